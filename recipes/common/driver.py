"""The one training program: every recipe is a `Task` (recipes/common/task.py) run by `main`.

    config (validated whole) → the data it reads (task.check_data) → strategy, batch plan
    → print config → seeds, precision →
    task.prepare → model (accumulation, optimizer, compile) → restore → train →
    evaluate → export → results.json

Modes (--mode): train (then export), eval (latest checkpoint), train_and_eval (evaluate
before a fresh run and after training, then export), export (latest checkpoint).
Re-running the same command resumes from the newest checkpoint in --model_dir. Flags are
read once (`flags.read_options`) and passed down as values.
"""

import contextlib
import dataclasses
import json
import math
import os
import re
import time

import tensorflow as tf
import tf_keras
from absl import logging as absl_logging

from lamb_tf import accumulation
from lamb_tf import noise_scale as noise_scale_lib
from recipes.common import callbacks as callbacks_lib
from recipes.common import checkpoints, config_help, corrupt_data, errors, exclusion_report
from recipes.common import config as config_lib
from recipes.common import export as export_lib
from recipes.common import native_log
from recipes.common import flags as flags_lib
from recipes.common import optimizer as optimizer_lib
from recipes.common import schema, storage
from recipes.common import strategy as strategy_lib
from recipes.common import task as task_lib
from recipes.common import training
from recipes.common.errors import TrainingDiverged, UserError

RESULTS_FILE = "results.json"
# What a run leaves in its model_dir (printed at the end when present).
# What the "outputs in" line names, where present (data/: the BERT recipe's preparation;
# digits/: the ResNet recipe's converted embedded digits; predictions.json, labels.json and
# inputs.json: fine-tuning's SQuAD answers, class labels and input kind; model_garden/ and
# hub/: its ecosystem exports, docs/finetune.md).
OUTPUTS = ("checkpoints", "config.yaml", RESULTS_FILE, "predictions.json", "labels.json",
           "inputs.json", exclusion_report.EXCLUSIONS_FILE, "data", "digits", "export",
           "model_garden", "hub", "train", "eval", "train_scalars", native_log.LOG_FILE)
TRAIN_MODES = flags_lib.TRAIN_MODES
EVAL_MODES = ("eval", "train_and_eval")
_INPUT_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.DataLossError,
                 tf.errors.NotFoundError)


def main(task_class, extra_flags=(), run_options=None):
    """A recipe's `__main__`: defines the shared flags and the program's `extra_flags`
    (`flags.ExtraFlag`), runs `run_options(task_class, options)` (default: `run`), reports
    errors in one line."""
    flags_lib.define_flags(extra_flags)
    from recipes.common import startup  # pylint: disable=import-outside-toplevel
    # what a recipe's top answers before TensorFlow loads (done already if it gave its config
    # class), answered here for one that gave none: a config key given as a flag, say
    startup.check_command_line(task_class.config_class, extra_flags)

    def program(argv):
        try:  # absl would take a returned value for the exit status
            run_from_flags(task_class, argv, extra_flags, run_options)
        finally:  # C++ lines of the process's exit (gRPC's, multi-worker) to the log too
            native_log.keep_for_exit()

    errors.run(program)


def run_from_flags(task_class, argv, extra_flags=(), run_options=None):
    """`run_options` (default: `run`) with the parsed flags; returns the held-out results
    (empty if not evaluated)."""
    options = flags_lib.read_options(argv, extra_flags)
    if options.help_config:
        print(config_help.format_config_help(task_class.config_class,
                                             flags_lib.program_name(argv[0])))
        return {}
    return (run_options or run)(task_class, options)


def load_task(task_class, options, mode=None):
    """The task over its loaded and wholly validated config, for --mode `mode` (its
    `Task.mode`; None: a study's check, as for training); nothing printed or written. The
    config's relative local paths (its schema's `path_field`s: train.init_checkpoint,
    export.dir, a recipe's data files) are absolute from the current directory from here
    on: the task reads them so, and the run's config.yaml keeps them so."""
    return _load_task(task_class, options, mode)[0]


def _load_task(task_class, options, mode):
    """`load_task`'s task, the run's own config it loaded (`runs_own_config`, read once:
    on gs:// each read is a round trip) and whether it checked --model_dir already
    (`check_run_to_read`), for `run` to pass down."""
    if task_class.config_class is None:
        raise UserError(f"{task_class.__name__}.config_class is not set: give the recipe's "
                        "config schema, a dataclass with the sections of recipes.common.schema")
    _check_shared_sections(task_class)
    own = runs_own_config(task_class, options)
    model_dir_checked = check_run_to_read(task_class, options, mode, own)
    config = config_lib.load_config(
        task_class.config_class, options.config_files or own,
        options.params_override, renamed_keys=schema.RENAMED_KEYS,
    )
    schema.check(config)
    config_lib.make_paths_absolute(config)
    task = task_class(config)
    task.mode = mode  # what check_config may read depends on it (eval: no training data)
    task.check_config()
    return task, own, model_dir_checked


# The sections every recipe's schema holds: the driver reads them (recipes.common.schema).
SHARED_SECTIONS = {"train": schema.TrainConfig, "optimizer": schema.OptimizerConfig,
                   "eval": schema.EvalConfig, "runtime": schema.RuntimeConfig,
                   "export": schema.ExportConfig}


