"""Preemption: when the process is told to stop (SIGTERM), a checkpoint of the current step.

A preemptible TPU VM or cloud instance gets SIGTERM some seconds before it is reclaimed.
While training runs, SIGTERM only sets a flag (`StopOnSigterm`); what happens next depends
on the strategy (`make_preemption`):

- `tf.distribute.MultiWorkerMirroredStrategy`: TF's
  `tf.distribute.experimental.PreemptionCheckpointHandler`. The worker that got SIGTERM
  tells the others through the coordination service; all of them agree on a step (the one
  after the next), save that step's checkpoint together and stop. A flag on one worker
  alone would stop that worker and leave the others waiting in a collective.
- Any other strategy (one process; TPUStrategy), and MultiWorkerMirroredStrategy on a
  Google Cloud CPU or TPU VM: a plain signal handler. After the step in progress, that
  step's checkpoint is saved and training stops. TF 2.20's handler supports only
  MultiWorkerMirroredStrategy and TPUStrategy, and on Google Cloud CPU and TPU VMs it
  ignores preemption on purpose (its `save_checkpoint_if_preempted` returns at once there;
  see `failure_handling.py` in TensorFlow), so there the handler would never save.

Either way the process then raises `Preempted` (exit status 143) and running the same
command again resumes from that checkpoint exactly: the batches of a step do not depend on
where the chunk started (recipes/common/training.py).
"""

import os
import signal

import tensorflow as tf
import tf_keras
from tensorflow.python.util import deprecation  # pylint: disable=g-direct-tensorflow-import

from recipes.common.callbacks import first_non_finite
from recipes.common.errors import Preempted

# Platforms where TF 2.20's PreemptionCheckpointHandler does nothing (see the docstring).
_HANDLER_IGNORES = ("GCE_CPU", "GCE_TPU")


class StopOnSigterm:
    """While active, SIGTERM only sets `requested`; the callbacks act on it after the
    current step. Outside the main thread (no signal handlers there) it does nothing.

    Enter it after the strategy is made: a MultiWorkerMirroredStrategy installs TF's own
    SIGTERM handler (in C++) when it starts, which would replace this one."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        except ValueError:  # not the main thread
            self._previous = None
        return self

    def _handle(self, signum, frame):
        del signum, frame
        self.requested = True

    def __exit__(self, *exc_info):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        return False


def make_preemption(model, manager, stop, model_dir):
    """The callback that saves and stops when `stop.requested` (see the module docstring):
    `SaveWhenClusterStops` for a MultiWorkerMirroredStrategy where TF's handler works,
    else `SaveWhenStopped`."""
    strategy = model.distribute_strategy
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        callback = SaveWhenClusterStops(manager, stop, strategy, model_dir)
        if callback.platform not in _HANDLER_IGNORES:
            return callback
    return SaveWhenStopped(manager, stop)


def save_unless_saved(model, manager, step):
    """Saves the checkpoint of `step` if every variable is finite and it is not saved yet,
    in this thread (an asynchronous save in flight lands first)."""
    variables = list(model.variables) + list(model.optimizer.variables())
    manager.sync()
    latest = manager.latest_checkpoint or ""
    if first_non_finite(variables) is None and not latest.endswith(f"-{step}"):
        manager.save(checkpoint_number=step)


def _step(model):
    return int(model.optimizer.iterations.numpy())


class SaveWhenStopped(tf_keras.callbacks.Callback):
    """After the step during which `stop.requested` became true, saves a checkpoint of that
    step (if every variable is finite) and stops `fit`; `raise_if_stopped` then raises
    `Preempted` (after the chunk's callbacks have run)."""

    def __init__(self, manager, stop):
        super().__init__()
        self._manager = manager
        self._stop = stop

    def on_train_batch_end(self, batch, logs=None):
        if not self._stop.requested or self.model.stop_training:
            return
        save_unless_saved(self.model, self._manager, _step(self.model))
        self.model.stop_training = True

    def raise_if_stopped(self):
        if self._stop.requested:
            raise Preempted(
                f"SIGTERM at step {_step(self.model)}; saved {self._manager.latest_checkpoint}; "
                "run the same command again to resume from it"
            )

    def close(self):
        """Nothing to stop (`SaveWhenClusterStops.close`)."""


class SaveWhenClusterStops(tf_keras.callbacks.Callback):
    """MultiWorkerMirroredStrategy: TF's PreemptionCheckpointHandler, asked after every step
    whether any worker got SIGTERM; if so every worker saves the agreed step's checkpoint
    and raises `Preempted` from inside `fit`.

    The handler counts its calls to agree on the step; the count restarts at 0 in every
    process (its own checkpoint, in `<model_dir>/preemption`, is never written: saving is
    `save_unless_saved` on the run's manager), so all workers count alike after a resume.
    """

    def __init__(self, manager, stop, strategy, model_dir):
        super().__init__()
        self._manager, self._stop = manager, stop
        unused = tf.train.CheckpointManager(
            tf.train.Checkpoint(), os.path.join(model_dir, "preemption"), max_to_keep=1
        )
        self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver,
            unused,
            termination_config=tf.distribute.experimental.TerminationConfig(
                termination_watcher_fn=lambda: stop.requested,  # polled by a thread, 1/s
                exit_fn=self._raise_preempted,
                grace_period=0,  # save at the agreed step, then stop
                save_fn=lambda checkpoint_number: save_unless_saved(
                    self.model, self._manager, checkpoint_number
                ),
            ),
        )
        # The handler does not say whether it will act; its platform decides (docstring).
        self.platform = self._handler._platform_device.name  # pylint: disable=protected-access

    def on_train_batch_end(self, batch, logs=None):
        # Saving, the handler reads its own deprecated `total_run_calls` (a console warning).
        with deprecation.silence():
            self._handler.save_checkpoint_if_preempted(checkpoint_number=_step(self.model))

    def _raise_preempted(self):
        who = "this worker" if self._stop.requested else "another worker"
        raise Preempted(
            f"SIGTERM to {who}; the workers saved the checkpoint of step {_step(self.model)} "
            "together; run the same command again on every worker to resume from it"
        )

    def raise_if_stopped(self):
        """Nothing: the handler stops every worker at the agreed step, in a later chunk if
        need be (one worker stopping alone would leave the others waiting)."""

    def close(self):
        """Stops the handler's watcher threads when training ends, while the other workers
        still run: TensorFlow leaves it to the handler's `__del__`, and the watcher of a
        worker whose chief had exited printed an UnavailableError's traceback (Socket
        closed) on a run that succeeded."""
        # pylint: disable=protected-access
        self._handler._stop_cluster_wise_termination_watcher_thread()
        self._handler._stop_poll_termination_signal_thread()
