"""Checkpointed `model.fit`, TensorBoard scalars and atomic export, shared by both recipes.

`train` runs `model.fit` in chunks ("epochs") of `checkpoint_every` optimizer steps and
saves a checkpoint after each: the model, the optimizer (slots and step counter) and the
state of the layers' random generators (dropout). Each chunk reads a fresh input pipeline
`make_train_dataset(first_step_of_the_chunk)`, so an uninterrupted run and a run restarted
from any checkpoint consume exactly the same batches with the same augmentation draws
(even stateful random ops in the pipeline restart at the chunk). Gradient accumulation
happens inside one optimizer step, so a checkpoint never holds a partial accumulation.

Non-finite values never reach a checkpoint: a non-finite loss stops training at once
(unless a LossScaleOptimizer skips such steps: float16), and before each save every
variable is checked to be finite, so the last good checkpoint is never overwritten by
diverged weights. The checkpoint files are complete before `tf.train.CheckpointManager`
updates its `checkpoint` index file (written to a temporary name and renamed), so a
process killed while saving leaves the previous checkpoint as the latest one.
See docs/reliability.md for the guarantees and what is deterministic.
"""

import math
import os
import re
import time
import uuid

import tensorflow as tf
import tf_keras

from lamb_tf.accumulation import GRADIENT_NORM_LOG
from recipes.common import config as config_lib

from recipes.common.errors import UserError

CHECKPOINT_SUBDIR = "checkpoints"


class TrainingDiverged(UserError):
    """The loss became NaN or Inf; the last good checkpoint is kept."""


class WorkerLost(UserError):
    """Multi-worker: a collective failed because another worker died or became unreachable."""


# What a collective raises on the survivors when a worker dies (connection refused or reset,
# the coordination service's heartbeat timeout, CommunicationOptions.timeout_seconds).
_COLLECTIVE_FAILURES = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
)


def set_up_randomness(seed, deterministic=False):
    """Seeds Python, NumPy and TF, and makes tf_keras layers draw from checkpointable state.

    Call before building the model. With `enable_tf_random_generator` the dropout layers
    draw from `tf.random.Generator` variables, which `make_checkpoint_manager` saves, so a
    resumed run continues the dropout stream where the checkpoint left it (the default
    legacy stateful ops would restart it). `deterministic=True` also turns on TF op
    determinism (bitwise-reproducible runs on the same hardware and software; slower,
    e.g. tf.data runs a map with stateful random ops on one thread).
    """
    tf_keras.backend.experimental.enable_tf_random_generator()
    tf_keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()


def random_generators(model):
    """The `tf.random.Generator` of every random layer (dropout) of `model`, in layer order.

    tf_keras keeps these out of checkpoints on purpose (`BaseRandomLayer` exposes them to
    SavedModel only); training checkpoints need them for an exact resume. Creates them now
    if the layer has not run yet (tf_keras creates them lazily, which would be too late for
    a restore): call inside the strategy scope, as `build_optimizer_state` does.
    """
    generators = []
    for layer in model.submodules:
        state = getattr(layer, "_random_generator", None)  # tf_keras.backend.RandomGenerator
        if state is None or not hasattr(state, "_maybe_init"):
            continue
        state._maybe_init()  # pylint: disable=protected-access
        if getattr(state, "_generator", None) is not None:
            generators.append(state._generator)  # pylint: disable=protected-access
    return generators


def make_checkpoint_manager(model, directory, max_to_keep=3):
    """A CheckpointManager over the model, its optimizer (slots and step counter) and the
    layers' random-generator states."""
    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=model.optimizer, random_generators=random_generators(model)
    )
    # Create the lazily made save counter now, on every worker alike: made later inside
    # `fit` (a MultiWorkerMirroredStrategy scope) it would be a broadcast that only the
    # workers which had not restored would run, and the collectives would mismatch.
    checkpoint.save_counter  # pylint: disable=pointless-statement
    return tf.train.CheckpointManager(
        checkpoint, os.path.join(directory, CHECKPOINT_SUBDIR), max_to_keep=max_to_keep
    )


def latest_checkpoint(model_dir):
    """Path of the newest checkpoint under `model_dir`, or None."""
    return tf.train.latest_checkpoint(os.path.join(model_dir, CHECKPOINT_SUBDIR))


