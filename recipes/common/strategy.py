"""The one distribution-strategy factory both recipes use, and who may write what.

Guess order (an explicit `--strategy` overrides it): `--tpu` given → TPUStrategy;
`TF_CONFIG` set → MultiWorkerMirroredStrategy; more than one GPU → MirroredStrategy;
otherwise the default (single-device) strategy.
"""

import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
import threading

import tensorflow as tf

from recipes.common import flags as flags_lib
from recipes.common import storage
from recipes.common.errors import UserError

TPU_INIT_TIMEOUT_SECONDS = 300


def make_strategy(strategy_name="", tpu="", communication="auto", cpu_replicas=0):
    """Builds the strategy named by the flags, or the guess described in the module doc;
    with `cpu_replicas` (and "mirrored"), a MirroredStrategy over that many logical CPU
    devices (`mirrored_over_cpu`)."""
    name = strategy_name or _guess(tpu)
    if name == "tpu":
        strategy = _tpu_strategy(tpu or "local", given_tpu=bool(tpu))
    elif name == "multi_worker_mirrored":
        if "TF_CONFIG" not in os.environ:
            raise UserError(
                "--strategy=multi_worker_mirrored needs the TF_CONFIG environment "
                "variable (cluster and task) on every worker; see README 'Run on a "
                "GPU cluster'"
            )
        check_tf_config(os.environ["TF_CONFIG"])
        implementation = {
            "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
            "ring": tf.distribute.experimental.CommunicationImplementation.RING,
            "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
        }[communication]
        with _python_sigterm_handler_kept():
            strategy = tf.distribute.MultiWorkerMirroredStrategy(
                communication_options=tf.distribute.experimental.CommunicationOptions(
                    implementation=implementation
                )
            )
    elif name == "mirrored" and cpu_replicas:
        strategy = mirrored_over_cpu(cpu_replicas)
    elif name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    elif name == "default":
        strategy = tf.distribute.get_strategy()
    else:
        raise UserError(
            f"unknown strategy {name!r}; use one of tpu, multi_worker_mirrored, "
            "mirrored, default"
        )
    print(
        f"strategy: {name}, {strategy.num_replicas_in_sync} replica(s) in sync",
        flush=True,
    )
    return strategy


@contextlib.contextmanager
def _python_sigterm_handler_kept():
    """Within it, TensorFlow's own SIGTERM handler (in C++), which a MultiWorkerMirroredStrategy
    installs as it starts, replaces the program's; after it, the program's is back: a SIGTERM
    between the strategy's start and training's was otherwise taken by TensorFlow's and
    ignored (the worker trained on to the end). Training watches SIGTERM itself
    (`recipes.common.preemption`), for TensorFlow's preemption handler too."""
    handler = signal.getsignal(signal.SIGTERM)  # Python's record: what the program set
    try:
        yield
    finally:
        # (SIG_DFL too: TensorFlow's ignored the signal; handlers are the main thread's)
        if handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)  # reinstalls Python's own C handler too


def mirrored_over_cpu(replicas):
    """A MirroredStrategy over `replicas` logical devices of this machine's CPU (what the
    tests use to run the multi-replica path without an accelerator); a UserError on a
    machine with GPUs (their replicas are the ones to use) or once TensorFlow's devices are
    set up (a split is possible only before)."""
    if tf.config.list_physical_devices("GPU"):
        raise UserError(f"--cpu_replicas={replicas}: this machine has GPUs; drop --cpu_replicas "
                        "(--strategy=mirrored takes a replica per GPU)")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError as error:  # ("Virtual devices cannot be modified after being ...")
        raise UserError(f"--cpu_replicas={replicas}: TensorFlow's devices are set up already "
                        f"in this process ({error})") from None
    return tf.distribute.MirroredStrategy(
        [device.name for device in tf.config.list_logical_devices("CPU")][:replicas])


