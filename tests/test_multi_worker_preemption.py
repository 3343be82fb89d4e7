"""Preemption of one worker of a 2-process MultiWorkerMirroredStrategy run: SIGTERM to the
non-chief worker mid-chunk makes both workers save the same later step (TF's
PreemptionCheckpointHandler, recipes/common/preemption.py) and exit 143; the same command
on both resumes there and ends with the weights of an uninterrupted cluster run.

The workers are the real BERT command line on loopback (TF_CONFIG from
tests/multi_worker_harness.py); every process has its own process group and a deadline.
"""

import os
import re
import signal
import time

import numpy as np
import pytest
import yaml

import multi_worker_harness
import reliability_cli as cli
import tiny_bert_data

pytestmark = pytest.mark.slow  # real multi-process runs (minutes)

STEPS = 8
CHECKPOINT_EVERY = 4
CLUSTER_TIMEOUT_SECONDS = 300
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def _config_file(tmp_path):
    data = tiny_bert_data.prepare(tmp_path)
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(yaml.safe_dump(tiny_bert_data.config(
        data, micro_batch_size=8, steps=STEPS, checkpoint_every=CHECKPOINT_EVERY,
        dropout_rate=0.1)), encoding="utf-8")
    return config_file


def _command(config_file, model_dir):
    return cli.command("recipes.bert.pretrain", f"--config_file={config_file}", "--mode=train",
                       "--deterministic", "--params_override=export.enabled=false",
                       f"--model_dir={model_dir}")


def _run_cluster(command, log_dir):
    os.makedirs(log_dir)
    results = multi_worker_harness.run_cluster(command, num_workers=2, cwd=cli.REPO_ROOT,
                                               log_dir=log_dir, timeout=CLUSTER_TIMEOUT_SECONDS,
                                               env=QUIET)
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    return results


def _start_workers(command, log_dir):
    """Two workers, each step slowed to 0.5 s so that the signal lands mid-chunk."""
    os.makedirs(log_dir)
    return multi_worker_harness.start_workers(command, 2, cli.REPO_ROOT, log_dir,
                                              env={**cli.ENV, cli.STEP_HOOK_ENV: "0.5"})


def test_sigterm_to_one_worker_saves_one_step_on_both_and_resumes_exactly(tmp_path):
    config_file = _config_file(tmp_path)
    straight_dir, model_dir = str(tmp_path / "straight"), str(tmp_path / "preempted")
    _run_cluster(_command(config_file, straight_dir), str(tmp_path / "straight_logs"))

    command = _command(config_file, model_dir)
    logs = tmp_path / "preempted_logs"
    workers = _start_workers(command, str(logs))
    try:
        deadline = time.monotonic() + CLUSTER_TIMEOUT_SECONDS
        while "step 3 done" not in cli.read(logs / "worker0.out"):
            assert time.monotonic() < deadline and workers[0].poll() is None, (
                cli.read(logs / "worker0.err")[-3000:])
            time.sleep(0.02)
        workers[1].send_signal(signal.SIGTERM)  # the non-chief: the chief must still save
        returncodes = [worker.wait(timeout=120) for worker in workers]
    finally:
        for worker in workers:
            cli.kill_group(worker)
            worker.wait()
    errors = [cli.read(logs / f"worker{index}.err") for index in range(2)]
    assert returncodes == [143, 143], errors[0][-2000:] + errors[1][-2000:]
    assert not any("Traceback" in text or "deprecated" in text for text in errors), errors
    last_lines = [[line for line in text.splitlines() if line.strip()][-1] for text in errors]
    assert last_lines[0].startswith("stopped: SIGTERM to another worker; the workers saved "
                                    "the checkpoint of step "), last_lines[0]
    assert last_lines[1].startswith("stopped: SIGTERM to this worker; the workers saved "
                                    "the checkpoint of step "), last_lines[1]
    saved = {int(re.search(r"of step (\d+)", line).group(1)) for line in last_lines}
    assert len(saved) == 1, last_lines
    step = saved.pop()
    assert 3 < step < STEPS, last_lines  # after the signal, before the end
    assert cli.latest_checkpoint(model_dir).endswith(f"ckpt-{step}")
    assert f"step {STEPS} done" not in cli.read(logs / "worker0.out")

    results = _run_cluster(command, str(tmp_path / "resumed_logs"))
    for result in results:
        assert f"at step {step}" in result.stdout, result.stdout[-2000:]
    straight, resumed = cli.checkpoint_values(straight_dir), cli.checkpoint_values(model_dir)
    for values in (straight, resumed):
        del values["save_counter/.ATTRIBUTES/VARIABLE_VALUE"]  # one more save when preempted
    assert straight.keys() == resumed.keys()
    assert any(key.startswith("random_generators/") for key in straight)
    for key, value in straight.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)