def _check_shared_sections(task_class):
    """A UserError naming a shared section the task's schema lacks or types otherwise (the
    driver reads each; a missing one was an AttributeError's traceback mid-run)."""
    fields = config_lib.schema_fields(task_class.config_class)  # (annotations as text too)
    for name, section in SHARED_SECTIONS.items():
        given = fields.get(name)
        if not (isinstance(given, type) and issubclass(given, section)):
            raise UserError(
                f"{task_class.config_class.__name__} has no section {name}: "
                f"schema.{section.__name__}; every recipe's schema holds train, optimizer, "
                "eval, runtime and export (docs/writing_a_recipe.md)")


def runs_own_config(task_class, options):
    """Without --config_file: (the config.yaml of the run in --model_dir,) when there is one
    of this program's, so that `--model_dir=RUN --mode=eval` (or a resume) is the run as it
    was trained, --params_override on top; else () (the schema's defaults)."""
    saved = os.path.join(options.model_dir or "", "config.yaml")
    if options.config_files or not options.model_dir or not tf.io.gfile.exists(saved):
        return ()
    try:
        config_lib.load_config(task_class.config_class, [saved])
    except errors.UnreachableStorage:
        raise
    except UserError:  # another program's, or damaged: check_same_program names it
        return ()
    return (saved,)


def check_run_to_read(task_class, options, mode, own):
    """For --mode=eval / export without --config_file, when --model_dir holds no config.yaml
    of this program (`runs_own_config`): a UserError, before the config is loaded, when it
    holds no run this program reads (runs in its subdirectories, no checkpoint, another
    program's run: `check_model_dir`, `check_same_program`). The schema's defaults, which
    would be the config, were checked first: a key they leave empty was refused (fine-tuning:
    "encoder.pretraining_dir is empty") as though the mistake were the config's. `own`:
    `runs_own_config`'s. Returns whether it checked --model_dir (`check_model_dir`)."""
    if (mode not in ("eval", "export") or options.config_files or not options.model_dir
            or own):
        return False
    check_model_dir(options.model_dir, mode)
    _check_program_of_run(task_class.config_class, options.model_dir, mode)
    return True


def check_task_methods(task, mode):
    """A UserError, before any work, for a `Task` subclass that leaves out a method `mode`
    calls (the base class's raises NotImplementedError, which may come after the training)."""
    name = type(task).__name__
    needed = ["build_model", "compile_arguments"]
    needed += ["train_replica_dataset"] if mode in TRAIN_MODES else []
    needed += ["evaluate"] if mode in EVAL_MODES else []
    needed += ["export"] if exports(task.config, mode) else []
    missing = [method for method in needed
               if getattr(type(task), method) is getattr(task_lib.Task, method)]
    if missing:
        without_export = (", or train with --params_override=export.enabled=false"
                          if missing == ["export"] and mode in TRAIN_MODES else "")
        raise UserError(f"{name} does not implement {', '.join(missing)}, which "
                        f"--mode={mode} calls: define it in {name}{without_export}")


def check_model_dir(model_dir, mode):
    """A UserError, before any work, for a --model_dir that cannot be a directory, that
    cannot be written (or created), whose own subdirectories (checkpoints/, ...) cannot be,
    that is a SavedModel or, for eval / export, holds no checkpoint."""
    problem = storage.local_directory_problem(model_dir)
    if problem and mode in ("eval", "export") and tf.io.gfile.exists(model_dir):
        raise UserError(  # an archived run, say: its checkpoints are read, but not only
            f"--model_dir={model_dir}: {problem}; --mode={mode} writes there too (its "
            f"tensorflow.log{', results.json' if mode == 'eval' else ''}): copy the run to a "
            "directory you can write (cp -r) and give that")
    storage.check_writable(f"--model_dir={model_dir}", model_dir)
    # the run's own directories it writes into (its data it reads, its export it replaces);
    # on gs:// not checked, as the model_dir itself is not
    written_into = [name for name in OUTPUTS if name not in ("data", "digits", "export")]
    for name in written_into if storage.all_local([model_dir]) else ():
        path = os.path.join(storage.local_path(model_dir), name)
        problem = os.path.isdir(path) and storage.local_directory_problem(path)
        if problem:
            raise UserError(f"--model_dir={model_dir}: {problem}, where the run writes its "
                            f"{name}/; make it writable, or give another --model_dir")
    if tf.io.gfile.exists(os.path.join(model_dir, "saved_model.pb")):
        raise UserError(f"--model_dir={model_dir} is a SavedModel (an export: its "
                        "saved_model.pb), which a run's files would be mixed into; give a "
                        "directory of its own")
    if tf.io.gfile.exists(os.path.join(model_dir, "params.yaml")) and not tf.io.gfile.exists(
            os.path.join(model_dir, "config.yaml")):
        raise UserError(
            f"--model_dir={model_dir} holds a Model Garden run (its params.yaml): give another "
            "--model_dir, or go on with that run with python -m lamb_tf.model_garden")
    if mode in ("eval", "export"):
        if checkpoints.latest_checkpoint(model_dir) is None:  # a comparison's directory?
            _check_no_runs_inside(model_dir, mode)
        checkpoints.require_checkpoint(model_dir)


