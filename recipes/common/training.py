"""The fit loop: `model.fit` in checkpoint chunks, resumable, stoppable, shared by every recipe.

`train` runs `model.fit` in chunks ("epochs") of `checkpoint_every` optimizer steps and
saves a checkpoint after each (recipes.common.checkpoints). One `fit` and one input
iterator `make_train_dataset(start, end)` run through up to `CHUNKS_PER_FIT` chunks (a run
resumed mid-chunk first finishes that chunk in a `fit` of its own), so the first step of a
chunk waits for no new `fit` or pipeline. The dataset makes each chunk's batches as a
pipeline made afresh at the chunk would (`recipes.common.task.train_dataset`), so an
uninterrupted run and a run restarted from any checkpoint consume exactly the same batches
with the same augmentation draws. Gradient accumulation happens inside one optimizer step,
so a checkpoint never holds a partial accumulation.

Each `fit`'s input iterator is deleted on a thread of its own once the `fit` returns, not in
`fit` itself: with tf.data's autotuning on, deleting an iterator sometimes waits until the
autotuning thread's next scheduled optimisation (up to a minute; 15.8 s in 2 of 8 deletions
of the tiny BERT's pipeline, none with autotuning off: benchmarks/input_teardown.py,
docs/performance.md). The deletion releases Python's lock while it waits, so the next
`fit`, the evaluation and the export go on meanwhile; the process waits for it at exit.
The driver does the same with the evaluation's iterator (`input_iterator_deleted_in_background`).

Non-finite values never reach a checkpoint: a non-finite loss stops training at once
(unless a LossScaleOptimizer skips such steps: float16), and before each save every
variable is checked to be finite. SIGTERM (a preemptible TPU VM or cloud instance being
reclaimed) saves a checkpoint of the current step and stops with `Preempted`; the rerun
resumes from that step (recipes/common/preemption.py). With `async_checkpoint` the files
are written on TensorFlow's own thread (`callbacks.CheckpointEachEpoch`), and every write
has landed when a `fit` ends. See docs/reliability.md for the guarantees.
"""

import contextlib
import threading

import tensorflow as tf
import tf_keras

from recipes.common import callbacks as callbacks_lib
from recipes.common import config as config_lib
from recipes.common import corrupt_data, fault_injection, preemption, schema
from recipes.common.task import checkpoint_chunks
from recipes.common.checkpoints import (  # noqa: F401  (also this module's API, for callers)
    CHECKPOINT_SUBDIR,
    build_optimizer_state,
    latest_checkpoint,
    make_checkpoint_manager,
    random_generators,
    require_checkpoint,
    restore,
)
from recipes.common.errors import (  # noqa: F401
    Preempted,
    TrainingDiverged,
    UserError,
    WorkerLost,
)
from recipes.common.export import export_saved_model  # noqa: F401
from recipes.common.fault_injection import EXPORT_HOOK_ENV, STEP_HOOK_ENV  # noqa: F401

# What a collective raises on the survivors when a worker dies (connection refused or reset,
# the coordination service's heartbeat timeout, CommunicationOptions.timeout_seconds).
_COLLECTIVE_FAILURES = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
)
# Checkpoint chunks per `fit` call: each call builds a dataset of this many chunk pipelines.
CHUNKS_PER_FIT = 32


