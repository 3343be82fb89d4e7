"""The strategy factory in recipes/common/strategy.py: guess order, overrides, TPU errors, chief.

MultiWorkerMirroredStrategy and several GPUs cannot be created inside this process (the
collective runtime must be configured before TensorFlow starts; the machine has no GPU), so
those constructors are replaced by a recorder and the test checks which one the factory
called and with what. tests/test_multi_worker.py runs the real MultiWorkerMirroredStrategy.
"""
import json
import re
import os
import tempfile
import threading
import time
import types

import pytest
import tensorflow as tf

from lamb_tf import accumulation
from recipes.common import driver
from recipes.common import strategy as strategy_lib
from recipes.common.errors import UserError

TF_CONFIG_WORKER_0 = json.dumps({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                                 "task": {"type": "worker", "index": 0}})


class RecordingStrategy:
    """Stands in for a strategy class; remembers how it was constructed."""

    num_replicas_in_sync = 4

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


@pytest.fixture
def no_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)


@pytest.fixture
def recorders(monkeypatch):
    """Replaces the multi-device strategy classes with RecordingStrategy subclasses."""
    classes = {}
    for name in ("MultiWorkerMirroredStrategy", "MirroredStrategy", "TPUStrategy"):
        classes[name] = type(name, (RecordingStrategy,), {})
        monkeypatch.setattr(tf.distribute, name, classes[name])
    return classes


def _two_fake_gpus(monkeypatch):
    real = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: ["GPU:0", "GPU:1"] if kind == "GPU" else real(kind))


def test_no_tf_config_no_gpu_guesses_the_default_strategy(no_tf_config, capsys):
    strategy = strategy_lib.make_strategy()
    assert strategy is tf.distribute.get_strategy()
    assert not tf.distribute.has_strategy()  # the default one, not a scope someone entered
    assert "strategy: default" in capsys.readouterr().out


def test_tf_config_guesses_multi_worker_with_the_communication_flag(monkeypatch, recorders):
    monkeypatch.setenv("TF_CONFIG", TF_CONFIG_WORKER_0)
    strategy = strategy_lib.make_strategy(communication="ring")
    assert type(strategy) is recorders["MultiWorkerMirroredStrategy"]
    options = strategy.kwargs["communication_options"]
    assert options.implementation == tf.distribute.experimental.CommunicationImplementation.RING


def test_several_gpus_guess_mirrored(monkeypatch, no_tf_config, recorders):
    _two_fake_gpus(monkeypatch)
    assert type(strategy_lib.make_strategy()) is recorders["MirroredStrategy"]


def test_tpu_flag_comes_first_in_the_guess(monkeypatch, recorders):
    monkeypatch.setenv("TF_CONFIG", TF_CONFIG_WORKER_0)
    _two_fake_gpus(monkeypatch)
    monkeypatch.setattr(strategy_lib, "_tpu_strategy", lambda tpu, **_: RecordingStrategy(tpu))
    strategy = strategy_lib.make_strategy(tpu="my-tpu")
    assert type(strategy) is RecordingStrategy and strategy.args == ("my-tpu",)


@pytest.mark.parametrize("name, expected", [("default", None), ("mirrored", "MirroredStrategy")])
def test_explicit_strategy_overrides_the_guess(monkeypatch, recorders, name, expected):
    monkeypatch.setenv("TF_CONFIG", TF_CONFIG_WORKER_0)  # the guess would be multi-worker
    strategy = strategy_lib.make_strategy(strategy_name=name)
    if expected is None:
        assert strategy is tf.distribute.get_strategy()
    else:
        assert type(strategy) is recorders[expected]


def test_explicit_multi_worker_without_tf_config_is_one_line_user_error(no_tf_config):
    with pytest.raises(UserError, match="needs the TF_CONFIG environment variable") as error:
        strategy_lib.make_strategy(strategy_name="multi_worker_mirrored")
    assert "\n" not in str(error.value)


def test_tpu_local_without_a_tpu_is_one_line_user_error_in_bounded_time():
    start = time.monotonic()
    with pytest.raises(UserError) as error:
        strategy_lib.make_strategy(tpu="local")
    elapsed = time.monotonic() - start
    message = str(error.value)
    assert message.startswith("--tpu=local: no usable TPU on this machine")
    assert "drop --tpu" in message and "\n" not in message
    assert elapsed < 60, elapsed