def check_export_dir(task, model_dir):
    """A UserError, before any work, if the export could not be written where it goes or
    would replace what is not an earlier export (`export.replace_problem`)."""
    export_dir = task.config.export.dir
    setting = f"export.dir={export_dir}"
    if export_dir:
        storage.check_writable(setting, export_dir)
    else:
        export_dir, setting = os.path.join(model_dir, task.export_subdir), "the export"
    problem = export_lib.replace_problem(export_dir, model_dir)
    if problem:
        raise UserError(f"{setting}: {problem}")
    inside = _run_output_holding(export_dir, model_dir, task.export_subdir)
    if inside:  # found when the export replaces it, after the training, otherwise
        raise UserError(f"{setting}: it is inside {inside}, which the run writes itself; give a "
                        f"directory of its own (by default {task.export_subdir}/ in --model_dir)")
    parent = os.path.dirname(storage.local_path(export_dir).rstrip("/"))
    if (task.config.export.dir and not storage.is_inside(parent, model_dir)
            and storage.run_file(parent)):  # another run's export/
        raise UserError(f"{setting}: it is in {parent}, another training run's directory, "
                        "whose export this one would replace; give a directory of its own")


def _run_output_holding(path, model_dir, export_subdir):
    """The run's own output in `model_dir` (`OUTPUTS` but its export) that `path` is or is
    inside, or None."""
    held = [name for name in OUTPUTS if name != export_subdir
            and storage.is_inside(path, os.path.join(model_dir, name))]
    return os.path.join(model_dir, held[0]) if held else None


def outputs_present(model_dir):
    """The `OUTPUTS` in `model_dir`, config.yaml with the earlier configs of a resumed run
    that changed it (config.<n>.yaml, `config.write_config`)."""
    present = [name for name in OUTPUTS if tf.io.gfile.exists(os.path.join(model_dir, name))]
    numbers = sorted(int(match[1]) for match in (
        re.fullmatch(r"config\.(\d+)\.yaml", os.path.basename(path))
        for path in tf.io.gfile.glob(os.path.join(model_dir, "config.*.yaml"))) if match)
    if numbers and "config.yaml" in present:
        names = ", ".join(f"config.{n}.yaml" for n in numbers)
        present[present.index("config.yaml")] = f"config.yaml (earlier: {names})"
    return present


def metric_values(task, results):
    """{name: float} of what `task.evaluate` returned; a UserError for what is not a dict
    (`Model.evaluate` without `return_dict=True` gives a list: an AttributeError's
    traceback before)."""
    if not isinstance(results, dict):
        raise UserError(f"{type(task).__name__}.evaluate returned a {type(results).__name__}, "
                        "not a dict of metric name -> value (Model.evaluate gives one with "
                        "return_dict=True)")
    return {name: float(value) for name, value in results.items()}


def exports(config, mode):
    """Whether a run in `mode` writes the export: `--mode=export`, or training with
    `export.enabled`."""
    return mode == "export" or (config.export.enabled and mode in TRAIN_MODES)


def check_steps_left(config, model_dir):
    """A UserError, before any work, for training a run whose newest checkpoint is past
    train.steps (it would train nothing and record the smaller train.steps as its config)."""
    latest = checkpoints.latest_checkpoint(model_dir)
    step = checkpoints.checkpoint_step(latest) if latest else None
    if step is not None and step > config.train.steps:
        raise UserError(
            f"--model_dir {model_dir} holds a run trained to step {step}, past "
            f"train.steps={config.train.steps}: give train.steps={step} or more to train it "
            "further, --mode=eval or --mode=export to use it, or a new --model_dir")


def check_init_checkpoint(config, model_dir, mode):
    """A UserError, before any work, for a train.init_checkpoint that a fresh training run
    would restore (`checkpoints.restore_weights_only`, the same forms: a run's model_dir, a
    directory of checkpoints, a checkpoint prefix; gs:// too) and that holds no checkpoint.
    A resumed run, eval and export do not read the key."""
    init_checkpoint = config.train.init_checkpoint
    if (init_checkpoint and mode in TRAIN_MODES
            and checkpoints.latest_checkpoint(model_dir) is None):
        checkpoints.init_checkpoint_path(init_checkpoint)
        reason = _not_this_programs(type(config), os.path.join(init_checkpoint, "config.yaml"))
        if reason:  # a run's model_dir: of another program, its weights do not fit
            raise UserError(
                f"train.init_checkpoint={init_checkpoint!r} holds a run of another program: "
                f"its config.yaml does not load as this program's ({reason}); give a run of "
                "this program")


def _not_this_programs(config_class, saved_path):
    """Why the config.yaml at `saved_path` does not load as `config_class`'s (the first
    clause of its error: the key lists that follow are this program's), or None (it loads,
    or there is none)."""
    if not tf.io.gfile.exists(saved_path):
        return None
    try:
        config_lib.load_config(config_class, [saved_path])
    except errors.UnreachableStorage:
        raise
    except UserError as error:
        return str(error).removeprefix(saved_path + ": ").split("; ")[0]
    return None


