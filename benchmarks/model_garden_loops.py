"""Model Garden's side of benchmarks/recipe_throughput.py: the recipe's model trained by
Model Garden's own experiment, task, input pipeline, LAMB and `base_trainer.Trainer`.

Each `*_side(config, task)` takes the recipe's config and its prepared `Task` (after
`task.prepare`) and returns (train(steps), optimizer_update(),
run_with_checkpoints(steps_per_chunk, chunks, directory, build_pipeline=False,
async_checkpoint=False), parameter count):

  train(steps)   Orbit's `Trainer.train(steps)`: `steps` training steps in Model Garden's
                 in-graph loop (what `train_lib.run_experiment` runs `steps_per_loop` steps
                 at a time with), one micro-batch per update (its trainer does not
                 accumulate);
  update()       one `apply_gradients` of fixed gradients by Model Garden's optimizer to
                 its model's variables, in a `tf.function`;
  run_with_checkpoints(steps_per_chunk, chunks, directory, build_pipeline=False,
                       async_checkpoint=False)
                 Model Garden's training loop as `train_lib.run_experiment` runs it in
                 "train" mode: an Orbit `Controller` over the same trainer, `chunks` loops
                 of `steps_per_chunk` steps, a checkpoint (`tf.train.CheckpointManager`)
                 after each, in `directory` (fresh: nothing is restored), and the
                 training summaries after each loop in `directory/train`
                 (`summary_interval` = a loop), as `run_experiment` writes them by default
                 and as the recipe's loop writes its TensorBoard scalars every `log_every`
                 (= a chunk, there) steps. No extra checkpoint at completion (the last
                 loop's is that step's), as in the recipe's loop. The trainer's input
                 iterator is kept from run to run; with `build_pipeline` the run first
                 builds its input pipeline as `Trainer.__init__` does once per real run,
                 so it also pays the pipeline's start (the iterator made, its first
                 batch), as each run of the recipe's loop does. With `async_checkpoint`
                 Orbit writes the checkpoints on a background thread
                 (`enable_async_checkpointing`), as the recipe's loop does with
                 `train.async_checkpoint`.

The optimizer is Model Garden's `lamb` (`official.modeling.optimization.lamb.LAMB`) with
the recipe's betas, epsilon, weight decay, exclusions and global clipnorm at a constant
learning rate (no warmup): the recipe's schedule is a few scalar ops per step either way.
"""
import sys

if __name__ == "__main__":  # run alone it would do nothing: say what to run instead,
    # before TensorFlow's start-up lines (the import below)
    print("error: benchmarks/model_garden_loops.py is a module of the benchmark scripts, used by "
          "recipe_throughput.py and step_after_pause.py; run one of those (--help lists its flags)",
          file=sys.stderr)
    sys.exit(2)

import contextlib  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import tensorflow as tf  # noqa: E402

from lamb_tf import exclusions  # noqa: E402
from recipes.bert import input as bert_input  # noqa: E402
from recipes.common import optimizer as optimizer_lib  # noqa: E402


def update_function(optimizer, variables):
    """One `apply_gradients` of fixed gradients (scale 1e-3) to `variables`, traced once."""
    gradients = [tf.constant(1e-3, dtype=v.dtype, shape=v.shape) for v in variables]

    @tf.function
    def update():
        optimizer.apply_gradients(zip(gradients, variables))

    return update


def parameter_count(variables):
    return sum(int(v.shape.num_elements()) for v in variables)


def lamb_trainer_override(optimizer, exclude_from_weight_decay,
                          exclude_from_layer_adaptation=None):
    """The `trainer` section: one step per loop, Model Garden's LAMB with the recipe's
    hyperparameters at the recipe's peak learning rate, constant."""
    return {
        "train_steps": 10**9, "steps_per_loop": 1,
        "optimizer_config": {
            "optimizer": {"type": "lamb", "lamb": {
                "beta_1": optimizer.beta_1, "beta_2": optimizer.beta_2,
                "epsilon": optimizer.epsilon,
                "weight_decay_rate": optimizer.weight_decay_rate,
                "exclude_from_weight_decay": exclude_from_weight_decay,
                # None: Model Garden's LAMB falls back to the weight-decay exclusions
                "exclude_from_layer_adaptation": exclude_from_layer_adaptation,
                "global_clipnorm": optimizer.global_clipnorm}},
            "learning_rate": {"type": "constant",
                              "constant": {"learning_rate": optimizer.learning_rate}},
            "warmup": {"type": None},
        },
    }


