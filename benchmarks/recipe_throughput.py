"""Examples/s of the BERT pretraining and ResNet recipes against Model Garden's own
training loop.

Both sides train the same model on the same TFRecords, at the same batch, one micro-batch
per update (k = 1: Model Garden's trainer does not accumulate):

  recipe        the recipe's own pieces, as `recipes/common/driver.py` builds them: the
                compiled `GradientAccumulationModel`, lamb_tf's LAMB with the config's
                schedule, the recipe's input pipeline, and one `model.fit` of `--steps`
                steps per round on a fresh iterator (what the recipe's loop pays once per
                `training.CHUNKS_PER_FIT` checkpoint chunks), with the config's
                `train.steps_per_execution`; the iterator is deleted after the `fit` on a
                thread of its own, as the recipe's loop deletes it
                (`training.input_iterator_deleted_in_background`);
  Model Garden  its own experiment for the same model (`bert/pretraining` with the same
                encoder sizes, or `resnet_imagenet` with the same ResNet depth, width,
                batch norm and image size), its own LAMB
                (`official.modeling.optimization.lamb.LAMB`, same betas, epsilon, weight
                decay, exclusions and global clipnorm; constant learning rate), its own
                input pipeline (`BertPretrainDataLoader`, or its image classification
                `InputReader` and `Parser` with the recipe's augmentation settings) and its
                own loop: Orbit's `Trainer.train(steps)`, the in-graph loop
                `train_lib.run_experiment` runs `steps_per_loop` steps at a time with
                (benchmarks/model_garden_loops.py).

The two are alternated round by round in this one process (benchmarks/alternation.py: the
order changes every round), so a shared machine's drift hits both alike; the first round of
each is a warm-up (tracing).
Also alternated: one optimizer update alone (each side's optimizer, its model's variables,
fixed gradients, in a `tf.function`), giving the share of a step spent in the optimizer, and
the recipe's input pipeline alone (10 x `--steps` batches pulled from one iterator of the
recipe's own dataset, made in the warm-up round), giving how many times faster the host
makes batches than the step consumes them, and the first batch of a fresh iterator (what
each `fit` call waits for before its first step). And the recipe's compiled steps alone:
`model.train_function` called on one iterator kept across rounds, the same steps without
the costs `fit` adds once per call (a fresh iterator, callbacks), so that the step and the
per-call cost can be told apart.

Then whole training runs: the recipe's own training loop (`recipes.common.training.train`,
a checkpoint per chunk), `--chunks` chunks of `--steps` steps, the loop as it is (one `fit`
and one dataset over the chunks) alternated with a `fit` and a fresh pipeline per chunk,
with the loop as it is reading one pipeline through the run instead of one per chunk (what
exact resume costs: not a loop to train with), and with Model Garden's loop over the same
steps and checkpoints (Orbit's `Controller`, as `train_lib.run_experiment` drives it):
each run's examples/s from the call to its return, and for each loop what a chunk boundary
costs (benchmarks/chunk_boundaries.py).

Where the models differ, both parameter counts are printed: Model Garden's BERT
next-sentence head has its own `inner_dim` dense layer (hidden x hidden more parameters;
the recipe's reuses the encoder's pooler); its ResNet head has `data.label_offset` more
classes (it has no label offset: see `model_garden_loops.resnet_model_override`). Other
differences of the ResNet side: Model Garden's LAMB always corrects the moments' bias (the
recipe's config may turn it off), and its task does not pass `crop_area_range` to its
parser (its random crops take 8-100% of the area; the recipe's `data.crop_area_min`-100%).

Usage:
  python benchmarks/recipe_throughput.py --work_dir /tmp/throughput          # tiny_cpu.yaml
  python benchmarks/recipe_throughput.py --recipe resnet --work_dir /tmp/throughput_resnet
  python benchmarks/recipe_throughput.py --config_file my.yaml --steps 2 --rounds 2  # CI
Prints a Markdown table (median and min-max over the timed rounds) and, with --json,
writes every sample.
"""
import datetime
import functools
import json
import os
import platform
import statistics
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from benchmarks import alternation, recipe_flags  # noqa: E402  (no TensorFlow)
from benchmarks.recipe_flags import DATA_REUSED, add_recipe_flags  # noqa: E402