# What a mode does with the run already in --model_dir: (verb, its -ing form).
_WITH_THE_RUN = {"train": ("resume", "resuming"), "train_and_eval": ("resume", "resuming"),
                 "eval": ("evaluate", "evaluating"), "export": ("export", "exporting")}


def check_same_program(task, model_dir, mode):
    """A UserError, before anything else is checked about --model_dir's run, when it holds
    a checkpoint and a config.yaml that is not this program's, or holds other runs in its
    subdirectories (fine-tuning's --compare_with_random_init writes two)."""
    if checkpoints.latest_checkpoint(model_dir) is None:
        _check_no_runs_inside(model_dir, mode)
        return
    _check_program_of_run(type(task.config), model_dir, mode)


def _check_program_of_run(config_class, model_dir, mode):
    """A UserError when the config.yaml of the run in `model_dir` is damaged or does not
    load as `config_class` (another program's run)."""
    saved_path = os.path.join(model_dir, "config.yaml")
    damaged = tf.io.gfile.exists(saved_path) and config_lib.yaml_problem(saved_path)
    if damaged:
        raise UserError(
            f"--model_dir {model_dir}: its config.yaml is damaged ({damaged}); put the run's "
            "config back (a copy of the run, or the config files it was started with), or "
            "give a new --model_dir")
    reason = _not_this_programs(config_class, saved_path)
    if reason:
        raise UserError(
            f"--model_dir {model_dir} holds a run this program cannot "
            f"{_WITH_THE_RUN[mode][0]}: its config.yaml does not load as this program's "
            f"({reason}); is it another program's run? "
            + ("Give a new --model_dir" if mode in TRAIN_MODES else
               f"{_WITH_THE_RUN[mode][0].capitalize()} it with the program that trained it"))


def _check_no_runs_inside(model_dir, mode):
    """A UserError when `model_dir` (no run of its own) holds runs in its subdirectories:
    this run's files would be mixed with theirs (an evaluation or export: it holds no run of
    its own to read)."""
    if tf.io.gfile.exists(os.path.join(model_dir, "config.yaml")) or not tf.io.gfile.isdir(
            model_dir):
        return
    inside = sorted(name.rstrip("/") for name in tf.io.gfile.listdir(model_dir)
                    if tf.io.gfile.exists(os.path.join(model_dir, name, "config.yaml")))
    runs = ", ".join(f"{n}/" for n in inside)
    if inside and mode in ("eval", "export"):
        raise UserError(
            f"--model_dir {model_dir} holds other runs in {runs} (each with its config.yaml), "
            f"not a run of its own to {_WITH_THE_RUN[mode][0]}: give one of those runs as "
            "--model_dir")
    if inside:
        raise UserError(
            f"--model_dir {model_dir} holds other runs in {runs} "
            "(each with its config.yaml), which this run's files would sit beside; give a new "
            "--model_dir")


def compare_with_saved_config(task, model_dir, mode):
    """When --model_dir holds a checkpoint and its config.yaml (this program's:
    `check_same_program` ran first): refuses a change to a key of `task.fixed_on_resume`,
    to `optimizer.name`, or into `mixed_float16` (one line each), before anything is written
    there; returns the console's line for every other changed key, old -> new (printed once
    the task has checked its data, which may refuse a change of its own)."""
    if checkpoints.latest_checkpoint(model_dir) is None:
        return []
    lines = []
    for key, old, new in saved_config_changes(task, model_dir):
        if key == "optimizer.name":  # every recipe: the slots are the optimizer's own
            raise UserError(
                f"{key} was {old!r} in the run in {model_dir}, now {new!r}: its checkpoint "
                f"holds the state of another optimizer; {_keep(key, old, mode)}")
        if key == "runtime.precision" and new == "mixed_float16":  # its LossScaleOptimizer's
            raise UserError(
                f"{key} was {old!r} in the run in {model_dir}, now {new!r}: its checkpoint "
                f"holds no loss scale, which mixed_float16 restores; {_keep(key, old, mode)}")
        fixed = [f for f in task.fixed_on_resume
                 if key == f or (f.endswith(".") and key.startswith(f))]
        if mode in ("eval", "export") and key in task.held_out_keys:
            fixed = []  # other held-out data to evaluate on (an export reads none)
        if fixed:  # model.dropout_rate too: no variable, but another model to go on with
            keys = f"its {fixed[0]}* keys" if fixed[0].endswith(".") else fixed[0]
            raise UserError(
                f"{key} was {old!r} in the run in {model_dir}, now {new!r}: a run keeps "
                f"{keys} from its first step to its last (they define what it trains); "
                f"{_keep(key, old, mode)}{_saved_relative(task, key, old)}")
        lines.append(f"config: {key} {old!r} -> {new!r} ({_WITH_THE_RUN[mode][1]} the run "
                     f"in {model_dir})")
    return lines


def other_held_out(task, model_dir, mode):
    """((key, value), ...) of the keys of `task.held_out_keys` that --mode=eval (`mode`) of
    the run in `model_dir` changes from its config.yaml: it evaluates the run on other
    held-out data than its own; else ()."""
    if (mode != "eval" or not task.held_out_keys
            or checkpoints.latest_checkpoint(model_dir) is None):
        return ()
    held_out = tuple((key, new) for key, _, new in saved_config_changes(task, model_dir)
                     if key in task.held_out_keys)
    if held_out:
        _check_held_out_subdir(model_dir, held_out)
    return held_out


