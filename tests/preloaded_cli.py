"""Runs many recipe command lines quickly: import once, fork one process per command line.

    python tests/preloaded_cli.py JOBS.json RESULTS.json

JOBS.json is a list of {"module", "args", "stdout", "stderr", "timeout"}. This program
imports the recipes' main modules (TensorFlow, Model Garden: ~5 s of CPU) once, then for
each job forks a child that runs `python -m module args` exactly as the command line does
(`runpy` executes the module as `__main__`: flags, `errors.run(main)`, `sys.exit`), with
stdout and stderr going to the job's files. Nothing TensorFlow runs before the fork, only
imports, so each child starts TensorFlow's runtime fresh. At most two children run at once;
a child that outlives its timeout is killed. RESULTS.json gets each job's exit status
(negative: killed by that signal) and its wall time.
"""

import json
import os
import runpy
import signal
import sys
import time
import warnings

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TF_CPP_MIN_LOG_LEVEL: as the caller's environment has it, else the recipes' default
# (recipes/common/startup.py, the first import of every recipe module preloaded below).
MODULES = ("recipes.bert.pretrain", "recipes.resnet.train", "recipes.bert.prepare_data")
PARALLEL = 2


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
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # what the interpreter would do: traceback, status 1
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(jobs_path, results_path):
    sys.path.insert(0, os.getcwd())
    for module in MODULES:
        __import__(module)
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


if __name__ == "__main__":
    main(*sys.argv[1:])
