"""The flags of `python -m recipes.study` (recipes/study/cli.py), read into what the study
runs: `parse_args` (argparse, each value parsed and refused in one line), `settings_from`
(the grid's `plan.StudySettings`, every number a run could not use refused with the flag's
name) and `metric_from` (the held-out metric and which way it is better).
"""
import argparse
import difflib
import math
import os

from recipes.common import argparse_parser
from recipes.common.errors import UserError
from recipes.study import adapter
from recipes.study import plan as plan_lib
from recipes.study import report


_KIND_WORDS = {int: "a whole number", float: "a number"}


def _list(kind):
    def parse(text):
        values = []
        for item in (item for item in text.split(",") if item):
            try:
                values.append(kind(item))
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{item!r} in {text!r} is not {_KIND_WORDS.get(kind, kind.__name__)}; "
                    f"give a comma-separated list of them") from None
        values = tuple(values)
        if not values:
            raise argparse.ArgumentTypeError("empty list")
        repeated = _first_repeated(values)
        if repeated is not None:  # a typo more often than a wish (32,32 for 32,64)
            raise argparse.ArgumentTypeError(f"{text!r} gives {repeated} twice; give each once")
        return values

    return parse


def _first_repeated(values):
    seen = set()
    for value in values:
        if value in seen:
            return value
        seen.add(value)
    return None


def _learning_rates(text):
    pairs = [item.split("=") for item in text.split(",")]
    if any(len(pair) != 2 for pair in pairs):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected OPTIMIZER=LR items, e.g. lamb=0.01,lars=1.0")
    rates = {}
    for name, value in pairs:
        try:
            rates[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: the learning rate of {name}={value} "
                                             "is not a number, e.g. lamb=0.01") from None
    repeated = _first_repeated(name for name, _ in pairs)
    if repeated is not None:
        raise argparse.ArgumentTypeError(f"{text!r} gives {repeated} twice; give each once")
    return rates


