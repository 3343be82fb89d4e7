"""Runs the recipes' command lines as a user does, and kills them at chosen moments.

Every process gets its own process group, so a kill takes whatever it started with it,
and every wait has a deadline, so a hung program never outlives its test.
"""

import os
import signal
import subprocess
import sys
import time

import tensorflow as tf

from recipes.common import training

# Testing hook of recipes/common/training.py: print "step N done" and pause after each step.
STEP_HOOK_ENV = training.STEP_HOOK_ENV
EXPORT_HOOK_ENV = training.EXPORT_HOOK_ENV
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def command(module, *args):
    return [sys.executable, "-m", module, *args]


def start(module, *args, log_path, env=None):
    """Starts `python -m module args` with stdout and stderr going to `log_path`."""
    log = open(log_path, "w")
    process = subprocess.Popen(
        command(module, *args), cwd=REPO_ROOT, env={**ENV, **(env or {})}, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    log.close()  # the child holds its own descriptor
    return process


def kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_when(process, condition, timeout=240, poll_seconds=0.02):
    """SIGKILLs `process` (and its group) as soon as `condition()` holds.

    Returns True if it was killed that way, False if it exited first. Kills it anyway, and
    fails, when neither happened within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if condition():
            kill_group(process)
            process.wait()
            return True
        time.sleep(poll_seconds)
    kill_group(process)
    process.wait()
    raise AssertionError(f"neither the kill condition nor the exit came within {timeout} s")


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def checkpoint_values(model_dir):
    """{key: value} of every tensor in the newest checkpoint under model_dir/checkpoints."""
    path = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    assert path is not None, f"no checkpoint under {model_dir}"
    reader = tf.train.load_checkpoint(path)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if not key.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


def latest_checkpoint(model_dir):
    return training.latest_checkpoint(model_dir) or ""


def _loading_tensorflow(pid):
    """Whether process `pid` has a handler for SIGTERM (bit 15 of SigCgt in /proc: the
    program's handler of its first seconds is in place; Python catches SIGINT from its
    start) and has TensorFlow's library mapped (its import has begun; it takes seconds
    more)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        caught = next(line for line in status if line.startswith("SigCgt:")).split()[1]
    if not int(caught, 16) & (1 << (signal.SIGTERM - 1)):
        return False
    with open(f"/proc/{pid}/maps", encoding="ascii") as maps:
        return "libtensorflow_framework" in maps.read()


def stopped_while_tensorflow_loads(command, signum):
    """`command` run (SIGINT at its default, whatever this process inherited), sent `signum`
    while it imports TensorFlow; returns (exit status, stdout, stderr)."""
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not _loading_tensorflow(process.pid):
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.005)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    return process.returncode, stdout, stderr
