"""What measuring the gradient noise scale costs per optimizer step.

The same `GradientAccumulationModel` step (tf_keras LAMB, a tiny MLP 64 -> 512 -> 512 -> 10
with softmax cross-entropy, k accumulation steps, one CPU replica) is timed with the
measurement off (`noise_scale_decay=None`), on (the default), and off again in a second
model (the control: the noise floor of the measurement), in one process, the variants
alternating over the repeats (benchmarks/alternation.py: one round per repeat, the order
changed every round) so that machine load hits them alike. A timing is `--steps`
calls of the compiled train function (what `fit` runs per step), after warm-up calls that
trace it. Per variant the minimum process CPU time per step over the repeats is reported
(on a machine shared with other jobs, wall time varies several-fold between repeats; the
minimum CPU time varies by about 1-2%), with the median wall time for reference;
overhead = min CPU(on) / min CPU(off) - 1, control = min CPU(off again) / min CPU(off) - 1.

The measurement adds one squared norm per micro-batch, one scalar all-reduce and a few
scalar ops per step; its share is largest when a micro-batch is cheap next to the number
of parameters, hence the small micro-batch row.

Usage:  .venv/bin/python benchmarks/noise_scale_cost.py [--json report.json]
Exits non-zero if an overhead exceeds --max_overhead (default 0.03, the project's bound).
"""
import json
import os
import statistics
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)  # benchmarks.alternation, when run as a script

from benchmarks import alternation  # noqa: E402

FEATURES, HIDDEN, CLASSES = 64, 512, 10
# (micro-batch, accumulation steps k)
CONFIGURATIONS = [(32, 8), (256, 8)]


def build(micro_batch, accumulation_steps, noise_scale_decay):
    import numpy as np
    import tensorflow as tf
    import tf_keras

    from lamb_tf.accumulation import GradientAccumulationModel
    from lamb_tf.tf_keras_optimizers import LAMB

    batch = micro_batch * accumulation_steps
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(batch,)).astype(np.int32)
    dataset = tf.data.Dataset.from_tensors((x, y)).repeat()
    tf_keras.utils.set_random_seed(0)
    inner = tf_keras.Sequential(
        [
            tf_keras.layers.Dense(HIDDEN, activation="relu", input_shape=(FEATURES,)),
            tf_keras.layers.Dense(HIDDEN, activation="relu"),
            tf_keras.layers.Dense(CLASSES),
        ]
    )
    model = GradientAccumulationModel(inner, accumulation_steps, noise_scale_decay)
    model.compile(
        optimizer=LAMB(1e-3),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model, dataset


def time_steps(model, iterator, steps):
    """(wall seconds, process CPU seconds) of `steps` compiled train steps."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        logs = model.train_function(iterator)
    float(logs["loss"])  # wait for the last step
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(micro_batch, accumulation_steps, steps, repeats):
    from lamb_tf.noise_scale import NOISE_SCALE_LOG

    variants = {"off": None, "on": 0.95, "off_again": None}
    models, logged = {}, {}
    for name, decay in variants.items():
        model, dataset = build(micro_batch, accumulation_steps, decay)
        model.make_train_function()
        iterator = iter(dataset)
        logged[name] = NOISE_SCALE_LOG in model.train_function(iterator)  # traces
        time_steps(model, iterator, 2)  # warm up, untimed
        models[name] = (model, iterator)
    # each repeat a round of alternation.alternate, the variants in another order each round
    # (warmed up above)
    timings = alternation.alternate(
        {name: (lambda model=model, iterator=iterator: time_steps(model, iterator, steps))
         for name, (model, iterator) in models.items()}, repeats, warmup=0)
    wall = {name: [seconds for seconds, _ in timings[name]] for name in variants}
    cpu = {name: [cpu_seconds for _, cpu_seconds in timings[name]] for name in variants}
    per_step = {name: 1000 * min(cpu[name]) / steps for name in variants}
    return {
        "micro_batch": micro_batch,
        "accumulation_steps": accumulation_steps,
        "steps": steps,
        "repeats": repeats,
        "cpu_ms_per_step": per_step,
        "median_wall_ms_per_step": {
            name: 1000 * statistics.median(wall[name]) / steps for name in variants
        },
        "overhead": per_step["on"] / per_step["off"] - 1,
        "control": per_step["off_again"] / per_step["off"] - 1,
        "noise_scale_logged": logged,
    }


def main(argv=None):
    parser = alternation.argument_parser(__doc__)
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per timing")
    parser.add_argument("--repeats", type=int, default=30, help="timings per variant")
    parser.add_argument(
        "--configurations",
        default=",".join(f"{m}x{k}" for m, k in CONFIGURATIONS),
        help="comma-separated MICROxK (micro-batch x accumulation steps)",
    )
    parser.add_argument("--max_overhead", type=float, default=0.03,
                        help="exit with status 1 if measuring the noise scale adds more "
                             "than this share to a step's CPU time (the project's bound)")
    parser.add_argument("--json", default="", help="also write the rows to this file")
    args = parser.parse_args(argv)
    try:
        configurations = [
            tuple(int(n) for n in item.split("x")) for item in args.configurations.split(",")
        ]
        if any(len(c) != 2 or min(c) < 1 for c in configurations):
            raise ValueError
    except ValueError:
        print(
            f"error: --configurations={args.configurations!r}: expected MICROxK items, e.g. "
            "32x8,256x8",
            file=sys.stderr,
        )
        return 2
    problem = None
    if args.steps < 1 or args.repeats < 1:
        problem = f"--steps={args.steps} and --repeats={args.repeats} must be at least 1"
    elif not args.max_overhead >= 0:  # (inf: no bound; NaN refused)
        problem = (f"--max_overhead={args.max_overhead} must be a share of at least 0 (e.g. "
                   "0.03): the exit status compares the measured overhead with it")
    else:
        problem = alternation.output_file_problem("--json", args.json)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    started = alternation.run_started()
    rows = [measure(m, k, args.steps, args.repeats) for m, k in configurations]
    run = alternation.run_finished(started)
    print("micro-batch  k  CPU ms/step off  on  off again  overhead  control (A/A)")
    for row in rows:
        ms = row["cpu_ms_per_step"]
        print(
            f"{row['micro_batch']:>11} {row['accumulation_steps']:>2} {ms['off']:>15.2f} "
            f"{ms['on']:>5.2f} {ms['off_again']:>10.2f} {100 * row['overhead']:>8.1f}% "
            f"{100 * row['control']:>8.1f}%"
        )
    if args.json:
        with open(args.json, "w") as handle:
            # git_commit, git_tree, load_average_start, load_average_end
            json.dump({"rows": rows, **run}, handle, indent=2)
    return 1 if any(row["overhead"] > args.max_overhead for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
