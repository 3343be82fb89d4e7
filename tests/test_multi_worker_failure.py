"""One worker of a 2-process MultiWorkerMirroredStrategy run dies: the other stops within a
bounded time with one line naming the last checkpoint, and restarting both resumes from it.

The workers are the real BERT command line on loopback (TF_CONFIG from
tests/multi_worker_harness.py); every process has its own process group and a deadline.
"""

import os
import re
import time

import pytest
import yaml

import multi_worker_harness
import reliability_cli as cli
import tiny_bert_data

pytestmark = pytest.mark.slow  # real command-line / multi-process runs

SURVIVOR_SECONDS = 60  # the surviving worker must have exited this long after the kill
STEPS = 6
CHECKPOINT_EVERY = 2
KILLED_AFTER_STEP = 3  # worker 1 dies once the chief has logged this step
# The step after it cannot finish: its checkpoint chunk, steps FIRST-LAST, is the one lost,
# and the chunk before it is the last one checkpointed.
LOST_CHUNK_FIRST = KILLED_AFTER_STEP // CHECKPOINT_EVERY * CHECKPOINT_EVERY + 1
LOST_CHUNK_LAST = LOST_CHUNK_FIRST + CHECKPOINT_EVERY - 1
LAST_CHECKPOINT_STEP = LOST_CHUNK_FIRST - 1


def _config(data):
    return tiny_bert_data.config(data, micro_batch_size=8, steps=STEPS,
                                 checkpoint_every=CHECKPOINT_EVERY, dropout_rate=0.1)


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
        assert cli.kill_when(workers[1],
                             lambda: f"step {KILLED_AFTER_STEP} done" in cli.read(chief_out),
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
    # The range is the chunk's steps counted from 1 (steps 3-4, not the 2-4 of its start
    # step and end), and the checkpoint the run's own.
    checkpoint = os.path.join(model_dir, "checkpoints", f"ckpt-{LAST_CHECKPOINT_STEP}")
    assert re.fullmatch(
        "error: lost contact with another worker during training steps "
        f"{LOST_CHUNK_FIRST}-{LOST_CHUNK_LAST} \\(.+\\); stopped, the last checkpoint is "
        f"{re.escape(checkpoint)}; restart every worker with the same command to resume "
        "from it", lines[-1]), stderr[-3000:]
    assert "Traceback" not in stderr
    assert survivor_seconds < SURVIVOR_SECONDS
    print(f"worker 0 stopped {survivor_seconds:.1f} s after worker 1 was killed")
    assert cli.latest_checkpoint(model_dir) == checkpoint

    # Restart both with the same command: both resume at step 2 and finish.
    second = tmp_path / "second"
    second.mkdir()
    results = multi_worker_harness.run_cluster(command, num_workers=2, cwd=cli.REPO_ROOT,
                                               log_dir=str(second), timeout=300,
                                               env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
        assert "restored" in result.stdout, result.stdout[-2000:]
        assert f"at step {LAST_CHECKPOINT_STEP}" in result.stdout, result.stdout[-2000:]
    assert cli.latest_checkpoint(model_dir).endswith(f"ckpt-{STEPS}")