def _check_held_out_subdir(model_dir, held_out):
    """A UserError if `held_out_subdir(held_out)` of the run in `model_dir` holds the
    evaluation of other held-out data (another file of that name): it would be replaced."""
    subdir = held_out_subdir(held_out)
    path = os.path.join(model_dir, subdir, RESULTS_FILE)
    if not tf.io.gfile.exists(path):
        return
    try:
        with tf.io.gfile.GFile(path) as f:
            earlier = dict(json.load(f).get("held_out") or {})
    except (ValueError, AttributeError, TypeError):  # damaged: what it held is unknown
        earlier = {}
    key, value = held_out[0]
    if earlier.get(key) != value:
        raise UserError(
            f"{key}={value}: {os.path.join(model_dir, subdir)}/ holds the evaluation of "
            f"{earlier.get(key) or 'other held-out data'}, which this one would replace; "
            f"move or remove {subdir}/, or give the file another name")


def held_out_subdir(held_out):
    """The subdirectory of a run that takes an evaluation of other held-out data
    (`other_held_out`): eval_<the first key's file name without its extension>."""
    name = os.path.basename(str(held_out[0][1]).rstrip("/"))
    return "eval_" + (os.path.splitext(name)[0] or name)


def saved_config_changes(task, model_dir):
    """[(key, saved value, value now)] of the keys `task.config` changes from the
    config.yaml in `model_dir` (none without one); a path spelled otherwise (`runs/a`
    saved, `/work/runs/a` now) is no change: a run saved with relative paths (before
    `load_task` made them absolute) goes on from the directory it started in."""
    saved_path = os.path.join(model_dir, "config.yaml")
    if not tf.io.gfile.exists(saved_path):
        return []
    saved = config_lib.load_config(type(task.config), [saved_path])
    return [(key, old, new) for key, old, new in config_lib.changed_keys(saved, task.config)
            if not config_lib.same_local_path(type(task.config), key, old, new)]


def _saved_relative(task, key, old):
    """The end of a refusal of a change to the path key `key` whose saved value `old` is a
    relative local path (a config.yaml of a version that kept them so): it means a place
    from the directory the run started in."""
    marker = config_lib.path_keys(type(task.config)).get(key)
    if marker and config_lib.names_relative_path(old, *marker):
        return (f" ({old!r} is relative, saved so by an older version: if the run started "
                "in another directory, run from there)")
    return ""


def saved_relative_paths(task, options, saved=None):
    """The `config:` lines of the path keys the run's own config.yaml (used without
    --config_file) holds relative, saved so by an older version, and the run reads (no
    --params_override changed them): read from the current directory, which may not be the
    one the run started in (nothing refuses a key that file alone gives). `saved`:
    `runs_own_config`'s, when the caller has it."""
    saved = runs_own_config(type(task), options) if saved is None else saved
    if not saved:
        return []
    config = config_lib.load_config(type(task.config), saved, renamed_keys=schema.RENAMED_KEYS)
    markers, lines = config_lib.path_keys(type(config)), []
    for key, value in config_lib.relative_paths(config).items():
        now = config_lib.absolute_path(value, *markers[key])
        if now == getattr(*config_lib.section_and_name(task.config, key)):
            lines.append(f"config: {key}={value!r} in {saved[0]} is relative (saved so by an "
                         f"older version): read as {now!r}, from the current directory; run "
                         "from the directory the run started in if that is another")
    return lines



def _keep(key, old, mode):
    """What to do about a change of `key` from `old` that `mode` refuses on a run."""
    if mode in TRAIN_MODES:
        return f"keep {key}={old!r} or use a new --model_dir"
    return (f"keep {key}={old!r} to {_WITH_THE_RUN[mode][0]} the run (without --config_file, "
            "its own config.yaml is the config)")


def plan_batch(config, num_replicas):
    """The `BatchPlan` of train.global_batch_size / micro_batch_size, or a UserError."""
    try:
        plan = accumulation.plan_batch(
            config.train.global_batch_size, config.train.micro_batch_size, num_replicas
        )
    except (ValueError, TypeError) as error:
        raise UserError(f"train.global_batch_size / train.micro_batch_size: {error}") from None
    if config.eval.global_batch_size % num_replicas:
        raise UserError(
            f"eval.global_batch_size={config.eval.global_batch_size} is not a multiple of the "
            f"{num_replicas} replicas"
        )
    return plan


def check_before_work(task, model_dir, mode, model_dir_checked=False):
    """Every check of a run of `task` into `model_dir` before any work (nothing written, no
    strategy made), a mistake one UserError; returns the `compare_with_saved_config` lines
    and the `other_held_out` pairs. (The batch-size study makes the ones that apply to a run
    it has not started: recipes/study/adapter.py `check_settings`.) `model_dir_checked`:
    `check_model_dir` ran already (`check_run_to_read`)."""
    check_task_methods(task, mode)
    if not model_dir_checked:
        check_model_dir(model_dir, mode)
    # Ctrl-C and SIGTERM outside training name the checkpoint a rerun goes on from
    errors.name_newest_checkpoint(lambda: checkpoints.latest_checkpoint(model_dir))
    # before what would be said of its run
    check_same_program(task, model_dir, mode)
    if exports(task.config, mode):
        check_export_dir(task, model_dir)
    if mode in TRAIN_MODES:
        check_steps_left(task.config, model_dir)
    check_init_checkpoint(task.config, model_dir, mode)
    changes = compare_with_saved_config(task, model_dir, mode)
    held_out = other_held_out(task, model_dir, mode)
    with errors.doing("while checking the data"):  # before a TPU is connected: fails fast
        task.check_data(mode, model_dir)
    return changes, held_out


