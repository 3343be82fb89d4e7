r"""BERT pretraining with LAMB: config → strategy → data → model → optimizer → restore →
fit → evaluate → export.

The embedded default (the project's main job; prepares the stdlib corpus, trains a tiny
BERT at an effective batch of 2,048 through gradient accumulation, exports, evaluates):

  python -m recipes.bert.pretrain --config_file=configs/bert/tiny_cpu.yaml \
      --model_dir=/tmp/bert_tiny

BERT-Large at batch 32k on a TPU VM (see docs/bert.md for the 64k/32k pair):

  python -m recipes.bert.pretrain --config_file=configs/bert/bert_large_lamb_32k.yaml \
      --tpu=local --model_dir=gs://BUCKET/bert_large_32k \
      --params_override=data.train_files=gs://BUCKET/data/train-*,...

Modes: train (then export), eval (latest checkpoint), train_and_eval (evaluate before and
after training, then export), export (latest checkpoint). Re-running the same command
resumes from the newest checkpoint in --model_dir.
"""

import collections
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Model Garden models are tf_keras models.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # C++ INFO lines (end of dataset, ...)

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from absl import flags  # noqa: E402

from lamb_tf import accumulation, exclusions, schedules  # noqa: E402
from lamb_tf.tf_keras_optimizers import LAMB  # noqa: E402
from recipes.bert import export as export_lib  # noqa: E402
from recipes.bert import input as input_lib  # noqa: E402
from recipes.bert import model as model_lib  # noqa: E402
from recipes.bert import prepare_data  # noqa: E402
from recipes.bert import vocabulary  # noqa: E402
from recipes.bert.config import BertPretrainingConfig  # noqa: E402
from recipes.common import config as config_lib  # noqa: E402
from recipes.common import errors, strategy as strategy_lib, training  # noqa: E402
from recipes.common import flags as flags_lib  # noqa: E402
from recipes.common.errors import UserError  # noqa: E402

FLAGS = flags.FLAGS
PRECISIONS = ("float32", "mixed_bfloat16")


def main(argv):
    if len(argv) > 1:
        raise UserError(f"unexpected arguments {argv[1:]}; all options are --flags")

    # ---- Config -------------------------------------------------------------------------
    config = flags_lib.load_config_from_flags(BertPretrainingConfig)
    check_config(config)
    print(f"resolved config:\n{config_lib.format_config(config)}", flush=True)

    # ---- Strategy and batch arithmetic --------------------------------------------------
    strategy = strategy_lib.make_strategy(FLAGS.strategy, FLAGS.tpu, FLAGS.communication)
    try:
        plan = accumulation.plan_batch(
            config.train.global_batch_size,
            config.train.micro_batch_size,
            strategy.num_replicas_in_sync,
        )
    except ValueError as error:
        raise UserError(f"train.global_batch_size / train.micro_batch_size: {error}") from None
    strategy_lib.log_batch_plan(strategy, plan)

    with strategy_lib.WorkerDirectory(FLAGS.model_dir, strategy) as work_dir:
        # config.yaml is written by training.train after the restore succeeded.
        run(config, FLAGS.mode, strategy, plan, work_dir.path)


