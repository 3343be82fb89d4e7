"""tf.data's own iterator checkpoint against a pipeline made afresh per checkpoint chunk.

The recipes resume to the same batch by starting each checkpoint chunk's input pipeline
afresh at the chunk's first step (`recipes.common.task.train_dataset`, docs/reliability.md).
tf.data has its own way: an iterator over a dataset is trackable, so `tf.train.Checkpoint(
iterator=...)` saves its state (the records in its shuffle buffer, its prefetched batches,
its place in each file), and a loop reading one pipeline through the whole run could resume
from it. This script measures whether the recipes could use that, and what it would cost:

1. Which iterators a checkpoint takes: the one each strategy hands out
   (`distribute_datasets_from_function`, as the recipes call it; the dataset does not
   matter): the default strategy of one device, `OneDeviceStrategy`, and
   `MirroredStrategy` over two logical CPU devices. `MultiWorkerMirroredStrategy` and
   `TPUStrategy` hand out the same `input_lib.DistributedIterator` class.
2. Whether the iterator of the recipe's own training pipeline (`task.train_replica_dataset`,
   as one device reads it) can be saved with tf.data's default `external_state_policy`
   (FAIL: ops whose state tf.data cannot hold, such as stateful random ops, refuse the
   save); if not, with IGNORE (such ops restart their state on restore), op determinism
   on as the recipes' `--deterministic` turns it on.
3. Where it can: whether the restored iterator gives bitwise the batches the saved one
   gives (and, the control, whether the pipeline made twice gives the same batches); then
   three jobs alternated round by round (benchmarks/alternation.py): saving the iterator
   (`Checkpoint.write`; its bytes on disk), restoring it into a new iterator and reading
   the first batch, and a chunk's pipeline made afresh (built, its iterator, its first
   batch: what the recipes pay per chunk, beside the last step of the chunk before).

Usage:
  python benchmarks/iterator_checkpoint.py --work_dir /tmp/iterator_checkpoint       # tiny BERT
  python benchmarks/iterator_checkpoint.py --recipe resnet --work_dir /tmp/ic_resnet
  python benchmarks/iterator_checkpoint.py --rounds 1 --work_dir /tmp/ic               # CI size
Prints Markdown tables and, with --json, writes every measurement.
"""
import datetime
import glob
import os
import re
import statistics
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from benchmarks import alternation, recipe_flags  # noqa: E402  (no TensorFlow)


def _parse_arguments(argv):
    parser = alternation.argument_parser(__doc__)
    recipe_flags.add_recipe_flags(parser, "iterator_checkpoint",
                                  json_help="write every measurement here")
    parser.add_argument("--rounds", type=int, default=9,
                        help="timed rounds of the three jobs (one more is warm-up)")
    return parser.parse_args(argv)


def _bad_arguments(args):
    """One line naming the first bad flag, or None."""
    if args.rounds < 1:
        return f"--rounds={args.rounds} must be at least 1"
    return alternation.output_file_problem("--json", args.json)


if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    recipe_flags.check_command_line(_parse_arguments, _bad_arguments)

from recipes.common import startup  # noqa: E402,F401  (legacy Keras, quiet C++)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import recipe_throughput  # noqa: E402
from recipes.common import errors  # noqa: E402

BATCHES_COMPARED = 3  # batches read after a restore and compared with the saved iterator's
BATCHES_BEFORE_SAVE = 3  # so that the saved iterator is mid-stream, its buffers full
SAVE, RESTORE, FRESH = ("save the iterator", "restore it, first batch",
                        "a chunk's pipeline afresh, first batch")  # the timed jobs
POLICIES = {"fail": tf.data.experimental.ExternalStatePolicy.FAIL,  # tf.data's default
            "ignore": tf.data.experimental.ExternalStatePolicy.IGNORE}