def run(task_class, options):
    """The whole program for `options` (a `flags.RunOptions`); returns held-out results."""
    if not options.verbose:  # TensorFlow's INFO chatter (TPU set-up, export internals, ...)
        absl_logging.set_verbosity(absl_logging.WARNING)
        tf.get_logger().setLevel("WARNING")
    task, own, model_dir_checked = _load_task(task_class, options, options.mode)
    changes, held_out = check_before_work(task, options.model_dir, options.mode,
                                          model_dir_checked)
    if own:  # (after the checks: a refusal is one line)
        print(f"config: the run's own {os.path.join(options.model_dir, 'config.yaml')} (no "
              "--config_file given)", flush=True)
    for line in saved_relative_paths(task, options, own) + changes:
        print(line, flush=True)
    if held_out:
        print(f"evaluation: of other held-out data than the run's ({held_out[0][0]}), into "
              f"{os.path.join(options.model_dir, held_out_subdir(held_out))}/ (the run's own "
              "results.json, eval/, predictions and config.yaml stay as they are)", flush=True)
    strategy = strategy_lib.make_strategy(options.strategy, options.tpu, options.communication,
                                          options.cpu_replicas)
    plan = plan_batch(task.config, strategy.num_replicas_in_sync)
    if options.verbose:
        print(f"resolved config:\n{config_lib.format_config(task.config)}", flush=True)
    if options.mode in TRAIN_MODES:  # the plan still builds the model a checkpoint holds
        strategy_lib.log_batch_plan(strategy, plan)
    elif options.mode == "eval":
        strategy_lib.log_eval_batch(strategy, task.config.eval.global_batch_size)
    new_model_dir = not tf.io.gfile.exists(options.model_dir)
    with _exclusive_use(options.model_dir, strategy):  # refused: the other run's, untouched
        try:
            with strategy_lib.WorkerDirectory(options.model_dir, strategy) as work_dir, \
                    native_log.to_file(work_dir.path, options.verbose):  # C++ log: to a file
                return _Run(task, options, strategy, plan, work_dir.path, held_out).execute()
        except UserError:  # found in task.prepare: the chief leaves no new --model_dir behind
            if new_model_dir and strategy_lib.is_chief(strategy):
                native_log.remove_if_only_log(options.model_dir)
            raise


def _exclusive_use(model_dir, strategy):
    """The chief's hold on --model_dir for the whole run (`storage.exclusive_use`): a second
    run, evaluation or export into it at the same time is refused in one line. (The other
    workers of a multi-worker run write into directories of their own.)"""
    if not strategy_lib.is_chief(strategy):
        return contextlib.nullcontext()
    return storage.exclusive_use(
        f"--model_dir={model_dir}", model_dir, "wait for it to finish or stop it (a training "
        "run resumes from its newest checkpoint), or give another --model_dir")


def held_inputs(task, mode):
    """The run's hold on the local directories of the files `mode` reads (`task.input_files`
    of what it trains on, evaluates and exports: `storage.shared_use`), as a context
    manager: until it ends, a preparation or conversion into one of them, which would write
    new files over the ones the run reads, is refused (`storage.exclusive_use`), and other
    runs may read them too."""
    splits = [split for split, modes in (("train", TRAIN_MODES), ("eval", EVAL_MODES))
              if mode in modes] + (["export"] if exports(task.config, mode) else [])
    directories = sorted({os.path.dirname(storage.local_path(path))
                          for split in splits for path in task.input_files(split)})
    with contextlib.ExitStack() as holds:  # (a refusal lets go of the ones taken)
        for directory in directories:
            holds.enter_context(storage.shared_use(
                f"the data directory {directory}", directory, "wait for it to finish, then "
                "run again"))
        return holds.pop_all()


def describe_noise_scale(global_batch_size, noise_scale):
    """The console's line for the run's last gradient-noise-scale estimate: a negative (or
    not finite) one is no scale yet, while |G|² or tr(Σ) is below its noise."""
    if noise_scale_lib.is_measured(noise_scale):  # (three figures below 100: not "≈ 0")
        shown = f"{noise_scale:,.0f}" if noise_scale >= 99.5 else f"{noise_scale:.3g}"
        return f"batch {global_batch_size:,}; measured noise scale ≈ {shown} examples"
    return (f"batch {global_batch_size:,}; noise scale not measurable yet (estimate "
            f"{noise_scale:,.0f}: the gradient norms are still mostly noise; it settles with "
            "more updates)")