def run(config, mode, strategy, plan, model_dir):
    """Everything after the batch plan, for one process writing to `model_dir`."""
    # Seeds, checkpointed dropout RNG state (exact resume), op determinism if asked.
    training.set_up_randomness(config.train.seed, deterministic=FLAGS.deterministic)

    # ---- Data ---------------------------------------------------------------------------
    data = locate_or_prepare_data(config.data, model_dir)
    vocab_size = len(vocabulary.read_vocabulary(data.vocab_file))

    # ---- Model and optimizer ------------------------------------------------------------
    tf_keras.mixed_precision.set_global_policy(config.train.precision)
    with strategy.scope():
        encoder, pretrainer = model_lib.build_pretrainer(config.model, vocab_size)
        inner_model = model_lib.build_training_model(
            pretrainer, config.data.seq_length, config.data.max_predictions_per_seq
        )
        # One optimizer update per global batch: k micro-batches per replica, averaged in
        # float32, all-reduced once (lamb_tf.accumulation).
        model = accumulation.GradientAccumulationModel(inner_model, plan.accumulation_steps)
        optimizer = make_optimizer(config.optimizer, config.train.steps)
        model.compile(
            optimizer=optimizer,
            loss=model_lib.losses(),
            weighted_metrics=model_lib.weighted_metrics(),
            steps_per_execution=config.train.steps_per_execution,
            jit_compile=config.train.jit_compile,
        )
        training.build_optimizer_state(model)
    log_exclusions(optimizer)

    # ---- Restore ------------------------------------------------------------------------
    # Checkpoints are read from --model_dir (the chief's) on every worker; training.train
    # restores for the training modes.
    resuming = training.latest_checkpoint(FLAGS.model_dir) is not None
    if mode in ("eval", "export"):
        restore_latest(model, FLAGS.model_dir)
    elif not resuming and config.train.init_checkpoint:
        restore_weights_only(model, config.train.init_checkpoint)

    def evaluate(when):
        return evaluate_and_print(model, strategy, config, data.eval_files, when)

    # ---- Fit ----------------------------------------------------------------------------
    if mode in ("train", "train_and_eval"):
        if mode == "train_and_eval" and not resuming:
            evaluate("before training")
        training.train(
            model,
            lambda first_step: make_train_dataset(strategy, config, data.train_files, first_step),
            model_dir=model_dir,
            total_steps=config.train.steps,
            checkpoint_every=config.train.checkpoint_every,
            global_batch_size=config.train.global_batch_size,
            log_every=config.train.log_every,
            data_files=data.train_files,  # a corrupt record is reported with its file
            restore_dir=FLAGS.model_dir,  # every worker resumes from the chief's checkpoint
            config=config,  # saved as config.yaml once the checkpoint fits the model
        )

    # ---- Evaluate -----------------------------------------------------------------------
    if mode in ("eval", "train_and_eval"):
        evaluate("after training" if mode == "train_and_eval" else "at the latest checkpoint")

    # ---- Export -------------------------------------------------------------------------
    if mode in ("train", "train_and_eval", "export"):
        export_dir = config.export.export_dir or os.path.join(model_dir, "export")
        export_lib.export_encoder(export_dir, encoder, data.vocab_file, config.data.seq_length)


def check_config(config):
    """Recipe-level checks that the schema's types cannot express; one line each."""
    if config.train.precision not in PRECISIONS:
        raise UserError(
            f"train.precision={config.train.precision!r} is not one of {', '.join(PRECISIONS)}"
        )
    if config.data.seq_length > config.model.max_sequence_length:
        raise UserError(
            f"data.seq_length={config.data.seq_length} exceeds model.max_sequence_length="
            f"{config.model.max_sequence_length}; raise model.max_sequence_length (BERT: 512)"
        )
    for key in ("steps", "checkpoint_every", "steps_per_execution", "log_every"):
        if getattr(config.train, key) <= 0:
            raise UserError(f"train.{key}={getattr(config.train, key)} must be positive")
    if config.optimizer.warmup_steps >= config.train.steps:
        raise UserError(
            f"optimizer.warmup_steps={config.optimizer.warmup_steps} must be less than "
            f"train.steps={config.train.steps}"
        )


# ---- Data ------------------------------------------------------------------------------


DataFiles = collections.namedtuple("DataFiles", ["train_files", "eval_files", "vocab_file"])


