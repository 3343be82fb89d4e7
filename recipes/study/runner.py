"""Runs study runs as subprocesses of the recipe CLI: resumable, in parallel, with progress.

A run's model directory is `<study_dir>/runs/<run.name>`; when the run is over the study
writes `study_run.json` there (status `ok` with the figures from results.json, or
`diverged` with the recipe's error line). A run with that file is never run again, so a
study stopped at any point resumes where it was: unfinished runs start again (the recipe
resumes from its own checkpoint if it wrote one). A failure other than divergence stops
the study with the recipe's error line: it would fail every run alike. Once the study
stops (a failure, Ctrl-C), no further run starts and the runs under way are stopped with
SIGTERM (the recipes save a checkpoint of their step and exit); none of them is recorded
but for its process's seconds (`stopped_attempts.json`), which the run's status adds to
its own when it finishes.
"""
import concurrent.futures
import dataclasses
import json
import os
import re
import signal
import subprocess
import threading
import time

from recipes.common import storage
from recipes.common.errors import UserError
from recipes.study import adapter

RUNS_SUBDIR = "runs"
STATUS_FILE = "study_run.json"
LOG_FILE = "study_run.log"
STOPPED_ATTEMPTS_FILE = "stopped_attempts.json"  # [seconds of each process the study stopped]
# what to do about a damaged file of a run (truncated by a crash, edited by hand)
REDO_ADVICE = ("remove it and run the study again: the run is evaluated again from its "
               "last checkpoint and recorded")
STOPPED_ATTEMPTS_ADVICE = ("remove it: the run's process count and time then leave out the "
                           "processes the study stopped")

# The error lines of the shared driver's `TrainingDiverged` (recipes/common/callbacks.py:
# `CheckpointEachEpoch`, a non-finite loss after a step and a non-finite variable before a
# checkpoint; recipes/common/driver.py: a non-finite held-out loss), as the recipe's CLI
# prints them (recipes/common/errors.py: "error: " and the message, exit status 2, the
# status of every other mistake too, so the line is what tells them apart).
DIVERGENCE_LINES = (
    re.compile(r"error: loss became \S+ at step \d+; stopped without saving"),
    re.compile(r"error: variable \S+ is not finite after step \d+; stopped without saving"),
    re.compile(r"error: eval loss is \S+; the model diverged"),
)


class RunFailed(RuntimeError):
    """A recipe run failed for a reason other than divergence; one line."""


def is_divergence(error_line):
    """Whether a recipe's last error line is the driver's report of a diverged run."""
    return any(pattern.match(error_line) for pattern in DIVERGENCE_LINES)


def run_dir(study_dir, run):
    return os.path.join(study_dir, RUNS_SUBDIR, run.name)


def read_status(study_dir, run, metric=None):
    """The run's recorded outcome ({"status", ...}) or None if it has not finished. Given
    `metric`, the result of a finished run holds that held-out metric: a run recorded with
    another one (the study's --metric changed) has it read again from its results.json."""
    path = os.path.join(run_dir(study_dir, run), STATUS_FILE)
    if not os.path.exists(path):
        return None
    status = storage.read_mapping(path, ("status",), REDO_ADVICE)
    recorded = status.get("result", {}).get("metric_name")
    if metric is None or status["status"] != "ok" or recorded == metric:
        return status
    return {**status, "result": _read_results(run_dir(study_dir, run), run, metric,
                                              recorded or "another metric")}


