"""Shared test setup: quiet TensorFlow logs and two logical CPU devices.

Two logical CPUs let `tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])` run real
cross-replica all-reduces on this machine. The split has to happen before TensorFlow
initialises its devices, so it is done here, once, at collection time.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

# Resolve `tf.keras` now, as Keras 3 (the TF 2.20 default), so that a recipe module imported
# during collection (it sets TF_USE_LEGACY_KERAS=1 for its own CLI) cannot flip it for the
# tests that follow; the variable itself is put back once collection is done.
_LEGACY_KERAS_AT_START = os.environ.get("TF_USE_LEGACY_KERAS")
assert tf.keras.optimizers.Optimizer is not None


def pytest_collection_finish(session):
    if _LEGACY_KERAS_AT_START is None:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)
    else:
        os.environ["TF_USE_LEGACY_KERAS"] = _LEGACY_KERAS_AT_START


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def two_cpu_strategy():
    """One MirroredStrategy over the two logical CPUs, shared by the session.

    Every new MirroredStrategy reuses the same collective keys, so two strategies whose
    all-reduces carry different shapes abort each other; one shared instance avoids that.
    """
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
