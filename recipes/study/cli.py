"""`python -m recipes.study`: how far the batch can grow, measured through the real recipe.

`--recipe` is bert, resnet or a recipe's own .py file (docs/writing_a_recipe.md). Example
(a small ResNet study on the embedded digits):

    python -m recipes.study --recipe=resnet --config_file=configs/resnet/tiny_cpu.yaml \\
        --study_dir=/tmp/study --batch_sizes=64,512,2048 --optimizers=lamb,lars,momentum \\
        --base_lr=lamb=0.01,lars=1.0,momentum=0.05 --epochs=8 --train_examples=4000 \\
        --micro_batch_size=32 --warmup_steps=5 --lr_multipliers=0.5,1,2 --untuned=lamb

Runs every learning rate of every (optimizer, batch) cell through the recipe's CLI, picks
each cell's best learning rate on the held-out metric, reruns it with the other seeds,
prints each line's largest batch within --tolerance of its smallest batch's figure, and
writes study.md, study.json and study.png into --study_dir. Run it again with the same
arguments to resume. The grid arithmetic is in recipes/study/plan.py.
"""
import argparse
import difflib
import math
import os
import shlex
import sys
import time

from recipes.common import argparse_parser, storage
from recipes.common import errors
from recipes.common.errors import UserError
from recipes.study import adapter
from recipes.study import plan as plan_lib
from recipes.study import report
from recipes.study import runner


def _list(kind):
    def parse(text):
        try:
            values = tuple(kind(item) for item in text.split(",") if item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
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


def parse_args(argv):
    parser = argparse_parser.OneLineParser(prog="python -m recipes.study",
                                           description=__doc__.splitlines()[0])
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
                        help="learning rate at batch B: sqrt, base LR x sqrt(B/base) (the "
                             "LAMB paper's); linear, base LR x B/base (Goyal et al.)")
    parser.add_argument("--lr_multipliers", type=_list(float), default=(0.5, 1.0, 2.0),
                        help="the sweep: the rule's learning rate times each of these")
    parser.add_argument("--warmup_steps", type=int, required=True,
                        help="warmup updates (sqrt: at every batch; linear: at the base batch)")
    parser.add_argument("--epochs", type=float, required=True,
                        help="training budget in epochs, equal at every batch size")
    parser.add_argument("--train_examples", type=int, required=True,
                        help="training examples in one epoch of the recipe's data")
    parser.add_argument("--micro_batch_size", type=int, required=True,
                        help="per-replica micro-batch; larger batches accumulate")
    parser.add_argument("--seeds", type=_list(int), default=(1, 2, 3),
                        help="the first sweeps; the best learning rate reruns with the rest")
    parser.add_argument("--untuned", type=_list(str), default=(),
                        help="optimizers also run at the sqrt rule's own LR (no sweep)")
    parser.add_argument("--metric", default="",
                        help="held-out metric in results.json (default: bert's "
                             f"{adapter.DEFAULT_METRICS['bert']}, resnet's "
                             f"{adapter.DEFAULT_METRICS['resnet']}; a recipe file's: required)")
    parser.add_argument("--metric_mode", choices=("auto", "min", "max"), default="auto",
                        help="which way --metric is better: min, lower; max, higher; auto, "
                             "as its name says: lower for a loss, entropy, error, mae, mse, "
                             "rmse, ...; higher for an accuracy, acc, auc, precision, recall, "
                             "f1, iou (another name needs min or max)")
    parser.add_argument("--tolerance", type=float, default=0.01,
                        help="how large the batch can go: each line's largest batch up to "
                             "which every batch's held-out figure stays within this fraction "
                             "of its smallest batch's (default 0.01: 1%%)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once")
    parser.add_argument("--report_only", action="store_true",
                        help="run nothing: write the table and plot of the runs finished so far")
    return parser.parse_args(argv)


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