def restore(manager, restore_dir=None):
    """Restores the newest checkpoint of `restore_dir` (default: the manager's directory)
    into the manager's objects; returns the restored optimizer step (0 if none).

    The model and optimizer must already be built, so that a checkpoint of another model
    shape fails here with one line instead of deep inside training.
    """
    path = latest_checkpoint(restore_dir) if restore_dir else manager.latest_checkpoint
    if path is None:
        return 0
    try:
        manager.checkpoint.restore(path).assert_existing_objects_matched()
    except (ValueError, AssertionError, tf.errors.InvalidArgumentError) as error:
        detail = str(error).strip().splitlines()[0][:240]
        raise UserError(
            f"checkpoint {path} does not fit this model ({detail}); it was trained with "
            "other model.* settings or another vocabulary / number of classes: use the "
            "config and data it was trained with, or a new --model_dir"
        ) from None
    step = int(manager.checkpoint.optimizer.iterations.numpy())
    print(f"restored {path} at step {step}", flush=True)
    return step


def build_optimizer_state(model):
    """Creates the optimizer's slots and the layers' random generators now (needed before
    restoring a checkpoint into them); call inside the strategy scope."""
    model.optimizer.build(model.trainable_variables)
    random_generators(model)


def first_non_finite(variables):
    """Name of the first floating-point variable holding a NaN or Inf, or None."""
    for variable in variables:
        if variable.dtype.is_floating and not bool(
            tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(variable)))
        ):
            return variable.name
    return None


class _CheckpointEachEpoch(tf_keras.callbacks.Callback):
    """Saves after every epoch (= `checkpoint_every` steps) if the loss and every variable
    are finite; otherwise stops with a `TrainingDiverged` naming the step.

    With a dynamic LossScaleOptimizer (float16) a non-finite loss is not fatal: the
    optimizer skips that step (`_SkippedSteps` counts it); the variables are still checked.
    """

    def __init__(self, manager):
        super().__init__()
        self._manager = manager

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)) or _loss_scaled(self.model.optimizer):
            return
        self.model.stop_training = True
        raise TrainingDiverged(
            f"loss became {float(loss)} at step {self._step()}; stopped without saving, the "
            f"last good checkpoint is {self._manager.latest_checkpoint}; lower the learning "
            "rate or check the input data"
        )

    def on_epoch_end(self, epoch, logs=None):
        step = self._step()
        variables = list(self.model.variables) + list(self.model.optimizer.variables())
        bad = first_non_finite(variables)
        if bad is not None:
            raise TrainingDiverged(
                f"variable {bad} is not finite after step {step}; stopped without saving, "
                f"the last good checkpoint is {self._manager.latest_checkpoint}; lower the "
                "learning rate or check the input data"
            )
        self._manager.save(checkpoint_number=step)


def _loss_scaled(optimizer):
    return isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer) and bool(
        optimizer.dynamic
    )


class _SkippedSteps(tf_keras.callbacks.Callback):
    """float16: logs each step the LossScaleOptimizer skipped for non-finite gradients.

    A skipped step halves the dynamic loss scale (down to its floor of 1) and resets the
    growth counter to 0; an applied step raises the counter or, every `dynamic_growth_steps`,
    doubles the scale. So: a scale drop by 2^n means n skipped steps, and an unchanged scale
    with the counter at 0 one skipped step (exact with steps_per_execution=1).
    """

    def __init__(self, log_dir):
        super().__init__()
        self._log_dir = log_dir
        self._writer = None
        self._scale = None
        self.skipped = 0

    def on_train_begin(self, logs=None):
        if _loss_scaled(self.model.optimizer):
            self._scale = float(self.model.optimizer.loss_scale)
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(
                    os.path.join(self._log_dir, "train_scalars")
                )

    def on_train_batch_end(self, batch, logs=None):
        if self._scale is None:
            return
        scale = float(self.model.optimizer.loss_scale)
        if scale < self._scale:
            newly_skipped = round(math.log2(self._scale / scale))
        else:
            counter = int(self.model.optimizer.dynamic_counter)
            newly_skipped = int(scale == self._scale and counter == 0)
        if newly_skipped:
            self.skipped += newly_skipped
            step = int(self.model.optimizer.iterations.numpy())
            print(
                f"float16: non-finite gradients, step {step} skipped by the "
                f"LossScaleOptimizer (loss scale {self._scale:g} -> {scale:g}); "
                f"{self.skipped} step(s) skipped in this run",
                flush=True,
            )
            with self._writer.as_default(step=step):
                tf.summary.scalar("skipped_steps", self.skipped)
            self._writer.flush()
        self._scale = scale


