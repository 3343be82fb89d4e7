"""`python -m lamb_tf.model_garden {nlp|vision} ...`: Model Garden's own drivers
(`official/nlp/train.py`, `official/vision/train.py`, with all of their flags) with
`lamb_tf.model_garden.register()` called first, e.g. on the tiny experiment shipped in
`configs/model_garden/`:

    .venv/bin/python -m lamb_tf.model_garden nlp --experiment=bert/pretraining --mode=train \
        --model_dir=/tmp/mg_bert --config_file=configs/model_garden/bert_tiny_lamb.yaml

Before launching (`check`), it names the first mistake in one line, exit status 2, before
anything is written: an unknown or malformed flag, a `--mode` the driver does not run, an
experiment `exp_factory` does not know (with the closest registered names), a
`--config_file` that is missing, a directory, not YAML or not a mapping, a config key
(file or `--params_override`) the experiment's config lacks (with the closest key) or
whose int, float, bool or str field cannot hold the value given (`_wrongly_typed`), and the
few fields whose absence makes Model Garden crash deep in its trainer
(`lamb_tf.model_garden.missing_field`: a learning-rate `decay_steps`, a `warmup_steps`, the
data's `input_path`), an optimizer argument that Model Garden's factory cannot build (ours
refuse `beta_1=1.5`, say), an `input_path` glob that matches no file, and a `--model_dir`
that is a file, cannot be created or written (`_check_model_dir`), holds a lamb_tf
recipe's run (its `config.yaml`, `tensorflow.log` or `exclusions.txt`) or a Model Garden run
whose checkpoints hold another `task.model` (`_check_same_model`). TensorFlow's C++
start-up lines (CUDA probing, oneDNN, CPU features) would come before this module runs
(`python -m` imports the `lamb_tf` package, and TensorFlow, first): so `lamb_tf/__init__.py`
sets `TF_CPP_MIN_LOG_LEVEL=3` when `python -m lamb_tf.model_garden` imports it, unless the
environment sets it (`TF_CPP_MIN_LOG_LEVEL=0` shows them), and makes Ctrl-C and SIGTERM one
line until the checks start (`_stopped_while_starting`); from there on, they are one line
and exit status 130 or 143 too (`_check_then`).
"""
import difflib
import importlib
import re
import signal
import sys
import typing

from lamb_tf.model_garden import DRIVERS, data_read_by, missing_field, register

# absl's help flags (as recipes.common.errors lists them; lamb_tf imports nothing of recipes/)
_HELP_FLAGS = {"--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml"}

# the modes each driver runs (absl's --mode enum also allows modes a driver does not
# implement: Model Garden raises NotImplementedError for them after writing model_dir)
MODES = {
    "nlp": ("train", "eval", "train_and_eval", "train_and_post_eval", "continuous_eval",
            "continuous_train_and_eval"),
    "vision": ("train", "eval", "train_and_eval", "train_and_post_eval", "continuous_eval"),
}


class _UsageError(Exception):
    """A mistake in the command line or the experiment config: one line, exit status 2."""


def registered_experiments():
    """Names of the experiments Model Garden's `exp_factory` knows in this process."""
    from official.core import exp_factory

    def names(collection, prefix=""):
        for key, value in collection.items():
            if isinstance(value, dict):
                yield from names(value, f"{prefix}{key}/")
            else:
                yield prefix + key

    return sorted(names(exp_factory._REGISTERED_CONFIGS))


# The modules each driver imports to register its experiments (importing the driver itself
# would define Model Garden's flags a second time).
_REGISTRIES = {"nlp": "official.common.registry_imports",
               "vision": "official.vision.registry_imports"}


