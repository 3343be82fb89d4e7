"""A directory one process of the project's programs writes in is refused to a second one at
the same time (`storage.exclusive_use`; the recipes hold their --model_dir for the whole
run): two runs into one --model_dir wrote their checkpoints, config.yaml and export over each
other, and a second preparation corrupted the first one's data."""
import os
import subprocess
import sys
import types

import pytest

from lock_holder import held_by_another_process, held_by_some_process
from recipes.common import storage
from recipes.common.errors import UserError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_hold_on_a_directory_another_process_holds_is_a_user_error_until_it_ends(
        tmp_path):
    directory = str(tmp_path / "run")
    label = f"--model_dir={directory}"
    with storage.exclusive_use(label, directory, "advice"):
        assert os.path.isdir(directory)  # made if missing
    with held_by_another_process(directory):
        with pytest.raises(UserError) as raised:
            with storage.exclusive_use(label, directory, "give another --model_dir"):
                pass
        assert str(raised.value) == (
            f"--model_dir={directory} is in use by another lamb_tf process, which still "
            "writes there; give another --model_dir")
        assert storage.held_elsewhere(directory)
    assert not storage.held_elsewhere(directory)
    with storage.exclusive_use(label, directory, "advice"):  # released: taken again
        assert os.listdir(directory) == []  # and no lock file left in it


def test_a_process_holds_a_directory_again_as_long_as_its_first_hold(tmp_path):
    """A run preparing its data into its own --model_dir (data.data_dir=<model_dir>) was
    refused by its own hold on the --model_dir."""
    directory = str(tmp_path / "run")
    with storage.exclusive_use("--model_dir", directory, "advice"):
        with storage.exclusive_use("data.data_dir", directory, "advice"):
            assert not storage.held_elsewhere(directory)
        # the inner hold ended, the outer one holds on
        check = subprocess.run(
            [sys.executable, "-c", "import fcntl, os, sys; fcntl.flock(os.open(sys.argv[1], "
             "os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)", directory],
            capture_output=True, text=True, timeout=60)
        assert check.returncode == 1 and "BlockingIOError" in check.stderr, check.stderr
    assert not storage.held_elsewhere(directory)


@pytest.mark.parametrize("stop", [UserError("refused"), KeyboardInterrupt()],
                         ids=["error", "ctrl-c"])
def test_a_hold_that_ends_in_an_exception_removes_the_directories_it_made_if_empty(
        tmp_path, stop):
    """convert, stopped by SIGTERM before its first shard landed, left an empty
    --output_dir behind (a second try then found it, as if another conversion's)."""
    (tmp_path / "kept").mkdir()
    for directory, written in ((tmp_path / "new" / "nested" / "out", None),
                               (tmp_path / "wrote", "shard"), (tmp_path / "kept", None)):
        with pytest.raises(type(stop)):
            with storage.exclusive_use("label", str(directory), "advice"):
                if written:
                    (directory / written).write_text("x")
                raise stop
    assert sorted(path.name for path in tmp_path.iterdir()) == ["kept", "wrote"]
    assert os.listdir(tmp_path / "wrote") == ["shard"]


def test_a_directory_a_run_reads_is_refused_to_a_writer_and_shared_with_other_readers(
        tmp_path):
    """A preparation into the data directory of a running training replaced the shards and
    the vocabulary it was reading, without a word."""
    directory = str(tmp_path / "data")
    os.makedirs(directory)
    label = f"the preparation directory {directory}"
    with held_by_another_process(directory, shared=True):  # a run reading it
        with pytest.raises(UserError) as raised:
            with storage.exclusive_use(label, directory, "wait for that preparation",
                                       advice_if_read="wait for the run reading it to end"):
                pass
        assert str(raised.value) == (
            f"{label} holds the data of another lamb_tf process, which reads it now; wait for "
            "the run reading it to end")
        with storage.shared_use("the data directory", directory, "advice"):  # a second run
            assert held_by_some_process(directory)  # (a writer still refused)
            assert not held_by_some_process(directory, shared=True)  # (another reader not)
    with storage.exclusive_use(label, directory, "advice"):  # released: written again
        pass


def test_a_run_reading_a_directory_another_process_writes_is_refused(tmp_path):
    directory = str(tmp_path / "data")
    os.makedirs(directory)
    with held_by_another_process(directory):  # a preparation writing there
        with pytest.raises(UserError) as raised:
            with storage.shared_use(f"the data directory {directory}", directory,
                                    "wait for it to finish, then run again"):
                pass
    assert str(raised.value) == (
        f"the data directory {directory} is in use by another lamb_tf process, which still "
        "writes there; wait for it to finish, then run again")


def test_a_process_reads_a_directory_it_holds_and_no_missing_one_is_made(tmp_path):
    directory = str(tmp_path / "run")
    with storage.exclusive_use("--model_dir", directory, "advice"):
        with storage.shared_use("the data directory", directory, "advice"):
            pass
        assert held_by_some_process(directory, shared=True)  # still exclusively
    with storage.shared_use("the data directory", str(tmp_path / "missing"), "advice"):
        with storage.shared_use("the data directory", "gs://bucket/data", "advice"):
            assert not os.path.exists(tmp_path / "missing")


