"""The one place that knows the recipes: their programs, metrics, config keys and results.

A study run is a `Run` (plan.py); this module turns it into the recipe's command line
(`--params_override` keys of the shared driver's schema, recipes/common/schema.py) and
reads the figures back from the driver's `<model_dir>/results.json`
(docs/ARCHITECTURE.md). If the recipes' keys change, this file changes, nothing else.

A recipe is `bert`, `resnet`, or the path of a recipe's own `.py` file: a program that runs
one `recipes.common.task.Task` subclass on the shared driver (docs/writing_a_recipe.md).
"""
import contextlib
import importlib
import importlib.util
import io
import os
import sys
import types

from recipes.common import storage
from recipes.common.errors import UserError

PROGRAMS = {"bert": "recipes.bert.pretrain", "resnet": "recipes.resnet.train"}
TASK_CLASSES = {"bert": "BertPretraining", "resnet": "ResNetClassification"}
# The held-out metric a cell's learning rate is picked on (`mode_of`: which way is better).
DEFAULT_METRICS = {"bert": "masked_lm_accuracy", "resnet": "top_1_accuracy"}
# Every held-out figure the shipped recipes write under "eval" in results.json (their
# compiled losses and metrics), so that a misspelt --metric is refused before any run; a
# recipe file's are known only from its first run's results.json.
HELD_OUT_METRICS = {
    "bert": ("loss", "masked_lm_accuracy", "masked_lm_cross_entropy", "masked_lm_loss",
             "next_sentence_accuracy", "next_sentence_loss"),
    "resnet": ("loss", "top_1_accuracy", "top_5_accuracy"),
}
RESULTS_FILE = "results.json"
MODE = "train_and_eval"  # each run trains, then evaluates: the metric is a held-out one
NOISE_SCALE_LOG = "gradient_noise_scale"  # lamb_tf.noise_scale.NOISE_SCALE_LOG (no TF import)


STUDY_KEYS = ("optimizer.name", "optimizer.learning_rate", "optimizer.warmup_steps",
              "train.global_batch_size", "train.micro_batch_size", "train.steps",
              "train.checkpoint_every", "train.seed", "export.enabled")


def overrides(run):
    """`--params_override` items setting what the study varies for `run`."""
    values = (run.optimizer, repr(run.learning_rate), run.warmup_steps, run.global_batch_size,
              run.micro_batch_size, run.steps,
              run.steps,  # train.checkpoint_every: one checkpoint, at the end
              run.seed,
              "false")  # export.enabled: a study needs the metric, not the SavedModel
    return [f"{key}={value}" for key, value in zip(STUDY_KEYS, values)]


def study_keys_in(extra_overrides):
    """The keys of the user's `--params_override` items that the study sets for each run
    itself (`STUDY_KEYS`): a recipe refuses a key given twice."""
    from recipes.common import config as config_lib  # yaml only: no TensorFlow

    def keys(node, prefix=""):
        for name, value in node.items():
            yield from (keys(value, f"{prefix}{name}.") if isinstance(value, dict)
                        else [f"{prefix}{name}"])

    given = keys(config_lib.parse_params_override(extra_overrides)) if extra_overrides else ()
    return [key for key in given if key in STUDY_KEYS]


def override_string(run, extra_overrides=""):
    """The `--params_override` value: the user's `key=value` items, then the study's."""
    return ",".join(([extra_overrides] if extra_overrides else []) + overrides(run))


def is_recipe_file(recipe):
    """Whether `recipe` names a recipe's own `.py` file rather than a shipped recipe."""
    return recipe.endswith(".py")


def command(recipe, config_files, run, model_dir, extra_overrides=""):
    """argv of the recipe's CLI training and evaluating `run` into `model_dir`."""
    program = [recipe] if is_recipe_file(recipe) else ["-m", PROGRAMS[recipe]]
    return (
        [sys.executable, *program]
        + [f"--config_file={path}" for path in config_files]
        + [
            f"--params_override={override_string(run, extra_overrides)}",
            f"--model_dir={model_dir}",
            f"--mode={MODE}",
        ]
    )


