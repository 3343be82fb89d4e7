"""Preemption through the real command lines: SIGKILL in the middle of training, restart
with the same command, and the final weights equal those of an uninterrupted run.

Also through the BERT command line: a kill during the export leaves no export directory
(a NaN in the data: tests/test_bad_inputs.py). Tiny shapes; dropout is on, so the
checkpointed RNG state is exercised.
"""

import glob
import os
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
import yaml

import reliability_cli as cli
import tiny_bert_data

pytestmark = pytest.mark.slow  # real command-line / multi-process runs

BERT = "recipes.bert.pretrain"
RESNET = "recipes.resnet.train"
STEPS = 6
CHECKPOINT_EVERY = 2


def _bert_config(data):
    # dropout on (its RNG state must resume exactly); two micro-batches per step, so the
    # accumulation inside the step is exercised too
    return tiny_bert_data.config(data, micro_batch_size=8, steps=STEPS,
                                 checkpoint_every=CHECKPOINT_EVERY, dropout_rate=0.1)


@pytest.fixture(scope="module")
def bert_data(tmp_path_factory):
    return tiny_bert_data.prepare(tmp_path_factory.mktemp("bert_data"))


@pytest.fixture(scope="module")
def bert_args(bert_data, tmp_path_factory):
    path = tmp_path_factory.mktemp("bert_config") / "tiny.yaml"
    path.write_text(yaml.safe_dump(_bert_config(bert_data)), encoding="utf-8")
    return [f"--config_file={path}", "--mode=train", "--deterministic"]


def _step_done(log_path, step):
    return lambda: f"step {step} done" in cli.read(log_path)


def _straight_and_interrupted(module, args, straight_dir, model_dir, log_dir,
                              kill_resumed_when=None, straight_args=None):
    """Runs `args` (`straight_args`, if given) uninterrupted in `straight_dir` and, at the
    same time, `args` in `model_dir` SIGKILLed right after step 3 (mid-chunk: the checkpoint
    of step 2 exists, that of step 4 not yet); then `args` again in `model_dir`. The restart
    is killed too when `kill_resumed_when(model_dir)` holds. Returns the logs of the killed
    and resumed runs."""
    killed_log = os.path.join(log_dir, "killed.log")
    process = cli.start(module, *args, f"--model_dir={model_dir}", log_path=killed_log,
                        env={cli.STEP_HOOK_ENV: "0.5"})
    straight_log = os.path.join(log_dir, "straight.log")
    straight = cli.start(module, *(straight_args or args), f"--model_dir={straight_dir}",
                         log_path=straight_log)
    try:
        assert cli.kill_when(process, _step_done(killed_log, 3)), cli.read(killed_log)[-3000:]
        assert straight.wait(timeout=300) == 0, cli.read(straight_log)[-3000:]
    finally:
        cli.kill_group(straight)
    assert cli.latest_checkpoint(model_dir).endswith("ckpt-2"), cli.read(killed_log)[-3000:]
    resumed_log = os.path.join(log_dir, "resumed.log")
    # with a kill condition, the export pauses between its temporary write and the rename
    # (testing hook), so the kill lands in the middle of the export every time
    hook = {} if kill_resumed_when is None else {cli.EXPORT_HOOK_ENV: "30"}
    process = cli.start(module, *args, f"--model_dir={model_dir}", log_path=resumed_log,
                        env=hook)
    if kill_resumed_when is None:
        try:
            assert process.wait(timeout=300) == 0, cli.read(resumed_log)[-3000:]
        finally:
            cli.kill_group(process)
    else:
        killed = cli.kill_when(process, lambda: kill_resumed_when(model_dir), timeout=300)
        assert killed, cli.read(resumed_log)[-3000:]
    return cli.read(killed_log), cli.read(resumed_log)