def check_tf_config(text):
    """A UserError naming what is wrong with the TF_CONFIG environment variable: JSON with a
    `cluster` of worker addresses and this process's `task` (type and index) in it."""
    try:
        tf_config = json.loads(text)
    except ValueError as error:
        raise UserError(f"TF_CONFIG is not JSON ({error}); e.g. TF_CONFIG='{{\"cluster\": "
                        f"{{\"worker\": [\"host1:12345\", \"host2:12345\"]}}, \"task\": "
                        f"{{\"type\": \"worker\", \"index\": 0}}}}'") from None
    cluster = tf_config.get("cluster") if isinstance(tf_config, dict) else None
    task = tf_config.get("task") if isinstance(tf_config, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise UserError("TF_CONFIG needs a \"cluster\" mapping of job names to addresses and "
                        "this process's \"task\" ({\"type\": \"worker\", \"index\": N})")
    members = cluster.get(task.get("type"))
    index = task.get("index")
    if not isinstance(members, list) or not isinstance(index, int) or not (
            0 <= index < len(members)):
        raise UserError(f"TF_CONFIG's task {task} is not in its cluster {cluster}: the index "
                        "must count from 0 within the task type's list of addresses")


def _guess(tpu):
    cluster = flags_lib.cluster_strategy(tpu)
    if cluster:
        return cluster
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "default"


def _tpu_strategy(tpu, given_tpu=True):
    """Connects to the TPU and initialises it, failing in bounded time with one line."""
    outcome = {}

    def connect():
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
            if tpu != "local":
                tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            outcome["resolver"] = resolver
        except Exception as error:  # Any failure here means: no usable TPU.
            outcome["error"] = error

    # A daemon thread bounds the wait: a TPU name that resolves nowhere can otherwise hang.
    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(TPU_INIT_TIMEOUT_SECONDS)
    if thread.is_alive():
        raise UserError(
            f"--tpu={tpu}: no TPU answered within {TPU_INIT_TIMEOUT_SECONDS} s; "
            "check the TPU name and that this VM can reach it, or drop --tpu"
        )
    if "error" in outcome:
        first_line = str(outcome["error"]).strip().splitlines()[0]
        first_line = first_line.split(" with these attrs")[0]  # TF appends op attributes
        if len(first_line) > 200:
            first_line = first_line[:200].rsplit(" ", 1)[0] + " ..."
        given = f"--tpu={tpu}" if given_tpu else "--strategy=tpu (on the local TPU)"
        raise UserError(
            f"{given}: no usable TPU on this machine ({first_line}); run on a "
            "TPU VM, or drop --tpu and --strategy=tpu to train on CPU/GPU"
        )
    return tf.distribute.TPUStrategy(outcome["resolver"])


def log_batch_plan(strategy, plan):
    """Prints the batch arithmetic: global = replicas × micro-batch × accumulation steps."""
    print(
        f"batch: global {plan.global_batch_size:,} = {strategy.num_replicas_in_sync:,} "
        f"replica(s) × micro-batch {plan.micro_batch_size:,} × {plan.accumulation_steps} "
        "accumulation step(s)",
        flush=True,
    )


def log_eval_batch(strategy, global_batch_size):
    """Prints an evaluation's batch: global = replicas × examples per replica."""
    replicas = strategy.num_replicas_in_sync
    print(f"batch: eval.global_batch_size {global_batch_size:,} = {replicas:,} replica(s) × "
          f"{global_batch_size // replicas:,}", flush=True)


def task(strategy):
    """(task_type, task_id) of this process, ("chief", 0) on a single machine."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return "chief", 0
    return resolver.task_type, resolver.task_id or 0


def is_chief(strategy):
    """Whether this process writes checkpoints, summaries, the config and the export."""
    task_type, task_id = task(strategy)
    if task_type == "chief":
        return True
    if task_type == "worker" and task_id == 0:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
        return "chief" not in cluster
    return False


class WorkerDirectory:
    """`model_dir` on the chief; a private temporary directory, removed on exit, elsewhere.

    MultiWorkerMirroredStrategy needs every worker to run the same save calls (they may hold
    collectives), but only the chief's files are kept. A worker killed outright (SIGKILL,
    out of memory) cannot remove its directory, which holds the model's checkpoints: the
    same worker of a run into the same `model_dir` removes it when it starts again, so
    killed runs do not pile up in the temporary directory. A worker holds its directory
    while it runs (`storage.exclusive_use`): the same worker of a second run into the same
    `model_dir` on this machine (a command started twice) is refused in one line and removes
    nothing, as the chief of that run is (`driver._exclusive_use`).
    """

    def __init__(self, model_dir, strategy):
        self.model_dir = model_dir
        self.chief = is_chief(strategy)
        self.held = contextlib.ExitStack()  # the non-chief's hold on its directory
        if self.chief:
            self.path = model_dir
            return
        task_type, task_id = task(strategy)
        prefix = f"lamb_tf_{task_type}{task_id}_{_digest(model_dir)}_"
        self.path = tempfile.mkdtemp(prefix=prefix)  # held before any other is looked at
        self.held.enter_context(storage.exclusive_use(
            f"the worker directory {self.path}", self.path, "unused (a new directory)",
            wait=True))
        try:
            _remove_killed_runs_directories(tempfile.gettempdir(), prefix, model_dir,
                                            f"{task_type} {task_id}", self.path)
        except UserError:
            self.cleanup()
            raise

    def cleanup(self):
        if not self.chief:
            shutil.rmtree(self.path, ignore_errors=True)
        self.held.close()

    def __enter__(self):
        return self

    def __exit__(self, *unused_exc):
        self.cleanup()


def _digest(model_dir):
    """12 hex digits that name `model_dir` (a path or URI, made absolute if local)."""
    name = model_dir if "://" in model_dir else os.path.abspath(model_dir)
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]


def _remove_killed_runs_directories(parent, prefix, model_dir, worker, own):
    """Removes the directories in `parent` whose names start with `prefix` and that this
    user owns (never a symbolic link: the temporary directory is shared), but `own`: those
    of killed runs; a UserError, before any is removed, if a live process holds one (the
    same `worker` of another run into `model_dir`)."""
    paths = [os.path.join(parent, name) for name in os.listdir(parent)
             if name.startswith(prefix) and os.path.join(parent, name) != own]
    paths = [path for path in paths if _own_directory(path)]
    for path in paths:
        if storage.held_elsewhere(path):
            raise UserError(
                f"--model_dir={model_dir} is in use by another run: its {worker} still runs on "
                f"this machine (its directory {path}); wait for it to finish or stop it (a "
                "training run resumes from its newest checkpoint), or give another --model_dir")
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def _own_directory(path):
    """Whether `path` is a directory (not a symbolic link) this user owns; not if it is
    gone (removed by its process as it ended)."""
    try:
        return (not os.path.islink(path) and os.path.isdir(path)
                and os.stat(path).st_uid == os.getuid())
    except FileNotFoundError:
        return False
