"""How long deleting a recipe's training input iterator takes, with tf.data's autotuning on
(the recipes' setting) and off.

Every `model.fit` ends by deleting its input iterator: in the recipes' loop once per
`training.CHUNKS_PER_FIT` checkpoint chunks and at the end of training. In whole training
runs (benchmarks/recipe_throughput.py, docs/performance.md) the end of a run sometimes
waited 8-12 s after its last step, in the iterator's destructor, while tf.data's
autotuning thread slept. This takes Keras and the model out of it: one iterator of the
recipe's own training dataset (`task.train_replica_dataset`, distributed as the driver
does) is read for `--seconds`, one batch per `--step_ms` (a step's time), while a second
thread keeps the cores busy with matrix products as a training step would; then the
iterator is deleted and the deletion timed. Autotuning on and off (`tf.data.Options`
`autotune.enabled`) alternate, `--trials` times each, in one process (benchmarks/alternation.py:
one round per trial, the two flipped every round).

Usage:
  python benchmarks/input_teardown.py --work_dir /tmp/teardown               # tiny BERT
  python benchmarks/input_teardown.py --recipe resnet --work_dir /tmp/teardown_resnet
  python benchmarks/input_teardown.py --seconds 1 --trials 1 --work_dir /tmp/t  # CI size
Prints a Markdown table and, with --json, writes every deletion time.
"""
import datetime
import math
import os
import statistics
import sys
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from benchmarks import alternation, recipe_flags  # noqa: E402  (no TensorFlow)


def _parse_arguments(argv):
    parser = alternation.argument_parser(__doc__)
    recipe_flags.add_recipe_flags(parser, "input_teardown",
                                  json_help="write every deletion time here")
    parser.add_argument("--seconds", type=float, default=25.0,
                        help="how long each iterator is read before it is deleted")
    parser.add_argument("--step_ms", type=float, default=300.0,
                        help="milliseconds between two batches (a training step)")
    parser.add_argument("--trials", type=int, default=6,
                        help="iterators deleted with autotuning on, and as many with it off")
    return parser.parse_args(argv)


def _bad_arguments(args):
    """One line naming the first bad flag, or None."""
    if args.trials < 1:
        return f"--trials={args.trials} must be at least 1"
    if not (math.isfinite(args.seconds) and args.seconds > 0):
        return f"--seconds={args.seconds:g} must be above 0 and finite; give seconds, e.g. 2"
    if not (math.isfinite(args.step_ms) and args.step_ms >= 0):
        return (f"--step_ms={args.step_ms:g} must be at least 0 and finite; give milliseconds, "
                "e.g. 20")
    return alternation.output_file_problem("--json", args.json)


if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    recipe_flags.check_command_line(_parse_arguments, _bad_arguments)

from recipes.common import startup  # noqa: E402,F401  (legacy Keras, quiet C++)

import tensorflow as tf  # noqa: E402

from benchmarks import recipe_throughput  # noqa: E402
from recipes.common import errors  # noqa: E402

SLOW_S = 1.0  # a deletion slower than this is counted as a wait


def _distributed_dataset(task, plan, strategy, autotune):
    def replica_dataset(context):
        options = tf.data.Options()
        options.autotune.enabled = autotune
        return task.train_replica_dataset(context, plan, 1, 0).with_options(options)

    return strategy.distribute_datasets_from_function(replica_dataset)


def _deletion_seconds(dataset, seconds, step_s):
    iterator = iter(dataset)
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        next(iterator)
        time.sleep(step_s)
    deleting = time.perf_counter()
    del iterator  # the only reference: the destructor runs here
    return time.perf_counter() - deleting


def _time_deletions(task, plan, strategy, args):
    """{"on": [deletion seconds], "off": [...]}: autotuning on and off alternated, one round
    of `alternation.alternate` per trial (no warm-up: every deletion is kept)."""
    def delete(setting):
        dataset = _distributed_dataset(task, plan, strategy, setting == "on")
        seconds = _deletion_seconds(dataset, args.seconds, args.step_ms / 1000)
        print(f"autotuning {setting}: deleted in {seconds:.3f} s", flush=True)
        return seconds

    return alternation.alternate(
        {setting: (lambda setting=setting: delete(setting)) for setting in ("on", "off")},
        args.trials, warmup=0, after_round=lambda index, total: print(
            f"trial {index + 1}/{total} done", flush=True))


def _keep_cores_busy(stop):
    product = tf.random.normal((1024, 1024))
    while not stop.is_set():
        product = tf.linalg.matmul(product, product) * 1e-3


def main(argv=None):
    args = _parse_arguments(argv)
    problem = _bad_arguments(args)
    if problem:  # one line and exit status 2, through recipe_throughput.exit_status
        raise errors.UserError(problem)
    task_class, _, config = recipe_throughput.load_recipe_config(args)
    config.train.global_batch_size = config.train.micro_batch_size
    recipe_throughput.make_work_dir(args.work_dir)
    started = alternation.run_started()
    task, strategy, plan = recipe_throughput.prepare_recipe(task_class, config, args.work_dir)
    stop = threading.Event()
    busy = threading.Thread(target=_keep_cores_busy, args=(stop,), daemon=True)
    busy.start()
    try:
        samples = _time_deletions(task, plan, strategy, args)
    finally:
        stop.set()
        busy.join()
    print(f"\n{args.recipe} recipe's training iterator, read {args.seconds:g} s "
          f"(a batch every {args.step_ms:g} ms, cores kept busy), then deleted; "
          f"{os.cpu_count()} CPU cores, TensorFlow {tf.__version__}")
    print("| tf.data autotuning | deletions | median (s) | max (s) "
          f"| deletions over {SLOW_S:g} s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for setting, values in samples.items():
        slow = sum(value > SLOW_S for value in values)
        print(f"| {setting} | {len(values)} | {statistics.median(values):.3f} "
              f"| {max(values):.3f} | {slow} |")
    recipe_throughput.write_json(args.json, {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "recipe": args.recipe, "seconds": args.seconds, "step_ms": args.step_ms,
        "tensorflow": tf.__version__, "deletion_s": samples,
        **alternation.run_finished(started)})
    return 0


if __name__ == "__main__":
    sys.exit(recipe_throughput.exit_status(main))