def test_a_tpu_that_never_answers_fails_after_the_timeout(monkeypatch):
    never = threading.Event()

    def hang(tpu):
        never.wait(30)  # a daemon thread; the factory must not wait for it

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", hang)
    monkeypatch.setattr(strategy_lib, "TPU_INIT_TIMEOUT_SECONDS", 1)
    start = time.monotonic()
    try:
        with pytest.raises(UserError, match="--tpu=far-away: no TPU answered within 1 s"):
            strategy_lib.make_strategy(tpu="far-away")
    finally:
        never.set()
    assert time.monotonic() - start < 10


class _ClusterStrategy:
    """A strategy as the factory sees it on a cluster: only `cluster_resolver` matters."""

    def __init__(self):
        self.cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()


@pytest.mark.parametrize("cluster, task, chief", [
    ({"chief": ["h:1"], "worker": ["h:2"]}, ("chief", 0), True),
    ({"chief": ["h:1"], "worker": ["h:2"]}, ("worker", 0), False),
    ({"worker": ["h:1", "h:2"]}, ("worker", 0), True),
    ({"worker": ["h:1", "h:2"]}, ("worker", 1), False),
    ({"worker": ["h:1"], "evaluator": ["h:2"]}, ("evaluator", 0), False),
])
def test_is_chief(monkeypatch, cluster, task, chief):
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": cluster, "task": {"type": task[0], "index": task[1]}}))
    assert strategy_lib.is_chief(_ClusterStrategy()) is chief


def test_single_process_is_chief(no_tf_config):
    assert strategy_lib.is_chief(tf.distribute.get_strategy())


def test_worker_directory_is_model_dir_on_chief(tmp_path, no_tf_config):
    with strategy_lib.WorkerDirectory(str(tmp_path), tf.distribute.get_strategy()) as directory:
        assert directory.path == str(tmp_path)
    assert tmp_path.is_dir()


def test_worker_directory_of_a_non_chief_is_private_and_removed(monkeypatch, tmp_path):
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}))
    with pytest.raises(RuntimeError):
        with strategy_lib.WorkerDirectory(str(tmp_path), _ClusterStrategy()) as directory:
            assert directory.path != str(tmp_path) and os.path.isdir(directory.path)
            open(os.path.join(directory.path, "ckpt-1.index"), "w").close()
            raise RuntimeError("training failed")  # cleaned up on the error path too
    assert not os.path.exists(directory.path)
    assert list(tmp_path.iterdir()) == []


def test_the_same_worker_of_a_second_run_into_a_model_dir_is_refused_and_removes_nothing(
        monkeypatch, tmp_path):
    """A multi-worker command started twice into one model_dir: the second run's worker 1
    removed the first run's worker-1 directory as a killed run's, and the first run died
    ("the training file ... went missing", then the chief lost contact)."""
    from lock_holder import held_by_another_process, held_by_some_process

    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run = str(tmp_path / "run")
    running = strategy_lib.WorkerDirectory(run, _ClusterStrategy())
    open(os.path.join(running.path, "ckpt-1.index"), "w").close()
    assert held_by_some_process(running.path)  # while the worker runs
    running.held.close()  # its hold: another process's, below
    assert not held_by_some_process(running.path)
    with held_by_another_process(running.path):
        with pytest.raises(UserError) as raised:
            strategy_lib.WorkerDirectory(run, _ClusterStrategy())
    assert str(raised.value) == (
        f"--model_dir={run} is in use by another run: its worker 1 still runs on this machine "
        f"(its directory {running.path}); wait for it to finish or stop it (a training run "
        "resumes from its newest checkpoint), or give another --model_dir")
    assert os.listdir(tmp_path) == [os.path.basename(running.path)]  # the refused one's: gone
    assert os.listdir(running.path) == ["ckpt-1.index"]


def test_a_killed_workers_directory_goes_when_that_worker_starts_again(monkeypatch, tmp_path):
    """A worker killed outright leaves its directory (checkpoints of the whole model); the
    next start of that worker of a run into the same model_dir removes it, and no other's."""
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run, other_run = str(tmp_path / "run"), str(tmp_path / "other_run")
    killed = strategy_lib.WorkerDirectory(run, _ClusterStrategy())  # never cleaned up
    open(os.path.join(killed.path, "ckpt-1.index"), "w").close()
    other = strategy_lib.WorkerDirectory(other_run, _ClusterStrategy())
    with strategy_lib.WorkerDirectory(run, _ClusterStrategy()) as again:
        assert os.path.isdir(again.path) and again.path != killed.path
        assert not os.path.exists(killed.path)
        assert os.path.isdir(other.path)
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(other.path)]


