"""The first training step after a pause, against the steps after it: the recipe's compiled
step and Model Garden's, and each side's optimizer update alone.

A checkpoint chunk's first step comes after a pause of the compute: the checkpoint save,
the summaries, the next chunk's pipeline. Is a step after a pause slower whatever the
pause holds, and does Model Garden's step pay it too? Each contender runs
`--steps_before` steps back to back, then sleeps (Python's `time.sleep`: nothing of
TensorFlow runs, nothing is read or written), then `--steps_after` steps each timed; the
measurement is the first of those against the median of the others. Every side runs with
no pause too, as the control. The contenders:

  recipe               the recipe's compiled `train_function` on one kept iterator (as
                       benchmarks/recipe_throughput.py's "compiled steps alone");
  Model Garden         one step of Model Garden's own loop (its `Trainer.train(1)`,
                       benchmarks/model_garden_loops.py), same model, data and batch;
  recipe update        one `apply_gradients` of lamb_tf's LAMB on the recipe's model's
                       variables, fixed gradients, in a `tf.function`;
  Model Garden update  the same with Model Garden's LAMB and its model's variables.

Every contender and pause alternate in one process (benchmarks/alternation.py: the order
changes each round; one warm-up round); each is judged on its rounds' ratios
(`alternation.describe_ratios`: the first step's speed against the others').

Usage:
  python benchmarks/step_after_pause.py --recipe resnet --work_dir /tmp/rt_resnet
  python benchmarks/step_after_pause.py --work_dir /tmp/rt_d --pauses 0.08,0.3   # tiny BERT
  python benchmarks/step_after_pause.py --config_file my.yaml --rounds 1 --steps_before 1 \\
      --steps_after 2 --pauses 0.01                                            # CI size
Prints a Markdown table and the verdicts; with --json, writes every sample.
"""
import datetime
import math
import os
import platform
import statistics
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from benchmarks import alternation, recipe_flags  # noqa: E402  (no TensorFlow)


def _parse_arguments(argv):
    parser = alternation.argument_parser(__doc__)
    recipe_flags.add_recipe_flags(parser, "step_after_pause")
    parser.add_argument("--pauses", default="0.05,0.3",
                        help="seconds of each pause, comma-separated (no pause is always run)")
    parser.add_argument("--steps_before", type=int, default=20,
                        help="steps run back to back before each pause")
    parser.add_argument("--steps_after", type=int, default=8,
                        help="steps timed after each pause (the first against the others)")
    parser.add_argument("--rounds", type=int, default=12,
                        help="timed rounds of every contender and pause, after one warm-up")
    return parser.parse_args(argv)


def _pauses(text):
    """The pauses in seconds, or None if `text` is not a list of positive finite numbers."""
    try:
        pauses = [float(item) for item in text.split(",")]
    except ValueError:
        return None
    return pauses if all(math.isfinite(pause) and pause > 0 for pause in pauses) else None


def _bad_arguments(args):
    """One line naming the first bad flag, or None."""
    for flag in ("steps_before", "rounds"):
        if getattr(args, flag) < 1:
            return f"--{flag}={getattr(args, flag)} must be at least 1"
    if args.steps_after < 2:
        return f"--steps_after={args.steps_after} must be at least 2 (the first and another)"
    if _pauses(args.pauses) is None:
        return f"--pauses={args.pauses}: give seconds above 0, comma-separated, e.g. 0.05,0.3"
    return alternation.output_file_problem("--json", args.json)


if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    recipe_flags.check_command_line(_parse_arguments, _bad_arguments)

from recipes.common import startup  # noqa: E402,F401  (legacy Keras, quiet C++)

import tensorflow as tf  # noqa: E402

from benchmarks import recipe_throughput  # noqa: E402
from recipes.common import errors  # noqa: E402


def _after_pause(step, steps_before, pause_s, steps_after):
    """(the first step's seconds, the median of the other steps' seconds) after a pause."""
    for _ in range(steps_before):
        step()
    if pause_s:
        time.sleep(pause_s)
    seconds = [alternation.seconds(step) for _ in range(steps_after)]
    return seconds[0], statistics.median(seconds[1:])


