"""Starts a MultiWorkerMirroredStrategy cluster of local processes on loopback, with a deadline.

    results = run_cluster([sys.executable, "-m", "recipes.bert.pretrain", ...],
                          num_workers=2, cwd=REPO_ROOT, log_dir=tmp_path, timeout=240)

Every worker gets its own `TF_CONFIG` (a cluster of 127.0.0.1 ports that were free a moment
ago), its own process group and its own temporary directory (`TMPDIR`), and writes its
output to files (a full pipe cannot block it). When the deadline passes, or as soon as one
worker fails (the others would wait for it in a collective forever), every worker's
process group is killed, so a hung cluster never outlives the test.
"""
import dataclasses
import json
import os
import signal
import socket
import subprocess
import time


@dataclasses.dataclass
class WorkerResult:
    index: int
    pid: int
    returncode: int  # -9 when killed
    stdout: str
    stderr: str
    tmpdir: str  # the worker's TMPDIR


def free_ports(count):
    """Ports on 127.0.0.1 that nobody listens on now (the OS picks them)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tf_config(ports, index):
    """TF_CONFIG of worker `index` in a cluster of workers on 127.0.0.1 (worker 0 is chief)."""
    return json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
        "task": {"type": "worker", "index": index},
    })


def _kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the worker and anything it started
    except ProcessLookupError:
        pass


def start_workers(command, num_workers, cwd, log_dir, env):
    """Starts `command` as `num_workers` workers of one loopback cluster, each in its own
    process group, writing to `log_dir/worker<i>.out` and `.err`; returns their `Popen`s
    (the caller waits for them and kills their groups)."""
    ports = free_ports(num_workers)
    workers = []
    for index in range(num_workers):
        worker_env = {**env, "TF_CONFIG": tf_config(ports, index)}
        out, err = (os.path.join(log_dir, f"worker{index}.{kind}") for kind in ("out", "err"))
        with open(out, "w") as stdout, open(err, "w") as stderr:
            workers.append(subprocess.Popen(command, cwd=cwd, env=worker_env, stdout=stdout,
                                            stderr=stderr, start_new_session=True))
    return workers


def run_cluster(command, num_workers, cwd, log_dir, timeout, env=None):
    """Runs `command` as `num_workers` workers; returns their `WorkerResult`s by index.

    Raises `TimeoutError` (after killing every worker) when they have not all exited
    within `timeout` seconds; its message holds the tail of each worker's stderr.
    """
    ports = free_ports(num_workers)
    processes, logs = [], []
    try:
        for index in range(num_workers):
            tmpdir = os.path.join(log_dir, f"worker{index}_tmp")
            os.makedirs(tmpdir)
            stdout = open(os.path.join(log_dir, f"worker{index}.out"), "w+")
            stderr = open(os.path.join(log_dir, f"worker{index}.err"), "w+")
            logs.append((stdout, stderr, tmpdir))
            worker_env = {**os.environ, **(env or {}), "TF_CONFIG": tf_config(ports, index),
                          "TMPDIR": tmpdir}
            processes.append(subprocess.Popen(command, cwd=cwd, env=worker_env, stdout=stdout,
                                              stderr=stderr, start_new_session=True))
        deadline = time.monotonic() + timeout
        timed_out = False
        while True:
            returncodes = [process.poll() for process in processes]  # poll every worker
            if None not in returncodes or any(code not in (None, 0) for code in returncodes):
                break  # all done, or one failed: the others would wait for it forever
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.2)
    finally:
        for process in processes:
            _kill_group(process)
            process.wait()
    results = []
    for index, (process, (stdout, stderr, tmpdir)) in enumerate(zip(processes, logs)):
        stdout.seek(0)
        stderr.seek(0)
        results.append(WorkerResult(index, process.pid, process.returncode, stdout.read(),
                                    stderr.read(), tmpdir))
        stdout.close()
        stderr.close()
    if timed_out:
        tails = "\n".join(f"--- worker {r.index} stderr:\n{r.stderr[-1500:]}" for r in results)
        raise TimeoutError(f"{num_workers} workers did not finish in {timeout} s; killed.\n{tails}")
    return results
