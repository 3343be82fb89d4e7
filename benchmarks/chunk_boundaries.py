"""What a checkpoint-chunk boundary costs in the recipes' training loop.

`recipes.common.training.train` runs up to `CHUNKS_PER_FIT` checkpoint chunks in one
`model.fit` reading one dataset (`recipes.common.task.train_dataset`), so the first step of a
chunk should cost what any other step costs. This measures it: the recipe's training loop
as the driver runs it (checkpoint after each chunk, the driver's callbacks), `chunks` chunks
of `steps_per_chunk` steps, timing every step from Keras' `on_train_batch_begin` to its
`on_train_batch_end` (the step, including the wait for its batch) and the gap between the
last step of a chunk and the first of the next (the checkpoint save, the epoch's callbacks
and, when a chunk starts a new `fit`, that call's set-up), and the start of a run: from
calling `train` to its first step (the first `fit`'s dataset built, that call's set-up).

Two loops are alternated round by round in one process (benchmarks/alternation.py): the
loop as it is, and the same loop with `CHUNKS_PER_FIT = 1` (a `fit` and a fresh input
pipeline per chunk, as the recipes ran before). Used by benchmarks/recipe_throughput.py,
which prints the table.
"""
import os
import statistics
import tempfile
import time

import tf_keras

from benchmarks import alternation
from recipes.common import task as task_lib
from recipes.common import training

LOOPS = {"one fit over the chunks": training.CHUNKS_PER_FIT, "a fit per chunk": 1}


class _StepTimes(tf_keras.callbacks.Callback):
    """(begin, end) wall times of every step of every `fit`."""

    def __init__(self):
        super().__init__()
        self.times, self._begin = [], None

    def on_train_batch_begin(self, batch, logs=None):
        self._begin = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        float(logs["loss"])  # the step has finished
        self.times.append((self._begin, time.perf_counter()))


def _one_run(model, make_dataset, work_dir, steps_per_chunk, chunks, global_batch_size):
    """{"first": [s], "others": [s], "gaps": [s], "start": [s]} of one training run in a
    fresh model_dir."""
    times = _StepTimes()
    model_dir = tempfile.mkdtemp(dir=work_dir)
    called = time.perf_counter()
    training.train(model, make_dataset, model_dir=model_dir,
                   total_steps=steps_per_chunk * chunks, checkpoint_every=steps_per_chunk,
                   global_batch_size=global_batch_size, verbose=0, callbacks=[times])
    durations = [end - begin for begin, end in times.times]
    first = durations[steps_per_chunk::steps_per_chunk]  # not the run's very first step
    others = [d for index, d in enumerate(durations) if index % steps_per_chunk]
    gaps = [times.times[index][0] - times.times[index - 1][1]
            for index in range(steps_per_chunk, len(durations), steps_per_chunk)]
    return {"first": first, "others": others, "gaps": gaps,
            "start": [times.times[0][0] - called]}


def measure(task, strategy, plan, model, work_dir, steps_per_chunk, chunks, rounds):
    """{loop: {"first"|"others"|"gaps"|"start": [seconds, every timed round]}}; round 0 is a
    warm-up and is not kept. The model keeps training across runs (its step count goes on;
    each run starts from a fresh model_dir)."""
    def make_dataset(start, end):
        return task_lib.train_dataset(task, strategy, plan, start, end)

    def run_with(chunks_per_fit):
        def run():
            default, training.CHUNKS_PER_FIT = training.CHUNKS_PER_FIT, chunks_per_fit
            try:
                return _one_run(model, make_dataset, work_dir, steps_per_chunk, chunks,
                                plan.global_batch_size)
            finally:
                training.CHUNKS_PER_FIT = default
        return run

    os.makedirs(work_dir, exist_ok=True)
    runs = alternation.alternate({loop: run_with(chunks_per_fit)
                                  for loop, chunks_per_fit in LOOPS.items()}, rounds)
    return {loop: {key: [value for run in loop_runs for value in run[key]]
                   for key in ("first", "others", "gaps", "start")}
            for loop, loop_runs in runs.items()}


def summary(samples):
    """{loop: {"others_ms", "first_ms", "first_vs_others", "gap_ms", "start_ms"}}
    (medians)."""
    rows = {}
    for loop, values in samples.items():
        others, first = statistics.median(values["others"]), statistics.median(values["first"])
        rows[loop] = {"others_ms": others * 1e3, "first_ms": first * 1e3,
                      "first_vs_others": first / others,
                      "gap_ms": statistics.median(values["gaps"]) * 1e3,
                      "start_ms": statistics.median(values["start"]) * 1e3}
    return rows


def print_table(rows, steps_per_chunk, chunks, rounds):
    print(f"\nchunk boundaries in the recipe's training loop: {chunks} chunks of "
          f"{steps_per_chunk} steps, a checkpoint after each, {rounds} timed runs of each "
          "loop after 1 warm-up, alternated")
    print("| loop | step (ms, median) | first step of a chunk (ms) | first ÷ others "
          "| between chunks (ms: checkpoint, callbacks, fit set-up) | start of a run (ms) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for loop, row in rows.items():
        print(f"| {loop} | {row['others_ms']:.1f} | {row['first_ms']:.1f} "
              f"| {row['first_vs_others']:.2f} | {row['gap_ms']:.0f} | {row['start_ms']:.0f} |")