def set_up_randomness(seed, deterministic=False):
    """Seeds Python, NumPy and TF, and makes tf_keras layers draw from checkpointable state.

    Call before building the model. With `enable_tf_random_generator` the dropout layers
    draw from `tf.random.Generator` variables, which the checkpoints save, so a resumed run
    continues the dropout stream where the checkpoint left it (the default legacy stateful
    ops would restart it). `deterministic=True` also turns on TF op determinism
    (bitwise-reproducible runs on the same hardware and software; slower).
    """
    tf_keras.backend.experimental.enable_tf_random_generator()
    tf_keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()


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
    async_checkpoint=False,
):
    """Trains `model` (compiled) to `total_steps`, resuming from `model_dir`. Args:
      model: a compiled tf_keras model whose optimizer counts applied updates.
      make_train_dataset: `(start, end) -> dataset` (or distributed dataset) whose first
        `end - start` global batches are those of optimizer steps `start` + 1 to `end`;
        endless (with a dataset exactly as long as its `fit`, the BERT recipe trained to
        other weights on the same batches); called once per `fit` (see the module
        docstring); the batch of a step must not depend on where the run started.
      model_dir: where checkpoints and summaries go (a worker's private dir off the chief).
      total_steps: optimizer steps to reach; must be a multiple of `checkpoint_every`.
      checkpoint_every: optimizer steps between checkpoints.
      global_batch_size: examples per optimizer step (for examples/s).
      verbose: print a progress line every `log_every` steps (0: silent).
      log_every: optimizer steps between TensorBoard scalars (default: checkpoint_every).
      restore_dir: where to find the checkpoint to resume from (default `model_dir`;
        multi-worker: the chief's model_dir, for every worker).
      config: the run's config; written to `model_dir/config.yaml` once the first chunk
        of this run is checkpointed, or when there is nothing left to train (a run stopped
        before, by bad data, a NaN or a checkpoint of another shape, leaves it as it was).
      data_files: the training TFRecords (comma-separated globs); if given, a corrupt
        record, or a file that disappears while training, stops training with a
        `UserError` naming the file.
      async_checkpoint: write each chunk's checkpoint on TensorFlow's background thread
        (`callbacks.CheckpointEachEpoch`); every checkpoint is written before `train`
        returns or raises.
    Returns the Keras History of this run (empty if already complete); `history.last_logs`
    holds the scalars of the last step's logs.
    """
    manager, first_step = _resume(model, model_dir, total_steps, checkpoint_every, restore_dir)
    history = tf_keras.callbacks.History()
    history.last_logs = {}
    if first_step >= total_steps:
        print(f"already trained to step {first_step} of train.steps={total_steps}: nothing left "
              "to train (a larger train.steps trains it further)", flush=True)
        if config is not None:
            config_lib.save_config(config, model_dir)
        return history
    every = log_every or checkpoint_every
    if verbose:  # one plain line per `every` steps instead of Keras' progress bar
        callbacks = [*callbacks, callbacks_lib.ProgressLine(total_steps, every)]
    if config is not None:  # once the first chunk of this run is checkpointed
        callbacks = [*callbacks, _SaveConfigOnce(config, model_dir, manager)]
    loop = ChunkLoop(model, manager, history, model_dir, global_batch_size, every, callbacks,
                     async_checkpoint=async_checkpoint)
    with preemption.StopOnSigterm() as stop:
        loop.preemption = preemption.make_preemption(model, manager, stop, model_dir)
        with contextlib.closing(loop.preemption):
            _fit_all(loop, make_train_dataset, first_step, total_steps, checkpoint_every,
                     data_files, restore_dir or model_dir)
    loop.report_skipped()
    return history


def _fit_all(loop, make_train_dataset, first_step, total_steps, checkpoint_every, data_files,
             checkpoint_dir):
    """The fits of `train`, from `first_step` on; a stopped, lost or starved one raised as
    its one-line error."""
    model = loop.model
    for fit_start, fit_end in _fits(first_step, total_steps, checkpoint_every):
        try:
            loop.fit_chunks(make_train_dataset(fit_start, fit_end), fit_start, fit_end,
                            checkpoint_every)
        except tf.errors.DataLossError as error:
            if data_files is None:
                raise
            raise UserError(corrupt_data.describe_corrupt_data(data_files, error)) from None
        except tf.errors.NotFoundError as error:
            if data_files is None:
                raise
            raise UserError(corrupt_data.describe_missing_data(
                data_files, error, latest_checkpoint(checkpoint_dir))) from None
        except _COLLECTIVE_FAILURES as error:
            raise _worker_lost(model, error, loop.chunk or (fit_start, fit_end), checkpoint_dir)
        except ValueError as error:  # Keras: no step at all in an epoch
            if "Empty logs" not in str(error):
                raise
            raise _data_ended(model, fit_end) from None
        loop.preemption.raise_if_stopped()
        # Keras only logs it; a callback that stops `fit` leaves stop_training set instead
        if int(model.optimizer.iterations.numpy()) < fit_end and not model.stop_training:
            raise _data_ended(model, fit_end)


def _resume(model, model_dir, total_steps, checkpoint_every, restore_dir):
    """(the CheckpointManager, the step restored from `restore_dir` or 0)."""
    schema.check_steps(total_steps, checkpoint_every)
    manager = make_checkpoint_manager(model, model_dir)
    build_optimizer_state(model)
    # Into the objects of the manager that saves: one Checkpoint object per process.
    first_step = restore(manager, restore_dir)
    return manager, first_step


def _fits(first_step, total_steps, checkpoint_every):
    """(start, end) of each `fit`: a chunk left unfinished by SIGTERM alone (its epoch is
    shorter), then up to `CHUNKS_PER_FIT` whole chunks at a time."""
    start = first_step
    if start % checkpoint_every and start < total_steps:
        end = min(total_steps, start - start % checkpoint_every + checkpoint_every)
        yield start, end
        start = end
    while start < total_steps:
        end = min(total_steps, start + CHUNKS_PER_FIT * checkpoint_every)
        yield start, end
        start = end


class _SaveConfigOnce(tf_keras.callbacks.Callback):
    """Writes `model_dir/config.yaml` at the end of this run's first chunk, once the
    chunk's checkpoint is written (a run that diverged or failed before it leaves the file
    as it was)."""

    def __init__(self, config, model_dir, manager):
        super().__init__()
        self._config, self._model_dir, self._manager = config, model_dir, manager

    def on_epoch_end(self, epoch, logs=None):
        if self._config is not None:
            self._manager.sync()  # an asynchronous checkpoint write lands first
            config_lib.save_config(self._config, self._model_dir)
            self._config = None