def _read_results(directory, run, metric, recorded=None):
    """`adapter.read_results` of a run that finished; a `RunFailed` if it holds no `metric`."""
    try:
        result = adapter.read_results(directory, metric)
    except adapter.MetricMissing as missing:
        raise RunFailed(
            f"--metric={metric}: run {run.name} finished, but its held-out results "
            f"have no {metric!r}, only {', '.join(missing.available) or 'none'} "
            f"({missing.path}); run the same command with --metric set to one of those"
        ) from None
    if result is None and recorded is None:
        raise RunFailed(f"run {run.name} finished without writing its {adapter.RESULTS_FILE} "
                        f"({directory}); run it again: remove {directory}")
    if result is None:  # recorded with another metric, and its results.json is gone
        raise RunFailed(
            f"--metric={metric}: run {run.name} was recorded with --metric={recorded}, and its "
            f"{adapter.RESULTS_FILE}, which holds the others, is gone ({directory}); give "
            f"--metric={recorded}")
    return result


def study_flags(recipe, config_files, extra_overrides):
    """The study's flags that shape every run besides its `Run` settings, as a run's status
    records them."""
    return {"--recipe": recipe, "--config_file": list(config_files),
            "--params_override": extra_overrides}


def check_recorded(study_dir, runs, flags):
    """A UserError for the first of `runs` recorded in `study_dir` with other settings
    (`Run` fields its name does not hold, such as the steps of another --epochs; or other
    `study_flags`): its figures would be tabulated as this study's."""
    for run in runs:
        status = read_status(study_dir, run)
        if status is None:
            continue
        recorded = {**status.get("run", {}), **status.get("study_flags", flags)}
        planned = {**dataclasses.asdict(run), **flags}
        differences = [f"{key} {recorded.get(key)!r} then, {value!r} now"
                       for key, value in planned.items()
                       if _comparable(key, recorded.get(key)) != _comparable(key, value)]
        if differences:
            raise UserError(
                f"--study_dir={study_dir}: run {run.name} was recorded with other settings "
                f"({'; '.join(differences)}); give another --study_dir for these settings, "
                "or the flags of the study that made it")


def _comparable(key, value):
    """A recorded setting as compared: config files by the files they name (`configs/a.yaml`
    and `./configs/a.yaml` are one file; --recipe is recorded absolute already)."""
    if key == "--config_file" and isinstance(value, list):
        return [os.path.abspath(path) for path in value]
    return value


def finished_runs(study_dir):
    """Names of the runs under `study_dir` with a recorded outcome (of any grid)."""
    runs_dir = os.path.join(study_dir, RUNS_SUBDIR)
    if not os.path.isdir(runs_dir):
        return []
    return sorted(name for name in os.listdir(runs_dir)
                  if os.path.exists(os.path.join(runs_dir, name, STATUS_FILE)))


def _write_json(path, value):
    """Writes `value` to `path` atomically (a stopped study leaves no half-written file)."""
    storage.write_text(path, json.dumps(value, indent=2, sort_keys=True))


def _write_status(directory, status):
    _write_json(os.path.join(directory, STATUS_FILE), status)


def _stopped_attempts(directory):
    """The seconds of each earlier process of the run that the study stopped."""
    path = os.path.join(directory, STOPPED_ATTEMPTS_FILE)
    if not os.path.exists(path):
        return []
    attempts = storage.read_document(path, STOPPED_ATTEMPTS_ADVICE)
    if not isinstance(attempts, list) or not all(  # (a bool is an int: not seconds)
            isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
            for seconds in attempts):
        raise UserError(f"{path} is not a list of seconds; {STOPPED_ATTEMPTS_ADVICE}")
    return attempts


def _record_stopped_attempt(directory, seconds):
    _write_json(os.path.join(directory, STOPPED_ATTEMPTS_FILE),
                _stopped_attempts(directory) + [seconds])


def _last_error_line(log_path):
    with open(log_path, errors="replace") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["(no output)"])[-1]


# A run ended by SIGTERM or SIGINT: the recipes' exit statuses (128 + the signal) or the
# signal itself (a negative return code).
_STOPPED_EXITS = {code for number in (signal.SIGTERM, signal.SIGINT)
                  for code in (128 + number, -number)}
# How long a thread whose run so ended waits for the study's own handler of that signal (in
# the main thread) to say stop, before it takes the next run.
_STOP_GRACE_SECONDS = 3