def loaded_tasks(recipe, config_files, runs, extra_overrides=""):
    """(run, the recipe's task with the config `run` trains with), for each of `runs`, loaded
    and validated in this process as the recipe's CLI would (no model_dir: a run's
    config.yaml is not read); raises the recipe's `UserError` for the first bad config."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # as the recipes' CLIs
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    driver = importlib.import_module("recipes.common.driver")
    task_class = task_class_of(recipe)
    for run in runs:
        options = types.SimpleNamespace(config_files=tuple(config_files), model_dir=None,
                                        params_override=override_string(run, extra_overrides))
        yield run, driver.load_task(task_class, options)


def check_settings(recipe, config_files, runs, model_dir_of, extra_overrides="", metric=None):
    """Loads and validates the recipe config of every run, checks that it reports the
    held-out `metric` (`check_metric_of_config`), and makes those of the driver's checks
    before any work (`driver.check_before_work`) that apply to a run not started yet (a
    recipe file's Task defines every method a run calls; a fresh run's
    train.init_checkpoint holds a checkpoint of this program; the data it reads into
    `model_dir_of(run)`), in this process (nothing runs or is written; a finished run is
    skipped and an unfinished one resumed, which its own run checks); raises the recipe's
    `UserError` for the first bad one."""
    for run, task in loaded_tasks(recipe, config_files, runs, extra_overrides):
        driver = importlib.import_module("recipes.common.driver")  # (after loaded_tasks: quiet)
        if metric is not None:
            check_metric_of_config(recipe, metric, task.config)
        driver.check_task_methods(task, MODE)
        driver.check_init_checkpoint(task.config, model_dir_of(run), MODE)
        task.check_data(MODE, model_dir_of(run))


def check_finished_configs(recipe, config_files, runs, model_dir_of, extra_overrides=""):
    """A UserError for the first of the finished `runs` whose config, as this study would
    run it now, differs from the one it ran with (its `config.yaml`): a config file, or a
    recipe file's defaults, changed since, and its figures would be tabulated as of the new
    settings."""
    driver = importlib.import_module("recipes.common.driver")
    for run, task in loaded_tasks(recipe, config_files, runs, extra_overrides):
        changes = driver.saved_config_changes(task, model_dir_of(run))
        if changes:
            key, old, new = changes[0]
            more = f", and {len(changes) - 1} more key(s)" if len(changes) > 1 else ""
            raise UserError(
                f"run {run.name} in {model_dir_of(run)} ran with {key}={old!r}, and this "
                f"study's config gives {new!r}{more}: a config file or the recipe changed "
                "since; give another --study_dir for the new settings, or restore them")


def task_class_of(recipe):
    """The `Task` subclass a recipe runs: a shipped one's by name; a recipe file's is the one
    `Task` subclass the file defines (the file is imported, its `__main__` block not run)."""
    if not is_recipe_file(recipe):
        return getattr(importlib.import_module(PROGRAMS[recipe]), TASK_CLASSES[recipe])
    spec = importlib.util.spec_from_file_location("study_recipe_file", recipe)
    module = importlib.util.module_from_spec(spec)
    argv, sys.argv = sys.argv, [recipe]  # (not the study's flags, to a program it may run)
    printed, warned = io.StringIO(), io.StringIO()  # what a program it runs says of its flags
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(warned):
            spec.loader.exec_module(module)
    except Exception as error:  # the recipe's own code: its error, in one line
        raise UserError(f"--recipe={recipe} cannot be imported: "
                        f"{type(error).__name__}: {error}") from None
    except SystemExit as exit_:  # it ran a program (or exited) when imported
        raise UserError(
            f"--recipe={recipe} exited when imported (status {exit_.code!r}): put its "
            "`driver.main(...)` under `if __name__ == \"__main__\":` (docs/writing_a_recipe.md)"
        ) from None
    finally:
        sys.argv = argv
        if not isinstance(sys.exc_info()[1], UserError):  # imported, or another error:
            sys.stdout.write(printed.getvalue())  # what it printed, as it would have
            sys.stderr.write(warned.getvalue())
    task_base = importlib.import_module("recipes.common.task").Task
    tasks = [value for value in vars(module).values() if isinstance(value, type)
             and issubclass(value, task_base) and value.__module__ == module.__name__]
    if len(tasks) != 1:
        raise UserError(f"--recipe={recipe} defines {len(tasks)} subclasses of "
                        "recipes.common.task.Task; a recipe file defines one "
                        "(docs/writing_a_recipe.md)")
    return tasks[0]


class MetricMissing(KeyError):
    """A finished run's results.json has no such held-out metric."""

    def __init__(self, metric, available, path):
        super().__init__(metric)
        self.metric, self.available, self.path = metric, available, path