def _parse_arguments(argv):
    parser = alternation.argument_parser(__doc__)
    add_recipe_flags(parser, "recipe_throughput",
                     work_dir_help=DATA_REUSED + ", and where each timed training-loop run "
                     "writes its summaries (chunk_boundaries/; its checkpoints are deleted "
                     "after the run)")
    parser.add_argument("--params_override", default="",
                        help="recipe config overrides, as the recipe's flag")
    parser.add_argument("--steps", type=int, default=20, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=4,
                        help="timed rounds of each side, after one warm-up round")
    parser.add_argument("--chunks", type=int, default=4,
                        help="checkpoint chunks (of --steps steps) per training-loop run")
    parser.add_argument("--boundary_rounds", type=int, default=3,
                        help="timed training-loop runs of each loop, after one warm-up")
    return parser.parse_args(argv)


def _bad_arguments(args):
    """One line naming the first bad flag, or None (the config's checks: `_incomparable`)."""
    for flag in ("steps", "rounds", "chunks", "boundary_rounds"):
        if getattr(args, flag) < 1:
            return f"--{flag}={getattr(args, flag)} must be at least 1"
    return alternation.output_file_problem("--json", args.json)


if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    recipe_flags.check_command_line(_parse_arguments, _bad_arguments)

from recipes.common import startup  # noqa: E402,F401  (legacy Keras, quiet C++)

import tensorflow as tf  # noqa: E402

from recipes.bert import pretrain  # noqa: E402
from recipes.common import config as config_lib  # noqa: E402
from recipes.common import driver, errors, schema, storage, training  # noqa: E402
from recipes.resnet import train as resnet_train  # noqa: E402
from benchmarks import chunk_boundaries, model_garden_loops  # noqa: E402

# --recipe: (its Task, its default config, Model Garden's side for it)
RECIPES = {
    "bert": (pretrain.BertPretraining, os.path.join(REPO_ROOT, "configs", "bert", "tiny_cpu.yaml"),
             model_garden_loops.bert_side),
    "resnet": (resnet_train.ResNetClassification,
               os.path.join(REPO_ROOT, "configs", "resnet", "tiny_cpu.yaml"),
               model_garden_loops.resnet_side),
}
assert tuple(RECIPES) == recipe_flags.RECIPE_NAMES  # (--recipe's choices, before TensorFlow)


def prepare_recipe(task_class, config, work_dir):
    """(task, strategy, batch plan) as `recipes/common/driver.py` makes them, the data
    prepared in `work_dir`."""
    task = task_class(config)
    task.check_config()
    task.prepare(work_dir, "train")
    strategy = tf.distribute.get_strategy()
    return task, strategy, driver.plan_batch(config, strategy.num_replicas_in_sync)


def build_recipe(task_class, config, work_dir):
    """(task, strategy, plan, compiled model, the first chunk's training dataset, endless)
    as `recipes/common/driver.py` builds them, the data prepared in `work_dir`."""
    task, strategy, plan = prepare_recipe(task_class, config, work_dir)
    model, _ = driver.compile_model(task, strategy, plan)
    # the rounds of the benchmarks read past any chunk's end
    dataset = strategy.distribute_datasets_from_function(
        lambda context: task.train_replica_dataset(context, plan, config.train.seed, 0))
    return task, strategy, plan, model, dataset


