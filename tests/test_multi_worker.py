"""Multi-worker training for real: 2 processes of the BERT recipe on loopback equal 1 process.

Two workers of the tiny BERT recipe (MultiWorkerMirroredStrategy from TF_CONFIG, 1 replica
each, 8 sequences per replica, no accumulation) and one single process (1 replica, 2
accumulated micro-batches of 8) train the same 3 LAMB steps at a global batch of 16; the
chief's final checkpoint must equal the single process' to float32 rounding; the cluster
writes its checkpoints (one per step) asynchronously (`train.async_checkpoint`). Only the chief
writes into model_dir; the other worker's private directory is gone when it exits. The
cluster is killed at a deadline (tests/multi_worker_harness.py), and tests below check that
the harness really stops hung and failed clusters.
"""
import glob
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import yaml

import multi_worker_harness
import tiny_bert_data
from conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # real command-line / multi-process runs

STEPS = 3
CLUSTER_TIMEOUT_SECONDS = 240
RECIPE = [sys.executable,
          os.path.join(REPO_ROOT, "tests", "bert_pretrain_without_record_shuffle.py")]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def _config(data):
    # one file: host h of N reads records h, h+N, ... (see the recipe wrapper); no dropout
    return tiny_bert_data.config(
        data, micro_batch_size=8, steps=STEPS, checkpoint_every=1, dropout_rate=0.0,
        train_files=data.train_files.replace("?????", "00000"))


def _final_checkpoint(model_dir):
    path = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    assert path and path.endswith(f"ckpt-{STEPS}"), path
    return path


def _float_variables(checkpoint):
    values = {}
    for name, _ in tf.train.list_variables(checkpoint):
        value = tf.train.load_variable(checkpoint, name)
        if name.startswith(("model/", "optimizer/")) and np.asarray(value).dtype.kind == "f":
            values[name] = value
    return values


def test_two_workers_on_loopback_equal_one_process(tmp_path):
    data = tiny_bert_data.prepare(tmp_path)
    config_file = tmp_path / "tiny_multi_worker.yaml"
    config_file.write_text(yaml.safe_dump(_config(data)), encoding="utf-8")
    command = RECIPE + [f"--config_file={config_file}", "--mode=train"]
    single_dir, multi_dir = tmp_path / "single", tmp_path / "multi"
    (tmp_path / "logs").mkdir()
    single_log = open(tmp_path / "single.log", "w+")
    # the reference run overlaps the cluster (2 cores: 3 processes)
    single = subprocess.Popen(command + [f"--model_dir={single_dir}"], cwd=REPO_ROOT,
                              stdout=single_log, stderr=subprocess.STDOUT,
                              env={**os.environ, **QUIET}, start_new_session=True)
    start = time.monotonic()
    try:
        # the cluster writes its checkpoints on TensorFlow's background thread: the copy of
        # the variables before each write is made on every worker alike
        workers = multi_worker_harness.run_cluster(
            command + [f"--model_dir={multi_dir}",
                       "--params_override=train.async_checkpoint=true"],
            num_workers=2, cwd=REPO_ROOT,
            log_dir=str(tmp_path / "logs"), timeout=CLUSTER_TIMEOUT_SECONDS, env=QUIET)
        single.wait(timeout=max(1, CLUSTER_TIMEOUT_SECONDS - (time.monotonic() - start)))
    finally:
        if single.poll() is None:
            os.killpg(single.pid, 9)
            single.wait()
    single_log.seek(0)
    single_output = single_log.read()
    chief, worker = workers

    assert [w.returncode for w in workers] == [0, 0], [w.stderr[-2000:] for w in workers]
    # a worker whose chief exited first printed its preemption watcher thread's traceback
    # (UnavailableError: Socket closed) on a run that succeeded
    assert not [w for w in workers if "Traceback" in w.stderr or "Exception in thread" in
                w.stderr], [w.stderr[-2000:] for w in workers]
    assert single.returncode == 0, single_output[-2000:]
    # the batch arithmetic each run printed: same global batch, different layouts
    for output in (chief.stdout, worker.stdout):
        assert "strategy: multi_worker_mirrored" in output
        assert "global 16 = 2 replica(s) × micro-batch 8 × 1 accumulation step(s)" in output
    assert "global 16 = 1 replica(s) × micro-batch 8 × 2 accumulation step(s)" in single_output

    # same weights and optimizer slots after 3 steps, to float32 rounding
    expected = _float_variables(_final_checkpoint(single_dir))
    actual = _float_variables(_final_checkpoint(multi_dir))
    assert expected.keys() == actual.keys() and len(expected) > 50
    for name, value in expected.items():
        if "/gradient_noise_scale/" in name:
            continue  # an estimate from micro-batch gradients: 2 workers split the batch otherwise
        np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-7, err_msg=name)

    # only the chief wrote into model_dir ...
    assert (multi_dir / "config.yaml").is_file()
    assert (multi_dir / "export" / "saved_model.pb").is_file()
    event_files = glob.glob(str(multi_dir / "**" / "events.out.tfevents.*"), recursive=True)
    writer_pids = {int(re.search(r"tfevents\.\d+\..+\.(\d+)\.\d+\.v2$", path).group(1))
                   for path in event_files}
    assert event_files and writer_pids == {chief.pid}
    # ... the other worker wrote into its own directory, which is gone now
    (worker_export,) = re.findall(r"exported SavedModel to (\S+)", worker.stdout)
    assert worker_export.startswith(worker.tmpdir)
    assert not os.path.exists(worker_export) and os.listdir(worker.tmpdir) == []
    # and its last line names the chief's outputs, not the directory it removed
    assert f"outputs in {multi_dir}, the chief's (this worker's copies, in " in worker.stdout
    assert f"outputs in {multi_dir}: " in chief.stdout


