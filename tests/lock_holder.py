"""`held_by_another_process(directory)`: a second process holds `directory` as a running
program of the project does (`recipes.common.storage.exclusive_use`: `flock` on the
directory) while the block runs. A hold of this process would not do: a process's second
hold on a directory it holds is granted."""
import contextlib
import subprocess
import sys

_HOLDER = """
import fcntl, os, sys
descriptor = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("held", flush=True)
sys.stdin.read()  # until the test closes its end
"""


@contextlib.contextmanager
def held_by_another_process(directory):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(directory)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def held_by_some_process(directory):
    """Whether a process holds `directory` now, as another process finds out."""
    probe = subprocess.run(
        [sys.executable, "-c", "import fcntl, os, sys; fcntl.flock(os.open(sys.argv[1], "
         "os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)", str(directory)],
        capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0 or "BlockingIOError" in probe.stderr, probe.stderr
    return probe.returncode != 0