def locate_or_prepare_data(data_config, model_dir):
    """Prepared TFRecords and vocabulary: the configured files, a finished preparation in
    the data directory, or a new preparation of the corpus there."""
    if data_config.train_files:
        missing = [key for key in ("eval_files", "vocab_file") if not getattr(data_config, key)]
        if missing:
            raise UserError(
                f"data.train_files is set but data.{missing[0]} is empty; give the held-out "
                "files and the vocabulary the training files were made with"
            )
        return DataFiles(data_config.train_files, data_config.eval_files, data_config.vocab_file)
    data_dir = data_config.data_dir or os.path.join(model_dir, "data")
    metadata_path = os.path.join(data_dir, "metadata.json")  # written last by a preparation
    if os.path.exists(metadata_path):
        with open(metadata_path, encoding="utf-8") as f:
            metadata = json.load(f)
        for key in ("seq_length", "max_predictions_per_seq"):
            if metadata[key] != getattr(data_config, key):
                raise UserError(
                    f"{data_dir} holds data prepared with {key}={metadata[key]}, but "
                    f"data.{key}={getattr(data_config, key)}; use another data.data_dir"
                )
        print(f"data: reusing the preparation in {data_dir}", flush=True)
        return DataFiles(metadata["train_files"], metadata["eval_files"], metadata["vocab_file"])
    print(f"data: preparing {data_config.corpus} into {data_dir}", flush=True)
    try:
        prepared = prepare_data.prepare_pretraining_data(
            None if data_config.corpus == "stdlib" else data_config.corpus,
            data_dir,
            vocab_file=data_config.vocab_file or None,
            vocab_size=data_config.vocab_size,
            seq_length=data_config.seq_length,
            max_predictions_per_seq=data_config.max_predictions_per_seq,
            dupe_factor=data_config.dupe_factor,
            seed=data_config.seed,
        )
    except prepare_data.ArgumentError as error:
        raise UserError(f"data: {error}") from None
    print(
        f"data: {prepared.num_train_sequences} training and {prepared.num_eval_sequences} "
        f"held-out sequences from {prepared.num_words} words, vocabulary of "
        f"{prepared.vocab_size} pieces",
        flush=True,
    )
    return DataFiles(prepared.train_files, prepared.eval_files, prepared.vocab_file)


def make_train_dataset(strategy, config, file_pattern, first_step):
    """Endless global batches for the chunk of training that starts at `first_step`.

    recipes.common.training builds one pipeline per checkpoint chunk. Each chunk shuffles
    with its own seed (train.seed + first_step) instead of skipping the batches earlier
    chunks read: the batches depend only on the chunk, so a run resumed from a checkpoint
    reads exactly what the uninterrupted run read, and resuming late in a long run costs
    nothing (skipping would re-read and parse every earlier batch).
    """

    def replica_dataset(input_context):
        dataset = input_lib.make_pretraining_dataset(
            file_pattern,
            seq_length=config.data.seq_length,
            max_predictions_per_seq=config.data.max_predictions_per_seq,
            batch_size=config.train.global_batch_size,  # the reader divides by replicas
            is_training=True,
            input_context=input_context,
            seed=config.train.seed + first_step,
        )
        return dataset.map(model_lib.keras_targets)

    return strategy.distribute_datasets_from_function(replica_dataset)


def make_eval_dataset(strategy, config, file_pattern):
    def replica_dataset(input_context):
        dataset = input_lib.make_pretraining_dataset(
            file_pattern,
            seq_length=config.data.seq_length,
            max_predictions_per_seq=config.data.max_predictions_per_seq,
            batch_size=config.eval.batch_size,
            is_training=False,
            input_context=input_context,
        )
        return dataset.map(model_lib.keras_targets)

    return strategy.distribute_datasets_from_function(replica_dataset)


# ---- Optimizer -------------------------------------------------------------------------