def recipe_side(task_class, config, work_dir):
    """(task, train(steps), step_only(steps), optimizer_update(), input_pipeline(steps),
    first_batch(), boundaries(steps, chunks, rounds, model_garden_run), parameter count)."""
    task, strategy, plan, model, dataset = build_recipe(task_class, config, work_dir)

    def train(steps):
        # Deleted inside `fit`, the iterator would wait for tf.data's autotuning thread:
        # rounds of 5.1 s where the steps took under 3 (docs/performance.md)
        with training.input_iterator_deleted_in_background(model, "train_function"):
            model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)

    kept = []  # the compiled train function and one iterator, made in the warm-up round

    def step_only(steps):
        """The same compiled steps without `fit`: `train_function` on one kept iterator."""
        if not kept:
            kept.extend([model.make_train_function(), iter(dataset)])
        for _ in range(steps // config.train.steps_per_execution):
            logs = kept[0](kept[1])
        tf.nest.map_structure(lambda t: t.numpy(), logs)

    iterator = []  # one iterator, made in the warm-up round (the pipeline's steady state)

    def input_pipeline(steps):
        if not iterator:
            iterator.append(iter(dataset))
        for _ in range(steps):
            batch = next(iterator[0])
        tf.nest.map_structure(lambda t: t.numpy(), batch)  # the last batch is materialised

    def first_batch():
        """What each `fit` call pays before its first step: a fresh iterator's first batch
        (file shuffling, the shuffle buffer filled)."""
        tf.nest.map_structure(lambda t: t.numpy(), next(iter(dataset)))

    def boundaries(steps, chunks, rounds, model_garden_run):
        return chunk_boundaries.measure(task, strategy, plan, model,
                                        os.path.join(work_dir, "chunk_boundaries"), steps,
                                        chunks, rounds, model_garden_run)

    update = model_garden_loops.update_function(model.optimizer, model.trainable_variables)
    return (task, train, step_only, update, input_pipeline, first_batch, boundaries,
            model_garden_loops.parameter_count(model.trainable_variables))


def _summary(samples):
    return {"median": statistics.median(samples), "min": min(samples),
            "max": max(samples), "samples": samples}


def write_json(path, report):
    """Writes `report` to --json's `path` when one was given (checked before the measurement
    by `alternation.output_file_problem`)."""
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=1)