# Testing hook (fault injection), documented in docs/reliability.md: when set, every
# training step prints "step N done" and then sleeps this many seconds, so that a test can
# SIGKILL the program in the middle of a chunk, between two checkpoints.
STEP_HOOK_ENV = "LAMB_TF_TEST_STEP_SECONDS"
# Testing hook: with this environment variable set, `export_saved_model` sleeps this many
# seconds between writing the temporary export and renaming it into place, so that a test
# can SIGKILL the program in the middle of an export.
EXPORT_HOOK_ENV = "LAMB_TF_TEST_EXPORT_SECONDS"


class _StepHookForTests(tf_keras.callbacks.Callback):
    def __init__(self, seconds):
        super().__init__()
        self._seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        print(f"step {int(self.model.optimizer.iterations.numpy())} done", flush=True)
        time.sleep(self._seconds)


class _StepCounterFromOptimizer(tf_keras.callbacks.Callback):
    """Starts Keras' per-fit batch counter at the optimizer step, so that TensorBoard's
    batch-level scalars use the true step across chunks and restarts (`fit` resets the
    private counter to 0; there is no public way to set it)."""

    def on_train_begin(self, logs=None):
        counter = self.model._train_counter  # pylint: disable=protected-access
        counter.assign(tf.cast(self.model.optimizer.iterations, counter.dtype))


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
            for name, value in sorted(diagnostics(self.model, logs).items()):
                tf.summary.scalar(name, value)
        self._writer.flush()
        self._last_time, self._last_step = now, step


def current_learning_rate(optimizer):
    """The learning rate the optimizer applies at its current step, as a float."""
    learning_rate = optimizer.learning_rate
    if isinstance(learning_rate, tf_keras.optimizers.schedules.LearningRateSchedule):
        learning_rate = learning_rate(optimizer.iterations)
    return float(tf.convert_to_tensor(learning_rate).numpy())


