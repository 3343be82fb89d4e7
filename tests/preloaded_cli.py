"""Runs recipe command lines quickly: import once, fork one process per command line.

Batch mode, for command lines known up front:

    python tests/preloaded_cli.py JOBS.json RESULTS.json

JOBS.json is a list of {"module", "args", "stdout", "stderr", "timeout"}. This program
imports the recipes' main modules (TensorFlow, Model Garden: ~5 s of CPU) once, then for
each job forks a child that runs `python -m module args` exactly as the command line does
(`runpy` executes the module as `__main__`: flags, `errors.run(main)`, `sys.exit`), with
stdout and stderr going to the job's files. Nothing TensorFlow runs before the fork, only
imports, so each child starts TensorFlow's runtime fresh. At most two children run at once;
a child that outlives its timeout is killed. RESULTS.json gets each job's exit status
(negative: killed by that signal) and its wall time.

Sequential mode, for command lines that depend on each other (run, change a file, run
again), from a test: `run(module, args, cwd=..., env=..., timeout=...)` (below) returns a
`subprocess.CompletedProcess` as `subprocess.run([python, "-m", module, *args],
capture_output=True, text=True, ...)` would, or raises `subprocess.TimeoutExpired`. It
sends the job to a server (`python tests/preloaded_cli.py --serve`: the same imports once,
then one JSON line a job on stdin, one answer line on stdout, each job a forked child in its
`cwd`, its stdin /dev/null), started on first use for each environment (one server at a
time per test process, each pytest-xdist worker its own: a job of another environment
replaces it). The environment is the server's: variables
read at import (TF_CPP_MIN_LOG_LEVEL, TF_USE_LEGACY_KERAS, ...) cannot differ per job, so
another `env` gets another server, and `--verbose` (which lowers TensorFlow's log level at
import) is refused unless `env` sets TF_CPP_MIN_LOG_LEVEL; PYTEST_CURRENT_TEST, which
pytest changes for every test, is left out. What the imports print happens once, in the
server (its log), not on a job's stderr: a test of what a program prints while its modules
import (TensorFlow's import lines, say) runs it with subprocess.
A server ends at the end of its stdin (the test process closed it, or died: a server also
checks for that while a job runs); a job's child dies with its server. A server's log and
its job's outputs are in a directory of the temporary directory named by the test process's
pid, removed when the server closes, or, if that process was killed (SIGKILL: nothing of it
runs), when the next server starts.
"""

import atexit
import ctypes
import gc
import json
import os
import re
import runpy
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings

# TF_CPP_MIN_LOG_LEVEL: as the caller's environment has it, else the recipes' default
# (recipes/common/startup.py, the first import of every recipe module preloaded below).
MODULES = ("recipes.bert.pretrain", "recipes.resnet.train", "recipes.bert.prepare_data",
           "recipes.bert.finetune")
PARALLEL = 2
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTUP_SECONDS = 600  # a server's imports, before its first answer (on a loaded machine)
ANSWER_SECONDS = 60  # past a job's timeout: the server kills the child and answers
MAX_SERVERS = 1  # each holds its imports (~0.8 GB): another environment's replaces it
_PR_SET_PDEATHSIG = 1


def _child(job):
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    sys.argv = [job["module"], *job["args"]]
    # runpy's notice that the module was imported before (by the preloading) is expected.
    warnings.filterwarnings("ignore", message=".*found in sys.modules.*", category=RuntimeWarning)
    code = 0
    try:
        runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code
        if code is not None and not isinstance(code, int):  # as the interpreter does
            print(code, file=sys.stderr)
            code = 1
        code = code or 0
    except BaseException:  # what the interpreter would do: traceback, status 1
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _preload():
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    sys.path[0] = os.getcwd()  # (not tests/, this file's): as `python -m` from there
    for module in MODULES:
        __import__(module)
    # The imports' objects out of the children's garbage collections: each full collection
    # of a child went over them all, and wrote to their pages, copying them (copy on write).
    gc.collect()
    gc.freeze()


def main(jobs_path, results_path):
    _preload()
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = [None] * len(jobs)
    running = {}  # pid -> (index, start, deadline)
    pending = list(range(len(jobs)))
    while pending or running:
        while pending and len(running) < PARALLEL:
            index = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                _child(jobs[index])
            start = time.monotonic()
            running[pid] = (index, start, start + jobs[index]["timeout"])
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for other, (_, _, deadline) in running.items():
                if now > deadline:
                    os.kill(other, signal.SIGKILL)
            time.sleep(0.05)
            continue
        index, start, _ = running.pop(pid)
        results[index] = {
            "returncode": os.waitstatus_to_exitcode(status),
            "seconds": round(time.monotonic() - start, 1),
        }
    with open(results_path, "w") as f:
        json.dump(results, f)