def make_work_dir(path):
    """Creates --work_dir (and its parents), or a UserError naming it, also when it is there
    but no file can be created in it."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise errors.UserError(f"--work_dir={path}: cannot create it ({error.strerror}); "
                               "choose a directory you can write") from None
    problem = storage.local_directory_problem(path)
    if problem:
        raise errors.UserError(f"--work_dir={path}: {problem}; choose a directory you can "
                               "write")


def load_recipe_config(args, params_override=""):
    """(task class, config file, config) of --recipe and --config_file, the config checked
    whole as the recipe checks it before it trains (recipes/common/driver.py `load_task`:
    `schema.check`, its relative paths made absolute, then the task's `check_config`), before any timing: a bad key or value
    (`train.steps_per_execution=0`, `optimizer.beta_1=2`, `model.hidden_size=0`, ...) is a
    UserError, one line; so is a config the recipe would refuse to train as given (e.g.
    optimizer.warmup_steps not below train.steps): the benchmarks then only raise
    train.steps (so the warmup stays below it) and set their own batch and chunks. The
    config as they change it is not checked again: their steps need not be a multiple of
    the chunk, as the recipe's must."""
    task_class, default_config = RECIPES[args.recipe][:2]
    config_file = args.config_file or default_config
    config = config_lib.load_config(task_class.config_class, [config_file], params_override,
                                    renamed_keys=schema.RENAMED_KEYS)
    schema.check(config)
    config_lib.make_paths_absolute(config)
    task_class(config).check_config()
    return task_class, config_file, config


def exit_status(main, argv=None):
    """`main(argv)`'s exit status, a `UserError` (a bad flag, --config_file, config key or data)
    printed as one line on stderr with status 2, as the recipes print theirs: for the
    `__main__` of every benchmark of a recipe."""
    try:
        return main(argv)
    except errors.UserError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return errors.EXIT_USER_ERROR


def _incomparable(args, config):
    """One line saying why the two sides would not train alike, or None."""
    if args.steps % config.train.steps_per_execution:
        return (f"--steps={args.steps} is not a multiple of train.steps_per_execution="
                f"{config.train.steps_per_execution}")
    if config.optimizer.name != "lamb":
        return (f"optimizer.name={config.optimizer.name}: Model Garden's side trains with its "
                "LAMB; use optimizer.name=lamb")
    if config.runtime.precision != "float32":
        return (f"runtime.precision={config.runtime.precision}: Model Garden's side runs in "
                "float32; use runtime.precision=float32")
    return None


def _timers(args, task_class, config, model_garden_side):
    """({(side, what): a function timing it once}, {side: parameter count},
    boundaries(steps, chunks, rounds) with Model Garden's loop in them)."""
    (task, recipe_train, step_only, recipe_update, input_pipeline, first_batch, boundaries,
     recipe_parameters) = recipe_side(task_class, config, args.work_dir)
    mg_train, mg_update, mg_run_with_checkpoints, mg_parameters = model_garden_side(config, task)
    timers = {
        ("recipe", "train"): lambda: alternation.seconds(recipe_train, args.steps),
        ("recipe", "step only"): lambda: alternation.seconds(step_only, args.steps),
        ("recipe", "update"): lambda: alternation.seconds(recipe_update),
        # 10x the steps: what the prefetch buffers filled while the loops ran is a small share
        ("recipe", "input"): lambda: alternation.seconds(input_pipeline, 10 * args.steps),
        ("recipe", "first batch"): lambda: alternation.seconds(first_batch),
        ("Model Garden", "train"): lambda: alternation.seconds(mg_train, args.steps),
        ("Model Garden", "update"): lambda: alternation.seconds(mg_update),
    }
    return (timers, {"recipe": recipe_parameters, "Model Garden": mg_parameters},
            functools.partial(boundaries, model_garden_run=mg_run_with_checkpoints))


def _report(args, config_file, config, parameters, samples, boundaries, run):
    """Everything measured, as written to --json (`run`: `alternation.run_finished`'s)."""
    batch = config.train.micro_batch_size
    rows = {}
    for side in parameters:
        train = _summary([args.steps * batch / s for s in samples[(side, "train")]])
        step_s = statistics.median(samples[(side, "train")]) / args.steps
        update = _summary(samples[(side, "update")])
        rows[side] = {"examples_per_s": train, "step_s": step_s, "update": update,
                      "optimizer_share": update["median"] / step_s}
    input_rate = _summary([10 * args.steps * batch / s for s in samples[("recipe", "input")]])
    recipe_rate = rows["recipe"]["examples_per_s"]["median"]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}, "
                   f"TensorFlow {tf.__version__}",
        "load_average": os.getloadavg(),
        **run,  # git_commit, git_tree, load_average_start, load_average_end
        "recipe": args.recipe, "config_file": config_file,
        "params_override": args.params_override,
        "batch": batch, "steps_per_round": args.steps, "rounds": args.rounds,
        "steps_per_execution": config.train.steps_per_execution,
        "jit_compile": config.runtime.jit_compile,
        "parameters": parameters,
        "rows": rows,
        "input_pipeline_examples_per_s": input_rate,
        "input_pipeline_vs_step": input_rate["median"] / recipe_rate,
        "fresh_iterator_first_batch_s": _summary(samples[("recipe", "first batch")]),
        # the recipe's compiled steps on one kept iterator: its step without `fit`'s per-call
        # costs (a fresh iterator, callbacks), against Model Garden's loop in the same round
        "step_only_examples_per_s": _summary(
            [args.steps * batch / s for s in samples[("recipe", "step only")]]),
        "per_round_step_only_vs_model_garden": [
            mg / ours for ours, mg in zip(samples[("recipe", "step only")],
                                          samples[("Model Garden", "train")])],
        "speed_vs_model_garden": recipe_rate / rows["Model Garden"]["examples_per_s"]["median"],
        # each round's recipe time against Model Garden's in the same round (adjacent in time)
        "per_round_speed_vs_model_garden": [
            mg / ours for ours, mg in zip(samples[("recipe", "train")],
                                          samples[("Model Garden", "train")])],
        "chunks": args.chunks, "boundary_rounds": args.boundary_rounds,
        "chunk_boundaries": chunk_boundaries.summary(boundaries, args.steps, args.chunks,
                                                     batch),
        "chunk_boundary_samples": boundaries,
    }


