"""Shared test setup: quiet TensorFlow logs, two logical CPU devices, and a temporary
directory (TMPDIR) for the programs the tests start, removed at the end.

Two logical CPUs let `tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])` run real
cross-replica all-reduces on this machine. The split has to happen before TensorFlow
initialises its devices, so it is done here, once per test process, before collection.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import fcntl  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

from recipes.common import native_log  # noqa: E402

_LEGACY_KERAS_AT_START = os.environ.get("TF_USE_LEGACY_KERAS")
_SCRATCH = None  # TMPDIR of the programs the tests start; TensorFlow's start-up log


def pytest_configure(config):
    """Two logical CPUs, in every process that runs tests.

    pytest.ini runs the tests in pytest-xdist worker processes; the process that starts them
    runs none and does not import TensorFlow. pytest captures nothing yet when a worker
    calls this, so TensorFlow's start-up lines (`failed call to cuInit`: no GPU here) go to
    a log file, not the console."""
    if getattr(config.option, "numprocesses", None) and "PYTEST_XDIST_WORKER" not in os.environ:
        return
    global _SCRATCH
    _SCRATCH = tempfile.mkdtemp(prefix="lamb_tf_tests_")
    # The programs the tests start write their temporary files here, and the directory goes
    # at the end: AutoGraph writes a module per converted function to TMPDIR and removes it
    # at exit, which a forked child ending in `os._exit` (tests/preloaded_cli.py) or a
    # killed run never reaches. (This process keeps its own, so pytest's tmp_path is as usual.)
    os.environ["TMPDIR"] = _SCRATCH
    with native_log.to_file(_SCRATCH):
        import tensorflow as tf

        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(cpus[0], [
            tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    # Resolve `tf.keras` now, as Keras 3 (the TF 2.20 default), so that a recipe module
    # imported during collection (it sets TF_USE_LEGACY_KERAS=1 for its own CLI) cannot flip
    # it for the tests that follow; the variable itself is put back once collection is done.
    assert tf.keras.optimizers.Optimizer is not None


def pytest_unconfigure(config):
    if "preloaded_cli" in sys.modules:  # its servers (sequential mode), before their files go
        sys.modules["preloaded_cli"].close_all()
    if _SCRATCH:
        shutil.rmtree(_SCRATCH, ignore_errors=True)


def pytest_collection_finish(session):
    if _LEGACY_KERAS_AT_START is None:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)
    else:
        os.environ["TF_USE_LEGACY_KERAS"] = _LEGACY_KERAS_AT_START


@pytest.fixture(autouse=True)
def _legacy_keras_variable_put_back():
    """`TF_USE_LEGACY_KERAS` as it was before each test: code a test runs in this process
    (the study's settings check, as the recipes' programs do) may set it, and `lamb_tf`'s
    flavour choice reads it, so a test that follows in the same process would otherwise see
    the tf_keras flavour."""
    before = os.environ.get("TF_USE_LEGACY_KERAS")
    yield
    if before is None:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)
    else:
        os.environ["TF_USE_LEGACY_KERAS"] = before


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def two_cpu_strategy():
    """One MirroredStrategy over the two logical CPUs, shared by the session.

    Every new MirroredStrategy reuses the same collective keys, so two strategies whose
    all-reduces carry different shapes abort each other; one shared instance avoids that.
    """
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def built_once(tmp_path_factory, name, build):
    """The directory `name` that `build(directory)` fills, built once per test session for
    every test file that asks (a read-only fixture several files import): pytest-xdist's
    workers share the session's temporary root (above each worker's), and the first to ask
    builds it under a lock while the others wait; one process (`-n 0`) builds it there once."""
    root = tmp_path_factory.getbasetemp()
    shared = root.parent if "PYTEST_XDIST_WORKER" in os.environ else root
    directory, done = shared / name, shared / f"{name}.built"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(directory, ignore_errors=True)  # a build that failed part-way
            directory.mkdir()
            build(directory)
            done.write_text("")
    return str(directory)