def _check_experiment(experiment, driver_name):
    known = registered_experiments()
    if experiment in known:
        return
    for other, registry_module in _REGISTRIES.items():  # what the other driver registers
        if other != driver_name:
            importlib.import_module(registry_module)
            if experiment in registered_experiments():
                raise _UsageError(
                    f"--experiment={experiment} is one of Model Garden's {other} experiments, "
                    f"which its {driver_name} trainer does not register; run python -m "
                    f"lamb_tf.model_garden {other} ...")
    close = difflib.get_close_matches(experiment, known, n=3)
    hint = (f"did you mean {_one_of(close)}?" if close
            else f"the registered ones: {', '.join(known)}")
    raise _UsageError(f"--experiment={experiment} is not a registered Model Garden "
                      f"experiment; {hint}")


def _one_of(names):
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


def _check_mode(mode, driver_name):
    if mode not in MODES[driver_name]:
        raise _UsageError(f"--mode={mode} is not a mode of Model Garden's {driver_name} "
                          f"trainer: use one of {', '.join(MODES[driver_name])}")


def _read_yaml_file(path, source):
    """The mapping of config keys in the YAML file `path` (named `source` in errors)."""
    import tensorflow as tf
    import yaml
    from official.modeling.hyperparams import params_dict

    if not tf.io.gfile.exists(path):
        raise _UsageError(f"{source}: the file '{path}' does not exist; check the path")
    if tf.io.gfile.isdir(path):
        raise _UsageError(f"{source}: '{path}' is a directory; give a YAML file")
    try:
        with tf.io.gfile.GFile(path) as f:
            loaded = yaml.load(f, Loader=params_dict._LOADER)
    except tf.errors.OpError as error:
        raise _UsageError(f"{source}: '{path}' cannot be read ({error.message})") from None
    except yaml.YAMLError as error:
        raise _UsageError(f"{source}: '{path}' is not valid YAML ({_yaml_problem(error)}); "
                          "fix the YAML syntax") from None
    if not isinstance(loaded, dict):
        raise _UsageError(f"{source}: '{path}' holds no mapping of config keys (e.g. "
                          "'trainer: {train_steps: 2}'); give a Model Garden experiment config")
    return loaded