def _print_report(report):
    rows, parameters = report["rows"], report["parameters"]
    print(f"{report['recipe']} recipe, batch {report['batch']} (k = 1), "
          f"{report['steps_per_round']} steps per round, {report['rounds']} timed rounds "
          f"after 1 warm-up, alternated in one process; "
          f"steps_per_execution={report['steps_per_execution']}, "
          f"jit_compile={report['jit_compile']}; {report['machine']}; "
          f"load average {report['load_average'][0]:.1f}")
    print("parameters: " + ", ".join(f"{side} {count:,}" for side, count in parameters.items()))
    print("| loop | examples/s (median) | min–max | speed vs Model Garden "
          "| optimizer update (ms) | share of a step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    model_garden_rate = rows["Model Garden"]["examples_per_s"]["median"]
    for side, row in rows.items():
        rate = row["examples_per_s"]
        print(f"| {side} | {rate['median']:.0f} | {rate['min']:.0f}–{rate['max']:.0f} "
              f"| {rate['median'] / model_garden_rate:.2f}× "
              f"| {row['update']['median'] * 1e3:.1f} | {row['optimizer_share']:.0%} |")
    paired = report["per_round_speed_vs_model_garden"]
    print("\nrecipe against Model Garden round by round: "
          + ", ".join(f"{ratio:.2f}×" for ratio in paired)
          + f" ({alternation.describe_ratios(paired)})")
    step_only = report["per_round_step_only_vs_model_garden"]
    print(f"recipe's compiled steps without `fit` (one kept iterator): "
          f"{report['step_only_examples_per_s']['median']:.0f} examples/s; against Model "
          f"Garden round by round: " + ", ".join(f"{ratio:.2f}×" for ratio in step_only)
          + f" ({alternation.describe_ratios(step_only)})")
    input_rate = report["input_pipeline_examples_per_s"]
    print(f"\nrecipe input pipeline alone: {input_rate['median']:.0f} examples/s "
          f"({input_rate['min']:.0f}–{input_rate['max']:.0f}), "
          f"{report['input_pipeline_vs_step']:.1f}× what the recipe's step consumes; "
          f"a fresh iterator's first batch (paid by every `fit` call): "
          f"{report['fresh_iterator_first_batch_s']['median'] * 1e3:.0f} ms")
    chunk_boundaries.print_table(report["chunk_boundaries"], report["steps_per_round"],
                                 report["chunks"], report["boundary_rounds"])


def main(argv=None):
    args = _parse_arguments(argv)
    problem = _bad_arguments(args)
    if problem:  # one line and exit status 2, through exit_status
        raise errors.UserError(problem)
    task_class, config_file, config = load_recipe_config(args, args.params_override)
    model_garden_side = RECIPES[args.recipe][2]
    problem = _incomparable(args, config)
    if problem:
        raise errors.UserError(problem)
    config.train.global_batch_size = config.train.micro_batch_size  # k = 1
    config.train.checkpoint_every = args.steps  # the chunks of the training-loop runs
    # every step the model takes here stays within the learning-rate schedule
    config.train.steps = max(config.train.steps, (args.rounds + 1) * args.steps + len(
        chunk_boundaries.LOOPS) * (args.boundary_rounds + 1) * args.chunks * args.steps)
    make_work_dir(args.work_dir)
    started = alternation.run_started()
    timers, parameters, boundaries = _timers(args, task_class, config, model_garden_side)
    samples = alternation.alternate(timers, args.rounds)
    boundary_samples = boundaries(args.steps, args.chunks, args.boundary_rounds)
    report = _report(args, config_file, config, parameters, samples, boundary_samples,
                     alternation.run_finished(started))
    _print_report(report)
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
