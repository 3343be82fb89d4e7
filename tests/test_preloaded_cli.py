"""tests/preloaded_cli.py's sequential mode: a job through the server (TensorFlow and the
recipes imported once, a forked child per job) answers as `python -m` run directly does."""
import os
import subprocess
import sys
import time

import pytest

import preloaded_cli
from conftest import REPO_ROOT

PROBE = '''import json, os, sys, time
print(json.dumps({"name": __name__, "cwd": os.getcwd(), "argv": sys.argv,
                  "path0": sys.path[0], "stdin": sys.stdin.read()}))
if sys.argv[1:2] == ["--kill-server"]:
    os.kill(os.getppid(), 9)
    time.sleep(600)
if sys.argv[1:2] == ["--sleep"]:
    with open("pid", "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
sys.exit(sys.argv[1] if sys.argv[1:] else 0)
'''


def _direct(module, args, cwd, env):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _as_run(done):
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow  # a server's imports (TensorFlow, Model Garden)
def test_jobs_answer_as_direct_runs_in_their_directory_and_are_killed_at_their_timeout(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "a test")  # (pytest's: changes every test)
    env = {**os.environ, "PYTHONPATH": REPO_ROOT}
    (tmp_path / "probe.py").write_text(PROBE)
    # a recipe's flag mistake: exit status 2, one line on stderr (before TensorFlow runs)
    bad = ["recipes.bert.prepare_data", ["--no_such_flag=1"], tmp_path, env]
    served = preloaded_cli.run(*bad[:2], cwd=tmp_path, env=env, timeout=120)
    server = preloaded_cli.server_of(env)  # (one an earlier test file started, maybe)
    answered = server.answered
    assert served.returncode == 2 and served.stderr.startswith("error: --no_such_flag=1")
    assert _as_run(served) == _as_run(_direct(*bad))
    # a module found in its directory (the current one: first on sys.path), its exit status
    # (a message: status 1) and its stdin empty, as `python -m probe` there
    for args in ([], ["3"], ["a message"]):
        served = preloaded_cli.run("probe", args, cwd=tmp_path, env=env, timeout=60)
        assert _as_run(served) == _as_run(_direct("probe", args, tmp_path, env))
    assert served.returncode == 1 and served.stderr == "a message\n"
    assert f'"cwd": "{tmp_path}"' in served.stdout
    # past its timeout: killed, subprocess.run's TimeoutExpired with what it printed
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        preloaded_cli.run("probe", ["--sleep"], cwd=tmp_path, env=env, timeout=2)
    assert time.monotonic() - start < 30 and '"--sleep"' in expired.value.stdout
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "pid").read_text()), 0)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "the next test")
    env = {**os.environ, "PYTHONPATH": REPO_ROOT}
    assert preloaded_cli.run("probe", [], cwd=tmp_path, env=env, timeout=60).returncode == 0
    assert preloaded_cli.server_of(env) is server and server.answered == answered + 5
    preloaded_cli.close_all()  # (conftest.py's pytest_unconfigure)
    assert server.process.returncode == 0 and not os.path.exists(server.directory)
    # a server that dies under a job: an error with its log, and the next job a new server
    with pytest.raises(RuntimeError, match=r"--serve ended or hung \(exit status -9\)"):
        preloaded_cli.run("probe", ["--kill-server"], cwd=tmp_path, env=env, timeout=60)
    assert preloaded_cli.run("probe", [], cwd=tmp_path, env=env, timeout=60).returncode == 0
    assert preloaded_cli.server_of(env).answered == 1


def test_a_job_without_a_timeout_or_in_a_missing_directory_is_refused(tmp_path):
    for timeout, cwd in ((None, tmp_path), (60, tmp_path / "gone")):
        with pytest.raises(ValueError, match="a job needs a timeout and an existing cwd"):
            preloaded_cli.run("probe", [], cwd=cwd, timeout=timeout)


def test_verbose_is_refused_where_it_would_change_the_log_level_set_at_import():
    env = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
    with pytest.raises(ValueError, match="--verbose sets TensorFlow's log level at import"):
        preloaded_cli.run("recipes.bert.finetune", ["--verbose"], cwd=REPO_ROOT, env=env,
                          timeout=60)


HOLDER = """import sys, time
sys.path.insert(0, sys.argv[1])
import preloaded_cli
print(preloaded_cli.new_directory(sys.argv[2]), flush=True)
time.sleep(600)
"""


def test_the_directory_of_a_killed_test_process_goes_when_the_next_server_starts(tmp_path):
    """A test process SIGKILLed runs no `close`: its server's directory was left in /tmp.
    The next server's start removes it, and keeps the directory of a process alive."""
    holders = [subprocess.Popen([sys.executable, "-c", HOLDER, os.path.dirname(__file__),
                                 str(tmp_path)], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    try:
        killed, alive = (holder.stdout.readline().strip() for holder in holders)
        assert os.path.isdir(killed) and os.path.isdir(alive)
        holders[0].kill()
        holders[0].wait()
        new = preloaded_cli.new_directory(str(tmp_path))
        assert sorted(os.listdir(tmp_path)) == sorted(map(os.path.basename, (alive, new)))
        assert os.path.basename(new).startswith(f"preloaded_cli-{os.getpid()}-")
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
            holder.stdout.close()
