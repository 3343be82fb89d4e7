"""`held_by_another_process(directory)`: a second process holds `directory` as a running
program of the project does (`recipes.common.storage.exclusive_use`: `flock` on the
directory; with `shared`, as a run reading its data does, `storage.shared_use`) while the
block runs. A hold of this process would not do: a process's second hold on a directory it
holds is granted."""
import contextlib
import subprocess
import sys

_HOLDER = """
import fcntl, os, sys
descriptor = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(descriptor, getattr(fcntl, sys.argv[2]) | fcntl.LOCK_NB)
print("held", flush=True)
sys.stdin.read()  # until the test closes its end
"""


@contextlib.contextmanager
def held_by_another_process(directory, shared=False):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(directory),
                               "LOCK_SH" if shared else "LOCK_EX"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def held_by_some_process(directory, shared=False):
    """Whether a process holds `directory` now, as another process finds out: so that it
    cannot have it exclusively, or with `shared` so that it cannot read it (a writer)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import fcntl, os, sys; fcntl.flock(os.open(sys.argv[1], "
         "os.O_RDONLY), getattr(fcntl, sys.argv[2]) | fcntl.LOCK_NB)", str(directory),
         "LOCK_SH" if shared else "LOCK_EX"],
        capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0 or "BlockingIOError" in probe.stderr, probe.stderr
    return probe.returncode != 0