def _strategies():
    """{name: strategy} of the strategies this machine can make, in one process."""
    cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
    strategies = {
        "default strategy (one device)": tf.distribute.get_strategy(),
        "OneDeviceStrategy": tf.distribute.OneDeviceStrategy(cpus[0]),
    }
    if len(cpus) > 1:
        strategies["MirroredStrategy, 2 CPU devices"] = tf.distribute.MirroredStrategy(cpus[:2])
    return strategies


def _write_checkpoint(iterator, prefix):
    """(the checkpoint's path, None) if a checkpoint of `iterator` is written at `prefix`,
    else (None, its error in one line)."""
    try:
        return tf.train.Checkpoint(iterator=iterator).write(prefix), None
    except (ValueError, TypeError, tf.errors.OpError) as error:
        text = str(error).splitlines()[0].split(" (an object derived")[0]  # no object address
        text = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*name:\s*$", "", text)
        return None, f"{type(error).__name__}: {text[:160]}"


def which_iterators_save(directory):
    """[{strategy, iterator class, saved, error}] for each strategy's input iterator."""
    rows = []
    for name, strategy in _strategies().items():
        dataset = strategy.distribute_datasets_from_function(
            lambda context: tf.data.Dataset.range(8).batch(2))
        iterator = iter(dataset)
        next(iterator)
        _, problem = _write_checkpoint(
            iterator, os.path.join(directory, f"strategy{len(rows)}", "iterator"))
        rows.append({"strategy": name, "iterator": type(iterator).__name__,
                     "saved": problem is None, "error": problem})
    return rows


def _flat_batches(iterator, count):
    return [[np.asarray(t) for t in tf.nest.flatten(next(iterator))] for _ in range(count)]


def _same_batches(batches, others):
    return all(len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y)
                                        for x, y in zip(a, b))
               for a, b in zip(batches, others))


def _bytes(prefix):
    return sum(os.path.getsize(path) for path in glob.glob(prefix + "*"))


def time_recipe_pipeline(task, plan, seed, rounds, directory, external_state_policy):
    """{"error": ...} if the recipe pipeline's iterator cannot be saved with tf.data's
    `external_state_policy`; else whether it restores to the same batches (and whether two
    pipelines made afresh give the same, the control), its bytes, and the three jobs'
    seconds, alternated."""
    context = tf.distribute.InputContext()
    options = tf.data.Options()
    options.experimental_external_state_policy = external_state_policy

    def pipeline(offset=0):
        return task.train_replica_dataset(context, plan, seed + offset, 0).with_options(options)

    saved = iter(pipeline())
    for _ in range(BATCHES_BEFORE_SAVE):
        next(saved)
    prefix = os.path.join(directory, f"pipeline_{external_state_policy.name.lower()}")
    path, problem = _write_checkpoint(saved, prefix)
    if problem:
        return {"error": problem}
    expected = _flat_batches(saved, BATCHES_COMPARED)
    restored = iter(pipeline())
    tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
    same = _same_batches(expected, _flat_batches(restored, BATCHES_COMPARED))
    del restored
    count = BATCHES_BEFORE_SAVE + BATCHES_COMPARED
    same_fresh = _same_batches(_flat_batches(iter(pipeline()), count),
                               _flat_batches(iter(pipeline()), count))

    fresh_seeds = iter(range(1, 10 ** 6))

    def save():
        tf.train.Checkpoint(iterator=saved).write(prefix)

    def restore_and_first_batch():
        iterator = iter(pipeline())
        tf.train.Checkpoint(iterator=iterator).read(path)
        next(iterator)

    def fresh_pipeline_and_first_batch():
        next(iter(pipeline(next(fresh_seeds))))  # another chunk's seed, as the recipes'

    samples = alternation.alternate(alternation.timing({
        SAVE: save, RESTORE: restore_and_first_batch, FRESH: fresh_pipeline_and_first_batch,
    }), rounds)
    return {"error": None, "same_batches_after_restore": same,
            "same_batches_made_twice": same_fresh, "bytes": _bytes(path), "seconds": samples}