def _progress(done, total, run, status):
    if status is None:  # stopped by the study before it finished
        return
    if status["status"] == "ok":
        result = status["result"]
        noise = result["noise_scale"]
        if noise is not None:  # a negative estimate is not a scale (the table's words)
            noise = f"{noise:,.0f}" if math.isfinite(noise) and noise > 0 else "not measurable"
        figures = (
            f"{result['metric_name']} {result['metric']:.4f}, {result['steps']} steps, "
            f"{result['wall_time_seconds']:.0f} s"
            + ("" if noise is None else f", noise scale {noise}")
        )
    else:
        figures = status["status"]
    print(f"[{done}/{total}] {run.name}: {figures}", flush=True)


def _header(args, settings, statuses):
    """study.md's first lines: the settings, the runs, and the command that makes it."""
    finished = [status for status in statuses.values() if status]
    process_seconds = sum(status["process_seconds"] for status in finished)
    command = " ".join(shlex.quote(arg) for arg in args.command_line
                       if not arg.startswith("--report_only"))
    return (
        f"Batch-size study: recipe {args.recipe}, {_count(settings.epochs, 'epoch')} of "
        f"{settings.train_examples:,} examples, {settings.lr_rule} learning-rate rule from "
        f"batch {settings.base_batch_size}, seeds {','.join(map(str, settings.seeds))}; "
        f"{len(finished)} of {len(statuses)} runs finished, {process_seconds / 60:.1f} min of "
        f"run processes in total.\n\nMade by: `python -m recipes.study {command}`"
    )


def _phase_line(name, runs, study_dir):
    """`sweep: 24 runs`, saying how many of them finished before (a resumed study skips
    them)."""
    done = sum(runner.read_status(study_dir, run) is not None for run in runs)
    before = f" ({done} finished before: not run again)" if done else ""
    return f"{name}: {_count(len(runs), 'run')}{before}"


def _count(number, noun):
    """`1 run`, `3 runs`, `0.25 epochs`."""
    return f"{number:g} {noun}" + ("" if number == 1 else "s")


def _metric(args):
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
            if near:
                typo = f" ({word!r}: {near[0]} misspelt?)"
                break
        raise UserError(f"--metric={metric}: which way it is better is not known from its "
                        f"name{typo}; give --metric_mode=min (lower is better) or "
                        "--metric_mode=max") from None


def _interrupted(study_dir, how="interrupted"):
    finished = runner.finished_runs(study_dir)
    if not finished:
        return f"{how}: the study stopped before any run finished; nothing is recorded"
    return (
        f"{how}: the study stopped; runs finished so far: {len(finished)}, recorded in "
        f"{os.path.join(study_dir, runner.RUNS_SUBDIR)} (--report_only tabulates them); run "
        "the same command again to resume"
    )