def compile_model(task, strategy, plan):
    """(compiled GradientAccumulationModel around `task.build_model()`, its optimizer, the
    inner one under a float16 LossScaleOptimizer), built in `strategy`'s scope with the
    optimizer state created (ready for a restore)."""
    config = task.config
    with strategy.scope():
        network = task.build_model()
        if not isinstance(network, tf_keras.Model):  # a Keras 3 one: a TypeError's traceback
            raise UserError(
                f"{type(task).__name__}.build_model returned a {type(network).__module__}."
                f"{type(network).__name__}, not a tf_keras model, which the driver trains: "
                "build it with tf_keras (docs/writing_a_recipe.md)")
        model = accumulation.GradientAccumulationModel(network, plan.accumulation_steps)
        optimizer = optimizer_lib.build_optimizer(
            config.optimizer, config.train.steps, task.default_exclude_from_weight_decay,
            variables=network.trainable_variables,
        )
        compiled_optimizer = optimizer
        if config.runtime.precision == "mixed_float16":
            compiled_optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
        model.compile(
            optimizer=compiled_optimizer,
            steps_per_execution=config.train.steps_per_execution,
            jit_compile=config.runtime.jit_compile,
            **task.compile_arguments(),
        )
        checkpoints.build_optimizer_state(model)
    return model, optimizer