def check_metric(recipe, metric):
    """A `UserError`, before any run, if a shipped recipe reports no held-out `metric`."""
    known = HELD_OUT_METRICS.get(recipe)
    if known is not None and metric not in known:
        raise UserError(f"--metric={metric}: recipe {recipe} reports no such held-out "
                        f"metric; give one of {', '.join(known)}")


def check_metric_of_config(recipe, metric, config):
    """A `UserError`, before any run, if a shipped recipe run with `config` (a loaded task's:
    its config files, overrides and defaults) leaves out the held-out `metric` it reports
    with other configs: ResNet's top-k accuracy needs more than k classes
    (recipes/resnet/model.py `reports_top_k`)."""
    if recipe != "resnet":
        return
    model = importlib.import_module("recipes.resnet.model")  # (loaded with the task)
    classes = config.data.num_classes
    if metric == f"top_{model.TOP_K}_accuracy" and not model.reports_top_k(classes):
        raise UserError(
            f"--metric={metric}: the config's data.num_classes is {classes} (<= "
            f"{model.TOP_K}), so recipe resnet does not report top-{model.TOP_K} accuracy "
            f"(every label is among the top {model.TOP_K}); give --metric=top_1_accuracy, or "
            f"a config of more than {model.TOP_K} classes")


# Words of a metric's name (split at "_") that say which way it is better.
LOWER_IS_BETTER_WORDS = ("loss", "entropy", "error", "mae", "mse", "rmse", "msle", "mape",
                         "perplexity")
HIGHER_IS_BETTER_WORDS = ("accuracy", "acc", "auc", "precision", "recall", "f1", "iou")


def mode_of(metric):
    """"min" (lower is better) for a name holding a word of `LOWER_IS_BETTER_WORDS` (the
    recipes' `loss`, `masked_lm_cross_entropy`; `mae`, `val_rmse`), "max" for one of
    `HIGHER_IS_BETTER_WORDS` (`top_1_accuracy`, `auc`), None when the name says neither or
    both. (Keras' callbacks take every name without "acc" or "auc" for a loss: an `f1` too.)"""
    words = set(metric.lower().split("_"))
    lower = bool(words.intersection(LOWER_IS_BETTER_WORDS))
    higher = bool(words.intersection(HIGHER_IS_BETTER_WORDS))
    return None if lower == higher else "min" if lower else "max"


def read_results(model_dir, metric):
    """`{metric_name, metric, steps, wall_time_seconds, noise_scale}` of a finished run
    (`metric`: the value of `metric_name`, which is `metric`), or None if its results.json
    is absent. A missing metric is a `MetricMissing` naming the ones present."""
    path = os.path.join(model_dir, RESULTS_FILE)
    if not os.path.exists(path):
        return None
    results = storage.read_mapping(path, ("steps", "wall_time_seconds"), advice=(
        "remove it and the run's study_run.json and run the study again: the run is "
        "evaluated again from its last checkpoint"))
    if metric not in results.get("eval", {}):
        raise MetricMissing(metric, sorted(results.get("eval", {})), path)
    noise_scale = results.get("train", {}).get(NOISE_SCALE_LOG)
    return {
        "metric_name": metric,
        "metric": float(results["eval"][metric]),
        "steps": int(results["steps"]),
        "wall_time_seconds": float(results["wall_time_seconds"]),
        "noise_scale": None if noise_scale is None else float(noise_scale),
    }
