"""Peak memory and throughput of gradient accumulation at effective batches 1k, 8k, 32k.

One fixed micro-batch (256 examples) on a tiny MLP (64 -> 512 -> 512 -> 10, softmax
cross-entropy), trained with `lamb_tf.accumulation.GradientAccumulationModel` + tf_keras
LAMB via `model.fit`, on one replica (CPU). Each configuration runs in a fresh subprocess;
what is reported:

* peak RSS: `resource.getrusage(RUSAGE_SELF).ru_maxrss` of that subprocess at its end:
  the whole process (TensorFlow runtime, graph, model, optimizer slots, the input batch
  held by `tf.data`, and the live activations), i.e. what the OS had to provide;
* examples/s: effective-batch examples per second over the timed optimizer steps (after
  one untimed step that traces and compiles).

A last row trains the 32k batch in one pass (no accumulation) for contrast: that is the
memory accumulation saves.

Usage:  .venv/bin/python benchmarks/accumulation_memory.py
Exits non-zero if the 32k peak RSS is more than 15% above the 1k peak RSS.
"""
import argparse
import json
import os
import subprocess
import sys
import time

MICRO_BATCH = 256
FEATURES, HIDDEN, CLASSES = 64, 512, 10
# (effective batch, micro-batch, timed optimizer steps): about the same work per row.
CONFIGURATIONS = [
    (1024, MICRO_BATCH, 64),
    (8192, MICRO_BATCH, 8),
    (32768, MICRO_BATCH, 2),
    (32768, 32768, 2),  # one pass, no accumulation: the contrast
]
ALLOWED_GROWTH = 0.15  # the bound: peak at 32k within 15% of 1k


def run_one(effective_batch, micro_batch, timed_steps):
    """Train in this process; return the measurements as a dict."""
    import resource

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
    start = time.perf_counter()
    model.fit(dataset, steps_per_epoch=timed_steps, epochs=1, verbose=0)
    seconds = time.perf_counter() - start
    return {
        "effective_batch": effective_batch,
        "micro_batch": micro_batch,
        "accumulation_steps": plan.accumulation_steps,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "examples_per_second": effective_batch * timed_steps / seconds,
        "timed_steps": timed_steps,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, type=int, metavar=("BATCH", "MICRO", "STEPS"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(*args.child)))
        return 0

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repo_root, env.get("PYTHONPATH")]))
    rows = []
    for configuration in CONFIGURATIONS:
        command = [sys.executable, os.path.abspath(__file__), "--child"] + list(
            map(str, configuration)
        )
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))

    model = f"{FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}"
    print(f"tiny MLP {model}, LAMB, 1 replica (CPU), one fresh process per row")
    print("| effective batch | micro-batch | k | peak RSS (MiB) | examples/s | timed steps |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['effective_batch']} | {row['micro_batch']} | {row['accumulation_steps']} "
            f"| {row['peak_rss_mib']:.0f} | {row['examples_per_second']:.0f} "
            f"| {row['timed_steps']} |"
        )
    growth = rows[2]["peak_rss_mib"] / rows[0]["peak_rss_mib"] - 1
    verdict = "OK" if growth <= ALLOWED_GROWTH else "TOO MUCH"
    print(
        f"peak RSS at 32k (k={rows[2]['accumulation_steps']}) vs 1k "
        f"(k={rows[0]['accumulation_steps']}): {growth:+.1%} "
        f"(bound {ALLOWED_GROWTH:.0%}): {verdict}"
    )
    return 0 if growth <= ALLOWED_GROWTH else 1


if __name__ == "__main__":
    sys.exit(main())