def _yaml_problem(error):
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    mark = getattr(error, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def _read_override(text):
    """`--params_override` as Model Garden reads it: CSV (a.b=1,c=2), YAML/JSON, or a file."""
    import yaml
    from official.modeling.hyperparams import params_dict

    try:
        text = params_dict.nested_csv_str_to_json_str(text)
    except ValueError:
        pass
    try:
        loaded = yaml.load(text, Loader=params_dict._LOADER)
    except yaml.YAMLError as error:
        raise _UsageError(f"--params_override is neither key=value pairs nor valid YAML "
                          f"({_yaml_problem(error)}); e.g. --params_override="
                          "trainer.train_steps=2,task.train_data.global_batch_size=4") from None
    if isinstance(loaded, dict):
        return loaded
    return _read_yaml_file(text, "--params_override")


def _unknown_key(config, override, prefix=""):
    """(dotted key, known keys beside it) for the first key of `override` that `config`
    lacks, or None."""
    for key, value in override.items():
        fields = config.as_dict()
        if key not in fields:
            return prefix + str(key), sorted(fields)
        child = getattr(config, key)
        if isinstance(value, dict) and hasattr(child, "as_dict"):
            found = _unknown_key(child, value, f"{prefix}{key}.")
            if found:
                return found
    return None


_NUMBER_KINDS = {int: (int,), float: (int, float), bool: (bool,)}  # what a field takes


def _wrongly_typed(config, override, prefix=""):
    """(dotted key, field type name, value) for the first value of `override` that its
    field in `config` cannot hold, or None. Checks the int, float and bool fields and their
    Optional forms (None passes where the field holds None already; an int field takes a
    whole float such as YAML's 1e4), and refuses a number or a bool for a str field (a
    list passes: Model Garden's readers take a list where its data configs say str):
    Model Garden's `override` stores any value, and one of the wrong kind
    (`trainer.train_steps=abc`, `runtime.distribution_strategy=1`) fails only inside its
    trainer, after model_dir is written. Fields of several types (`Union[str, List[str]]`)
    are not checked."""
    hints = typing.get_type_hints(type(config))
    for key, value in override.items():
        if key not in hints or not hasattr(config, key):
            continue  # an unknown key: `params.override` names it
        child, field_type = getattr(config, key), hints.get(key)
        if child is None and isinstance(field_type, type) and hasattr(field_type, "as_dict"):
            child = field_type()  # an unset section (a one-of's other branch): its defaults
        if isinstance(value, dict) and hasattr(child, "as_dict"):
            found = _wrongly_typed(child, value, f"{prefix}{key}.")
            if found:
                return found
            continue
        optional = False
        if typing.get_origin(field_type) is typing.Union:
            arguments = [a for a in typing.get_args(field_type) if a is not type(None)]
            field_type, optional = (arguments[0] if len(arguments) == 1 else None), True
        if field_type is str and isinstance(value, (bool, int, float)):
            return prefix + str(key), "str", value
        kinds = _NUMBER_KINDS.get(field_type)
        if kinds is None or (value is None and (optional or child is None)):
            continue
        integral = field_type is int and isinstance(value, float) and value.is_integer()
        if (isinstance(value, bool) != (field_type is bool)
                or not (isinstance(value, kinds) or integral)):  # (1e4: YAML's float)
            return prefix + str(key), field_type.__name__, value
    return None


def _override(params, override, source, experiment):
    """`params.override(override, is_strict=True)` with a mistake named in one line."""
    wrong = _wrongly_typed(params, override)
    if wrong:
        key, type_name, value = wrong
        quote = f" (quote it: '{value}')" if type_name == "str" else ""
        raise _UsageError(f"{source}: config key '{key}' of Model Garden's {experiment} "
                          f"config takes {'a' if type_name != 'int' else 'an'} {type_name}, "
                          f"got {value!r}{quote}")
    try:
        params.override(override, is_strict=True)
    except (KeyError, ValueError, TypeError, AttributeError) as error:
        unknown = _unknown_key(params, override)
        if unknown is None:
            raise _UsageError(f"{source}: {_message(error)}") from None
        key, known = unknown
        parent, _, leaf = key.rpartition(".")
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = (f"did you mean {parent + '.' if parent else ''}{close[0]}?" if close
                else f"the keys under {parent or 'the top level'}: {', '.join(known)}")
        raise _UsageError(f"{source}: unknown config key '{key}' (not in Model Garden's "
                          f"{experiment} config); {hint}") from None


def _message(error):
    """An exception's text without KeyError's quotes or Model Garden's advice to its coders."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return str(text).split(" To extend the existing keys")[0]


def _parsed_config(flags_obj):
    """The experiment config as Model Garden's `train_utils.parse_configuration` builds it
    (same sources, same order), with a mistake in any source named in one line."""
    from official.core import exp_factory
    from official.core import train_utils

    experiment = flags_obj.experiment
    parser = train_utils.ExperimentParser(flags_obj)
    params = exp_factory.get_exp_config(experiment)
    for config_file in flags_obj.config_file or []:
        source = f"--config_file={config_file}"
        _override(params, _read_yaml_file(config_file, source), source, experiment)
    params = parser.parse_data_service(parser.parse_runtime(params))
    if flags_obj.params_override:
        _override(params, _read_override(flags_obj.params_override), "--params_override",
                  experiment)
    try:
        params.validate()
        # Model Garden's own parse, which the driver repeats: what it runs is what was checked
        return train_utils.parse_configuration(flags_obj, lock_return=False, print_return=False)
    except (KeyError, ValueError, TypeError, AttributeError) as error:
        raise _UsageError(f"the experiment config is invalid: {_message(error)}") from None


_REQUIRED_FLAGS = {"experiment": "--experiment=bert/pretraining", "mode": "--mode=train",
                   "model_dir": "--model_dir=/tmp/mg_bert"}


def _check_model_dir(model_dir):
    """A --model_dir that is a file or under one, or that cannot be created or written:
    Model Garden's trainer fails on it with a long traceback (FailedPreconditionError,
    NotFoundError) after building the experiment."""
    import tensorflow as tf

    try:
        path = _nearest_existing(model_dir)
        is_file = bool(path) and not tf.io.gfile.isdir(path)
    except tf.errors.OpError:  # e.g. no access to a bucket: Model Garden's own error follows
        return
    if is_file:
        raise _UsageError(f"--model_dir={model_dir}: {path} is a file, not a directory; give "
                          "a new directory or one of an earlier run")
    problem = _write_problem(path) if path and "://" not in model_dir else None
    if problem:
        raise _UsageError(f"--model_dir={model_dir}: {problem}; give a directory you can "
                          "write (it is created if missing)")


# What a lamb_tf recipe's run (recipes/common/driver.py) writes in its --model_dir and Model
# Garden's runs do not: the C++ log file from its start, the exclusion report before its
# first step, config.yaml with its first checkpoint.
RECIPE_RUN_FILES = ("config.yaml", "tensorflow.log", "exclusions.txt")


def _check_not_a_recipe_run(model_dir):
    """A --model_dir holding a lamb_tf recipe's run (Model Garden's runs hold
    `params.yaml`): the trainer would write its checkpoints, params.yaml and summaries among
    the recipe's."""
    import os

    import tensorflow as tf

    try:
        found = [name for name in RECIPE_RUN_FILES
                 if tf.io.gfile.exists(os.path.join(model_dir, name))]
    except tf.errors.OpError:  # e.g. no access to a bucket: Model Garden's own error follows
        return
    if found:
        raise _UsageError(f"--model_dir={model_dir} holds a lamb_tf recipe's run (its "
                          f"{found[0]}): give another --model_dir, or resume that run with its "
                          "recipe")


