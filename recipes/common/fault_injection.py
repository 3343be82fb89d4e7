"""Testing hooks (fault injection), documented in docs/reliability.md.

They let a test kill or stop the real program at a chosen moment instead of racing it:
nothing happens unless the environment variable is set.
"""

import os
import time

import tf_keras

# When set, every training step prints "step N done" and then sleeps this many seconds, so
# that a test can kill or stop the program in the middle of a chunk, between two checkpoints.
STEP_HOOK_ENV = "LAMB_TF_TEST_STEP_SECONDS"
# When set, `recipes.common.export.export_saved_model` sleeps this many
# seconds between writing the temporary export and renaming it into place, so that a test
# can SIGKILL the program in the middle of an export.
EXPORT_HOOK_ENV = "LAMB_TF_TEST_EXPORT_SECONDS"


class StepHookForTests(tf_keras.callbacks.Callback):
    """Prints "step N done" after each optimizer step, then pauses."""

    def __init__(self, seconds):
        super().__init__()
        self._seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        print(f"step {int(self.model.optimizer.iterations.numpy())} done", flush=True)
        time.sleep(self._seconds)


def step_hook():
    """The step-pause callback when STEP_HOOK_ENV is set, else None."""
    seconds = os.environ.get(STEP_HOOK_ENV)
    return StepHookForTests(float(seconds)) if seconds else None


def pause_before_export(temporary):
    """Sleeps EXPORT_HOOK_ENV seconds (when set) after the temporary export is written."""
    if os.environ.get(EXPORT_HOOK_ENV):
        print(f"export written to {temporary}", flush=True)
        time.sleep(float(os.environ[EXPORT_HOOK_ENV]))
