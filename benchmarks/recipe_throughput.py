"""Examples/s of the BERT pretraining recipe against Model Garden's own training loop.

Both sides train the same BERT (Model Garden's `BertEncoderV2` with the masked-LM and
next-sentence heads, sizes from the recipe's config) on the same TFRecords, at the same
batch, one micro-batch per update (k = 1: Model Garden's trainer does not accumulate):

  recipe        the recipe's own pieces, as `recipes/common/driver.py` builds them: the
                compiled `GradientAccumulationModel`, lamb_tf's LAMB with the config's
                schedule, the recipe's input pipeline, and one `model.fit` of `--steps`
                steps per round (the recipe fits one chunk of `checkpoint_every` steps at a
                time), with the config's `train.steps_per_execution`;
  Model Garden  its `bert/pretraining` experiment with the same encoder sizes, its own
                LAMB (`official.modeling.optimization.lamb.LAMB`, same betas, epsilon,
                weight decay, exclusions and global clipnorm; constant learning rate), its
                own input pipeline (`BertPretrainDataLoader`) and its own loop: Orbit's
                `Trainer.train(steps)`, the in-graph loop `train_lib.run_experiment` runs
                `steps_per_loop` steps at a time with.

The two are alternated round by round in this one process (the order flips every round), so
a shared machine's drift hits both alike; the first round of each is a warm-up (tracing).
Also alternated: one optimizer update alone (each side's optimizer, its model's variables,
fixed gradients, in a `tf.function`), giving the share of a step spent in the optimizer, and
the recipe's input pipeline alone (10 x `--steps` batches pulled from one iterator of the
recipe's own dataset, made in the warm-up round), giving how many times faster the host
makes batches than the step consumes them, and the first batch of a fresh iterator (what
each `fit` call waits for before its first step).

Model Garden's next-sentence head has its own `inner_dim` dense layer (hidden x hidden more
parameters); the recipe's reuses the encoder's pooler. Both parameter counts are printed.

`--recipe resnet` times the ResNet recipe (configs/resnet/tiny_cpu.yaml by default) the same
way, without a Model Garden side: its step, its optimizer update and its input pipeline.

Usage:
  python benchmarks/recipe_throughput.py --work_dir /tmp/throughput          # tiny_cpu.yaml
  python benchmarks/recipe_throughput.py --recipe resnet --work_dir /tmp/throughput_resnet
  python benchmarks/recipe_throughput.py --config_file my.yaml --steps 2 --rounds 2  # CI
Prints a Markdown table (median and min-max over the timed rounds) and, with --json,
writes every sample.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from recipes.common import startup  # noqa: E402,F401  (legacy Keras, quiet C++)

import tensorflow as tf  # noqa: E402

from recipes.bert import pretrain  # noqa: E402
from recipes.common import config as config_lib  # noqa: E402
from recipes.common import driver  # noqa: E402
from recipes.resnet import train as resnet_train  # noqa: E402

# --recipe: (its Task, its default config)
RECIPES = {
    "bert": (pretrain.BertPretraining, os.path.join(REPO_ROOT, "configs", "bert", "tiny_cpu.yaml")),
    "resnet": (resnet_train.ResNetClassification,
               os.path.join(REPO_ROOT, "configs", "resnet", "tiny_cpu.yaml")),
}


def recipe_side(task_class, config, work_dir):
    """(task, train(steps), optimizer_update(), input_pipeline(steps), first_batch(),
    parameter count)."""
    task = task_class(config)
    task.check_config()
    task.prepare(work_dir, "train")
    strategy = tf.distribute.get_strategy()
    plan = driver.plan_batch(config, strategy.num_replicas_in_sync)
    model, _ = driver.compile_model(task, strategy, plan)
    dataset = task.train_dataset(strategy, plan, first_step=0)

    def train(steps):
        model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)

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

    update = _update_function(model.optimizer, model.trainable_variables)
    return (task, train, update, input_pipeline, first_batch,
            _parameters(model.trainable_variables))


def model_garden_side(config, train_files, vocab_size):
    """(train(steps), optimizer_update(), parameter count) of Model Garden's experiment."""
    from official.common import registry_imports  # noqa: F401  (Model Garden's experiments)
    from official.core import base_trainer, exp_factory, task_factory

    model, data, optimizer = config.model, config.data, config.optimizer
    params = exp_factory.get_exp_config("bert/pretraining")
    params.override({
        "task": {
            "model": {
                "encoder": {"type": "bert", "bert": {
                    "vocab_size": vocab_size, "hidden_size": model.hidden_size,
                    "num_layers": model.num_layers,
                    "num_attention_heads": model.num_attention_heads,
                    "intermediate_size": model.intermediate_size,
                    "max_position_embeddings": model.max_sequence_length,
                    "type_vocab_size": model.type_vocab_size,
                    "dropout_rate": model.dropout_rate,
                    "attention_dropout_rate": model.attention_dropout_rate,
                    "initializer_range": model.initializer_range}},
                "cls_heads": [{"inner_dim": model.hidden_size, "num_classes": 2,
                               "dropout_rate": model.dropout_rate, "name": "next_sentence"}],
            },
            "train_data": {"input_path": train_files, "seq_length": data.seq_length,
                           "max_predictions_per_seq": data.max_predictions_per_seq,
                           "global_batch_size": config.train.micro_batch_size,
                           "use_next_sentence_label": True, "seed": config.train.seed},
        },
        "trainer": {
            "train_steps": 10**9, "steps_per_loop": 1,
            "optimizer_config": {
                "optimizer": {"type": "lamb", "lamb": {
                    "beta_1": optimizer.beta_1, "beta_2": optimizer.beta_2,
                    "epsilon": optimizer.epsilon,
                    "weight_decay_rate": optimizer.weight_decay_rate,
                    "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"],
                    "global_clipnorm": optimizer.global_clipnorm}},
                "learning_rate": {"type": "constant",
                                  "constant": {"learning_rate": optimizer.learning_rate}},
                "warmup": {"type": None},
            },
        },
    }, is_strict=False)
    task = task_factory.get_task(params.task)
    mg_model = task.build_model()
    mg_optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    trainer = base_trainer.Trainer(params, task, model=mg_model, optimizer=mg_optimizer,
                                   train=True, evaluate=False)

    def train(steps):
        logs = trainer.train(tf.constant(steps, tf.int32))
        tf.nest.map_structure(lambda t: getattr(t, "numpy", lambda: t)(), logs)

    update = _update_function(mg_optimizer, mg_model.trainable_variables)
    return train, update, _parameters(mg_model.trainable_variables)