class ChunkLoop:
    """The callbacks of one `train` call and its `fit` calls (one epoch per chunk).

    `train` makes one; benchmarks/loop_callbacks.py makes its own to time these callbacks.
    Set `preemption` (a Keras callback) before `fit_chunks`."""

    def __init__(self, model, manager, history, model_dir, global_batch_size, every, extra,
                 async_checkpoint=False):
        self.model, self.manager, self.history, self.preemption = model, manager, history, None
        self.skipped_steps = callbacks_lib.SkippedSteps(model_dir)
        self.chunk = None  # (start, end) of the chunk in progress, for error messages
        self._chunks = {}  # epoch -> (start, end) of the current `fit`
        self.callbacks = [
            tf_keras.callbacks.LambdaCallback(
                on_epoch_begin=lambda epoch, logs: setattr(self, "chunk", self._chunks[epoch])),
            callbacks_lib.StepCounterFromOptimizer(),
            self.skipped_steps,
            callbacks_lib.CheckpointEachEpoch(manager, asynchronous=async_checkpoint),
            callbacks_lib.TensorBoard(log_dir=model_dir, update_freq=every),
            callbacks_lib.TrainingScalars(model_dir, global_batch_size, every),
            callbacks_lib.LastLogs(history),
            history,
            *extra,
        ]
        hook = fault_injection.step_hook()
        if hook is not None:
            self.callbacks.append(hook)
        self.epochs = []

    def fit_chunks(self, dataset, start, end, checkpoint_every):
        """One `fit` over steps `start` + 1 to `end`: one epoch per checkpoint chunk."""
        chunks = list(checkpoint_chunks(start, end, checkpoint_every))
        first = len(self.epochs)
        self._chunks = dict(enumerate(chunks, start=first))
        try:
            with input_iterator_deleted_in_background(self.model, "train_function"):
                self.model.fit(
                    dataset,
                    initial_epoch=first,
                    epochs=first + len(chunks),
                    steps_per_epoch=chunks[0][1] - chunks[0][0],  # the others are no longer
                    callbacks=self.callbacks + [self.preemption],
                    verbose=0,
                )
        finally:  # an asynchronous checkpoint write lands before anything reads the index
            self.manager.sync()
        self.epochs.extend(range(first, first + len(chunks)))
        self.history.epoch = self.epochs

    def report_skipped(self):
        if self.skipped_steps.skipped:
            print(
                f"float16: {self.skipped_steps.skipped} step(s) were skipped for non-finite "
                "gradients in this run",
                flush=True,
            )


@contextlib.contextmanager
def input_iterator_deleted_in_background(model, function_name):
    """Within it, the input iterator of `model.fit` (`function_name="train_function"`) or
    `model.evaluate` (`"test_function"`) is deleted on a thread of its own after the call
    instead of inside it (see the module docstring); Keras' own function is put back."""
    make_function = {"train_function": model.make_train_function,
                     "test_function": model.make_test_function}[function_name]
    function = KeepsItsIterator(make_function())
    setattr(model, function_name, function)  # what fit / evaluate call (Keras reuses it)
    try:
        yield
    finally:
        setattr(model, function_name, function.function)
        function.delete_iterator_in_background()


class KeepsItsIterator:
    """A Keras train or test function that keeps the input iterator `fit` or `evaluate`
    passes it, so that the iterator outlives the call and `delete_iterator_in_background`
    deletes it."""

    def __init__(self, function):
        self.function, self.iterator = function, None

    def __call__(self, iterator):
        self.iterator = iterator
        return self.function(iterator)

    def delete_iterator_in_background(self):
        """Drops the last reference to the iterator on a new (non-daemon) thread."""
        held, self.iterator = [self.iterator], None
        threading.Thread(target=held.clear, name="delete the input iterator").start()


def _data_ended(model, fit_end):
    """The UserError of training data that ended before step `fit_end` (Keras stops `fit`
    with a line in tensorflow.log, and a `fit` of no step at all with a ValueError)."""
    reached = int(model.optimizer.iterations.numpy())
    return UserError(
        f"the training data ended before step {fit_end} (at step {reached}): a recipe's "
        "train_replica_dataset must be endless (a run trains train.steps steps, whatever the "
        "data's size); put .repeat() before its .batch(...)")


def _worker_lost(model, error, chunk, checkpoint_dir):
    if not isinstance(model.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return error
    return WorkerLost(
        f"lost contact with another worker during training steps {chunk[0] + 1}-{chunk[1]} "
        f"({corrupt_data.first_line(error)}); stopped, the last checkpoint is "
        f"{latest_checkpoint(checkpoint_dir)}; restart every worker with the same command to "
        "resume from it"
    )