def _nearest_existing(model_dir):
    """`model_dir` (made absolute if local) or its nearest parent that exists ("" if none
    does)."""
    import os

    import tensorflow as tf

    path = model_dir if "://" in model_dir else os.path.abspath(model_dir)
    while path and not tf.io.gfile.exists(path):
        path = os.path.dirname(path.rstrip("/"))
    return path


def _write_problem(directory):
    """None if this process can make a directory in the local `directory`, else why not (as
    the recipes find out: one directory made and removed at once)."""
    import os
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(prefix=".lamb_tf_write_check_", dir=directory))
    except OSError as error:
        return f"cannot write in {directory} ({error.strerror})"
    return None


def check(flags_obj, driver_name):
    """Raises `_UsageError` for the first mistake in the flags or the experiment config."""
    for flag, example in _REQUIRED_FLAGS.items():
        if not getattr(flags_obj, flag):
            raise _UsageError(f"--{flag} is required, e.g. {example}")
    _check_mode(flags_obj.mode, driver_name)
    _check_model_dir(flags_obj.model_dir)
    _check_not_a_recipe_run(flags_obj.model_dir)
    _check_experiment(flags_obj.experiment, driver_name)
    params = _parsed_config(flags_obj)
    _check_same_model(params, flags_obj.model_dir)
    missing = missing_field(params, flags_obj.mode)
    if missing:
        raise _UsageError(f"{missing} is not set, and Model Garden's trainer crashes without "
                          "it: set it in --config_file or --params_override "
                          "(e.g. configs/model_garden/bert_tiny_lamb.yaml)")
    _check_optimizer(params.trainer.optimizer_config)
    _check_input_paths(params, flags_obj.mode)


def _check_same_model(params, model_dir):
    """A --model_dir holding a Model Garden run with checkpoints of another `task.model`:
    the trainer overwrote its params.yaml with the new config, then failed to restore the
    checkpoint into the new model with a long traceback."""
    import os

    import tensorflow as tf
    import yaml

    saved_path = os.path.join(model_dir, "params.yaml")
    try:
        if not tf.io.gfile.exists(saved_path) or not tf.train.latest_checkpoint(model_dir):
            return
        with tf.io.gfile.GFile(saved_path) as saved_file:
            saved = yaml.safe_load(saved_file)
    except (tf.errors.OpError, yaml.YAMLError):  # Model Garden's own handling follows
        return
    task = saved.get("task") if isinstance(saved, dict) else None
    old = task.get("model") if isinstance(task, dict) else None
    change = _first_difference(old, params.task.model.as_dict(), "task.model")
    if isinstance(old, dict) and change:
        key, was, now = change
        raise _UsageError(f"{key} was {was!r} in the run in {model_dir}, now {now!r}: its "
                          "checkpoints hold that model; keep the run's value, or give another "
                          "--model_dir")