def _assert_same_checkpoints(straight_dir, resumed_dir, ignore=()):
    straight = cli.checkpoint_values(straight_dir)
    resumed = cli.checkpoint_values(resumed_dir)
    for key in ignore:
        del straight[key], resumed[key]
    assert straight.keys() == resumed.keys()
    steps = [int(v) for k, v in straight.items() if k.startswith("optimizer/_iterations")]
    assert steps == [STEPS]
    # The dropout generators' states are in the checkpoint and continued exactly.
    assert any(key.startswith("random_generators/") for key in straight)
    for key, value in straight.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)
    return straight


def _temporary_export_exists(model_dir):
    return bool(glob.glob(os.path.join(model_dir, "export.tmp-*", "variables", "*")))


@pytest.fixture(scope="module")
def bert_runs(bert_args, tmp_path_factory):
    """An uninterrupted run, and a run killed mid-chunk then restarted; the restart is
    itself killed during its export (after its last checkpoint)."""
    straight_dir = str(tmp_path_factory.mktemp("bert_straight"))
    resumed_dir = str(tmp_path_factory.mktemp("bert_resumed"))
    logs = _straight_and_interrupted(
        BERT, bert_args, straight_dir, resumed_dir, str(tmp_path_factory.mktemp("bert_logs")),
        kill_resumed_when=_temporary_export_exists)
    return straight_dir, resumed_dir, logs


def test_bert_killed_mid_chunk_resumes_to_the_same_weights(bert_runs):
    straight_dir, resumed_dir, (killed_log, resumed_log) = bert_runs
    assert "step 3 done" in killed_log and "step 4 done" not in killed_log
    assert "restored" in resumed_log and "at step 2" in resumed_log
    values = _assert_same_checkpoints(straight_dir, resumed_dir)
    weights = [k for k in values if k.startswith("model/") and "OPTIMIZER_SLOT" not in k]
    assert len(weights) > 20


def test_bert_kill_during_export_leaves_no_export_directory(bert_runs):
    straight_dir, resumed_dir, _ = bert_runs
    # The uninterrupted run's export is complete and loads ...
    loaded = tf.saved_model.load(os.path.join(straight_dir, "export"))
    assert "serving_default" in loaded.signatures
    # ... the killed one is absent (only a temporary sibling, safe to delete, remains).
    assert not os.path.exists(os.path.join(resumed_dir, "export"))
    assert glob.glob(os.path.join(resumed_dir, "export.tmp-*"))


def _sigterm_after_step_3_then_resume(module, args, model_dir, log_dir):
    """Runs `args` in `model_dir`, SIGTERMed right after step 3: it must save ckpt-3 (not a
    multiple of checkpoint_every) and exit 143; then the same command again, which must
    resume at step 3 and finish."""
    log = os.path.join(log_dir, "sigterm.log")
    process = cli.start(module, *args, f"--model_dir={model_dir}", log_path=log,
                        env={cli.STEP_HOOK_ENV: "0.5"})
    try:
        deadline = time.monotonic() + 240
        while not _step_done(log, 3)() and process.poll() is None:
            assert time.monotonic() < deadline, cli.read(log)[-3000:]
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 143, cli.read(log)[-3000:]
    finally:
        cli.kill_group(process)
    stopped_log = cli.read(log)
    assert "stopped: SIGTERM at step 3" in stopped_log and "step 4 done" not in stopped_log
    assert cli.latest_checkpoint(model_dir).endswith("ckpt-3"), stopped_log[-3000:]
    resumed_log = os.path.join(log_dir, "resumed_after_sigterm.log")
    resumed = cli.start(module, *args, f"--model_dir={model_dir}", log_path=resumed_log)
    try:
        assert resumed.wait(timeout=300) == 0, cli.read(resumed_log)[-3000:]
    finally:
        cli.kill_group(resumed)
    assert "at step 3" in cli.read(resumed_log)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async_checkpoint"])
