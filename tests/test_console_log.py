"""recipes/common/native_log.py in a fresh process (no TensorFlow): what C code writes to
file descriptor 2 goes to <model_dir>/tensorflow.log while the redirect is on, Python's
sys.stderr stays on the real stderr, and both are as before afterwards. The recipes' command
lines are checked in tests/test_bad_inputs.py (XLA's and libjpeg's lines)."""

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


def _run(model_dir, verbose):
    return subprocess.run([sys.executable, "-c", PROGRAM, str(model_dir), verbose],
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": REPO_ROOT},
                          capture_output=True, text=True, timeout=60, check=True)


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
