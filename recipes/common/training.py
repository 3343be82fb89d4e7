"""Checkpointed `model.fit`, TensorBoard scalars and atomic export, shared by both recipes.

`train` runs `model.fit` in "epochs" of `checkpoint_every` optimizer steps over an endless,
deterministic input pipeline, and saves a checkpoint (model, optimizer slots, step counter)
after each. On start it restores the newest checkpoint in `model_dir` and asks the input
pipeline to skip the batches already consumed, so a restarted run continues exactly where
the last checkpoint stopped. A non-finite loss stops training before the next checkpoint
is written, so the last good checkpoint is never overwritten by diverged weights.
"""

import math
import os
import time
import uuid

import tensorflow as tf
import tf_keras

from recipes.common.errors import UserError

CHECKPOINT_SUBDIR = "checkpoints"


class TrainingDiverged(UserError):
    """The loss became NaN or Inf; the last good checkpoint is kept."""


def make_checkpoint_manager(model, directory, max_to_keep=3):
    """A CheckpointManager over the model and its optimizer (slots and step counter)."""
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    return tf.train.CheckpointManager(
        checkpoint, os.path.join(directory, CHECKPOINT_SUBDIR), max_to_keep=max_to_keep
    )


def latest_checkpoint(model_dir):
    """Path of the newest checkpoint under `model_dir`, or None."""
    return tf.train.latest_checkpoint(os.path.join(model_dir, CHECKPOINT_SUBDIR))


def restore(manager, model_dir=None):
    """Restores the newest checkpoint; returns the restored optimizer step (0 if none).

    The model and optimizer must already be built, so that a checkpoint of another model
    shape fails here with one line instead of deep inside training.
    """
    path = manager.latest_checkpoint
    if path is None:
        return 0
    try:
        manager.checkpoint.restore(path).assert_existing_objects_matched()
    except (ValueError, AssertionError, tf.errors.InvalidArgumentError) as error:
        detail = str(error).strip().splitlines()[0][:240]
        raise UserError(
            f"checkpoint {path} does not fit this model ({detail}); use a new "
            "--model_dir or the config it was trained with"
        ) from None
    step = int(manager.checkpoint.optimizer.iterations.numpy())
    print(f"restored {path} at step {step}", flush=True)
    return step


def build_optimizer_state(model):
    """Creates the optimizer's slots now (needed before restoring a checkpoint into them)."""
    model.optimizer.build(model.trainable_variables)


