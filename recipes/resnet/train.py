"""Train, evaluate and export a ResNet classifier with LAMB or LARS on ImageNet-format TFRecords.

    python -m recipes.resnet.train --config_file=configs/resnet/tiny_cpu.yaml --model_dir=/tmp/rn
    python -m recipes.resnet.train --config_file=configs/resnet/resnet50_lamb_32k.yaml \
        --params_override=data.train_file_pattern=gs://b/train-*,data.eval_file_pattern=gs://b/validation-* \
        --model_dir=gs://b/runs/lamb32k --tpu=local

Flags are the shared ones (recipes/common/flags.py); `--mode` is train | eval |
train_and_eval | export. The program reads top to bottom: config, strategy, data, model
and optimizer (with the table of which variables get weight decay and trust ratios),
train (resumes from the newest checkpoint in --model_dir), evaluate (prints held-out
top-1/top-5), export (SavedModel at <model_dir>/saved_model).
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Model Garden models are tf_keras models

import math  # noqa: E402
import time  # noqa: E402

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from absl import flags  # noqa: E402

from lamb_tf import accumulation  # noqa: E402
from recipes.common import config as config_lib  # noqa: E402
from recipes.common import errors  # noqa: E402
from recipes.common import flags as flags_lib  # noqa: E402
from recipes.common import strategy as strategy_lib  # noqa: E402
from recipes.common import training  # noqa: E402
from recipes.common.errors import UserError  # noqa: E402
from recipes.resnet import convert  # noqa: E402
from recipes.resnet import digits  # noqa: E402
from recipes.resnet import export as export_lib  # noqa: E402
from recipes.resnet import input as input_lib  # noqa: E402
from recipes.resnet import model as model_lib  # noqa: E402
from recipes.resnet.config import ResNetConfig  # noqa: E402

FLAGS = flags.FLAGS
DIGITS_SUBDIR = "digits"
EXPORT_SUBDIR = "saved_model"
EXCLUSIONS_FILE = "exclusions.txt"


def resolve_data(config, work_dir):
    """(train pattern, eval pattern, eval examples, labels.txt or None) for this config."""
    data = config.data
    if data.embedded_digits:
        digits_dir = os.path.join(work_dir, DIGITS_SUBDIR)
        info = digits.prepare(
            digits_dir,
            validation_fraction=data.digits_validation_fraction,
            num_shards=4,
            jpeg_quality=95,
            seed=data.seed,
        )
        if (
            data.num_classes != len(info["class_names"])
            or data.label_offset != info["label_offset"]
        ):
            raise UserError(
                f"data.embedded_digits needs data.num_classes={len(info['class_names'])} and "
                f"data.label_offset={info['label_offset']}, got {data.num_classes} and "
                f"{data.label_offset}"
            )
        splits = info["splits"]
        return (
            os.path.join(digits_dir, splits["train"]["file_pattern"]),
            os.path.join(digits_dir, splits["validation"]["file_pattern"]),
            splits["validation"]["num_examples"],
            export_lib.labels_file_for(digits_dir),
        )
    labels_dir = os.path.dirname(data.train_file_pattern or data.eval_file_pattern)
    return (
        data.train_file_pattern,
        data.eval_file_pattern,
        data.eval_num_examples,
        export_lib.labels_file_for(labels_dir) if labels_dir else None,
    )


def explain_input_error(error, patterns, jpeg_only):
    """A UserError naming the corrupt record and file behind a decode failure, if any."""
    message = getattr(error, "message", str(error))
    if input_lib.LABEL_RANGE_ERROR in message:
        return UserError(
            f"{input_lib.LABEL_RANGE_ERROR}; check data.label_offset (1 for the ImageNet "
            "conversion scripts' 1..1000 labels) and data.num_classes"
        )
    for pattern in patterns:
        if not pattern:
            continue
        print(
            f"input error ({message.strip().splitlines()[0][:160]}); scanning {pattern} "
            "for the corrupt record ...",
            flush=True,
        )
        corrupt = convert.find_corrupt_records(pattern, jpeg_only=jpeg_only, limit=1)
        if corrupt:
            return UserError(convert.describe_corrupt_record(corrupt[0]))
    return None


def build_compiled_model(config, plan):
    """(classifier, accumulating training model, optimizer), compiled; call in strategy.scope().

    The classifier is what gets exported; the training model wraps it for exact gradient
    accumulation over `plan.accumulation_steps` micro-batches per optimizer step.
    """
    classifier = model_lib.build_model(
        config.model, config.data.num_classes, config.data.image_size
    )
    model = accumulation.GradientAccumulationModel(classifier, plan.accumulation_steps)
    optimizer = model_lib.build_optimizer(config.optimizer, config.train.steps)
    if config.runtime.mixed_precision == "mixed_float16":
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
    model.compile(
        optimizer=optimizer,
        loss=model_lib.SmoothedCrossEntropy(config.data.num_classes, config.train.label_smoothing),
        metrics=model_lib.metrics(),
        steps_per_execution=config.train.steps_per_execution,
        jit_compile=config.runtime.jit_compile,
    )
    return classifier, model, optimizer


def make_distributed_train_dataset(strategy, config, pattern, plan, skip_steps, dtype):
    """Endless training batches from `pattern`, one pipeline per host, after `skip_steps` steps."""

    def dataset_fn(context):
        # each optimizer step takes one batch per local replica from this pipeline
        replicas_per_pipeline = context.num_replicas_in_sync // context.num_input_pipelines
        return input_lib.make_train_dataset(
            config.data,
            pattern,
            plan.per_replica_batch_size,
            input_context=context,
            skip_batches=skip_steps * replicas_per_pipeline,
            dtype=dtype,
        )

    return strategy.distribute_datasets_from_function(dataset_fn)


def main(argv):
    del argv
    # ------------------------------------------------------------------ config, strategy
    config = flags_lib.load_config_from_flags(ResNetConfig)
    print(config_lib.format_config(config), flush=True)
    strategy = strategy_lib.make_strategy(FLAGS.strategy, FLAGS.tpu, FLAGS.communication)
    if config.runtime.mixed_precision:
        tf_keras.mixed_precision.set_global_policy(config.runtime.mixed_precision)
    try:
        plan = accumulation.plan_batch(
            config.train.global_batch_size,
            config.train.micro_batch_size,
            strategy.num_replicas_in_sync,
        )
    except (ValueError, TypeError) as error:
        raise UserError(f"train.global_batch_size / train.micro_batch_size: {error}") from None
    strategy_lib.log_batch_plan(strategy, plan)
    if config.eval.global_batch_size % strategy.num_replicas_in_sync:
        raise UserError(
            f"eval.global_batch_size={config.eval.global_batch_size} is not a multiple of the "
            f"{strategy.num_replicas_in_sync} replicas"
        )
    with strategy_lib.WorkerDirectory(FLAGS.model_dir, strategy) as work_dir:
        # config.yaml is written by training.train after the restore succeeded.
        run(config, strategy, plan, work_dir.path)


def run(config, strategy, plan, model_dir):
    mode = FLAGS.mode
    # Seeds, checkpointed dropout RNG state (exact resume), op determinism if asked.
    training.set_up_randomness(config.data.seed, deterministic=FLAGS.deterministic)
    image_dtype = "bfloat16" if config.runtime.mixed_precision == "mixed_bfloat16" else "float32"
    # ------------------------------------------------------------------ data
    train_pattern, eval_pattern, eval_examples, labels_file = resolve_data(config, model_dir)
    if mode in ("train", "train_and_eval"):
        input_lib.list_files(train_pattern, "data.train_file_pattern")
    if mode in ("eval", "train_and_eval"):
        input_lib.list_files(eval_pattern, "data.eval_file_pattern")
        eval_examples = eval_examples or input_lib.count_records(eval_pattern)

    # ------------------------------------------------------------------ model, optimizer
    with strategy.scope():
        classifier, model, optimizer = build_compiled_model(config, plan)
        training.build_optimizer_state(model)
    layerwise = getattr(optimizer, "inner_optimizer", optimizer)
    summary, table = model_lib.exclusion_summary(layerwise)
    print(summary, flush=True)  # the full table goes to model_dir once the checkpoint fits

    jpeg_only = config.data.decode_jpeg_only

    def make_train_dataset(skip_steps):
        return make_distributed_train_dataset(
            strategy, config, train_pattern, plan, skip_steps, image_dtype
        )

    # ------------------------------------------------------------------ train
    if mode in ("train", "train_and_eval"):
        start = time.perf_counter()
        try:
            training.train(
                model,
                make_train_dataset,
                model_dir=model_dir,
                total_steps=config.train.steps,
                checkpoint_every=config.train.checkpoint_every,
                global_batch_size=config.train.global_batch_size,
                verbose=2,
                restore_dir=FLAGS.model_dir,  # every worker resumes from the chief's checkpoint
                config=config,  # saved as config.yaml once the checkpoint fits the model
            )
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
            raise explain_input_error(error, [train_pattern], jpeg_only) or error
        print(
            f"trained to step {config.train.steps} in {time.perf_counter() - start:.1f} s",
            flush=True,
        )
    else:
        manager = training.make_checkpoint_manager(model, model_dir)
        training.require_checkpoint(model_dir)
        training.restore(manager)
    with tf.io.gfile.GFile(os.path.join(model_dir, EXCLUSIONS_FILE), "w") as f:
        f.write(summary + "\n\n" + table + "\n")  # which variables get weight decay / trust ratio

    # ------------------------------------------------------------------ evaluate
    if mode in ("eval", "train_and_eval"):
        steps = input_lib.eval_steps(
            eval_examples, config.eval.global_batch_size, _num_input_pipelines(strategy)
        )
        eval_dataset = strategy.distribute_datasets_from_function(
            lambda context: input_lib.make_eval_dataset(
                config.data,
                eval_pattern,
                config.eval.global_batch_size // strategy.num_replicas_in_sync,
                steps,
                input_context=context,
                dtype=image_dtype,
            )
        )
        try:
            results = model.evaluate(eval_dataset, steps=steps, return_dict=True, verbose=2)
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
            raise explain_input_error(error, [eval_pattern], jpeg_only) or error
        step = int(model.optimizer.iterations.numpy())
        writer = tf.summary.create_file_writer(os.path.join(model_dir, "eval"))
        with writer.as_default(step=step):
            for name, value in results.items():
                tf.summary.scalar(name, value)
        writer.flush()
        if not math.isfinite(results["loss"]):
            raise training.TrainingDiverged(f"eval loss is {results['loss']}; the model diverged")
        print(
            f"held-out top-1: {results['top_1_accuracy']:.4f}  top-5: "
            f"{results['top_5_accuracy']:.4f}  loss: {results['loss']:.4f}  "
            f"({eval_examples} examples, step {step})",
            flush=True,
        )

    # ------------------------------------------------------------------ export
    if mode == "export" or (config.export.enabled and mode in ("train", "train_and_eval")):
        export_lib.export(
            classifier,
            config.data,
            os.path.join(model_dir, EXPORT_SUBDIR),
            jpeg_only=config.export.jpeg_serving,
            labels_file=labels_file,
        )


def _num_input_pipelines(strategy):
    """Input pipelines `distribute_datasets_from_function` creates: one per host.

    Needed before the eval dataset exists (to size its padding); TF has no public
    accessor, so: TPUStrategy's `num_hosts`, MultiWorkerMirroredStrategy's worker count,
    else 1.
    """
    extended = strategy.extended
    if hasattr(extended, "num_hosts"):
        return extended.num_hosts
    return getattr(extended, "_num_workers", 1)  # pylint: disable=protected-access


if __name__ == "__main__":
    flags_lib.define_flags()
    errors.run(main)