def runtime_override(config):
    """float32 (the benchmark refuses other precisions), and XLA as the recipe's config:
    Model Garden's Trainer compiles its step with XLA only on GPUs with `enable_xla`."""
    return {"enable_xla": config.runtime.jit_compile, "mixed_precision_dtype": "float32"}


def train_experiment(experiment, override):
    """(train(steps), update(), run_with_checkpoints(steps_per_chunk, chunks, directory),
    parameter count) of Model Garden's `experiment` with `override`, driven by its own
    `base_trainer.Trainer`; one training step is run first (it builds the model's layers
    that are made on the first call)."""
    import orbit
    params, task, model, optimizer, trainer = _trainer(experiment, override)

    def train(steps):
        logs = trainer.train(tf.constant(steps, tf.int32))
        tf.nest.map_structure(lambda t: getattr(t, "numpy", lambda: t)(), logs)

    replaced = []  # iterators replaced by `build_pipeline`: deleted at exit, not in a run

    def run_with_checkpoints(steps_per_chunk, chunks, directory, build_pipeline=False,
                             async_checkpoint=False):
        """Orbit's `Controller` over `chunks` loops of `steps_per_chunk` steps, a checkpoint
        and the training summaries after each (written on a background thread with
        `async_checkpoint`, Orbit's `enable_async_checkpointing`, as the recipe's
        `train.async_checkpoint`); returns the (begin, end) wall times of every loop
        (`Trainer.train`)."""
        loops = []

        def timed_train(num_steps):  # what the Controller calls once per loop
            begin = time.perf_counter()
            logs = type(trainer).train(trainer, num_steps)
            tf.nest.map_structure(lambda t: getattr(t, "numpy", lambda: t)(), logs)
            loops.append((begin, time.perf_counter()))
            return logs

        if build_pipeline:
            replaced.append(trainer._train_iter)  # pylint: disable=protected-access
            trainer.train_dataset = trainer.distribute_dataset(
                task.build_inputs, params.task.train_data)
        manager = tf.train.CheckpointManager(
            trainer.checkpoint, directory, max_to_keep=params.trainer.max_to_keep,
            step_counter=trainer.global_step, checkpoint_interval=steps_per_chunk,
            init_fn=trainer.initialize)
        # Orbit prints a line per loop and per checkpoint; the benchmark prints its tables
        trainer.train = timed_train
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                controller = orbit.Controller(global_step=trainer.global_step,
                                              trainer=trainer, steps_per_loop=steps_per_chunk,
                                              checkpoint_manager=manager,
                                              enable_async_checkpointing=async_checkpoint,
                                              summary_dir=os.path.join(directory, "train"),
                                              summary_interval=steps_per_chunk)
                controller.train(int(trainer.global_step.numpy()) + steps_per_chunk * chunks,
                                 checkpoint_at_completion=False)
        finally:
            del trainer.train  # the class's own again
        return loops

    # Model Garden's BERT pretrainer makes its heads (the next-sentence head's dense layers,
    # the masked-LM head's) on its first call: `build_model` leaves 39 of its 48 variables.
    # One training step builds them all, so that the update times the whole model's.
    train(1)
    update = update_function(optimizer, model.trainable_variables)
    return train, update, run_with_checkpoints, parameter_count(model.trainable_variables)


def _trainer(experiment, override):
    """(params, task, model, optimizer, trainer): Model Garden's `experiment` with
    `override` and its own `base_trainer.Trainer`."""
    from official.common import registry_imports  # noqa: F401  (Model Garden's experiments)
    from official.core import base_trainer, exp_factory, task_factory

    params = exp_factory.get_exp_config(experiment)
    params.override(override, is_strict=True)  # a misspelt key is an error
    task = task_factory.get_task(params.task)
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    trainer = base_trainer.Trainer(params, task, model=model, optimizer=optimizer,
                                   train=True, evaluate=False)
    return params, task, model, optimizer, trainer


