"""The Keras callbacks of the training loop: checkpoints, float16 skipped steps, and the
TensorBoard scalars Keras does not write itself."""

import math
import os
import time

import tensorflow as tf
import tf_keras
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.scalar import summary_v2 as scalar_summary

from lamb_tf import noise_scale
from recipes.common.errors import TrainingDiverged


def first_non_finite(variables):
    """Name of the first floating-point variable holding a NaN or Inf, or None.

    First one sum of every variable's sum: a NaN or Inf anywhere makes it NaN or Inf, so a
    finite sum proves every value finite, with one op per variable brought to the host in
    one read (19.5 instead of 28 ms over the tiny BERT's 184 variables with an `is_finite`
    flag per variable, docs/performance.md). Only a sum that is not finite (a NaN or Inf,
    or finite values overflowing it) has each variable checked, to name the first."""
    floating = [variable for variable in variables if variable.dtype.is_floating]
    if not floating:
        return None
    total = tf.add_n([tf.cast(tf.reduce_sum(variable), tf.float32) for variable in floating])
    if math.isfinite(float(total)):
        return None
    finite = tf.stack([tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(variable)))
                       for variable in floating]).numpy()
    return next((variable.name for variable, ok in zip(floating, finite) if not ok), None)


class CheckpointEachEpoch(tf_keras.callbacks.Callback):
    """Saves after every epoch (= `checkpoint_every` steps) if the loss and every variable
    are finite; otherwise stops with a `TrainingDiverged` naming the step.

    With a dynamic LossScaleOptimizer (float16) a non-finite loss is not fatal: the
    optimizer skips that step (`SkippedSteps` counts it); the variables are still checked.

    `asynchronous=True` writes each checkpoint with TensorFlow's async checkpoint: `save`
    copies the variables and returns, a thread of TensorFlow's writes the files and then
    the manager's index, so the index still never names an incomplete checkpoint. Anything
    that reads the index first waits for the write in flight (`manager.sync()`); at the end
    of `fit` the last write is waited for, and if it failed its error is raised here.
    """

    def __init__(self, manager, asynchronous=False):
        super().__init__()
        self._manager = manager
        self._options = tf.train.CheckpointOptions(
            experimental_enable_async_checkpoint=asynchronous)
        self._last_saved_step = None

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def _last_good_checkpoint(self):
        self._manager.sync()  # an asynchronous write in flight lands first
        return self._manager.latest_checkpoint

    def _last_good(self):
        checkpoint = self._last_good_checkpoint()
        return (f"the last good checkpoint is {checkpoint}" if checkpoint
                else "no checkpoint was saved before it")

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)) or loss_scaled(self.model.optimizer):
            return
        self.model.stop_training = True
        raise TrainingDiverged(
            f"loss became {float(loss)} at step {self._step()}; stopped without saving, "
            f"{self._last_good()}; lower the learning rate or check the input data"
        )

    def on_epoch_end(self, epoch, logs=None):
        step = self._step()
        variables = list(self.model.variables) + list(self.model.optimizer.variables())
        bad = first_non_finite(variables)
        if bad is not None:
            raise TrainingDiverged(
                f"variable {bad} is not finite after step {step}; stopped without saving, "
                f"{self._last_good()}; lower the learning rate or check the input data"
            )
        if not (self._manager.latest_checkpoint or "").endswith(f"-{step}"):  # SIGTERM saved it
            self._manager.save(checkpoint_number=step, options=self._options)
            self._last_saved_step = step

    def on_train_end(self, logs=None):
        saved, self._last_saved_step = self._last_saved_step, None
        if saved is None or self._last_good_checkpoint().endswith(f"-{saved}"):
            return
        if saved == self._step():  # the write failed; TF raises its error at the next save
            self._manager.save(checkpoint_number=saved, options=self._options)
            self._manager.sync()


def loss_scaled(optimizer):
    return isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer) and bool(
        optimizer.dynamic
    )