class _Run:
    """One process's run, writing to `model_dir` (the chief's --model_dir, or a worker's
    private directory); checkpoints are always read from --model_dir."""

    # An evaluation of other held-out data (`other_held_out`): (key, value) pairs, and the
    # subdirectory of `model_dir` that takes its outputs (`evaluation_dir`).
    held_out, evaluation_subdir = (), ""

    def __init__(self, task, options, strategy, plan, model_dir, held_out=()):
        self.task, self.config, self.options = task, task.config, options
        self.strategy, self.plan, self.model_dir = strategy, plan, model_dir
        if held_out:
            self.held_out, self.evaluation_subdir = held_out, held_out_subdir(held_out)
        self.start = time.perf_counter()
        self.model, self.layer_adaptation, self.pattern_lines = None, True, []

    @property
    def evaluation_dir(self):
        """Where the evaluation writes results.json and eval/: the process's model_dir, or
        its subdirectory for other held-out data (`held_out_subdir`)."""
        if not self.evaluation_subdir:
            return self.model_dir
        return os.path.join(self.model_dir, self.evaluation_subdir)

    def execute(self):
        mode = self.options.mode
        self.task.evaluation_dir = self.evaluation_dir
        training.set_up_randomness(self.config.train.seed, self.options.deterministic)
        tf_keras.mixed_precision.set_global_policy(self.config.runtime.precision)
        with errors.doing("while preparing the data"):
            self.task.prepare(self.model_dir, mode)
        with held_inputs(self.task, mode):  # no preparation writes over them until the end
            return self.execute_prepared(mode)

    def execute_prepared(self, mode):
        """`execute` once the task's data is prepared."""
        with errors.doing("while building the model"):
            rows = self.build()
        print(exclusion_report.summary(rows, self.layer_adaptation), flush=True)
        for line in self.pattern_lines:
            print(line, flush=True)
        resuming = checkpoints.latest_checkpoint(self.options.model_dir) is not None
        with errors.doing("while restoring"):
            if mode in ("eval", "export"):
                checkpoints.restore_latest(self.model, self.options.model_dir)
            elif not resuming and self.config.train.init_checkpoint:
                checkpoints.restore_weights_only(self.model, self.config.train.init_checkpoint,
                                                 self.task.init_checkpoint_fits)
        train_logs, results = {}, {}
        if mode in TRAIN_MODES:
            if mode == "train_and_eval" and not resuming:
                self.evaluate("before training")
            with errors.doing("while training"):  # in `fit`, SIGTERM saves the step first
                train_logs = self.train()
            if train_logs:  # recorded now: a rerun after a stop in the evaluation or export
                self.write_results(train_logs, {})  # has nothing to train, and keeps it
        # after the restore: the model fits
        exclusion_report.write(self.model_dir, rows, self.layer_adaptation)
        if mode in EVAL_MODES:
            results = self.evaluate("after training" if mode in TRAIN_MODES else "latest")
        if exports(self.config, mode):
            with errors.doing("while exporting"):
                self.task.export_step = int(self.model.optimizer.iterations.numpy())
                self.task.export(self.export_dir())
        if mode != "export":
            train_logs = self.write_results(train_logs, results)["train"]
        if mode in TRAIN_MODES and noise_scale_lib.NOISE_SCALE_LOG in train_logs:
            print(describe_noise_scale(self.plan.global_batch_size,
                                       train_logs[noise_scale_lib.NOISE_SCALE_LOG]), flush=True)
        if self.model_dir != self.options.model_dir:  # a worker but the chief
            print(f"outputs in {self.options.model_dir}, the chief's (this worker's copies, in "
                  f"{self.model_dir}, are removed as it exits)", flush=True)
        else:
            present = outputs_present(self.model_dir) + (
                [f"{self.evaluation_subdir} (this evaluation's)"] if self.held_out else [])
            print(f"outputs in {self.model_dir}: {', '.join(present)}", flush=True)
        return results

    def export_dir(self):
        """export.dir, or export/ (the task's `export_subdir`) in the process's model_dir.
        A worker but the chief exports into its private directory (removed when it exits):
        the workers run the same save calls, and an export must not remove another's
        leftovers in the making (`export.remove_leftovers`)."""
        if self.config.export.dir and strategy_lib.is_chief(self.strategy):
            return self.config.export.dir
        return os.path.join(self.model_dir, self.task.export_subdir)

    def build(self):
        """Builds and compiles the accumulating model; returns the exclusion table rows."""
        self.model, optimizer = compile_model(self.task, self.strategy, self.plan)
        self.layer_adaptation = exclusion_report.has_trust_ratio(optimizer)
        config = self.config.optimizer
        decay_patterns = optimizer_lib.weight_decay_exclusions(
            config, self.task.default_exclude_from_weight_decay
        )
        rows = exclusion_report.exclusion_rows(
            optimizer, self.model.trainable_variables, decay_patterns, config.weight_decay_rate
        )
        self.pattern_lines = exclusion_report.check_configured_patterns(
            config, rows, self.layer_adaptation, refuse=self.options.mode in TRAIN_MODES)
        return rows

    def train(self):
        """Checkpointed training to train.steps; returns the last step's log scalars."""
        train = self.config.train
        try:
            history = training.train(
                self.model,
                lambda start, end: task_lib.train_dataset(
                    self.task, self.strategy, self.plan, start, end),
                model_dir=self.model_dir,
                total_steps=train.steps,
                checkpoint_every=train.checkpoint_every,
                global_batch_size=train.global_batch_size,
                log_every=train.log_every,
                restore_dir=self.options.model_dir,  # every worker resumes from the chief's
                config=self.config,  # saved as config.yaml with this run's first checkpoint
                async_checkpoint=train.async_checkpoint,
            )
        except _INPUT_ERRORS as error:
            raise self.explain_input_error(error, "train") or error
        return history.last_logs

    def evaluate(self, when):
        """Held-out metrics: printed on one line, TensorBoard `eval/`, returned as floats."""
        with errors.doing("while evaluating"):
            return self._evaluate(when)

    def _evaluate(self, when):
        try:
            # the input iterator deleted after evaluate returns, not inside it (as in training)
            with training.input_iterator_deleted_in_background(self.model, "test_function"):
                results = self.task.evaluate(self.model, self.strategy)
        except _INPUT_ERRORS as error:
            raise self.explain_input_error(error, "eval") or error
        results = metric_values(self.task, results)
        step = int(self.model.optimizer.iterations.numpy())
        callbacks_lib.write_scalars(
            tf.summary.create_file_writer(os.path.join(self.evaluation_dir, "eval")), step,
            results)
        if not math.isfinite(results.get("loss", 0.0)):
            raise TrainingDiverged(f"eval loss is {results['loss']}; the model diverged")
        print(f"held-out {self.task.describe_evaluation(results)}  [{when}]", flush=True)
        return results

    def explain_input_error(self, error, split):
        """The one line for a TF error raised while reading `split`, or None: a file of the
        task's listed input that went missing, else the task's own explanation."""
        if not isinstance(error, tf.errors.NotFoundError):
            return self.task.explain_input_error(error, split)
        message = str(getattr(error, "message", error))
        missing = next((path for path in self.task.input_files(split) if path in message), None)
        if missing is None:
            return None
        return UserError(corrupt_data.describe_missing_file(
            missing, split, error, checkpoints.latest_checkpoint(self.options.model_dir)))

    def write_results(self, train_logs, eval_results):
        """Writes `results.json` (atomically), what a study tool reads from a run, and
        returns what it holds. A training writes it twice: when trained (`eval` empty) and at
        the end. An evaluation without training (`--mode=eval`, or a rerun of a run stopped
        after its training) replaces its `eval` and keeps the rest; one of other held-out
        data writes its own in `evaluation_dir`, with those data's keys (`held_out`).
        `eval_step`, with held-out figures: the optimizer step of the weights they are of (a
        `--mode=eval` after a further training was stopped: its newest checkpoint's, while
        `steps` and `train` stay the finished training's)."""
        step = int(self.model.optimizer.iterations.numpy())
        results = {
            "mode": self.options.mode,
            "global_batch_size": self.plan.global_batch_size,
            "micro_batch_size": self.plan.micro_batch_size,
            "accumulation_steps": self.plan.accumulation_steps,
            "num_replicas": self.plan.num_replicas,
            "steps": step,
            "wall_time_seconds": round(time.perf_counter() - self.start, 3),
            "eval": eval_results,
            "train": train_logs,
        }
        if self.held_out:
            results["held_out"] = dict(self.held_out)
            tf.io.gfile.makedirs(self.evaluation_dir)
        path = os.path.join(self.evaluation_dir, RESULTS_FILE)
        if not train_logs and tf.io.gfile.exists(path):  # --mode=eval: the training's stays
            with tf.io.gfile.GFile(path) as f:
                trained = json.load(f)
            if trained.get("train"):
                results = {**trained, "eval": eval_results,
                           "eval_mode_wall_time_seconds": results["wall_time_seconds"]}
        results.pop("eval_step", None)  # (the training's record's: of its own figures)
        if eval_results:
            results["eval_step"] = step
        storage.write_text(path, json.dumps(results, indent=2, sort_keys=True) + "\n")
        return results