class _CheckpointEachEpoch(tf_keras.callbacks.Callback):
    """Saves after every epoch (= `checkpoint_every` steps) unless the loss is not finite."""

    def __init__(self, manager, first_step, steps_per_epoch):
        super().__init__()
        self._manager = manager
        self._first_step = first_step
        self._steps_per_epoch = steps_per_epoch
        self._epoch_start_step = first_step

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start_step = int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.model.stop_training = True
            self._diverged_at = self._epoch_start_step + batch + 1
            raise TrainingDiverged(
                f"loss became {float(loss)} at or before step {self._diverged_at}; stopped "
                f"without saving, the last good checkpoint is {self._manager.latest_checkpoint}; "
                "lower the learning rate or check the input data"
            )

    def on_epoch_end(self, epoch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        self._manager.save(checkpoint_number=step)


class TrainingScalars(tf_keras.callbacks.Callback):
    """TensorBoard scalars Keras does not write: learning rate, examples/s, and the model's
    own diagnostics (global gradient norm, per-layer trust ratios) when it exposes them."""

    def __init__(self, log_dir, global_batch_size, every_n_steps):
        super().__init__()
        self._writer = tf.summary.create_file_writer(os.path.join(log_dir, "train_scalars"))
        self._global_batch_size = global_batch_size
        self._every = max(1, every_n_steps)
        self._last_time = None
        self._last_step = None

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        now = time.perf_counter()
        if self._last_step is None:
            self._last_time, self._last_step = now, step
            return
        if step - self._last_step < self._every:
            return
        examples_per_second = (
            (step - self._last_step) * self._global_batch_size / (now - self._last_time)
        )
        with self._writer.as_default(step=step):
            tf.summary.scalar("learning_rate", current_learning_rate(self.model.optimizer))
            tf.summary.scalar("examples_per_second", examples_per_second)
            for name, value in sorted(diagnostics(self.model).items()):
                tf.summary.scalar(name, value)
        self._writer.flush()
        self._last_time, self._last_step = now, step


def current_learning_rate(optimizer):
    """The learning rate the optimizer applies at its current step, as a float."""
    learning_rate = optimizer.learning_rate
    if isinstance(learning_rate, tf_keras.optimizers.schedules.LearningRateSchedule):
        learning_rate = learning_rate(optimizer.iterations)
    return float(tf.convert_to_tensor(learning_rate).numpy())


def diagnostics(model):
    """Scalars the model and optimizer expose about the last step, by TensorBoard tag."""
    scalars = {}
    gradient_norm = getattr(model, "last_gradient_norm", None)
    if gradient_norm is not None:
        scalars["global_gradient_norm"] = float(tf.convert_to_tensor(gradient_norm).numpy())
    trust_ratios = getattr(model.optimizer, "trust_ratios", None)
    if callable(trust_ratios):
        for path, ratio in trust_ratios().items():
            scalars[f"trust_ratio/{path}"] = float(ratio)
    return scalars


def train(
    model,
    make_train_dataset,
    *,
    model_dir,
    total_steps,
    checkpoint_every,
    global_batch_size,
    log_every=None,
    callbacks=(),
    verbose=1,
):
    """Trains `model` (compiled, optimizer built) to `total_steps`, resuming from `model_dir`.

    Args:
      model: a compiled tf_keras model whose optimizer counts applied updates.
      make_train_dataset: `skip_steps -> dataset` of endless, deterministic global batches
        that starts after `skip_steps` batches (a dataset or a distributed dataset).
      model_dir: where checkpoints and summaries go (a worker's private dir off the chief).
      total_steps: optimizer steps to reach; must be a multiple of `checkpoint_every`.
      checkpoint_every: optimizer steps between checkpoints.
      global_batch_size: examples per optimizer step (for examples/s).
    Returns:
      The Keras History of this run (empty if the run was already complete).
    """
    if total_steps % checkpoint_every:
        lower = total_steps - total_steps % checkpoint_every
        raise UserError(
            f"train.steps={total_steps} is not a multiple of "
            f"train.checkpoint_every={checkpoint_every}; use train.steps={lower or checkpoint_every} "
            f"or {lower + checkpoint_every}, or another checkpoint_every"
        )
    manager = make_checkpoint_manager(model, model_dir)
    build_optimizer_state(model)
    first_step = restore(manager)
    if first_step % checkpoint_every:
        raise UserError(
            f"the checkpoint in {model_dir} is at step {first_step}, not a multiple of "
            f"train.checkpoint_every={checkpoint_every}; keep the checkpoint_every it "
            "was trained with"
        )
    if first_step >= total_steps:
        print(f"already trained to step {first_step} >= train.steps={total_steps}", flush=True)
        return tf_keras.callbacks.History()
    all_callbacks = [
        _CheckpointEachEpoch(manager, first_step, checkpoint_every),
        tf_keras.callbacks.TensorBoard(
            log_dir=model_dir, update_freq=log_every or checkpoint_every
        ),
        TrainingScalars(model_dir, global_batch_size, log_every or checkpoint_every),
        *callbacks,
    ]
    return model.fit(
        make_train_dataset(first_step),
        initial_epoch=first_step // checkpoint_every,
        epochs=total_steps // checkpoint_every,
        steps_per_epoch=checkpoint_every,
        callbacks=all_callbacks,
        verbose=verbose,
    )


def export_saved_model(export_dir, obj, signatures=None, options=None):
    """Saves a SavedModel that is either complete at `export_dir` or absent.

    It is written under a temporary sibling name and renamed into place; an existing export
    is moved aside first and deleted only after the new one is in place. (On gs:// a rename
    is a copy: the temporary name still keeps a half-written export out of `export_dir`.)
    """
    parent = os.path.dirname(export_dir.rstrip("/"))
    if parent:
        tf.io.gfile.makedirs(parent)
    temporary = f"{export_dir.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        tf.saved_model.save(obj, temporary, signatures=signatures, options=options)
    except BaseException:
        if tf.io.gfile.exists(temporary):
            tf.io.gfile.rmtree(temporary)
        raise
    previous = None
    if tf.io.gfile.exists(export_dir):
        previous = f"{export_dir.rstrip('/')}.old-{uuid.uuid4().hex[:8]}"
        tf.io.gfile.rename(export_dir, previous)
    tf.io.gfile.rename(temporary, export_dir)
    if previous:
        tf.io.gfile.rmtree(previous)
    print(f"exported SavedModel to {export_dir}", flush=True)
    return export_dir


def require_checkpoint(model_dir):
    """The newest checkpoint path, or a UserError saying that there is none yet."""
    path = latest_checkpoint(model_dir)
    if path is None:
        raise UserError(
            f"no checkpoint in {os.path.join(model_dir, CHECKPOINT_SUBDIR)}; train "
            "first (--mode=train) or point --model_dir at a trained run"
        )
    return path
