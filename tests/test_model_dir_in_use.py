"""A directory one process of the project's programs writes in is refused to a second one at
the same time (`storage.exclusive_use`; the recipes hold their --model_dir for the whole
run): two runs into one --model_dir wrote their checkpoints, config.yaml and export over each
other, and a second preparation corrupted the first one's data."""
import os
import subprocess
import sys

import pytest

from recipes.common import storage
from recipes.common.errors import UserError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_second_hold_on_a_directory_is_a_user_error_until_the_first_ends(tmp_path):
    directory = str(tmp_path / "run")
    label = f"--model_dir={directory}"
    with storage.exclusive_use(label, directory, "give another --model_dir"):
        assert os.path.isdir(directory)  # made if missing
        with pytest.raises(UserError) as raised:
            with storage.exclusive_use(label, directory, "give another --model_dir"):
                pass
        assert str(raised.value) == (
            f"--model_dir={directory} is in use by another process of this program, which "
            "still writes there; give another --model_dir")
    with storage.exclusive_use(label, directory, "advice"):  # released: taken again
        assert os.listdir(directory) == []  # and no lock file left in it


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
    with storage.exclusive_use(model_dir, model_dir, "unused"):  # as a running run does
        result = subprocess.run(
            [sys.executable, "-m", "recipes.resnet.train",
             "--config_file=configs/resnet/tiny_cpu.yaml", f"--model_dir={model_dir}"],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"error: --model_dir={model_dir} is in use by another process of this program, which "
        "still writes there; wait for it to finish or stop it (a training run resumes from "
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