def main(argv=None):
    """The study; its exit status (2: a mistake, one line; 130: interrupted by Ctrl-C; 143:
    by SIGTERM). Either way the runs under way are sent SIGTERM (they save a checkpoint of
    their step) and waited for."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    args.command_line = list(argv)
    try:
        with errors.sigterm_raises():
            return _main(args)
    except KeyboardInterrupt:
        print(_interrupted(args.study_dir), file=sys.stderr, flush=True)
        return errors.EXIT_INTERRUPTED
    except errors.Terminated:
        print(_interrupted(args.study_dir, "interrupted (SIGTERM)"), file=sys.stderr,
              flush=True)
        return errors.EXIT_PREEMPTED


def _checked_plan(args):
    """(metric, settings, sweeps, untuned, sweep runs, untuned runs) once every check of
    the flags, the recipe's config and the study directory passes; else a UserError or a
    PlanError, before any run."""
    if not args.study_dir:
        raise UserError("--study_dir is empty; give a directory you can write (it is created "
                        "if missing)")
    # before any run: a recipe would refuse `~/...` only once the study had made `./~/...`
    storage.refuse_unexpanded_home("--study_dir", args.study_dir)
    metric = _metric(args)
    settings = settings_from(args)
    plan_lib.check(settings)
    sweeps, untuned = plan_lib.sweep_runs(settings), plan_lib.untuned_runs(settings)
    sweep_phase = [run for runs in sweeps.values() for run in runs]
    untuned_phase = [run for runs in untuned.values() for run in runs]
    adapter.check_settings(args.recipe, args.config_file, sweep_phase + untuned_phase,
                           lambda run: runner.run_dir(args.study_dir, run), args.params_override)
    storage.check_writable(f"--study_dir={args.study_dir}", args.study_dir)
    storage.check_not_a_run(f"--study_dir={args.study_dir}", args.study_dir,
                            "the study's runs, study.md and study.json")
    planned = sweep_phase + untuned_phase + [
        seed_run for run in sweep_phase for seed_run in plan_lib.seed_runs(run, settings.seeds)]
    runner.check_recorded(args.study_dir, planned, runner.study_flags(
        args.recipe, args.config_file, args.params_override))
    adapter.check_finished_configs(
        args.recipe, args.config_file,
        [run for run in planned if runner.read_status(args.study_dir, run) is not None],
        lambda run: runner.run_dir(args.study_dir, run), args.params_override)
    if args.report_only:
        if not any(runner.read_status(args.study_dir, run) for run in planned):
            raise UserError(
                f"--report_only: --study_dir={args.study_dir} has no finished run of this "
                "study; run the command without --report_only to run them")
    return metric, settings, sweeps, untuned, sweep_phase, untuned_phase


def _main(args):
    start = time.perf_counter()
    try:
        metric, settings, sweeps, untuned, sweep_phase, untuned_phase = _checked_plan(args)
    except (plan_lib.PlanError, UserError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    os.makedirs(args.study_dir, exist_ok=True)
    if args.tolerance >= 1:  # (allowed: a loss may be 100% worse and more)
        print(f"note: --tolerance={args.tolerance:g} is {args.tolerance * 100:g}%; for "
              f"{args.tolerance:g}% give {args.tolerance / 100:g}", flush=True)
    unused = [name for name in args.base_lr if name not in settings.optimizers]
    if unused:  # (allowed: one --base_lr for several studies)
        print(f"note: --base_lr gives {', '.join(unused)}, which --optimizers does not list; "
              "it runs no such line", flush=True)
    run_arguments = dict(
        recipe=args.recipe, config_files=args.config_file, study_dir=args.study_dir,
        extra_overrides=args.params_override, metric=metric.name,
    )
    execute = runner.execute
    if args.report_only:
        def execute(runs, **_):
            return {run.name: runner.read_status(args.study_dir, run, metric.name)
                    for run in runs}
    try:
        # sweep, then the seeds of each cell's best, then the untuned line (last: the
        # tuned table is complete first when a study has to stop early)
        if not args.report_only:
            steps = ", ".join(f"{plan_lib.steps_for(settings, batch):,} at batch {batch:,}"
                              for batch in settings.batch_sizes)
            print(f"steps per run ({_count(settings.epochs, 'epoch')} of "
                  f"{settings.train_examples:,} examples): {steps}", flush=True)
            print(_phase_line("sweep", sweep_phase, args.study_dir), flush=True)
        statuses = execute(
            sweep_phase, parallel=args.parallel, progress=_progress, **run_arguments
        )
        reruns = []
        for sweep in sweeps.values():
            best = report.best_run(sweep, statuses, metric)
            if best is not None:
                reruns += plan_lib.seed_runs(best, settings.seeds)
        for name, runs in (("seeds", reruns), ("untuned", untuned_phase)):
            runs = list({run.name: run for run in runs if run.name not in statuses}.values())
            if runs:
                if not args.report_only:
                    print(_phase_line(name, runs, args.study_dir), flush=True)
                statuses.update(
                    execute(runs, parallel=args.parallel, progress=_progress, **run_arguments)
                )
    except runner.RunFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rows = report.summarize(settings, sweeps, untuned, statuses, metric)
    paths = report.write(args.study_dir, rows, metric, args.tolerance,
                         _header(args, settings, statuses))
    for line in report.largest_batches(rows, metric, args.tolerance):
        print(line)
    print(f"study written: {', '.join(paths)} ({time.perf_counter() - start:.0f} s)")
    return 0
