"""SIGTERM outside training (data preparation, building, evaluation, export) stops a program
as Ctrl-C does: what it was writing is cleaned up, then one line and exit status 143
(`recipes/common/errors.py`; SIGTERM during `fit` saves the step first:
tests/test_resume_after_kill.py). The lines name the newest checkpoint when a run has one."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

import reliability_cli as cli
import tiny_bert_data

REPO_ROOT = cli.REPO_ROOT
PROGRAM = """import os, signal, sys, time
from recipes.common import errors
{starting}
def main(argv):
    if len(argv) > 1:
        errors.name_newest_checkpoint(lambda: argv[1])
    with errors.doing("while exporting"):
        try:
            os.kill(os.getpid(), signal.{signal})
            time.sleep(30)
        finally:
            print("cleaned up", flush=True)
errors.run(main)
"""


def _default_sigint():
    """In the child before it starts: SIGINT at its default, whatever pytest inherited. A
    pytest started in the background of a non-interactive shell ignores SIGINT; its child
    then did too (Python installs no KeyboardInterrupt handler for an ignored SIGINT) and
    slept through the Ctrl-C to exit 0, failing the test with no bug in the program."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_program(signal_name, *args, starting=""):
    """PROGRAM sending itself `signal_name` in its `main`, after the line `starting`."""
    program = PROGRAM.format(signal=signal_name, starting=starting)
    return subprocess.run([sys.executable, "-c", program, *args], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=120, preexec_fn=_default_sigint)


@pytest.mark.parametrize("starting", ["", "errors.stop_while_starting()"],
                         ids=["run-alone", "after-the-first-seconds-handler"])
@pytest.mark.parametrize("signal_name, status, line", [
    ("SIGTERM", 143, "stopped: SIGTERM (while exporting); run the same command again to go on "
                     "(a training run resumes from its newest checkpoint)"),
    ("SIGINT", 130, "stopped: interrupted (Ctrl-C); run the same command again to go on (a "
                    "training run resumes from its newest checkpoint; SIGTERM also saves the "
                    "step in progress first)")])
def test_a_signal_once_main_runs_cleans_up_then_one_line(starting, signal_name, status, line):
    """SIGTERM outside training stops the program as Ctrl-C does. After the handler of a
    program's first seconds (`errors.stop_while_starting`), which ends the process at once,
    `errors.run` puts both back once `main` starts (it was kept for Ctrl-C, unnoticed)."""
    result = _run_program(signal_name, starting=starting)
    assert result.returncode == status, result.stderr
    assert result.stdout == "cleaned up\n"
    assert result.stderr.splitlines() == [line]


WRAPPED_IN_C_CODE = PROGRAM.replace(
    "            time.sleep(30)\n",
    "            time.sleep(30)\n"
    "        except BaseException:  # as CPython reports an exception raised inside C code\n"
    "            raise SystemError('<built-in method __array__ of numpy.ndarray object> '\n"
    "                              'returned a result with an exception set')\n")


@pytest.mark.parametrize("signal_name, status, how", [
    ("SIGTERM", 143, "SIGTERM (while exporting)"), ("SIGINT", 130, "interrupted (Ctrl-C)")])
def test_a_signal_that_reaches_python_as_a_system_error_is_still_a_stop(
        signal_name, status, how):
    """A signal's exception raised while C code ran (numpy's `__array__` inside TensorFlow's
    conversion of a summary's value) reached Python as a SystemError with it as context: a
    traceback and exit 1 (seen in CI, Model Garden's launcher under SIGTERM)."""
    assert WRAPPED_IN_C_CODE != PROGRAM
    result = subprocess.run(
        [sys.executable, "-c", WRAPPED_IN_C_CODE.format(signal=signal_name, starting="")],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, preexec_fn=_default_sigint)
    assert result.returncode == status, result.stderr
    assert result.stderr.splitlines()[0].startswith(f"stopped: {how}; run the same command")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("signal_name, how, status", [
    ("SIGTERM", "SIGTERM (while exporting)", 143),
    ("SIGINT", "interrupted (Ctrl-C)", 130)])
def test_stopped_line_names_the_newest_checkpoint(signal_name, how, status):
    result = _run_program(signal_name, "/runs/a/checkpoints/ckpt-4")
    assert result.returncode == status, result.stderr
    note = " (SIGTERM also saves the step in progress first)" if status == 130 else ""
    assert result.stderr.splitlines() == [
        f"stopped: {how}; the newest checkpoint is /runs/a/checkpoints/ckpt-4 (step 4): run "
        f"the same command again to go on from there{note}"]


def _signal_when(process, log, text, signum=signal.SIGTERM, timeout=240, then=0.0):
    """Sends `signum` to `process` `then` seconds after `text` is in its log; returns its
    exit status."""
    deadline = time.monotonic() + timeout
    try:
        while text not in cli.read(log):
            assert process.poll() is None, cli.read(log)[-3000:]
            assert time.monotonic() < deadline, cli.read(log)[-3000:]
            time.sleep(0.05)
        time.sleep(then)
        process.send_signal(signum)
        return process.wait(timeout=120)
    finally:
        cli.kill_group(process)