@pytest.mark.parametrize("index, chief", [(0, True), (1, False)])
def test_only_the_chief_exports_into_export_dir_the_others_into_their_own_directory(
        monkeypatch, tmp_path, index, chief):
    """Every worker of a multi-worker run exported into the shared export.dir, where one
    worker's export could remove another's still being written as its leftovers."""
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": index}}))
    shared = str(tmp_path / "shared_export")
    worker_dir = str(tmp_path / f"worker{index}")
    task = types.SimpleNamespace(export_subdir="saved_model_here", config=types.SimpleNamespace(
        export=types.SimpleNamespace(dir=shared)))
    run = driver._Run(  # pylint: disable=protected-access
        task, options=None, strategy=_ClusterStrategy(), plan=None, model_dir=worker_dir)
    expected = shared if chief else str(tmp_path / f"worker{index}" / "saved_model_here")
    assert run.export_dir() == expected


def test_log_batch_plan_prints_the_arithmetic(capsys, two_cpu_strategy):
    plan = accumulation.plan_batch(global_batch_size=64, micro_batch_size=8, num_replicas=2)
    strategy_lib.log_batch_plan(two_cpu_strategy, plan)
    out = capsys.readouterr().out
    # 64 = 2 replicas x 8 per micro-batch x 4 accumulation steps
    assert "global 64 = 2 replica(s) × micro-batch 8 × 4 accumulation step(s)" in out
    plan = accumulation.plan_batch(global_batch_size=32768, micro_batch_size=2048,
                                   num_replicas=2)
    strategy_lib.log_batch_plan(two_cpu_strategy, plan)
    assert capsys.readouterr().out == (  # 32,768 = 2 × 2,048 × 8
        "batch: global 32,768 = 2 replica(s) × micro-batch 2,048 × 8 accumulation step(s)\n")


def test_log_eval_batch_prints_the_examples_per_replica(capsys, two_cpu_strategy):
    """--mode=eval shows the batch it evaluates with, not the training's plan."""
    strategy_lib.log_eval_batch(two_cpu_strategy, 4096)
    assert capsys.readouterr().out == (
        "batch: eval.global_batch_size 4,096 = 2 replica(s) × 2,048\n")


@pytest.mark.parametrize("tf_config, words", [
    ('{"cluster": {"worker": ["localhost:1"]', "TF_CONFIG is not JSON (Expecting ',' delimiter"),
    ('{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 3}}',
     "TF_CONFIG's task {'type': 'worker', 'index': 3} is not in its cluster"),
    ('{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}',
     "TF_CONFIG's task {'type': 'worker', 'index': 2} is not in its cluster"),
    ('{"cluster": {"worker": ["localhost:1"]}}', 'TF_CONFIG needs a "cluster" mapping'),
], ids=["not-json", "index-past-the-workers", "index-one-past-the-last-worker", "no-task"])
def test_a_tf_config_that_cannot_make_a_cluster_is_one_line(monkeypatch, recorders, tf_config,
                                                             words):
    """A bad TF_CONFIG went on to the strategy (TensorFlow's long error, or a hang waiting
    for a worker that does not exist); an index equal to the number of workers (one past the
    last) was accepted. `recorders`: a TF_CONFIG let through builds no real strategy."""
    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(UserError, match=re.escape(words)) as raised:
        strategy_lib.make_strategy("multi_worker_mirrored")
    assert "\n" not in str(raised.value)


def test_strategy_tpu_without_a_tpu_names_the_flag_given():
    """`--strategy=tpu` alone means the local TPU: the line names that flag, not --tpu."""
    with pytest.raises(UserError, match=re.escape(
            "--strategy=tpu (on the local TPU): no usable TPU on this machine (")):
        strategy_lib.make_strategy("tpu")


def test_cpu_replicas_split_the_cpu_into_that_many_mirrored_devices(recorders, monkeypatch,
                                                                      capsys):
    configured = []
    monkeypatch.setattr(tf.config, "set_logical_device_configuration",
                        lambda device, devices: configured.append(len(devices)))
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [
        types.SimpleNamespace(name=f"/device:CPU:{i}") for i in range(3)])
    strategy = strategy_lib.make_strategy("mirrored", cpu_replicas=2)
    assert type(strategy) is recorders["MirroredStrategy"] and configured == [2]
    assert strategy.args == (["/device:CPU:0", "/device:CPU:1"],)
    assert capsys.readouterr().out.startswith("strategy: mirrored, ")