def _first_difference(old, new, key):
    """(dotted key, old value, new value) of the first leaf where two dicts differ, or None."""
    if isinstance(old, dict) and isinstance(new, dict):
        for name in sorted(set(old) | set(new)):
            change = _first_difference(old.get(name), new.get(name), f"{key}.{name}")
            if change:
                return change
        return None
    return None if old == new else (key, old, new)


def _check_optimizer(optimizer_config):
    """The optimizer built as the trainer's task builds it (Model Garden's own factory, ours
    registered for lamb/lars): an argument our classes refuse (beta_1=1.5, say) fails there
    only after the driver has written model_dir."""
    from official.modeling.optimization import optimizer_factory

    factory = optimizer_factory.OptimizerFactory(optimizer_config)
    try:
        factory.build_optimizer(factory.build_learning_rate())
    except (ValueError, TypeError) as error:
        section = f"trainer.optimizer_config.optimizer.{optimizer_config.optimizer.type}"
        # (gin, which wraps build_optimizer, adds a line naming itself)
        raise _UsageError(f"{section}: {_message(error).splitlines()[0]}") from None


def _check_input_paths(params, mode):
    """A data `input_path` glob that matches no file (Model Garden's reader fails on it
    after the driver has written model_dir); `dummy` is its synthetic data."""
    import tensorflow as tf

    for data_name in data_read_by(mode):
        paths = getattr(getattr(params.task, data_name, None), "input_path", None)
        paths = paths.split(",") if isinstance(paths, str) else paths or []
        for path in (p.strip() for p in paths):
            if path and path != "dummy" and not tf.io.gfile.glob(path):
                raise _UsageError(f"task.{data_name}.input_path={path!r} matches no file; "
                                  "check the path")


class _Terminated(BaseException):
    """SIGTERM while the checks or Model Garden's trainer run: raised between two Python
    lines (a checkpoint being written in TensorFlow's C++ is finished first), so that the
    program unwinds as for Ctrl-C instead of ending without a word."""


def _raise_terminated(signum, frame):
    del signum, frame
    raise _Terminated()


