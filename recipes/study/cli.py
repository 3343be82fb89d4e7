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
import math
import os
import shlex
import sys
import time

from recipes.common import errors, storage
from recipes.common.errors import UserError
from recipes.study import adapter
from recipes.study import flags
from recipes.study import plan as plan_lib
from recipes.study import report
from recipes.study import runner


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
    args = flags.parse_args(argv, description=__doc__.splitlines()[0])
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
    # gs://: it made ./gs:/... and its runs wrote to the URL; file://: the path it names
    storage.refuse_remote("--study_dir", args.study_dir, "a study")
    args.study_dir = storage.local_path(args.study_dir)
    metric = flags.metric_from(args)
    settings = flags.settings_from(args)
    plan_lib.check(settings)
    sweeps, untuned = plan_lib.sweep_runs(settings), plan_lib.untuned_runs(settings)
    sweep_phase = [run for runs in sweeps.values() for run in runs]
    untuned_phase = [run for runs in untuned.values() for run in runs]
    adapter.check_settings(args.recipe, args.config_file, sweep_phase + untuned_phase,
                           lambda run: runner.run_dir(args.study_dir, run), args.params_override,
                           metric.name)
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
    except (runner.RunFailed, UserError) as error:  # (UserError: a run's file damaged)
        print(f"error: {error}", file=sys.stderr)
        return 2
    rows = report.summarize(settings, sweeps, untuned, statuses, metric)
    paths = report.write(args.study_dir, rows, metric, args.tolerance,
                         _header(args, settings, statuses))
    for line in report.largest_batches(rows, metric, args.tolerance):
        print(line)
    print(f"study written: {', '.join(paths)} ({time.perf_counter() - start:.0f} s)")
    return 0