def test_cpu_replicas_on_a_machine_with_gpus_or_after_devices_are_set_up_are_one_line(
        monkeypatch):
    def set_up_already(device, devices):
        raise RuntimeError("Virtual devices cannot be modified after being initialized")

    monkeypatch.setattr(tf.config, "set_logical_device_configuration", set_up_already)
    with pytest.raises(UserError, match=r"^--cpu_replicas=2: TensorFlow's devices are set up "
                                        r"already in this process \(Virtual devices"):
        strategy_lib.make_strategy("mirrored", cpu_replicas=2)
    _two_fake_gpus(monkeypatch)
    with pytest.raises(UserError, match=r"^--cpu_replicas=2: this machine has GPUs; drop "):
        strategy_lib.make_strategy("mirrored", cpu_replicas=2)


@pytest.mark.slow  # a command-line run
def test_a_run_with_cpu_replicas_trains_on_that_many_replicas(tmp_path):
    """The multi-replica path (per-replica batches, the all-reduce) from the command line of
    a machine without an accelerator, as the tests reach it."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-m", "recipes.resnet.train", f"--model_dir={tmp_path / 'run'}",
         f"--config_file={repo}/configs/resnet/tiny_cpu.yaml", "--strategy=mirrored",
         "--cpu_replicas=2", "--mode=train", "--params_override=train.steps=2,"
         "train.checkpoint_every=2,optimizer.warmup_steps=1,export.enabled=false"],
        cwd=repo, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "strategy: mirrored, 2 replica(s) in sync" in result.stdout
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (results["num_replicas"], results["steps"]) == (2, 2)


@pytest.mark.parametrize("tpu, strategy, communication, tf_config, message", [
    # the TPU was dropped without a word: `strategy: default, 1 replica(s) in sync`
    ("local", "mirrored", "auto", False, "--tpu=local runs on a TPU, which --strategy=mirrored "
     "does not use; drop --strategy (--tpu picks tpu) or drop --tpu"),
    ("my-tpu", "default", "auto", False, "--tpu=my-tpu runs on a TPU, which --strategy=default "
     "does not use"),
    ("local", "multi_worker_mirrored", "auto", True, "--tpu=local runs on a TPU, which "
     "--strategy=multi_worker_mirrored does not use"),
    # --communication ignored by every strategy but the multi-worker one
    ("", "", "nccl", False, "--communication=nccl sets the collectives of "
     "--strategy=multi_worker_mirrored only (--strategy is unset and TF_CONFIG is not set); "
     "drop --communication, or run on a cluster (TF_CONFIG: docs/distributed.md)"),
    ("", "mirrored", "ring", True, "--communication=ring sets the collectives of "
     "--strategy=multi_worker_mirrored only (--strategy=mirrored)"),
    ("local", "", "nccl", True, "--communication=nccl sets the collectives of "
     "--strategy=multi_worker_mirrored only (--tpu picks tpu)"),
])
def test_distribution_flags_that_contradict_one_another_are_refused(
        monkeypatch, tpu, strategy, communication, tf_config, message):
    from recipes.common import flags as flags_lib

    monkeypatch.delenv("TF_CONFIG", raising=False)
    if tf_config:
        monkeypatch.setenv("TF_CONFIG", TF_CONFIG_WORKER_0)
    with pytest.raises(UserError) as error:
        flags_lib.check_distribution_flags(tpu, strategy, 0, communication)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize("tpu, strategy, communication, tf_config", [
    ("local", "", "auto", False), ("local", "tpu", "auto", False),
    ("", "", "nccl", True),  # docs/distributed.md's GPU cluster: TF_CONFIG guesses multi-worker
    ("", "multi_worker_mirrored", "ring", False),  # (TF_CONFIG missing: make_strategy says so)
    ("", "mirrored", "auto", False), ("", "", "auto", False),
])
def test_distribution_flags_that_agree_are_accepted(monkeypatch, tpu, strategy, communication,
                                                     tf_config):
    from recipes.common import flags as flags_lib

    monkeypatch.delenv("TF_CONFIG", raising=False)
    if tf_config:
        monkeypatch.setenv("TF_CONFIG", TF_CONFIG_WORKER_0)
    assert flags_lib.check_distribution_flags(tpu, strategy, 0, communication) is None
