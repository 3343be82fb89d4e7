"""TensorFlow's C++ log lines go to `<model_dir>/tensorflow.log`, not the console.

Some lines reach the process's stderr (file descriptor 2) from C/C++ code that no setting
reaches: XLA's `Compiled cluster using XLA!` and absl's `WARNING: All log messages before
absl::InitializeLog() is called are written to STDERR` (absl logging, which ignores
TF_CPP_MIN_LOG_LEVEL; ABSL_MIN_LOG_LEVEL, TF_CPP_MAX_VLOG_LEVEL and GLOG_minloglevel do not
reach it either, and absl's C++ flags such as --stderrthreshold are never parsed in a Python
process), and libjpeg's `Not a JPEG file: starts with 0x74 0x68` while decoding a bad image.
`to_file` points descriptor 2 at the log file while Python's `sys.stderr` keeps the real
stderr, so the program's own lines (errors, `warnings.warn`, tracebacks) stay on the console;
Python `logging` records go to the file (absl's handler, made at start-up, writes to the
stream of descriptor 2), TensorFlow's Python-side WARNINGs among them. The converter
(`recipes.resnet.convert`), which has no directory of its own (its --output_dir is a
dataset's, read by globs), sends them nowhere instead (`discarded`), C++ code's FATAL and
CHECK lines of a crash too; --verbose shows them.
Some C++ lines come after the program's last line, while the process exits: a worker of a
multi-worker run whose peer has already exited gets gRPC's `failed to connect to all
addresses ... Connection refused` from the coordination service's shutdown. A recipe's
`main` calls `keep_for_exit` once the run is over, so those go to the same log file.
"""

import contextlib
import os
import sys
import tempfile

from recipes.common import storage

LOG_FILE = "tensorflow.log"
_last_log = None  # the file `to_file` last wrote to, for `keep_for_exit`


@contextlib.contextmanager
def to_file(model_dir, verbose=False):
    """While active, writes to file descriptor 2 (C/C++ code) are appended to
    `model_dir/tensorflow.log` (a local file under the temporary directory for a remote
    `model_dir`, e.g. gs://); `sys.stderr` writes to the original stderr. With `verbose`,
    nothing changes. Yields the log file's path (None with `verbose`)."""
    if verbose:
        yield None
        return
    if not storage.all_local([model_dir]):
        directory = tempfile.mkdtemp(prefix="lamb_tf_log_")
        print(f"TensorFlow's log: {os.path.join(directory, LOG_FILE)}", flush=True)
    else:
        directory = storage.local_path(model_dir)
        os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOG_FILE)
    global _last_log
    _last_log = path
    with _descriptor_2_at(path):
        yield path


@contextlib.contextmanager
def discarded(verbose=False):
    """`to_file` for a program with no directory of its own to log in (the converter, whose
    output directory is a dataset's): writes to file descriptor 2 go nowhere (os.devnull)
    while active; `sys.stderr` writes to the original stderr. With `verbose`, nothing
    changes."""
    if verbose:
        yield
        return
    with _descriptor_2_at(os.devnull):
        yield


@contextlib.contextmanager
def _descriptor_2_at(path):
    """While active, descriptor 2 appends to `path` and `sys.stderr` writes to the original
    stderr (`_descriptor_2_to`); both are given back at the end."""
    python_stderr = sys.stderr
    terminal = _descriptor_2_to(path)
    try:
        yield
    finally:
        if sys.stderr is not python_stderr:
            sys.stderr.flush()
            sys.stderr.close()
            sys.stderr = python_stderr
        os.dup2(terminal, 2)
        os.close(terminal)


def keep_for_exit():
    """For the rest of the process, descriptor 2 writes to the log file `to_file` last
    wrote to (to nothing if its directory is gone: a multi-worker worker's private
    directory is removed at the end) and `sys.stderr` to the console, as inside `to_file`.
    Call it when the program is over (nothing to do if `to_file` never redirected)."""
    if _last_log is not None:
        exists = os.path.isdir(os.path.dirname(_last_log))
        os.close(_descriptor_2_to(_last_log if exists else os.devnull))


def remove_if_only_log(directory):
    """Removes `directory` if it holds nothing but the log file `to_file` made there (a run
    that failed before writing anything else into a directory it created)."""
    with contextlib.suppress(OSError):  # (then it stays: never an error of its own)
        if os.path.isdir(directory) and os.listdir(directory) in ([], [LOG_FILE]):
            if os.listdir(directory):
                os.remove(os.path.join(directory, LOG_FILE))
            os.rmdir(directory)


def _descriptor_2_to(path):
    """Points descriptor 2 at `path` (appending) and `sys.stderr`, if it wrote to
    descriptor 2, at a copy of the old one; returns another copy of the old descriptor 2."""
    sys.stderr.flush()
    terminal = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)
    os.close(log)
    stream = sys.stderr
    if _descriptor(stream) == 2:  # else (a test's capture) it is left as it is
        sys.stderr = os.fdopen(os.dup(terminal), "w", buffering=1, encoding=stream.encoding,
                               errors=stream.errors)
    return terminal


def _descriptor(stream):
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