class _Once(argparse.Action):
    """--params_override given twice: refused as the recipes refuse it (argparse, as absl,
    would keep the last one silently; its items layer, so both were probably meant)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = vars(namespace).setdefault("_given_once", set())
        if self.dest in given:
            parser.error(f"{option_string} is given twice and only the last would count; give "
                         "it once, joining the items with commas: a.b=1,c.d=2")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


def _recipe(text):
    if text in adapter.PROGRAMS:
        return text
    if adapter.is_recipe_file(text) and os.path.isfile(text):
        return os.path.abspath(text)  # the runs start in other directories
    raise argparse.ArgumentTypeError(
        f"{text!r} is neither {' nor '.join(sorted(adapter.PROGRAMS))} nor an existing "
        "recipe file (a .py file running a Task on the shared driver: "
        "docs/writing_a_recipe.md)")


def parse_args(argv, description=None):
    """The study's flags from `argv`; a mistake is one line and exit status 2 (argparse's
    `error`, as `OneLineParser` words it)."""
    parser = argparse_parser.OneLineParser(prog="python -m recipes.study",
                                           description=description)
    parser.add_argument("--recipe", required=True, type=_recipe,
                        help="the recipe each run trains: "
                             + ", ".join(f"{name} ({program})" for name, program
                                         in sorted(adapter.PROGRAMS.items()))
                             + ", or a recipe's own .py file (docs/writing_a_recipe.md)")
    parser.add_argument("--config_file", action="append", default=[],
                        help="the recipe's YAML config (repeatable, as the recipe's flag; "
                             "none: the recipe's defaults)")
    parser.add_argument("--params_override", default="", action=_Once,
                        help="key=value,... for every run; not a key the study sets itself "
                             "(optimizer.name, optimizer.learning_rate, optimizer.warmup_steps, "
                             "train.global_batch_size, train.micro_batch_size, train.steps, "
                             "train.checkpoint_every, train.seed, export.enabled)")
    parser.add_argument("--study_dir", required=True, help="runs, table and plot go here")
    parser.add_argument("--batch_sizes", type=_list(int), required=True,
                        help="global batch sizes compared, comma-separated, e.g. 256,1024,4096")
    parser.add_argument("--optimizers", type=_list(str), required=True,
                        help="optimizer.name values swept, e.g. lamb,lars,adamw,momentum")
    parser.add_argument("--base_lr", type=_learning_rates, required=True,
                        help="OPTIMIZER=LR,...: peak learning rate at --base_batch_size")
    parser.add_argument("--base_batch_size", type=int, default=0,
                        help="batch the base learning rates belong to (default: the smallest)")
    parser.add_argument("--lr_rule", choices=("sqrt", "linear"), default="sqrt",
                        help="learning rate at batch B: sqrt (the default), base LR x "
                             "sqrt(B/base) (the LAMB paper's); linear, base LR x B/base "
                             "(Goyal et al.)")
    parser.add_argument("--lr_multipliers", type=_list(float), default=(0.5, 1.0, 2.0),
                        help="the sweep: the rule's learning rate times each of these "
                             "(default 0.5,1,2)")
    parser.add_argument("--warmup_steps", type=int, required=True,
                        help="warmup updates (sqrt: at every batch; linear: at the base batch)")
    parser.add_argument("--epochs", type=float, required=True,
                        help="training budget in epochs, equal at every batch size")
    parser.add_argument("--train_examples", type=int, required=True,
                        help="training examples in one epoch of the recipe's data")
    parser.add_argument("--micro_batch_size", type=int, required=True,
                        help="per-replica micro-batch; larger batches accumulate")
    parser.add_argument("--seeds", type=_list(int), default=(1, 2, 3),
                        help="the first sweeps; the best learning rate reruns with the rest "
                             "(default 1,2,3)")
    parser.add_argument("--untuned", type=_list(str), default=(),
                        help="optimizers also run at the sqrt rule's own LR (no sweep)")
    _add_answer_flags(parser)
    return parser.parse_args(argv)


def _add_answer_flags(parser):
    """The flags of what the study answers on, and how it runs."""
    parser.add_argument("--metric", default="",
                        help="held-out metric in results.json (default: bert's "
                             f"{adapter.DEFAULT_METRICS['bert']}, resnet's "
                             f"{adapter.DEFAULT_METRICS['resnet']}; a recipe file's: required)")
    parser.add_argument("--metric_mode", choices=("auto", "min", "max"), default="auto",
                        help="which way --metric is better: min, lower; max, higher; auto (the "
                             "default), as its name says: lower for a loss, entropy, error, "
                             "mae, mse, rmse, ...; higher for an accuracy, acc, auc, precision, "
                             "recall, f1, iou (another name needs min or max)")
    parser.add_argument("--tolerance", type=float, default=0.01,
                        help="how large the batch can go: each line's largest batch up to "
                             "which every batch's held-out figure stays within this fraction "
                             "of its smallest batch's (default 0.01: 1%%)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (default 1)")
    parser.add_argument("--report_only", action="store_true",
                        help="run nothing: write the table and plot of the runs finished so far")


MAX_SEED = 2**32 - 1  # the recipes seed NumPy, which takes 0 ... 2**32 - 1


def _finite_positive(value):
    return math.isfinite(value) and value > 0


def settings_from(args):
    """The study's settings from the parsed flags; a `PlanError` for the first flag whose
    value no run could use (checked here, not by the recipe, so that the line names the
    study's flag)."""
    batch_sizes = tuple(sorted(set(args.batch_sizes)))
    positive = {
        "--parallel": [args.parallel], "--epochs": [args.epochs],
        "--train_examples": [args.train_examples],
        "--micro_batch_size": [args.micro_batch_size],
        "--batch_sizes": batch_sizes, "--lr_multipliers": args.lr_multipliers,
    }
    for flag, values in positive.items():
        for value in values:
            if not _finite_positive(value):
                raise plan_lib.PlanError(f"{flag}: got {value}; give a finite number above 0")
    for optimizer, value in args.base_lr.items():
        if not _finite_positive(value):
            raise plan_lib.PlanError(
                f"--base_lr: {optimizer}={value} is not a learning rate; give a finite "
                f"number above 0, e.g. {optimizer}=0.01")
    if args.base_batch_size < 0:
        raise plan_lib.PlanError(f"--base_batch_size={args.base_batch_size} is negative; give "
                                 "a batch size above 0 (or leave it out: the smallest batch)")
    if args.warmup_steps < 0:
        raise plan_lib.PlanError(f"--warmup_steps must be at least 0, got {args.warmup_steps}")
    if not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise plan_lib.PlanError(f"--tolerance={args.tolerance:g}: give a finite fraction of "
                                 "0 or more, e.g. 0.01 (1%)")
    for seed in args.seeds:
        if not 0 <= seed <= MAX_SEED:
            raise plan_lib.PlanError(f"--seeds: {seed} is not a seed the recipes take; give "
                                     f"seeds from 0 to {MAX_SEED}")
    for path in args.config_file:
        if os.path.isdir(path):
            raise plan_lib.PlanError(f"--config_file {path} is a directory; give a YAML file")
        if not os.path.isfile(path):
            raise plan_lib.PlanError(f"--config_file {path} does not exist; check the path "
                                     "(relative to the current directory)")
    if "{" in args.params_override or "\n" in args.params_override:
        raise plan_lib.PlanError("--params_override: use key=value,... items (no YAML mapping)")
    taken = adapter.study_keys_in(args.params_override)
    if taken:
        raise plan_lib.PlanError(
            f"--params_override sets {', '.join(taken)}, which the study sets for each run "
            "itself from its flags (--help lists them); drop it")
    return plan_lib.StudySettings(
        batch_sizes=batch_sizes,
        optimizers=tuple(dict.fromkeys(args.optimizers)),
        base_learning_rates=args.base_lr,
        base_batch_size=args.base_batch_size or batch_sizes[0],
        lr_rule=args.lr_rule,
        lr_multipliers=tuple(args.lr_multipliers),
        warmup_steps=args.warmup_steps,
        epochs=args.epochs,
        train_examples=args.train_examples,
        micro_batch_size=args.micro_batch_size,
        seeds=tuple(args.seeds),
        untuned=tuple(dict.fromkeys(args.untuned)),
    )


def metric_from(args):
    """The held-out metric learning rates are picked on (`report.Metric`): --metric, or the
    shipped recipe's, better as --metric_mode says; a UserError for a shipped recipe's
    metric it does not report, or a name that does not say its direction under auto."""
    metric = args.metric or adapter.DEFAULT_METRICS.get(args.recipe, "")
    if not metric:
        raise UserError(f"--metric is required with --recipe={args.recipe}: the held-out "
                        "metric of its results.json to pick learning rates on, e.g. "
                        "--metric=accuracy")
    adapter.check_metric(args.recipe, metric)
    try:
        return report.Metric.of(metric, args.metric_mode)
    except ValueError:  # auto, and the name does not say
        known, typo = adapter.LOWER_IS_BETTER_WORDS + adapter.HIGHER_IS_BETTER_WORDS, ""
        for word in metric.split("_"):  # a misspelt word is likelier than a metric of its own
            near = difflib.get_close_matches(word.lower(), known, n=1, cutoff=0.8)
            if near and near[0] != word.lower():  # (a name may hold words of both ways)
                typo = f" ({word!r}: {near[0]} misspelt?)"
                break
        raise UserError(f"--metric={metric}: which way it is better is not known from its "
                        f"name{typo}; give --metric_mode=min (lower is better) or "
                        "--metric_mode=max") from None