def diagnostics(model, logs=None):
    """Scalars about the last step, by TensorBoard tag: the global gradient norm that
    `GradientAccumulationModel` logs, and the optimizer's per-variable trust ratios."""
    scalars = {}
    if logs and GRADIENT_NORM_LOG in logs:
        scalars[GRADIENT_NORM_LOG] = float(logs[GRADIENT_NORM_LOG])
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
    data_files=None,
    restore_dir=None,
    config=None,
):
    """Trains `model` (compiled, optimizer built) to `total_steps`, resuming from `model_dir`.

    Args:
      model: a compiled tf_keras model whose optimizer counts applied updates.
      make_train_dataset: `skip_steps -> dataset` of endless, deterministic global batches
        that starts after `skip_steps` batches (a dataset or a distributed dataset);
        called once per chunk, so the same `skip_steps` must give the same batches.
      model_dir: where checkpoints and summaries go (a worker's private dir off the chief).
      total_steps: optimizer steps to reach; must be a multiple of `checkpoint_every`.
      checkpoint_every: optimizer steps between checkpoints.
      global_batch_size: examples per optimizer step (for examples/s).
      restore_dir: where to look for the checkpoint to resume from; default `model_dir`.
        Multi-worker: the chief's model_dir, for every worker (workers other than the chief
        write into private directories, but all must resume from the same step).
      config: the run's config; written to `model_dir/config.yaml` once the checkpoint in
        `model_dir` (if any) has been restored into the model, so that a run refused for a
        checkpoint of another shape leaves the trained run's config.yaml as it was.
      data_files: the training TFRecords (comma-separated globs); if given, a corrupt
        record stops training with a `UserError` naming the damaged file.
    Returns:
      The Keras History of this run (empty if the run was already complete).
    """
    if total_steps % checkpoint_every:
        lower = total_steps - total_steps % checkpoint_every
        raise UserError(
            f"train.steps={total_steps} is not a multiple of "
            f"train.checkpoint_every={checkpoint_every}; use "
            f"train.steps={lower or checkpoint_every} "
            f"or {lower + checkpoint_every}, or another checkpoint_every"
        )
    manager = make_checkpoint_manager(model, model_dir)
    build_optimizer_state(model)
    # Into the objects of the manager that saves: one Checkpoint object per process, alike
    # on every worker.
    first_step = restore(manager, restore_dir)
    if first_step % checkpoint_every:
        raise UserError(
            f"the checkpoint in {model_dir} is at step {first_step}, not a multiple of "
            f"train.checkpoint_every={checkpoint_every}; keep the checkpoint_every it "
            "was trained with"
        )
    if config is not None:
        config_lib.save_config(config, model_dir)
    if first_step >= total_steps:
        print(f"already trained to step {first_step} >= train.steps={total_steps}", flush=True)
        return tf_keras.callbacks.History()
    skipped_steps = _SkippedSteps(model_dir)
    history = tf_keras.callbacks.History()
    all_callbacks = [
        _StepCounterFromOptimizer(),
        skipped_steps,
        _CheckpointEachEpoch(manager),
        tf_keras.callbacks.TensorBoard(
            log_dir=model_dir, update_freq=log_every or checkpoint_every
        ),
        TrainingScalars(model_dir, global_batch_size, log_every or checkpoint_every),
        history,
        *callbacks,
    ]
    if os.environ.get(STEP_HOOK_ENV):
        all_callbacks.append(_StepHookForTests(float(os.environ[STEP_HOOK_ENV])))
    epochs = []
    for chunk_start in range(first_step, total_steps, checkpoint_every):
        # A fresh pipeline per chunk: an uninterrupted run and a run resumed from this
        # chunk's checkpoint read the same batches with the same augmentation draws.
        epoch = chunk_start // checkpoint_every
        if verbose:
            print(
                f"training steps {chunk_start + 1}-{chunk_start + checkpoint_every} of "
                f"{total_steps}",
                flush=True,
            )
        try:
            model.fit(
                make_train_dataset(chunk_start),
                initial_epoch=epoch,
                epochs=epoch + 1,
                steps_per_epoch=checkpoint_every,
                callbacks=all_callbacks,
                verbose=verbose,
            )
        except tf.errors.DataLossError as error:
            if data_files is None:
                raise
            raise UserError(describe_corrupt_data(data_files, error)) from None
        except _COLLECTIVE_FAILURES as error:
            if not isinstance(model.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
                raise
            last = latest_checkpoint(restore_dir or model_dir)
            raise WorkerLost(
                f"lost contact with another worker during training steps {chunk_start + 1}-"
                f"{chunk_start + checkpoint_every} ({_first_line(error)}); stopped, the last "
                f"checkpoint is {last}; restart every worker with the same command to resume "
                "from it"
            ) from None
        epochs.append(epoch)
    if skipped_steps.skipped:
        print(
            f"float16: {skipped_steps.skipped} step(s) were skipped for non-finite gradients "
            "in this run",
            flush=True,
        )
    history.epoch = epochs
    return history


def find_corrupt_tfrecord(file_patterns):
    """(path, records readable before the damage, TF's message) of the first TFRecord file
    matched by the comma-separated globs that cannot be read to its end, or None."""
    for pattern in file_patterns.split(","):
        for path in sorted(tf.io.gfile.glob(pattern.strip())):
            readable = 0
            try:
                for _ in tf.data.TFRecordDataset(path):
                    readable += 1
            except tf.errors.DataLossError as error:
                return path, readable, _first_line(error)
    return None


def describe_corrupt_data(file_patterns, error):
    """One line naming the damaged TFRecord file behind a DataLossError during training."""
    found = find_corrupt_tfrecord(file_patterns)
    if found is None:
        return (
            f"corrupt training data in {file_patterns} ({_first_line(error)}); check or "
            "re-create the TFRecord files"
        )
    path, readable, message = found
    return (
        f"corrupt TFRecord file {path}: unreadable after {readable} record(s) ({message}); "
        "re-create it (or remove it from the training files)"
    )


def _first_line(error):
    """The first informative line of TF's message (not "Graph execution error:" nor the
    "Detected at node" traceback), without graph-node prefix and op suffix, bounded."""
    lines = str(getattr(error, "message", error)).strip().splitlines()
    informative = [
        line
        for line in lines
        if line.strip()
        and not line[0].isspace()
        and not line.startswith(("Graph execution error", "Detected at node", "File "))
    ]
    message = (informative or lines or [""])[0]
    message = re.sub(r"\{\{[^}]*\}\}\s*", "", message)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", message)[:200]


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
    if os.environ.get(EXPORT_HOOK_ENV):
        print(f"export written to {temporary}", flush=True)
        time.sleep(float(os.environ[EXPORT_HOOK_ENV]))
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