def _update_function(optimizer, variables):
    """One `apply_gradients` of fixed gradients (scale 1e-3) to `variables`, traced once."""
    gradients = [tf.constant(1e-3, dtype=v.dtype, shape=v.shape) for v in variables]

    @tf.function
    def update():
        optimizer.apply_gradients(zip(gradients, variables))

    return update


def _parameters(variables):
    return sum(int(v.shape.num_elements()) for v in variables)


def _timed(function, *args):
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def _summary(samples):
    return {"median": statistics.median(samples), "min": min(samples),
            "max": max(samples), "samples": samples}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="bert")
    parser.add_argument("--config_file",
                        help="the recipe's config (default: configs/<recipe>/tiny_cpu.yaml)")
    parser.add_argument("--params_override", default="",
                        help="recipe config overrides, as the recipe's flag")
    parser.add_argument("--work_dir", default="/tmp/recipe_throughput",
                        help="the recipe's model_dir here: where its data are prepared or "
                             "reused (nothing else is written)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=4,
                        help="timed rounds of each side, after one warm-up round")
    parser.add_argument("--json", help="write every sample here")
    args = parser.parse_args(argv)
    for flag in ("steps", "rounds"):
        if getattr(args, flag) < 1:
            print(f"--{flag}={getattr(args, flag)} must be at least 1", file=sys.stderr)
            return 2

    task_class, default_config = RECIPES[args.recipe]
    config_file = args.config_file or default_config
    config = config_lib.load_config(task_class.config_class, [config_file],
                                     args.params_override)
    config.train.global_batch_size = config.train.micro_batch_size  # k = 1
    config.train.steps = max(config.train.steps, (args.rounds + 1) * args.steps)
    config.optimizer.warmup_steps = min(config.optimizer.warmup_steps, config.train.steps - 1)
    os.makedirs(args.work_dir, exist_ok=True)
    task, recipe_train, recipe_update, input_pipeline, first_batch, recipe_parameters = (
        recipe_side(task_class, config, args.work_dir))
    timers = {
        ("recipe", "train"): lambda: _timed(recipe_train, args.steps),
        ("recipe", "update"): lambda: _timed(recipe_update),
        # 10x the steps: what the prefetch buffers filled while the loops ran is a small share
        ("recipe", "input"): lambda: _timed(input_pipeline, 10 * args.steps),
        ("recipe", "first batch"): lambda: _timed(first_batch),
    }
    sides, parameters = ["recipe"], {"recipe": recipe_parameters}
    if args.recipe == "bert":
        mg_train, mg_update, parameters["Model Garden"] = model_garden_side(
            config, task.data.train_files, task.vocab_size)
        timers[("Model Garden", "train")] = lambda: _timed(mg_train, args.steps)
        timers[("Model Garden", "update")] = lambda: _timed(mg_update)
        sides.append("Model Garden")
    samples = {key: [] for key in timers}
    order = list(timers)
    for round_index in range(args.rounds + 1):
        for key in (order if round_index % 2 == 0 else order[::-1]):
            seconds = timers[key]()
            if round_index:  # round 0: tracing and warm-up
                samples[key].append(seconds)

    batch = config.train.micro_batch_size
    rows = {}
    for side in sides:
        train = _summary([args.steps * batch / s for s in samples[(side, "train")]])
        step_s = statistics.median(samples[(side, "train")]) / args.steps
        update = _summary(samples[(side, "update")])
        rows[side] = {"examples_per_s": train, "step_s": step_s, "update": update,
                      "optimizer_share": update["median"] / step_s}
    input_rate = _summary([10 * args.steps * batch / s for s in samples[("recipe", "input")]])
    recipe_rate = rows["recipe"]["examples_per_s"]["median"]
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}, "
                   f"TensorFlow {tf.__version__}",
        "load_average": os.getloadavg(),
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
    }
    if "Model Garden" in rows:
        report["speed_vs_model_garden"] = (
            recipe_rate / rows["Model Garden"]["examples_per_s"]["median"])
        # each round's recipe time against Model Garden's in the same round (adjacent in time)
        report["per_round_speed_vs_model_garden"] = [
            mg / ours for ours, mg in zip(samples[("recipe", "train")],
                                          samples[("Model Garden", "train")])]
    print(f"{args.recipe} recipe, batch {batch} (k = 1), {args.steps} steps per round, "
          f"{args.rounds} timed rounds after 1 warm-up, alternated in one process; "
          f"steps_per_execution={config.train.steps_per_execution}, "
          f"jit_compile={config.runtime.jit_compile}; {report['machine']}; "
          f"load average {report['load_average'][0]:.1f}")
    print("parameters: " + ", ".join(f"{side} {count:,}" for side, count in parameters.items()))
    print("| loop | examples/s (median) | min–max | speed vs Model Garden "
          "| optimizer update (ms) | share of a step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for side in sides:
        row = rows[side]
        rate = row["examples_per_s"]
        versus = (f"{rate['median'] / rows['Model Garden']['examples_per_s']['median']:.2f}×"
                  if "Model Garden" in rows else "–")
        print(f"| {side} | {rate['median']:.0f} | {rate['min']:.0f}–{rate['max']:.0f} "
              f"| {versus} | {row['update']['median'] * 1e3:.1f} "
              f"| {row['optimizer_share']:.0%} |")
    if "Model Garden" in rows:
        paired = report["per_round_speed_vs_model_garden"]
        print(f"\nrecipe against Model Garden round by round: "
              + ", ".join(f"{ratio:.2f}×" for ratio in paired)
              + f" (median {statistics.median(paired):.2f}×)")
    print(f"\nrecipe input pipeline alone: {input_rate['median']:.0f} examples/s "
          f"({input_rate['min']:.0f}–{input_rate['max']:.0f}), "
          f"{report['input_pipeline_vs_step']:.1f}× what the recipe's step consumes; "
          f"a fresh iterator's first batch (paid by every `fit` call): "
          f"{report['fresh_iterator_first_batch_s']['median'] * 1e3:.0f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