def bert_side(config, task):
    """Model Garden's `bert/pretraining` with the recipe's encoder sizes and TFRecords.

    Its next-sentence head has its own `inner_dim` dense layer (hidden x hidden more
    parameters); the recipe's reuses the encoder's pooler. Its reader is the recipe's own
    (`BertPretrainDataLoader`) with the recipe's shuffle buffer."""
    model, data = config.model, config.data
    return train_experiment("bert/pretraining", {
        "runtime": runtime_override(config),
        "task": {
            "model": {
                "encoder": {"type": "bert", "bert": {
                    "vocab_size": task.vocab_size, "hidden_size": model.hidden_size,
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
            "train_data": {"input_path": task.data.train_files, "seq_length": data.seq_length,
                           "max_predictions_per_seq": data.max_predictions_per_seq,
                           "global_batch_size": config.train.micro_batch_size,
                           "use_next_sentence_label": True, "seed": config.train.seed,
                           # the recipe's reader shuffles this many records (Model
                           # Garden's default is 100): the same pipeline on both sides
                           "shuffle_buffer_size": bert_input.SHUFFLE_BUFFER_SIZE},
        },
        "trainer": lamb_trainer_override(config.optimizer,
                                         list(exclusions.BERT_EXCLUDE_PATTERNS)),
    })


def resnet_model_override(config):
    """`task.model` and `task.losses` of `resnet_imagenet` for the recipe's network and loss.

    num_classes: Model Garden has no label offset, its parser keeps `image/class/label` as
    written; the recipe subtracts `data.label_offset` (1 for the converter's labels
    1..num_classes, 0 = background). So Model Garden gets num_classes + label_offset
    classes (11 for the digits), every written label is in range, and class 0 is never a
    target: Model Garden's own 1001-class ImageNet setup. Its head has one more output per
    offset label (final channels + 1 parameters each) and smooths labels over those too.
    """
    model, data = config.model, config.data
    return {
        "model": {
            "num_classes": data.num_classes + data.label_offset,
            "input_size": [data.image_size, data.image_size, 3],
            "backbone": {"type": "resnet", "resnet": {
                "model_id": model.depth, "depth_multiplier": model.depth_multiplier}},
            "norm_activation": {"norm_momentum": model.norm_momentum,
                                "norm_epsilon": model.norm_epsilon, "use_sync_bn": False},
            "dropout_rate": model.dropout_rate,
        },
        # no L2 loss: weight decay is LAMB's, as in the recipe (resnet_imagenet has 1e-4)
        "losses": {"l2_weight_decay": 0.0, "one_hot": True,
                   "label_smoothing": config.train.label_smoothing},
    }


def resnet_side(config, task):
    """Model Garden's `resnet_imagenet` with the recipe's ResNet, images and TFRecords."""
    data = config.data
    train_data = {
        "input_path": task.data.train_pattern,
        "global_batch_size": config.train.micro_batch_size, "dtype": "float32",
        "aug_rand_hflip": data.random_flip, "aug_crop": True,
        # not passed to the Parser by Model Garden's task (tf-models-official 2.20): its
        # crops take 8-100% of the area whatever this says
        "crop_area_range": [data.crop_area_min, 1.0],
        "decode_jpeg_only": data.decode_jpeg_only,
        "shuffle_buffer_size": data.shuffle_buffer_size, "seed": config.train.seed,
    }
    decay_exclusions = optimizer_lib.weight_decay_exclusions(
        config.optimizer, task.default_exclude_from_weight_decay)
    return train_experiment("resnet_imagenet", {
        "runtime": runtime_override(config),
        "task": {**resnet_model_override(config), "train_data": train_data},
        "trainer": lamb_trainer_override(config.optimizer, decay_exclusions,
                                         config.optimizer.exclude_from_layer_adaptation),
    })