def test_a_file_system_without_flock_runs_unlocked_and_says_so(tmp_path, monkeypatch, capsys):
    """Some NFS mounts refuse flock on a directory opened for reading (EBADF): every run
    ended in an OSError traceback."""
    import errno
    import fcntl

    def refused(descriptor, operation):
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    monkeypatch.setattr(fcntl, "flock", refused)
    directory = str(tmp_path / "run")
    with storage.exclusive_use(f"--model_dir={directory}", directory, "advice"):
        pass
    assert capsys.readouterr().out == (
        f"note: --model_dir={directory} cannot be locked on its file system (Bad file "
        "descriptor): a second run into it at the same time is not refused\n")


def test_a_remote_directory_is_not_locked_or_made(tmp_path):
    with storage.exclusive_use("--model_dir=gs://bucket/run", "gs://bucket/run", "advice"):
        with storage.exclusive_use("--model_dir=gs://bucket/run", "gs://bucket/run", "advice"):
            pass


@pytest.mark.slow  # a fresh process that imports TensorFlow
def test_a_run_into_a_model_dir_in_use_is_one_line_and_touches_nothing(tmp_path):
    model_dir = str(tmp_path / "run")
    os.makedirs(model_dir)
    with open(os.path.join(model_dir, "notes.txt"), "w", encoding="utf-8") as f:
        f.write("the other run's")
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    with held_by_another_process(model_dir):  # as a running run does
        result = subprocess.run(
            [sys.executable, "-m", "recipes.resnet.train",
             "--config_file=configs/resnet/tiny_cpu.yaml", f"--model_dir={model_dir}"],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"error: --model_dir={model_dir} is in use by another lamb_tf process, which still "
        "writes there; wait for it to finish or stop it (a training run resumes from "
        "its newest checkpoint), or give another --model_dir"]
    assert os.listdir(model_dir) == ["notes.txt"]


@pytest.mark.parametrize("mode, writes", [("eval", "its tensorflow.log, results.json"),
                                          ("export", "its tensorflow.log")])
def test_evaluating_a_run_in_a_read_only_directory_says_to_copy_it(tmp_path, monkeypatch,
                                                                    mode, writes):
    """An archived run (a read-only mount) was told to "give a directory you can write", as
    if its checkpoints were not there."""
    from recipes.common import driver

    problem = f"cannot write in {tmp_path} (Read-only file system)"
    monkeypatch.setattr(storage, "local_directory_problem", lambda directory: problem)
    with pytest.raises(UserError) as raised:
        driver.check_model_dir(str(tmp_path), mode)
    assert str(raised.value) == (
        f"--model_dir={tmp_path}: {problem}; --mode={mode} writes there too ({writes}): copy "
        "the run to a directory you can write (cp -r) and give that")
    with pytest.raises(UserError, match="give a directory you can write"):  # a new run
        driver.check_model_dir(str(tmp_path), "train")


def test_a_run_whose_own_subdirectory_cannot_be_written_is_refused_before_any_work(
        tmp_path, monkeypatch):
    """A resumed run whose checkpoints/ was read-only (a shared team directory) trained, then
    ended in PermissionDeniedError's traceback at its first checkpoint."""
    from recipes.common import driver

    checkpoints_dir = tmp_path / "checkpoints"
    checkpoints_dir.mkdir()
    problem = f"cannot write in {checkpoints_dir} (Read-only file system)"
    monkeypatch.setattr(storage, "local_directory_problem",
                        lambda directory: problem if directory == str(checkpoints_dir) else None)
    with pytest.raises(UserError) as raised:
        driver.check_model_dir(str(tmp_path), "train")
    assert str(raised.value) == (f"--model_dir={tmp_path}: {problem}, where the run writes its "
                                 "checkpoints/; make it writable, or give another --model_dir")


def test_a_model_dir_that_is_a_savedmodel_is_refused(tmp_path):
    """A run trained into an earlier export's directory: the next export replaced the
    directory, the run's checkpoints with it."""
    from recipes.common import driver

    (tmp_path / "saved_model.pb").write_bytes(b"")
    with pytest.raises(UserError, match=r"is a SavedModel \(an export: its saved_model.pb\)"):
        driver.check_model_dir(str(tmp_path), "train")


@pytest.mark.parametrize("mode, exports, held", [
    ("train", False, ["train"]), ("train", True, ["export", "train"]),
    ("train_and_eval", True, ["eval", "export", "train"]), ("eval", True, ["eval"]),
    ("export", False, ["export"])])
def test_a_run_holds_the_directories_of_the_files_its_mode_reads(tmp_path, mode, exports,
                                                                 held):
    from recipes.common import driver

    for name in ("train", "eval", "export"):
        (tmp_path / name).mkdir()

    class Task:  # (the driver's questions here: `input_files`, and whether the run exports)
        config = types.SimpleNamespace(export=types.SimpleNamespace(enabled=exports))

        @staticmethod
        def input_files(split):
            return [str(tmp_path / split / "a"), str(tmp_path / split / "b"),
                    f"gs://bucket/{split}/c"]

    with driver.held_inputs(Task(), mode):
        assert [name for name in ("eval", "export", "train")
                if held_by_some_process(tmp_path / name)] == held
    assert not held_by_some_process(tmp_path / "train")
