"""Runs study runs as subprocesses of the recipe CLI: resumable, in parallel, with progress.

A run's model directory is `<study_dir>/runs/<run.name>`; when the run is over the study
writes `study_run.json` there (status `ok` with the figures from results.json, or
`diverged` with the recipe's error line). A run with that file is never run again, so a
study stopped at any point resumes where it was: unfinished runs start again (the recipe
resumes from its own checkpoint if it wrote one). A failure other than divergence stops
the study with the recipe's error line: it would fail every run alike.
"""
import concurrent.futures
import json
import os
import subprocess
import time

from recipes.study import adapter

RUNS_SUBDIR = "runs"
STATUS_FILE = "study_run.json"
LOG_FILE = "study_run.log"


class RunFailed(RuntimeError):
    """A recipe run failed for a reason other than divergence; one line."""


def run_dir(study_dir, run):
    return os.path.join(study_dir, RUNS_SUBDIR, run.name)


def read_status(study_dir, run):
    """The run's recorded outcome ({"status", ...}) or None if it has not finished."""
    path = os.path.join(run_dir(study_dir, run), STATUS_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def _write_status(directory, status):
    path = os.path.join(directory, STATUS_FILE)
    with open(path + ".tmp", "w") as handle:
        json.dump(status, handle, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)


def _last_error_line(log_path):
    with open(log_path, errors="replace") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["(no output)"])[-1]


def execute_one(run, *, recipe, config_files, study_dir, extra_overrides, metric):
    """Runs `run` to its end; records and returns its status."""
    directory = run_dir(study_dir, run)
    os.makedirs(directory, exist_ok=True)
    log_path = os.path.join(directory, LOG_FILE)
    argv = adapter.command(recipe, config_files, run, directory, extra_overrides)
    start = time.perf_counter()
    with open(log_path, "a") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        returncode = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode
    status = {"run": run.__dict__, "process_seconds": round(time.perf_counter() - start, 1)}
    if returncode == 0:
        status.update(status="ok", result=adapter.read_results(directory, metric))
    else:
        line = _last_error_line(log_path)
        if "diverged" not in line.lower():
            raise RunFailed(f"run {run.name} failed (exit {returncode}): {line} [log: {log_path}]")
        status.update(status="diverged", error=line)
    _write_status(directory, status)
    return status


def execute(runs, *, parallel, progress, **run_arguments):
    """Runs every unfinished run of `runs` (`parallel` at a time); returns
    {run.name: status} for all of them. `progress(done, total, run, status)` after each."""
    study_dir = run_arguments["study_dir"]
    statuses = {run.name: read_status(study_dir, run) for run in runs}
    todo = [run for run in runs if statuses[run.name] is None]
    done = len(runs) - len(todo)
    if not todo:
        return statuses
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = {pool.submit(execute_one, run, **run_arguments): run for run in todo}
        try:
            for future in concurrent.futures.as_completed(futures):
                run = futures[future]
                statuses[run.name] = future.result()
                done += 1
                progress(done, len(runs), run, statuses[run.name])
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return statuses
