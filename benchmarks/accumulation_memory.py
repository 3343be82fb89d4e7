"""Peak memory and throughput of gradient accumulation at k = 1, 4, 16, 64 micro-batches.

One fixed micro-batch (256 examples) on a tiny MLP (64 -> 512 -> 512 -> 10, softmax
cross-entropy), trained with `lamb_tf.accumulation.GradientAccumulationModel` + tf_keras
LAMB via `model.fit`, on one replica (CPU), k micro-batches per optimizer step (effective
batch 256·k). Each configuration runs in a fresh subprocess; the configurations are run
`--rounds` times in turn (a shared machine drifts; the median over rounds is reported).
What is reported:

* peak RSS: `resource.getrusage(RUSAGE_SELF).ru_maxrss` of that subprocess at its end:
  the whole process (TensorFlow runtime, graph, model, optimizer slots, the input batch
  held by `tf.data`, and the live activations), i.e. what the OS had to provide;
* examples/s: effective-batch examples per second over the timed optimizer steps (after
  one untimed step that traces and compiles); each row times about the same number of
  micro-batches (64). These come from separate processes, so they drift with the machine;
  the speed bound is judged on a second measurement instead: every k built in one process
  and timed in turn, round by round, and the largest k's examples/s divided by k = 1's in
  the same round (median over the rounds).

A last row trains the k = 64 batch (16384) in one pass (no accumulation) for contrast: that
is the memory accumulation saves.

Usage:  .venv/bin/python benchmarks/accumulation_memory.py [--rounds 3] [--json PATH]
        .venv/bin/python benchmarks/accumulation_memory.py --tiny   # seconds, for CI
Exits 1 if, at k = 64 against k = 1, peak RSS grows by more than 15% or examples/s drop by
more than 5% (the project's bounds).
"""
import json
import os
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)  # benchmarks.alternation, when run as a script

from benchmarks import alternation  # noqa: E402