def make_optimizer(optimizer_config, total_steps):
    """lamb_tf LAMB over a warmup + polynomial-decay schedule (in applied updates)."""
    learning_rate = schedules.TfKerasWarmupPolynomialDecay(
        peak_learning_rate=optimizer_config.learning_rate,
        total_steps=total_steps,
        warmup_steps=optimizer_config.warmup_steps,
        end_learning_rate=optimizer_config.end_learning_rate,
        power=optimizer_config.decay_power,
    )
    patterns = optimizer_config.exclude_from_weight_decay
    keras_kwargs = {}
    if optimizer_config.global_clipnorm is not None:
        # tf_keras clips inside apply_gradients, after the all-reduce and after accumulation.
        keras_kwargs["global_clipnorm"] = optimizer_config.global_clipnorm
    return LAMB(
        learning_rate=learning_rate,
        beta_1=optimizer_config.beta_1,
        beta_2=optimizer_config.beta_2,
        epsilon=optimizer_config.epsilon,
        weight_decay_rate=optimizer_config.weight_decay_rate,
        exclude_from_weight_decay=(
            list(exclusions.BERT_EXCLUDE_PATTERNS) if patterns is None else patterns
        ),
        exclude_from_layer_adaptation=optimizer_config.exclude_from_layer_adaptation,
        **keras_kwargs,
    )


def log_exclusions(optimizer):
    """One line per pattern list: which variables the exclusions matched."""
    rows = optimizer.exclusion_table()
    total = sum(_size(row.shape) for row in rows)
    for label, chosen in (("weight decay", "decayed"), ("layer adaptation", "adapted")):
        excluded = [row for row in rows if not getattr(row, chosen)]
        parameters = sum(_size(row.shape) for row in excluded)
        examples = ", ".join(row.path for row in excluded[:3])
        print(
            f"optimizer: {len(excluded)} of {len(rows)} variables ({parameters} of {total} "
            f"parameters) excluded from {label}, e.g. {examples or 'none'}",
            flush=True,
        )


def _size(shape):
    size = 1
    for dimension in shape:
        size *= int(dimension)
    return size


# ---- Restore ---------------------------------------------------------------------------


def restore_latest(model, model_dir):
    """The newest checkpoint of this run (model and optimizer), or a one-line error."""
    training.require_checkpoint(model_dir)
    training.restore(training.make_checkpoint_manager(model, model_dir))


def restore_weights_only(model, init_checkpoint):
    """Phase 2 of mixed-batch training: phase 1's weights, a fresh optimizer."""
    path = init_checkpoint
    if tf.io.gfile.isdir(init_checkpoint):
        path = training.latest_checkpoint(init_checkpoint) or tf.train.latest_checkpoint(
            init_checkpoint
        )
    if path is None or not tf.io.gfile.glob(path + "*"):
        raise UserError(
            f"train.init_checkpoint={init_checkpoint!r} holds no checkpoint; give phase 1's "
            "model_dir or a checkpoint path such as <model_dir>/checkpoints/ckpt-7038"
        )
    # Only the path checkpoint -> model -> inner_model (the weights): a compiled Keras model
    # also tracks its optimizer, which must not come along.
    weights_only = tf.train.Checkpoint(model=tf.train.Checkpoint(inner_model=model.inner_model))
    status = weights_only.restore(path)
    try:
        status.expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as error:
        detail = str(error).strip().splitlines()[0][:200]
        raise UserError(
            f"train.init_checkpoint {path} does not fit this model ({detail}); phase 1 and "
            "phase 2 need the same model.* shape and vocabulary"
        ) from None
    print(f"initialised weights from {path} (optimizer state starts fresh)", flush=True)


# ---- Evaluation ------------------------------------------------------------------------


def evaluate_and_print(model, strategy, config, eval_files, when):
    """Held-out masked-LM accuracy / loss and next-sentence accuracy, printed on one line."""
    results = model.evaluate(
        make_eval_dataset(strategy, config, eval_files),
        steps=config.eval.steps or None,
        return_dict=True,
        verbose=0,
    )
    print(
        f"held-out evaluation {when}: "
        f"masked_lm_accuracy={results['masked_lm_accuracy']:.4f} "
        f"masked_lm_loss={results['masked_lm_cross_entropy']:.4f} "
        f"next_sentence_accuracy={results['next_sentence_accuracy']:.4f}",
        flush=True,
    )
    return results


if __name__ == "__main__":
    flags_lib.define_flags()
    errors.run(main)