def _stop_behind(error):
    """The Ctrl-C or SIGTERM behind `error`: itself, or one it was raised from or while
    handling (a signal's exception raised inside C code, numpy's `__array__` say, reaches
    Python as a SystemError with it as its context); None if none is."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (KeyboardInterrupt, _Terminated)):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _check_then(driver_main, driver_name):
    """`driver_main`, run only after the flags and the experiment config pass the checks."""
    from absl import flags

    def checked_main(argv):
        for signum, handler in ((signal.SIGINT, signal.default_int_handler),
                                (signal.SIGTERM, _raise_terminated)):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # (lamb_tf's, while starting)
                signal.signal(signum, handler)
        try:
            check(flags.FLAGS, driver_name)
            return driver_main(argv)
        except _UsageError as error:
            _usage_error(str(error))
        except (KeyboardInterrupt, _Terminated, Exception) as error:  # a stop: one line
            stopped = _stop_behind(error)
            if stopped is None:
                raise
            how = "SIGTERM" if isinstance(stopped, _Terminated) else "interrupted (Ctrl-C)"
            print(f"stopped: {how}; run the same command again to go on (Model Garden's "
                  "trainer resumes from the newest checkpoint in --model_dir)",
                  file=sys.stderr, flush=True)
            sys.exit(143 if isinstance(stopped, _Terminated) else 130)

    return checked_main


def _usage_error(message):
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


# Model Garden's flags that `<driver> --help` lists (all of them: --helpfull).
_KEY_FLAGS = ("experiment", "mode", "model_dir", "config_file", "params_override", "tpu")


def _set_driver_help(driver_name, usage):
    """What absl's `--help` prints for `<driver> --help`: this usage and Model Garden's
    main flags (absl prints the `__main__` module's docstring, here lamb_tf.model_garden's
    notes on the registration, and the flags that module defines: none)."""
    from absl import flags

    sys.modules["__main__"].__doc__ = (
        f"{usage.replace('{' + '|'.join(DRIVERS) + '}', driver_name)}\n\nModel Garden's own "
        f"{driver_name} trainer ({DRIVERS[driver_name]}) with lamb_tf's LAMB and LARS as its "
        "'lamb' and 'lars' optimizers; every flag: --helpfull.")
    for name in _KEY_FLAGS:
        if name in flags.FLAGS:
            flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])


def main():
    """`python -m lamb_tf.model_garden {nlp|vision} <Model Garden flags>`."""
    usage = (f"usage: python -m lamb_tf.model_garden {{{'|'.join(DRIVERS)}}} "
             "--experiment=... --mode=train --model_dir=... [--config_file=...] "
             "[--params_override=...]")
    if set(sys.argv[1:2]) & _HELP_FLAGS:  # before a driver: this launcher's own usage
        print(f"{usage}\nModel Garden's own trainer ({', '.join(DRIVERS.values())}) with "
              "lamb_tf's LAMB and LARS as its 'lamb' and 'lars' optimizers; its flags: "
              f"python -m lamb_tf.model_garden {next(iter(DRIVERS))} --helpfull")
        sys.exit(0)
    if len(sys.argv) < 2 or sys.argv[1] not in DRIVERS:
        given = f"got {sys.argv[1]!r}" if sys.argv[1:] else "got no driver"
        print(f"error: give the driver first, {' or '.join(DRIVERS)} ({given}): {usage}",
              file=sys.stderr)
        sys.exit(2)
    driver_name = sys.argv.pop(1)
    driver = importlib.import_module(DRIVERS[driver_name])
    from absl import app
    from absl import flags
    from official.common import flags as tfm_flags

    # what the driver's own `if __name__ == "__main__"` block does, with the required
    # flags checked by `_check_then` (one line, status 2) instead of absl's
    tfm_flags.define_flags()
    register()
    app.define_help_flags()
    _set_driver_help(driver_name, usage)
    try:  # parsed here first so that a bad flag is one line and exit status 2, as any mistake
        flags.FLAGS(sys.argv)
    except SystemExit as help_exit:  # absl prints --help/--helpfull, then exits with status 1
        sys.exit(0 if set(sys.argv[1:]) & _HELP_FLAGS else help_exit.code)
    except flags.Error as error:
        # absl's --mode enum holds modes the driver does not run: name the ones it does
        bad_mode = re.match(r"flag --mode=(.*): value should be one of", str(error))
        if bad_mode:
            try:
                _check_mode(bad_mode.group(1), driver_name)
            except _UsageError as mode_error:
                _usage_error(str(mode_error))
        _usage_error(f"{error} (python -m lamb_tf.model_garden {driver_name} --helpfull "
                     "lists the flags)")
    # absl keeps the last of a repeated flag; the items of --params_override layer (the
    # recipes refuse it twice too: recipes/common/flags.py)
    flag_args = sys.argv[1:sys.argv.index("--")] if "--" in sys.argv else sys.argv[1:]
    overrides = [arg for arg in flag_args if arg.lstrip("-").split("=")[0] == "params_override"]
    if len(overrides) > 1:
        _usage_error(f"--params_override is given {len(overrides)} times and only the last "
                     "would count; give it once, joining the items with commas: "
                     "--params_override=a.b=1,c.d=2")
    app.run(_check_then(driver.main, driver_name))  # (help was handled by the parse above)