MICRO_BATCH = 256
FEATURES, HIDDEN, CLASSES = 64, 512, 10
TIMED_MICRO_BATCHES = 64
ACCUMULATION_STEPS = (1, 4, 16, 64)
# (effective batch, micro-batch, timed optimizer steps): the same number of micro-batches per row
CONFIGURATIONS = [(MICRO_BATCH * k, MICRO_BATCH, TIMED_MICRO_BATCHES // k)
                  for k in ACCUMULATION_STEPS]
CONFIGURATIONS.append((MICRO_BATCH * 64, MICRO_BATCH * 64, 1))  # one pass: the contrast
TINY_CONFIGURATIONS = [(16, 16, 2), (64, 16, 1), (64, 64, 1)]
ALLOWED_GROWTH = 0.15  # the project's bound on peak memory, k = 64 against k = 1
ALLOWED_SLOWDOWN = 0.05  # the project's bound on examples/s, k = 64 against k = 1


def _build(effective_batch, micro_batch):
    """(compiled GradientAccumulationModel, endless dataset of one fixed batch, BatchPlan)."""
    import numpy as np
    import tensorflow as tf
    import tf_keras

    from lamb_tf.accumulation import GradientAccumulationModel, plan_batch
    from lamb_tf.tf_keras_optimizers import LAMB

    plan = plan_batch(effective_batch, micro_batch, num_replicas=1)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(effective_batch, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(effective_batch,)).astype(np.int32)
    dataset = tf.data.Dataset.from_tensors((x, y)).repeat()
    del x, y
    model = tf_keras.Sequential(
        [
            tf_keras.layers.Dense(HIDDEN, activation="relu", input_shape=(FEATURES,)),
            tf_keras.layers.Dense(HIDDEN, activation="relu"),
            tf_keras.layers.Dense(CLASSES),
        ]
    )
    model = GradientAccumulationModel(model, plan.accumulation_steps)
    model.compile(
        LAMB(1e-3),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0)  # trace + first step
    return model, dataset, plan


def run_one(effective_batch, micro_batch, timed_steps):
    """Train in this process; return the measurements as a dict."""
    import resource

    model, dataset, plan = _build(effective_batch, micro_batch)
    seconds = alternation.seconds(model.fit, dataset, steps_per_epoch=timed_steps, epochs=1,
                                  verbose=0)
    return {
        "effective_batch": effective_batch,
        "micro_batch": micro_batch,
        "accumulation_steps": plan.accumulation_steps,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "examples_per_second": effective_batch * timed_steps / seconds,
        "timed_steps": timed_steps,
    }


def speed_in_one_process(configurations, rounds):
    """{k: [examples/s of each round]}: every configuration built in this one process and
    timed in turn, round by round (benchmarks/alternation.py: each round in another order),
    so that the machine's drift hits every k alike. Each round times the same number of
    micro-batches per k."""
    def job(batch, steps, model, dataset):
        return lambda: batch * steps / alternation.seconds(
            model.fit, dataset, steps_per_epoch=steps, epochs=1, verbose=0)

    jobs = {}
    for batch, micro_batch, steps in configurations:
        model, dataset, plan = _build(batch, micro_batch)
        jobs[plan.accumulation_steps] = job(batch, steps, model, dataset)
    return alternation.alternate(jobs, rounds, warmup=0)


def print_speed(speed):
    """Prints the same-process table; returns the largest k's examples/s ÷ k = 1's, per round."""
    print(f"\nexamples/s in one process, every k in turn for {len(speed[1])} rounds "
          "(the same micro-batches per round):")
    print("| k | examples/s (median) | min–max | against k = 1, round by round (median) |")
    print("| ---: | ---: | ---: | ---: |")
    for k, samples in speed.items():
        ratios = [ours / base for ours, base in zip(samples, speed[1])]
        print(f"| {k} | {statistics.median(samples):.0f} | {min(samples):.0f}–{max(samples):.0f} "
              f"| {statistics.median(ratios):.3f} |")
    return [ours / base for ours, base in zip(speed[max(speed)], speed[1])]


def _parse_arguments(argv):
    """The flags, checked: a mistake is one line and exit status 2."""
    parser = alternation.argument_parser(__doc__)
    parser.add_argument("--child", nargs=3, type=int, metavar=("BATCH", "MICRO", "STEPS"),
                        help="internal: one measured configuration, run in a process of "
                             "its own by this script")
    parser.add_argument("--speed_child", type=int, metavar="ROUNDS",
                        help="internal: the examples/s rounds, run in a process of its own "
                             "by this script")
    parser.add_argument("--rounds", type=int, default=None,
                        help="runs of every configuration (default 3; not with --tiny)")
    parser.add_argument("--tiny", action="store_true",
                        help="tiny batches, one round (CI); refuses --rounds")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    if args.child or args.speed_child:
        return args
    if args.tiny and args.rounds is not None:  # it ran one round and said nothing
        parser.error(f"--rounds={args.rounds}: --tiny runs one round of tiny batches; drop "
                     "--rounds, or --tiny to measure the real batches")
    args.rounds = 3 if args.rounds is None else args.rounds
    if args.rounds < 1:
        parser.error(f"--rounds={args.rounds} must be at least 1")
    if problem := alternation.output_file_problem("--json", args.json):
        parser.error(problem)  # before the measurement, which its write would otherwise lose
    return args


def _memory_rows(configurations, rounds, env):
    """One row per configuration: each measured in a fresh process per round, the median of
    the rounds' peak RSS and examples/s (and every round's value)."""
    runs = {configuration: [] for configuration in configurations}
    for _ in range(rounds):
        for configuration in configurations:
            command = [sys.executable, os.path.abspath(__file__), "--child"] + list(
                map(str, configuration))
            result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            runs[configuration].append(json.loads(result.stdout.strip().splitlines()[-1]))
    rows = []
    for measured in runs.values():
        row = dict(measured[0], rounds=len(measured))
        for key in ("peak_rss_mib", "examples_per_second"):
            row[key] = statistics.median(m[key] for m in measured)
            row[key + "_runs"] = [m[key] for m in measured]
        rows.append(row)
    return rows


def _print_memory_rows(rows):
    model = f"{FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}"
    print(f"tiny MLP {model}, LAMB, 1 replica (CPU), one fresh process per row and round, "
          f"median of {rows[0]['rounds']} round(s)")
    print("| effective batch | micro-batch | k | peak RSS (MiB) | examples/s | timed steps |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['effective_batch']} | {row['micro_batch']} | {row['accumulation_steps']} "
            f"| {row['peak_rss_mib']:.0f} | {row['examples_per_second']:.0f} "
            f"| {row['timed_steps']} |"
        )


def main(argv=None):
    args = _parse_arguments(argv)
    if args.child:
        print(json.dumps(run_one(*args.child)))
        return 0
    if args.speed_child:
        configurations = (TINY_CONFIGURATIONS if args.tiny else CONFIGURATIONS)[:-1]
        print(json.dumps(speed_in_one_process(configurations, args.speed_child)))
        return 0
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, env.get("PYTHONPATH")]))
    configurations = TINY_CONFIGURATIONS if args.tiny else CONFIGURATIONS
    started = alternation.run_started()
    rows = _memory_rows(configurations, 1 if args.tiny else args.rounds, env)
    _print_memory_rows(rows)
    speed_rounds = 2 if args.tiny else max(3, args.rounds)
    result = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--speed_child", str(speed_rounds)]
        + (["--tiny"] if args.tiny else []), env=env, capture_output=True, text=True, check=True)
    speed = {int(k): v for k, v in json.loads(result.stdout.strip().splitlines()[-1]).items()}
    paired = print_speed(speed)
    first, last = rows[0], rows[-2]  # k = 1 and the largest k (the last row is one pass)
    growth = last["peak_rss_mib"] / first["peak_rss_mib"] - 1
    slowdown = 1 - statistics.median(paired)  # same process, round by round
    within = growth <= ALLOWED_GROWTH and slowdown <= ALLOWED_SLOWDOWN
    print(
        f"k={last['accumulation_steps']} against k={first['accumulation_steps']}: peak RSS "
        f"{growth:+.1%} (bound +{ALLOWED_GROWTH:.0%}), examples/s {-slowdown:+.1%} "
        f"(same process, median of the rounds; bound -{ALLOWED_SLOWDOWN:.0%}): "
        f"{'OK' if within else 'OUT OF BOUNDS'}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "peak_growth": growth, "slowdown": slowdown,
                       "same_process_examples_per_second": speed,
                       "same_process_largest_k_against_k1": paired,
                       **alternation.run_finished(started)}, f, indent=1)
    return 0 if within or args.tiny else 1


if __name__ == "__main__":
    sys.exit(main())
