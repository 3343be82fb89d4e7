"""recipes/common/native_log.py in a fresh process (no TensorFlow): what C code writes to
file descriptor 2 goes to <model_dir>/tensorflow.log while the redirect is on, Python's
sys.stderr stays on the real stderr, and both are as before afterwards; after
`keep_for_exit`, what C code writes while the process exits goes to the log too; `discarded`
(a data tool's) drops it. The recipes' command lines are checked in tests/test_bad_inputs.py
(XLA's and libjpeg's lines) and tests/test_resnet_convert.py (the converter's)."""

import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = """
import os, sys
from recipes.common import native_log
with native_log.to_file(sys.argv[1], verbose=sys.argv[2] == "verbose") as path:
    os.write(2, b"native line\\n")  # as C code writes: to the descriptor
    print("python line", file=sys.stderr)
print(path)
os.write(2, b"native after\\n")
print("python after", file=sys.stderr)
"""

# As a recipe's main ends: the program's last line, then C++ lines while the process exits
# (gRPC's, when a peer worker has exited first).
PROGRAM_EXIT = """
import atexit, os, sys
from recipes.common import native_log
atexit.register(os.write, 2, b"native line at exit\\n")
with native_log.to_file(sys.argv[1], verbose=sys.argv[2] == "verbose"):
    os.write(2, b"native line\\n")
native_log.keep_for_exit()
print("stopped: the program's last line", file=sys.stderr)
sys.exit(143)
"""


def _run(model_dir, verbose, program=PROGRAM, check=True):
    return subprocess.run([sys.executable, "-c", program, str(model_dir), verbose],
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": REPO_ROOT},
                          capture_output=True, text=True, timeout=60, check=check)


def test_native_stderr_goes_to_the_log_file_and_python_stderr_stays(tmp_path):
    model_dir = tmp_path / "run"
    result = _run(model_dir, "quiet")
    assert result.stderr == "python line\nnative after\npython after\n"
    assert result.stdout.strip() == str(model_dir / "tensorflow.log")
    assert (model_dir / "tensorflow.log").read_text() == "native line\n"


def test_verbose_keeps_everything_on_the_console(tmp_path):
    result = _run(tmp_path / "run", "verbose")
    assert result.stderr == "native line\npython line\nnative after\npython after\n"
    assert not (tmp_path / "run").exists()


def test_native_lines_while_the_process_exits_go_to_the_log_after_keep_for_exit(tmp_path):
    model_dir = tmp_path / "run"
    result = _run(model_dir, "quiet", PROGRAM_EXIT, check=False)
    assert result.returncode == 143, result.stderr
    assert result.stderr == "stopped: the program's last line\n"
    assert (model_dir / "tensorflow.log").read_text() == "native line\nnative line at exit\n"


def test_keep_for_exit_after_the_log_directory_is_removed_drops_the_exit_lines(tmp_path):
    program = PROGRAM_EXIT.replace("native_log.keep_for_exit()",
                                   "import shutil; shutil.rmtree(sys.argv[1]); "
                                   "native_log.keep_for_exit()")
    result = _run(tmp_path / "run", "quiet", program, check=False)
    assert result.returncode == 143, result.stderr
    assert result.stderr == "stopped: the program's last line\n"
    assert not (tmp_path / "run").exists()


def test_keep_for_exit_without_a_log_changes_nothing(tmp_path):
    result = _run(tmp_path / "run", "verbose", PROGRAM_EXIT, check=False)
    assert result.stderr == ("native line\nstopped: the program's last line\n"
                             "native line at exit\n")
    assert not (tmp_path / "run").exists()


# A data tool's (recipes.resnet.convert's): no directory of its own to log in.
PROGRAM_DISCARDED = """
import os, sys
from recipes.common import native_log
with native_log.discarded(verbose=sys.argv[2] == "verbose"):
    os.write(2, b"native line\\n")
    print("python line", file=sys.stderr)
os.write(2, b"native after\\n")
print("python after", file=sys.stderr)
"""


def test_discarded_drops_native_stderr_and_keeps_python_stderr_unless_verbose(tmp_path):
    result = _run(tmp_path / "unused", "quiet", PROGRAM_DISCARDED)
    assert result.stderr == "python line\nnative after\npython after\n"
    result = _run(tmp_path / "unused", "verbose", PROGRAM_DISCARDED)
    assert result.stderr == "native line\npython line\nnative after\npython after\n"
    assert not (tmp_path / "unused").exists()
