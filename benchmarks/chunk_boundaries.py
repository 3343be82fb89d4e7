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

Three loops of the recipe are alternated round by round in one process
(benchmarks/alternation.py): the loop as it is, the same loop with `CHUNKS_PER_FIT = 1` (a
`fit` and a fresh input pipeline per chunk, as the recipes ran before), and the loop as it
is reading one pipeline through each `fit` instead of one per chunk (ONE_PIPELINE_LOOP: what
exact resume costs). With Model Garden's loop over the same model, steps, checkpoints and
summaries (`model_garden_loops`: Orbit's `Controller`; both loops write their training
scalars once a chunk), each run's whole time (from the call to its return, every checkpoint
included) gives the recipe's loop against Model Garden's in examples/s; Model Garden's loops
(`Trainer.train`, a chunk's steps in one in-graph loop) are timed too, giving its step, its
time between chunks, and its start and end of a run beside the recipe's. Model Garden's
loop runs twice per round: with the input iterator its trainer keeps from run to run (no
pipeline start at all), and building its input pipeline in the run, as a real run
(`train_lib.run_experiment`) does once, as each run of the recipe's loop builds its own.
Used by benchmarks/recipe_throughput.py, which prints the table.
"""
import sys

if __name__ == "__main__":  # run alone it would do nothing: say what to run instead,
    # before TensorFlow's start-up lines (the import below)
    print("error: benchmarks/chunk_boundaries.py is a module of the benchmark scripts, used by "
          "recipe_throughput.py; run one of those (--help lists its flags)",
          file=sys.stderr)
    sys.exit(2)

import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from benchmarks import alternation  # noqa: E402
from recipes.common import task as task_lib  # noqa: E402
from recipes.common import training  # noqa: E402

RECIPE_LOOP = "one fit over the chunks"  # the loop as it is
# The loop as it is reading one pipeline through each `fit` (`one_pipeline_dataset`), as
# Model Garden's loop reads one through its run: what the pipeline per chunk, on which exact
# resume rests, costs is the difference from RECIPE_LOOP. Not a loop to train with: a run
# resumed from a checkpoint would read other batches than the uninterrupted run.
ONE_PIPELINE_LOOP = "one fit, one pipeline (no exact resume)"
# loop -> (checkpoint chunks per `fit`, a pipeline per chunk)
LOOPS = {RECIPE_LOOP: (training.CHUNKS_PER_FIT, True), "a fit per chunk": (1, True),
         ONE_PIPELINE_LOOP: (training.CHUNKS_PER_FIT, False)}
MODEL_GARDEN_LOOP = "Model Garden's Controller"
# The same, building its input pipeline in each run, as a real run does once
MODEL_GARDEN_BUILDING_LOOP = "Model Garden's Controller, building its pipeline"
MODEL_GARDEN_LOOPS = {MODEL_GARDEN_LOOP: False, MODEL_GARDEN_BUILDING_LOOP: True}
# What `measure` gives per loop: the recipe's loops all but "chunk_steps", Model Garden's
# all but "first" and "others"
SAMPLE_KEYS = ("first", "others", "chunk_steps", "gaps", "start", "end", "whole")
# summary's per-run ratios: each run against the run of the same round of that loop
PER_RUN_RATIOS = {"per_run_vs_model_garden": MODEL_GARDEN_LOOP,
                  "per_run_vs_model_garden_building": MODEL_GARDEN_BUILDING_LOOP}


def _delete_checkpoints(run_dir):
    """Deletes the checkpoints of a timed run (written to be timed, not kept: a tiny ResNet
    run leaves about 200 MB of them, a whole benchmark several GB); its summaries stay."""
    for directory, _, files in os.walk(run_dir):
        for name in files:
            if name.startswith("ckpt-") or name == "checkpoint":
                os.remove(os.path.join(directory, name))


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


def _one_run(model, make_dataset, work_dir, steps_per_chunk, chunks, global_batch_size,
             steps_per_execution, async_checkpoint):
    """{"first": [s], "others": [s], "gaps": [s], "start": [s], "end": [s], "whole": [s]} of
    one training run in a fresh model_dir ("end": from the last step to `train`'s return).

    Keras calls the batch callbacks once per execution of `steps_per_execution` steps (a
    divisor of `steps_per_chunk`: recipe_throughput checks it): "first" and "others" are per
    step (an execution's time divided by its steps); with one execution per chunk there are
    no "others"."""
    times = _StepTimes()
    model_dir = tempfile.mkdtemp(dir=work_dir)
    called = time.perf_counter()
    training.train(model, make_dataset, model_dir=model_dir,
                   total_steps=steps_per_chunk * chunks, checkpoint_every=steps_per_chunk,
                   log_every=steps_per_chunk,  # scalars once a chunk, as Model Garden's loop
                   global_batch_size=global_batch_size, verbose=0, callbacks=[times],
                   async_checkpoint=async_checkpoint)
    whole = time.perf_counter() - called
    _delete_checkpoints(model_dir)
    per_chunk = steps_per_chunk // steps_per_execution  # executions per chunk
    assert len(times.times) == per_chunk * chunks, (len(times.times), per_chunk, chunks)
    durations = [(end - begin) / steps_per_execution for begin, end in times.times]
    first = durations[per_chunk::per_chunk]  # not the run's very first step
    others = [d for index, d in enumerate(durations) if index % per_chunk]
    gaps = [times.times[index][0] - times.times[index - 1][1]
            for index in range(per_chunk, len(durations), per_chunk)]
    return {"first": first, "others": others, "gaps": gaps,
            "start": [times.times[0][0] - called], "end": [called + whole - times.times[-1][1]],
            "whole": [whole]}


def measure(task, strategy, plan, model, work_dir, steps_per_chunk, chunks, rounds,
            model_garden_run=None):
    """{loop: {SAMPLE_KEYS: [seconds, every timed round]}}; round 0 is a warm-up and is not
    kept. The model keeps training across runs (its step count goes on; each run starts from
    a fresh model_dir); both loops write their checkpoints as `train.async_checkpoint` says.
    `model_garden_run(steps_per_chunk, chunks, directory, build_pipeline,
    async_checkpoint)`, if given, gives two more loops (MODEL_GARDEN_LOOPS: its input iterator
    kept from run to run, and its input pipeline built in each run), returning the (begin,
    end) of each of its loops: their "chunk_steps" (a loop's time per step, the run's first
    loop left out, as it waits for the input), "gaps", "start", "end" and "whole"."""
    def chunk_pipelines(start, end):
        return task_lib.train_dataset(task, strategy, plan, start, end)

    def one_pipeline(start, end):
        return one_pipeline_dataset(task, strategy, plan, start)

    def run_with(chunks_per_fit, pipeline_per_chunk):
        def run():
            default, training.CHUNKS_PER_FIT = training.CHUNKS_PER_FIT, chunks_per_fit
            try:
                return _one_run(model, chunk_pipelines if pipeline_per_chunk else one_pipeline,
                                work_dir, steps_per_chunk, chunks,
                                plan.global_batch_size, task.config.train.steps_per_execution,
                                task.config.train.async_checkpoint)
            finally:
                training.CHUNKS_PER_FIT = default
        return run

    def run_model_garden(build_pipeline):
        def run():
            called = time.perf_counter()
            run_dir = tempfile.mkdtemp(dir=work_dir)
            loops = model_garden_run(steps_per_chunk, chunks, run_dir, build_pipeline,
                                     task.config.train.async_checkpoint)
            returned = time.perf_counter()
            _delete_checkpoints(run_dir)
            return {"chunk_steps": [(end - begin) / steps_per_chunk  # not the run's first
                                    for begin, end in loops[1:]],
                    "gaps": [begin - end for (_, end), (begin, _) in zip(loops, loops[1:])],
                    "start": [loops[0][0] - called], "end": [returned - loops[-1][1]],
                    "whole": [returned - called]}
        return run

    os.makedirs(work_dir, exist_ok=True)
    loops = {loop: run_with(*how) for loop, how in LOOPS.items()}
    if model_garden_run is not None:
        for loop, build_pipeline in MODEL_GARDEN_LOOPS.items():
            loops[loop] = run_model_garden(build_pipeline)
    runs = alternation.alternate(loops, rounds)
    return {loop: {key: [value for run in loop_runs for value in run.get(key, [])]
                   for key in SAMPLE_KEYS}
            for loop, loop_runs in runs.items()}


def one_pipeline_dataset(task, strategy, plan, first_step):
    """The distributed dataset of one `fit` from step `first_step` read from one pipeline
    (`task.train_replica_dataset` at the position of `first_step`'s chunk, endless, then
    prefetched as `task.train_dataset` prefetches its joined chunks): the batches of its
    first chunk are the recipe's, the later chunks' go on from there instead of starting
    their own pipelines (ONE_PIPELINE_LOOP)."""
    config = task.config.train
    seed_offset, steps_to_skip = task_lib.chunk_input_position(first_step,
                                                               config.checkpoint_every)
    return strategy.distribute_datasets_from_function(
        lambda context: task.train_replica_dataset(
            context, plan, config.seed + seed_offset, steps_to_skip).prefetch(
                tf.data.AUTOTUNE))


def summary(samples, steps_per_chunk, chunks, global_batch_size):
    """{loop: {"whole_s", "examples_per_s", "per_run_vs_model_garden",
    "per_run_vs_model_garden_building", "gap_ms", "start_ms", "end_ms" and, for the recipe's
    loops, "first_ms" and, with more than one execution per chunk, "others_ms",
    "first_vs_others", "first_speed_vs_its_chunk", "last_speed_vs_its_chunk"; for Model
    Garden's, "chunk_step_ms"}} (medians; the per-run ratios pair each run with the run of
    the same round of MODEL_GARDEN_LOOP, and of MODEL_GARDEN_BUILDING_LOOP;
    "first_speed_vs_its_chunk" and "last_speed_vs_its_chunk" pair a chunk's first or last
    step with its own other steps)."""
    examples = steps_per_chunk * chunks * global_batch_size
    rows = {}
    for loop, values in samples.items():
        whole = statistics.median(values["whole"])
        row = rows[loop] = {"whole_s": whole, "examples_per_s": examples / whole}
        for key, reference in PER_RUN_RATIOS.items():
            theirs = samples.get(reference, {}).get("whole")
            if theirs:
                row[key] = [their / ours for ours, their in zip(values["whole"], theirs)]
        row.update({"gap_ms": statistics.median(values["gaps"]) * 1e3,
                    "start_ms": statistics.median(values["start"]) * 1e3,
                    "end_ms": statistics.median(values["end"]) * 1e3})
        if loop in MODEL_GARDEN_LOOPS:  # its steps are timed per loop (= chunk), in-graph
            row["chunk_step_ms"] = statistics.median(values["chunk_steps"]) * 1e3
            continue
        row["first_ms"] = statistics.median(values["first"]) * 1e3
        if values["others"]:  # not with one execution (steps_per_execution) per chunk
            row["others_ms"] = statistics.median(values["others"]) * 1e3
            row["first_vs_others"] = row["first_ms"] / row["others_ms"]
            row["first_speed_vs_its_chunk"] = _first_speed_vs_its_chunk(values, chunks)
            row["last_speed_vs_its_chunk"] = _last_speed_vs_its_chunk(values, chunks)
    return rows


def _other_steps_by_chunk(values, chunks):
    """[[a chunk's other steps (all but its first), one list per chunk] per run] from
    `values` as `measure` pools them: every run's steps in run order, per run `chunks - 1`
    first steps (every chunk's but the run's first) and `chunks` chunks of other steps."""
    runs = len(values["whole"])
    per_chunk = len(values["others"]) // (runs * chunks)
    return [[values["others"][(run * chunks + chunk) * per_chunk:][:per_chunk]
             for chunk in range(chunks)] for run in range(runs)]


def _first_speed_vs_its_chunk(values, chunks):
    """For every chunk but a run's first: the median of its other steps' times ÷ its first
    step's time (≥ 1: the first step no slower), each first step paired with the steps of
    its own chunk."""
    firsts = iter(values["first"])  # in run order, chunks 2.. of each run
    return [statistics.median(others) / next(firsts)
            for run in _other_steps_by_chunk(values, chunks) for others in run[1:]]


def _last_speed_vs_its_chunk(values, chunks):
    """For every chunk but a run's last, of at least three steps: the median of its steps
    between the first and the last ÷ its last step's time. A chunk's last step is when the
    loop as it is starts the next chunk's pipeline."""
    return [statistics.median(others[:-1]) / others[-1]
            for run in _other_steps_by_chunk(values, chunks) for others in run[:-1]
            if len(others) >= 2]


def print_table(rows, steps_per_chunk, chunks, rounds):
    print(f"\nchunk boundaries in the recipe's training loop: {chunks} chunks of "
          f"{steps_per_chunk} steps, a checkpoint after each, {rounds} timed runs of each "
          "loop after 1 warm-up, alternated")
    print("| loop | step (ms, median) | first step of a chunk (ms) | first ÷ others "
          "| between chunks (ms: checkpoint, callbacks, fit set-up) | start of a run (ms) "
          "| end of a run (ms) | whole run (s) | examples/s over the run "
          "| vs Model Garden (per run) | vs Model Garden building its pipeline (per run) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for loop, row in rows.items():
        if loop not in MODEL_GARDEN_LOOPS:
            others = (f"{row['others_ms']:.1f}", f"{row['first_vs_others']:.2f}") \
                if "others_ms" in row else ("–", "–")  # one execution per chunk
            steps = f"{others[0]} | {row['first_ms']:.1f} | {others[1]}"
        else:  # Model Garden's loop: a chunk's steps in one call of Orbit's in-graph loop
            steps = f"{row['chunk_step_ms']:.1f} (a chunk's mean) | – | –"
        cells = f"{steps} | {row['gap_ms']:.0f} | {row['start_ms']:.0f} | {row['end_ms']:.0f}"
        versus = " | ".join(_paired(row.get(key)) for key in PER_RUN_RATIOS)
        print(f"| {loop} | {cells} | {row['whole_s']:.1f} | {row['examples_per_s']:.0f} "
              f"| {versus} |")
    # the targets: the recipe's loop at least as fast as Model Garden's (run by
    # run), and the first step of a chunk no slower than the others (chunk by chunk)
    for loop in (RECIPE_LOOP, ONE_PIPELINE_LOOP):
        for key, reference in PER_RUN_RATIOS.items():
            if rows.get(loop, {}).get(key):
                print(f"the recipe's loop ({loop}) against {reference}, run by run: "
                      + alternation.describe_ratios(rows[loop][key]))
    recipe = rows.get(RECIPE_LOOP, {})
    if recipe.get("first_speed_vs_its_chunk"):
        print(f"the recipe's loop ({RECIPE_LOOP}), the first step of a chunk against the "
              "other steps of its chunk (their median time ÷ its time), chunk by chunk: "
              + alternation.describe_ratios(recipe["first_speed_vs_its_chunk"]))
    if recipe.get("last_speed_vs_its_chunk"):  # where the next chunk's pipeline starts
        print(f"the recipe's loop ({RECIPE_LOOP}), the last step of a chunk against the "
              "steps between its first and last (their median time ÷ its time), chunk by "
              "chunk: " + alternation.describe_ratios(recipe["last_speed_vs_its_chunk"]))


def _paired(ratios):
    """"median× (each run's)" of per-run ratios, or "–"."""
    if not ratios:
        return "–"
    return (f"{statistics.median(ratios):.2f}× ("
            + ", ".join(f"{ratio:.2f}" for ratio in ratios) + ")")