def test_bert_sigterm_mid_chunk_saves_that_step_and_resumes_exactly(bert_args, bert_runs,
                                                                      tmp_path, asynchronous):
    """Preemption: SIGTERM after step 3 saves ckpt-3 (not a multiple of checkpoint_every)
    and exits 143; the same command resumes at step 3 and ends bitwise equal to the
    uninterrupted run. With train.async_checkpoint=true the preempted and resumed runs write
    their chunk checkpoints asynchronously (ckpt-2 may still be in flight at the SIGTERM)."""
    straight_dir = bert_runs[0]
    if asynchronous:
        bert_args = [*bert_args, "--params_override=train.async_checkpoint=true"]
    model_dir = str(tmp_path / "preempted")
    _sigterm_after_step_3_then_resume(BERT, bert_args, model_dir, str(tmp_path))
    # every weight, slot, step and generator state; not the count of saves (one more here)
    _assert_same_checkpoints(straight_dir, model_dir,
                             ignore=["save_counter/.ATTRIBUTES/VARIABLE_VALUE"])


# ---- ResNet ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet_args(tmp_path_factory):
    from recipes.resnet import data as resnet_data

    data_dir = str(tmp_path_factory.mktemp("digits"))
    info = resnet_data.prepare_digits(data_dir, validation_fraction=0.2, num_shards=2,
                                      jpeg_quality=95, seed=0)
    train_pattern = os.path.join(data_dir, info["splits"]["train"]["file_pattern"])
    override = ",".join([
        "data.embedded_digits=false",
        f"data.train_file_pattern={train_pattern}",
        "data.random_flip=true",  # random crops and flips in the pipeline: exercised
        "data.shuffle_buffer_size=200",
        "model.dropout_rate=0.2",  # and the checkpointed dropout state
        "train.global_batch_size=16",
        "train.micro_batch_size=8",
        f"train.steps={STEPS}",
        f"train.checkpoint_every={CHECKPOINT_EVERY}",
        "optimizer.warmup_steps=1",
        "export.enabled=false",
    ])
    return ["--config_file=configs/resnet/tiny_cpu.yaml", f"--params_override={override}",
            "--mode=train", "--deterministic"]


# train.async_checkpoint=true: the killed and the resumed run write their checkpoints on
# TensorFlow's background thread, the uninterrupted run in the step's own thread.
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async_checkpoint"])
def test_resnet_killed_mid_chunk_resumes_to_the_same_weights(resnet_args, tmp_path,
                                                             asynchronous):
    straight_dir, resumed_dir = str(tmp_path / "straight"), str(tmp_path / "resumed")
    interrupted_args = [
        arg + ",train.async_checkpoint=true"
        if asynchronous and arg.startswith("--params_override=") else arg
        for arg in resnet_args]
    assert not asynchronous or interrupted_args != resnet_args
    killed_log, resumed_log = _straight_and_interrupted(
        RESNET, interrupted_args, straight_dir, resumed_dir, str(tmp_path),
        straight_args=resnet_args)
    assert "step 3 done" in killed_log and "step 4 done" not in killed_log
    assert "restored" in resumed_log and "at step 2" in resumed_log
    # the asynchronous writer saves a save counter of its own (0), which nothing reads
    _assert_same_checkpoints(straight_dir, resumed_dir, ignore=(
        ["save_counter/.ATTRIBUTES/VARIABLE_VALUE"] if asynchronous else []))


def test_resnet_sigterm_mid_chunk_saves_that_step_and_resumes_exactly(resnet_args, tmp_path):
    """The resumed run makes the chunk's pipeline and skips the step already trained: its
    later examples must get the crops and flips of the run never stopped (Model Garden's
    stateful draws started again, and it ended at other weights)."""
    straight_dir, model_dir = str(tmp_path / "straight"), str(tmp_path / "preempted")
    straight_log = str(tmp_path / "straight.log")
    straight = cli.start(RESNET, *resnet_args, f"--model_dir={straight_dir}",
                         log_path=straight_log)
    try:
        _sigterm_after_step_3_then_resume(RESNET, resnet_args, model_dir, str(tmp_path))
        assert straight.wait(timeout=300) == 0, cli.read(straight_log)[-3000:]
    finally:
        cli.kill_group(straight)
    _assert_same_checkpoints(straight_dir, model_dir,
                             ignore=["save_counter/.ATTRIBUTES/VARIABLE_VALUE"])