def _contenders(args, task_class, config):
    """{name: one synchronous step of it}."""
    (task, _, step_only, recipe_update, *_) = recipe_throughput.recipe_side(
        task_class, config, args.work_dir)
    model_garden_train, model_garden_update, *_ = recipe_throughput.RECIPES[args.recipe][2](
        config, task)
    return {
        "recipe": lambda: step_only(1),
        "Model Garden": lambda: model_garden_train(1),
        # (a `tf.function` call returns when its ops have run: eager execution is synchronous)
        "recipe update": recipe_update,
        "Model Garden update": model_garden_update,
    }


def _report(args, config, samples, run):
    rows = []
    for (name, pause), values in samples.items():
        first = [value[0] for value in values]
        others = [value[1] for value in values]
        speeds = [other / one for one, other in values]
        rows.append({
            "contender": name, "pause_s": pause,
            "first_ms": statistics.median(first) * 1e3,
            "others_ms": statistics.median(others) * 1e3,
            "extra_ms": statistics.median(one - other for one, other in values) * 1e3,
            "speeds": speeds,
            "verdict": alternation.describe_ratios(speeds),
        })
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}, "
                   f"TensorFlow {tf.__version__}",
        "load_average": os.getloadavg(),
        **run,  # alternation.run_finished's: git_commit, git_tree, load averages
        "recipe": args.recipe, "batch": config.train.micro_batch_size,
        "steps_before": args.steps_before, "steps_after": args.steps_after,
        "rounds": args.rounds, "rows": rows,
        "samples": {f"{name} / {pause:g} s": values for (name, pause), values in samples.items()},
    }


def _print_report(report):
    print(f"{report['recipe']} recipe, batch {report['batch']} (k = 1): {report['steps_before']} "
          f"steps, a pause, {report['steps_after']} steps timed; {report['rounds']} timed "
          f"rounds after 1 warm-up, alternated in one process; {report['machine']}; "
          f"load average {report['load_average'][0]:.1f}")
    print("| contender | pause | first step after it (ms) | the steps after that (ms) "
          "| extra (ms) | first step's speed ÷ the others' |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in report["rows"]:
        print(f"| {row['contender']} | {row['pause_s']:g} s | {row['first_ms']:.1f} "
              f"| {row['others_ms']:.1f} | {row['extra_ms']:+.1f} "
              f"| {statistics.median(row['speeds']):.2f}× |")
    print()
    for row in report["rows"]:
        print(f"{row['contender']}, the first step after {row['pause_s']:g} s of pause "
              f"against the steps after it: {row['verdict']}")


def main(argv=None):
    args = _parse_arguments(argv)
    problem = _bad_arguments(args)
    if problem:  # one line and exit status 2, through recipe_throughput.exit_status
        raise errors.UserError(problem)
    task_class, _, config = recipe_throughput.load_recipe_config(args)
    config.train.global_batch_size = config.train.micro_batch_size  # k = 1
    config.train.steps_per_execution = 1  # one step per call: each step timed
    pauses = [0.0] + _pauses(args.pauses)
    # every update of the recipe's optimizer (its steps and its updates alone) stays within
    # its learning-rate schedule
    config.train.steps = max(config.train.steps, 2 * (args.rounds + 1) * len(pauses) * (
        args.steps_before + args.steps_after))
    recipe_throughput.make_work_dir(args.work_dir)
    started = alternation.run_started()
    contenders = _contenders(args, task_class, config)
    jobs = {(name, pause): (lambda step=step, pause=pause: _after_pause(
        step, args.steps_before, pause, args.steps_after))
        for name, step in contenders.items() for pause in pauses}
    samples = alternation.alternate(
        jobs, args.rounds, after_round=lambda index, total: print(
            f"round {index + 1}/{total}", file=sys.stderr, flush=True))
    report = _report(args, config, samples, alternation.run_finished(started))
    _print_report(report)
    recipe_throughput.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(recipe_throughput.exit_status(main))