def serve():
    """Sequential mode's server: one job (a JSON line on stdin) at a time, each answered
    with {"returncode", "seconds", "timed_out"} on stdout, until the end of stdin."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what the imports print goes to the log, not among the answers
    parent = os.getppid()
    _preload()
    for line in sys.stdin:
        answers.write(json.dumps(_serve_one(json.loads(line), parent)) + "\n")


def _serve_one(job, parent):
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        _start_child(job, server)
    start = time.monotonic()
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if os.getppid() != parent:  # the test process died: nobody waits for the answer
            os.kill(pid, signal.SIGKILL)
            os._exit(1)
        if time.monotonic() - start > job["timeout"]:
            os.kill(pid, signal.SIGKILL)
            timed_out = True
        time.sleep(0.05)
    return {"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out,
            "seconds": round(time.monotonic() - start, 1)}


def _start_child(job, server):
    """In a forked child of the server: its set-up, then the job (`_child`); a set-up that
    fails writes its traceback to the job's stderr file and exits with status 1."""
    try:  # dies with the server (a server killed itself leaves no job behind)
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server:
            os._exit(1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # not the server's jobs
        os.chdir(job["cwd"])
        sys.path[0] = os.getcwd()  # as `python -m` puts the current directory first
    except BaseException:
        import traceback

        with open(job["stderr"], "w") as f:
            traceback.print_exc(file=f)
        os._exit(1)
    _child(job)


class Server:
    """A `--serve` process of one environment (the client side: `run` below)."""

    def __init__(self, env):
        self.directory = new_directory()
        self.log = os.path.join(self.directory, "server.log")
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--serve"], cwd=REPO_ROOT,
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True)  # Ctrl-C goes to pytest; the server ends with it
        self.answered = 0
        self._pending = b""

    def run(self, module, args, cwd, timeout):
        out, err = (os.path.join(self.directory, name) for name in ("stdout", "stderr"))
        for path in (out, err):  # (not the previous job's, should this one not write them)
            if os.path.exists(path):
                os.remove(path)
        job = {"module": module, "args": list(args), "cwd": os.fspath(cwd), "stdout": out,
               "stderr": err, "timeout": timeout}
        try:
            self.process.stdin.write((json.dumps(job) + "\n").encode())
            self.process.stdin.flush()
            line = self._answer(
                timeout + ANSWER_SECONDS + (0 if self.answered else STARTUP_SECONDS))
        except BrokenPipeError:
            line = None
        except BaseException:  # (Ctrl-C): its answer would be taken for the next job's
            self.close()
            raise
        if line is None:
            with open(self.log, errors="replace") as f:
                log = f.read()[-3000:]
            self.close()  # (the next job gets a new server)
            raise RuntimeError(f"tests/preloaded_cli.py --serve ended or hung (exit status "
                               f"{self.process.returncode}); its log:\n{log}")
        answer = json.loads(line)
        self.answered += 1
        stdout, stderr = (_read(path) for path in (out, err))
        argv = [sys.executable, "-m", module, *args]
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
        return subprocess.CompletedProcess(argv, answer["returncode"], stdout, stderr)

    def _answer(self, seconds):
        """The server's next line (None: none within `seconds`, or the server ended)."""
        deadline = time.monotonic() + seconds
        fd = self.process.stdout.fileno()
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line

    def close(self):
        """Ends the server (at the end of its stdin; killed if it has not within 10 s)."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def new_directory(parent=None):
    """A new directory of a server's log and job outputs in `parent` (None: the temporary
    directory), named by this process's pid, after removing those of processes that have
    ended: a test process SIGKILLed runs no `close`, and its server's directory was left."""
    parent = parent or tempfile.gettempdir()
    for name in os.listdir(parent):
        owner = re.fullmatch(r"preloaded_cli-(\d+)-.+", name)
        if owner and not _alive(int(owner.group(1))):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"preloaded_cli-{os.getpid()}-", dir=parent)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        pass
    return True


def _read(path):
    """The text of the job's output file `path` ("" if the job never opened it)."""
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


_SERVERS = {}  # environment (sorted items) -> Server, the most recently used last


def server_environment(env=None):
    """The environment of the server that runs a job given `env` (None: this process's)."""
    env = dict(os.environ if env is None else env)
    env.pop("PYTEST_CURRENT_TEST", None)  # (pytest's name of the test: one server for all)
    return env


def server_of(env=None):
    """The server (a `Server`) of the jobs given `env`, if one has started."""
    return _SERVERS.get(tuple(sorted(server_environment(env).items())))


def run(module, args, *, cwd, env=None, timeout):
    """`subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
    capture_output=True, text=True, timeout=timeout)`, through this environment's server."""
    if timeout is None or not os.path.isdir(cwd):  # (subprocess.run: no limit; an OSError)
        raise ValueError(f"a job needs a timeout and an existing cwd, not {timeout}, {cwd}")
    env = server_environment(env)
    if "--verbose" in args and "TF_CPP_MIN_LOG_LEVEL" not in env:
        raise ValueError("--verbose sets TensorFlow's log level at import, before the job: "
                         "run it with subprocess, or set TF_CPP_MIN_LOG_LEVEL in env")
    key = tuple(sorted(env.items()))
    server = _SERVERS.pop(key, None)
    if server is None or server.process.poll() is not None:
        while len(_SERVERS) >= MAX_SERVERS:
            _SERVERS.pop(next(iter(_SERVERS))).close()
        server = Server(env)
    _SERVERS[key] = server
    return server.run(module, args, cwd, timeout)


@atexit.register
def close_all():
    """Ends every server (conftest.py's pytest_unconfigure, or at exit)."""
    while _SERVERS:
        _SERVERS.popitem()[1].close()


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        main(*sys.argv[1:])