@pytest.mark.parametrize("program", [
    ("recipes.bert.pretrain", "--config_file=configs/bert/tiny_cpu.yaml"),  # check_command_line
    ("recipes.bert.prepare_data",)])  # check_program_flags
@pytest.mark.parametrize("signum, how, status", [
    (signal.SIGINT, "interrupted (Ctrl-C)", 130), (signal.SIGTERM, "SIGTERM", 143)])
def test_stopped_while_tensorflow_loads_is_one_line_not_a_traceback(program, signum, how,
                                                                   status, tmp_path):
    """Ctrl-C in a program's first seconds (its command line checked, TensorFlow importing)
    printed the KeyboardInterrupt's traceback through TensorFlow's modules, and SIGTERM
    ended it without a word."""
    output = str(tmp_path / "out")
    flag = "--output_dir" if program[0].endswith("prepare_data") else "--model_dir"
    status_given, stdout, stderr = cli.stopped_while_tensorflow_loads(
        [sys.executable, "-m", *program, f"{flag}={output}"], signum)
    assert status_given == status, stderr
    assert stdout == ""
    assert stderr.splitlines() == [f"stopped: {how} while starting, before anything was written"]
    assert not os.path.exists(output)


@pytest.mark.slow  # prepares the embedded corpus (about a minute uninterrupted)
def test_sigterm_during_data_preparation_is_one_line_and_exit_143(tmp_path):
    output_dir, log = str(tmp_path / "data"), str(tmp_path / "prepare.log")
    process = cli.start("recipes.bert.prepare_data", f"--output_dir={output_dir}",
                        log_path=log)
    # the first line, once the embedded corpus is written (the next come at the end)
    assert _signal_when(process, log, "Corpus:", then=2) == 143, cli.read(log)[-3000:]
    assert cli.read(log).splitlines()[-1] == (
        "stopped: SIGTERM (while preparing the data); run the same command again")  # (not "a
    # training run resumes from its newest checkpoint", as it said)
    # not marked finished, and no half-written shard (`prepare_data._write_shards`)
    assert not os.path.exists(os.path.join(output_dir, "metadata.json"))
    assert not glob.glob(os.path.join(output_dir, "*.tmp"))


@pytest.fixture(scope="module")
def bert_args(tmp_path_factory):
    data = tiny_bert_data.prepare(tmp_path_factory.mktemp("bert_data"))
    config = tiny_bert_data.config(data, micro_batch_size=16, steps=2, checkpoint_every=2,
                                   dropout_rate=0.0)
    path = tmp_path_factory.mktemp("bert_config") / "tiny.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return [f"--config_file={path}", "--mode=train"]


@pytest.mark.slow  # two tiny BERT runs
def test_sigterm_during_export_leaves_no_copy_and_the_rerun_exports(bert_args, tmp_path):
    model_dir, log = str(tmp_path / "run"), str(tmp_path / "stopped.log")
    process = cli.start("recipes.bert.pretrain", *bert_args, f"--model_dir={model_dir}",
                        log_path=log, env={cli.EXPORT_HOOK_ENV: "60"})
    assert _signal_when(process, log, "export written to") == 143, cli.read(log)[-3000:]
    checkpoint = os.path.join(model_dir, "checkpoints", "ckpt-2")
    assert cli.read(log).splitlines()[-1] == (
        f"stopped: SIGTERM (while exporting); the newest checkpoint is {checkpoint} (step 2): "
        "run the same command again to go on from there")
    assert not glob.glob(os.path.join(model_dir, "export*"))  # no export, no temporary copy
    with open(os.path.join(model_dir, "results.json"), encoding="utf-8") as f:
        trained = json.load(f)  # written once trained: the rerun has nothing to train
    assert trained["steps"] == 2 and "loss" in trained["train"] and trained["eval"] == {}
    # what an export killed outright (SIGKILL) leaves: removed by the next export
    os.makedirs(os.path.join(model_dir, "export.tmp-0123abcd", "variables"))
    rerun_log = str(tmp_path / "rerun.log")
    rerun = cli.start("recipes.bert.pretrain", *bert_args, f"--model_dir={model_dir}",
                      log_path=rerun_log)
    try:
        assert rerun.wait(timeout=300) == 0, cli.read(rerun_log)[-3000:]
    finally:
        cli.kill_group(rerun)
    rerun_output = cli.read(rerun_log)
    assert "already trained to step 2" in rerun_output
    assert ("removed what an interrupted export left: "
            f"{os.path.join(model_dir, 'export.tmp-0123abcd')}") in rerun_output
    assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(model_dir, "export*"))) \
        == ["export"]
    assert os.path.exists(os.path.join(model_dir, "export", "saved_model.pb"))
    with open(os.path.join(model_dir, "results.json"), encoding="utf-8") as f:
        kept = json.load(f)  # the training's record (its logs were `{}` in the rerun)
    assert kept["train"] == trained["train"]
    assert kept["wall_time_seconds"] == trained["wall_time_seconds"]