def test_a_hung_cluster_is_killed_at_the_deadline(tmp_path):
    hang = [sys.executable, "-c", "import subprocess, time; "
            "subprocess.Popen(['sleep', '600']); time.sleep(600)"]  # a child in the group too
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="2 workers did not finish in 2 s; killed"):
        multi_worker_harness.run_cluster(hang, num_workers=2, cwd=str(tmp_path),
                                         log_dir=str(tmp_path), timeout=2)
    assert time.monotonic() - start < 20
    leftover = subprocess.run(["pgrep", "-f", "^sleep 600$"], capture_output=True, text=True)
    mine = [pid for pid in leftover.stdout.split() if _session_dir(pid) == str(tmp_path)]
    assert mine == []


def _session_dir(pid):
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def test_a_failed_worker_stops_the_others_at_once(tmp_path):
    index_1_fails = [sys.executable, "-c", "import json, os, sys, time; "
                     "task = json.loads(os.environ['TF_CONFIG'])['task']; "
                     "sys.exit(3) if task['index'] == 1 else time.sleep(600)"]
    start = time.monotonic()
    results = multi_worker_harness.run_cluster(index_1_fails, num_workers=2,
                                               cwd=str(tmp_path), log_dir=str(tmp_path),
                                               timeout=120)
    assert time.monotonic() - start < 30
    assert [r.returncode for r in results] == [-9, 3]


SIGTERM_AFTER_THE_STRATEGY = """
import os, signal, sys, time
from recipes.common import startup  # noqa: F401 (as the recipes: before TensorFlow)
from recipes.common import strategy
got = []
signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
if sys.argv[1:] == ["tensorflow's own"]:  # the control: the case at hand
    import tensorflow as tf
    tf.distribute.MultiWorkerMirroredStrategy()
else:
    strategy.make_strategy("multi_worker_mirrored")
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(1)
print("the program's handler ran" if got else "TensorFlow's handler took it", flush=True)
"""


def test_sigterm_between_the_strategys_start_and_training_reaches_the_program():
    """A MultiWorkerMirroredStrategy installs TensorFlow's own SIGTERM handler (C++) as it
    starts: a SIGTERM before training began was taken by it and ignored, and the worker
    trained to the end (exit status 0, no line)."""
    for how, expected in (("tensorflow's own", "TensorFlow's handler took it"),
                          ("the recipes'", "the program's handler ran")):
        env = {**os.environ, **QUIET, "TF_CONFIG": multi_worker_harness.tf_config(
            multi_worker_harness.free_ports(1), 0)}
        result = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_THE_STRATEGY, how],
                                cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.stdout.splitlines()[-1:] == [expected], (how, result.stderr[-2000:])

