"""One worker of a 2-process MultiWorkerMirroredStrategy run dies: the other stops within a
bounded time with one line naming the last checkpoint, and restarting both resumes from it.

The workers are the real BERT command line on loopback (TF_CONFIG from
tests/multi_worker_harness.py); every process has its own process group and a deadline.
"""

import time

import pytest
import yaml

import multi_worker_harness
import reliability_cli as cli
import tiny_bert_data

pytestmark = pytest.mark.slow  # real command-line / multi-process runs

SURVIVOR_SECONDS = 60  # the surviving worker must have exited this long after the kill
STEPS = 6


def _config(data):
    return tiny_bert_data.config(data, micro_batch_size=8, steps=STEPS, checkpoint_every=2,
                                 dropout_rate=0.1)


def _start_workers(command, log_dir):
    return multi_worker_harness.start_workers(command, 2, cli.REPO_ROOT, log_dir,
                                              env={**cli.ENV, cli.STEP_HOOK_ENV: "0.5"})


def test_a_dead_worker_stops_the_other_and_both_resume(tmp_path):
    data = tiny_bert_data.prepare(tmp_path)
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(yaml.safe_dump(_config(data)), encoding="utf-8")
    model_dir = str(tmp_path / "run")
    command = cli.command("recipes.bert.pretrain", f"--config_file={config_file}",
                          "--mode=train", f"--model_dir={model_dir}")
    first = tmp_path / "first"
    first.mkdir()
    workers = _start_workers(command, str(first))
    chief_out = str(first / "worker0.out")
    try:
        # Kill worker 1 in the middle of the second chunk: checkpoint 2 written, step 3 done.
        assert cli.kill_when(workers[1], lambda: "step 3 done" in cli.read(chief_out),
                             timeout=300), cli.read(first / "worker1.err")[-3000:]
        killed_at = time.monotonic()
        workers[0].wait(timeout=SURVIVOR_SECONDS)
        survivor_seconds = time.monotonic() - killed_at
    finally:
        for worker in workers:
            cli.kill_group(worker)
            worker.wait()
    stderr = cli.read(first / "worker0.err")
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert workers[0].returncode == 2, stderr[-3000:]
    assert lines[-1].startswith("error: lost contact with another worker during training "
                                "steps 3-4"), stderr[-3000:]
    assert "ckpt-2" in lines[-1] and "restart every worker" in lines[-1]
    assert "Traceback" not in stderr
    assert survivor_seconds < SURVIVOR_SECONDS
    print(f"worker 0 stopped {survivor_seconds:.1f} s after worker 1 was killed")
    assert cli.latest_checkpoint(model_dir).endswith("ckpt-2")

    # Restart both with the same command: both resume at step 2 and finish.
    second = tmp_path / "second"
    second.mkdir()
    results = multi_worker_harness.run_cluster(command, num_workers=2, cwd=cli.REPO_ROOT,
                                               log_dir=str(second), timeout=300,
                                               env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
        assert "restored" in result.stdout and "at step 2" in result.stdout, result.stdout[-2000:]
    assert cli.latest_checkpoint(model_dir).endswith(f"ckpt-{STEPS}")