class _Stop:
    """Shared by the threads of one `execute`: once set, no run starts and the processes
    under way are sent SIGTERM."""

    def __init__(self):
        self._lock = threading.Lock()
        self._processes = set()
        self.is_set = False
        self._said = threading.Event()

    def wait(self, seconds):
        """Until the study says stop, or `seconds` have passed."""
        self._said.wait(seconds)

    def start(self, argv, log):
        """The run's process, or None once the study is stopping."""
        with self._lock:
            if self.is_set:
                return None
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            self._processes.add(process)
            return process

    def finished(self, process):
        with self._lock:
            self._processes.discard(process)

    def set(self):
        with self._lock:
            self.is_set = True
            self._said.set()
            for process in self._processes:
                if process.poll() is None:
                    process.terminate()


def execute_one(run, *, recipe, config_files, study_dir, extra_overrides, metric, stop=None):
    """Runs `run` to its end; records and returns its status (None: not run or stopped,
    because `stop` was set)."""
    stop = stop or _Stop()
    if stop.is_set:
        return None
    directory = run_dir(study_dir, run)
    os.makedirs(directory, exist_ok=True)
    log_path = os.path.join(directory, LOG_FILE)
    argv = adapter.command(recipe, config_files, run, directory, extra_overrides)
    start = time.perf_counter()
    with open(log_path, "a") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        process = stop.start(argv, log)
        if process is None:
            return None
        try:
            returncode = process.wait()
        finally:
            stop.finished(process)
    seconds = round(time.perf_counter() - start, 1)
    if returncode in _STOPPED_EXITS and not stop.is_set:  # (the next run: not before it)
        stop.wait(_STOP_GRACE_SECONDS)
    # stopped by the study, or by the signal that stops the study (a process group's SIGTERM
    # or Ctrl-C reaches the run too, maybe before the study has said stop): it runs again
    if returncode != 0 and (stop.is_set or returncode in _STOPPED_EXITS):
        _record_stopped_attempt(directory, seconds)
        return None
    stopped = _stopped_attempts(directory)
    status = {"run": dataclasses.asdict(run),
              "study_flags": study_flags(recipe, config_files, extra_overrides),
              "process_seconds": round(seconds + sum(stopped), 1),  # every process's
              "processes": len(stopped) + 1}
    if returncode == 0:
        status.update(status="ok", result=_read_results(directory, run, metric))
    else:
        line = _last_error_line(log_path)
        if not is_divergence(line):
            raise RunFailed(f"run {run.name} failed (exit {returncode}): "
                            f"{line.removeprefix('error: ')} [log: {log_path}]")
        status.update(status="diverged", error=line)
    _write_status(directory, status)
    return status


def execute(runs, *, parallel, progress, **run_arguments):
    """Runs every unfinished run of `runs` (`parallel` at a time); returns
    {run.name: status} for all of them. `progress(done, total, run, status)` after each.
    An exception (a `RunFailed`, Ctrl-C) starts no further run and stops those under way."""
    study_dir = run_arguments["study_dir"]
    statuses = {run.name: read_status(study_dir, run, run_arguments["metric"]) for run in runs}
    todo = [run for run in runs if statuses[run.name] is None]
    done = len(runs) - len(todo)
    if not todo:
        return statuses
    stop = _Stop()

    def execute_or_stop(run):
        try:
            return execute_one(run, stop=stop, **run_arguments)
        except BaseException:
            stop.set()  # here, before this thread can take the next run
            raise

    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = {pool.submit(execute_or_stop, run): run for run in todo}
        try:
            for future in concurrent.futures.as_completed(futures):
                run = futures[future]
                statuses[run.name] = future.result()
                done += 1
                progress(done, len(runs), run, statuses[run.name])
        except BaseException:
            stop.set()
            for future in futures:
                future.cancel()
            raise
    return statuses