def _print_report(report):
    print(f"\nWhich input iterators a tf.train.Checkpoint takes "
          f"(TensorFlow {report['tensorflow']}):")
    print("| strategy | iterator | saved | error |")
    print("| --- | --- | --- | --- |")
    for row in report["strategies"]:
        print(f"| {row['strategy']} | `{row['iterator']}` | {'yes' if row['saved'] else 'no'} "
              f"| {row['error'] or ''} |")
    print(f"\nThe {report['recipe']} recipe's training pipeline (batch {report['batch']}), "
          "its own iterator (one device):")
    for attempt in report["pipeline"]:
        policy = (f"external_state_policy {attempt['external_state_policy']}"
                  + (", op determinism on" if attempt["op_determinism"] else ""))
        if attempt["error"]:
            print(f"{policy}: not saved: {attempt['error']}")
            continue
        print(f"{policy}: saved, {attempt['bytes'] / 1e6:.1f} MB on disk; the next "
              f"{BATCHES_COMPARED} batches of the restored iterator bitwise those of the "
              f"saved one: {_yes(attempt['same_batches_after_restore'])} (the control, the "
              f"pipeline made twice, the same {BATCHES_BEFORE_SAVE + BATCHES_COMPARED} "
              f"batches: {_yes(attempt['same_batches_made_twice'])})")
        print(f"{report['rounds']} rounds alternated, {os.cpu_count()} CPU cores:")
        print("| job | median (ms) | min–max (ms) |")
        print("| --- | ---: | ---: |")
        for job, values in attempt["seconds"].items():
            print(f"| {job} | {1e3 * statistics.median(values):.0f} "
                  f"| {1e3 * min(values):.0f}–{1e3 * max(values):.0f} |")
        fresh = attempt["seconds"][FRESH]
        for job in (SAVE, RESTORE):
            ratios = [a / b for a, b in zip(attempt["seconds"][job], fresh)]
            low, high, coverage = alternation.median_interval(ratios)
            print(f"{job} ÷ {FRESH}, round by round: median {statistics.median(ratios):.2f}×, "
                  f"{low:.2f}–{high:.2f}× with {coverage:.0%} confidence")


def _yes(flag):
    return "yes" if flag else "no"


def main(argv=None):
    args = _parse_arguments(argv)
    problem = _bad_arguments(args)
    if problem:  # one line and exit status 2, through recipe_throughput.exit_status
        raise errors.UserError(problem)
    cpu = tf.config.list_physical_devices("CPU")[0]
    if tf.config.get_logical_device_configuration(cpu) is None:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        except RuntimeError:  # the runtime is up already (a caller's process): its devices
            pass
    task_class, _, config = recipe_throughput.load_recipe_config(args)
    config.train.global_batch_size = config.train.micro_batch_size
    recipe_throughput.make_work_dir(args.work_dir)
    started = alternation.run_started()
    with tempfile.TemporaryDirectory(dir=args.work_dir) as directory:
        strategies = which_iterators_save(directory)
        task, _, plan = recipe_throughput.prepare_recipe(task_class, config, args.work_dir)
        attempts = []
        # tf.data's default refuses to save ops whose state it cannot hold; IGNORE saves the
        # rest and restarts such ops' state on restore
        for policy in (POLICIES["fail"], POLICIES["ignore"]):
            if policy is POLICIES["ignore"]:
                # As the recipes' --deterministic: a parallel map of stateful random ops
                # hands the draws to other elements without it (no recipe's has any now)
                tf.config.experimental.enable_op_determinism()
            attempt = time_recipe_pipeline(task, plan, config.train.seed, args.rounds,
                                           directory, policy)
            attempts.append({"external_state_policy": policy.name.lower(),
                             "op_determinism": policy is POLICIES["ignore"], **attempt})
            if not attempt["error"]:
                break
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "recipe": args.recipe, "batch": config.train.micro_batch_size, "rounds": args.rounds,
        "tensorflow": tf.__version__, "strategies": strategies, "pipeline": attempts,
        **alternation.run_finished(started),  # git_commit, git_tree, load averages
    }
    _print_report(report)
    recipe_throughput.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(recipe_throughput.exit_status(main))
