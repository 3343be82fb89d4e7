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

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def two_cpu_strategy():
    """One MirroredStrategy over the two logical CPUs, shared by the session.

    Every new MirroredStrategy reuses the same collective keys, so two strategies whose
    all-reduces carry different shapes abort each other; one shared instance avoids that.
    """
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