class SkippedSteps(tf_keras.callbacks.Callback):
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
        if loss_scaled(self.model.optimizer):
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
            write_scalars(self._writer, step, {"skipped_steps": self.skipped})
        self._scale = scale


class StepCounterFromOptimizer(tf_keras.callbacks.Callback):
    """Starts Keras' per-fit batch counter at the optimizer step, so that TensorBoard's
    batch-level scalars use the true step across chunks and restarts (`fit` resets the
    private counter to 0; there is no public way to set it)."""

    def on_train_begin(self, logs=None):
        counter = self.model._train_counter  # pylint: disable=protected-access
        counter.assign(tf.cast(self.model.optimizer.iterations, counter.dtype))


class TensorBoard(tf_keras.callbacks.TensorBoard):
    """Keras' TensorBoard callback, a step's scalars handed to it only on the steps it
    writes them (every `update_freq` steps), and the model and its train graph written at
    the first `fit` only.

    Keras decides inside each `tf.summary.scalar` of each step's logs, by an eager
    `record_if(step % update_freq == 0)`: on the main job's tiny BERT 5.8 ms of every step
    (benchmarks/loop_callbacks.py). This asks once per step, the same question of the same
    step counter (Keras' `_train_step`, the model's train counter), and leaves everything
    else to Keras. Keras also writes the graph at the start of every `fit` (about 180 ms
    each on the tiny BERT); the loop runs a `fit` per `CHUNKS_PER_FIT` chunks."""

    def on_train_batch_end(self, batch, logs=None):
        if self._should_write_train_graph or not (
                int(self._train_step.numpy()) % self.update_freq):
            super().on_train_batch_end(batch, logs)

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        self.write_graph = False  # written once


class TrainingScalars(tf_keras.callbacks.Callback):
    """TensorBoard scalars Keras does not write: learning rate, examples/s, and the model's
    own diagnostics (global gradient norm, per-layer trust ratios) when it exposes them.

    Written at the steps Keras writes its own batch scalars and the progress line prints:
    every multiple of `every_n_steps`, so in the recipes (`log_every` dividing
    `checkpoint_every`) at a chunk's last step, never at the next chunk's first. examples/s
    is over the steps since the last write (since the first step this callback saw, whose
    own time holds the tracing); a write with no step before it in the run has none."""

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
        if step % self._every:
            if self._last_step is None:
                self._last_time, self._last_step = now, step
            return
        scalars = {"learning_rate": current_learning_rate(self.model.optimizer)}
        if self._last_step is not None:
            scalars["examples_per_second"] = (
                (step - self._last_step) * self._global_batch_size / (now - self._last_time))
        write_scalars(self._writer, step, {**scalars, **diagnostics(self.model, logs)})
        self._last_time, self._last_step = now, step


def write_scalars(writer, step, scalars):
    """Writes `scalars` ({tag: float}) at `step` as one TensorBoard event: the Summary of
    one `tf.summary.scalar` per tag (TensorBoard's own `scalar_pb`), in one eager op.

    The recipes write about 50 scalars every `log_every` steps (the trust ratios); with
    one eager `tf.summary.scalar` each, `TrainingScalars` took 10.0 ms of every step of the
    main job's tiny BERT at `log_every` 5, and 1.6 ms this way (benchmarks/loop_callbacks.py,
    docs/performance.md). Keras' TensorBoard callback keeps a `record_if(step %
    update_freq == 0)` in force during fit, and these writes may fall on other steps:
    recorded regardless."""
    summary = summary_pb2.Summary()
    for tag, value in sorted(scalars.items()):
        summary.value.extend(scalar_summary.scalar_pb(tag, value).value)
    with writer.as_default(step=step), tf.summary.record_if(True):
        tf.summary.experimental.write_raw_pb(summary.SerializeToString())
    writer.flush()


class ProgressLine(tf_keras.callbacks.Callback):
    """One console line every `every` optimizer steps (and at the last step): the step,
    every scalar of the step's logs by name (Keras' `fit` logs: the loss and metrics are
    means over the steps of the current checkpoint chunk so far, other scalars such as
    `global_gradient_norm` the step's own), the time per step and the time left. Plain
    lines (no redrawn progress bar), so a log file reads like the terminal.

    Seconds per step are timed from the end of this process's first step, so that its
    tracing and compiling (seconds, once) do not inflate every figure and the time left;
    a line at that first step itself says that its time includes them."""

    def __init__(self, total_steps, every):
        super().__init__()
        self._total, self._every = total_steps, max(1, every)
        self._start = self._first_step_end = None  # (step, time) in this process

    def on_train_begin(self, logs=None):
        if self._start is None:  # the first chunk of this process
            self._start = (int(self.model.optimizer.iterations.numpy()), time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        now = time.perf_counter()
        if self._first_step_end is None:
            self._first_step_end = (step, now)
        if step % self._every and step != self._total:
            return
        first_step, first_time = self._first_step_end
        timing = ""
        if step == first_step:  # only the first step timed so far: tracing included
            first_step, first_time = self._start
            timing = " (with tracing)"
        per_step = (now - first_time) / max(1, step - first_step)
        scalars = " ".join(
            f"{name}={_scalar_text(name, float(value))}"
            for name, value in (logs or {}).items()
            if _is_scalar(value)
        )
        print(
            f"step {step}/{self._total}  {scalars}  {_step_time(per_step)}/step{timing}, "
            f"{_duration(per_step * (self._total - step))} left",
            flush=True,
        )


def _scalar_text(name, value):
    """Four figures; a gradient-noise-scale estimate that is not a positive number is no
    scale yet (|G|² or tr(Σ) still below its noise), as the run's final line says."""
    if name == noise_scale.NOISE_SCALE_LOG and not noise_scale.is_measured(value):
        return "not_yet"
    return f"{value:.4g}"


def _step_time(seconds):
    """`1.23 s` from a second up, three figures of milliseconds below (`420 ms`, `42.0 ms`,
    `4.20 ms`), so that a fast recipe's steps do not all read `0.00 s`."""
    milliseconds = seconds * 1000
    if milliseconds >= 999.5:  # would read `1000 ms`
        return f"{seconds:.2f} s"
    decimals = 0 if milliseconds >= 99.95 else 1 if milliseconds >= 9.995 else 2
    return f"{milliseconds:.{decimals}f} ms"


def _duration(seconds):
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{seconds:02d}s"


class LastLogs(tf_keras.callbacks.Callback):
    """Keeps the scalars of the last training step's logs on `history.last_logs` (the
    driver writes them to results.json)."""

    def __init__(self, history):
        super().__init__()
        self._history = history

    def on_train_batch_end(self, batch, logs=None):
        self._history.last_logs = {
            name: float(value) for name, value in (logs or {}).items() if _is_scalar(value)
        }


def current_learning_rate(optimizer):
    """The learning rate the optimizer applies at its current step, as a float."""
    learning_rate = optimizer.learning_rate
    if isinstance(learning_rate, tf_keras.optimizers.schedules.LearningRateSchedule):
        learning_rate = learning_rate(optimizer.iterations)
    return float(tf.convert_to_tensor(learning_rate).numpy())


def diagnostics(model, logs=None):
    """Scalars about the last step, by TensorBoard tag: every scalar the training step adds
    to its logs besides the compiled loss and metrics (e.g. `global_gradient_norm` of
    `GradientAccumulationModel`), and the optimizer's per-variable trust ratios."""
    compiled = set(model.metrics_names)
    scalars = {
        name: float(value)
        for name, value in (logs or {}).items()
        if name not in compiled and _is_scalar(value)
    }
    trust_ratios = getattr(getattr(model.optimizer, "inner_optimizer", model.optimizer),
                           "trust_ratios", None)
    if callable(trust_ratios):
        for path, ratio in trust_ratios().items():
            scalars[f"trust_ratio/{path}"] = float(ratio)
    return scalars


def _is_scalar(value):
    try:
        return tf.convert_to_tensor(value).shape.rank == 0
    except (TypeError, ValueError):
        return False
