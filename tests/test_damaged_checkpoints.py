"""A run's checkpoint files incomplete or damaged (a partial copy of a run, or of a checkpoint
being written to a bucket): one line naming the file, exit 2, never a run that starts again
from step 0 without a word, and never a traceback (recipes/common/checkpoints.py)."""
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import REPO_ROOT
from recipes.common import checkpoints
from recipes.common import config as config_lib
from recipes.common import driver
from recipes.common.errors import UserError
from recipes.resnet import train as resnet_train

TINY_RESNET = os.path.join(REPO_ROOT, "configs", "resnet", "tiny_cpu.yaml")


def _save_two_checkpoints(model_dir):
    """ckpt-1 and ckpt-2 under `model_dir`/checkpoints, as a recipe's manager keeps them."""
    variable = tf.Variable(1.0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=variable),
                                         os.path.join(model_dir, "checkpoints"), max_to_keep=3)
    manager.save(checkpoint_number=1)
    variable.assign(2.0)
    return manager.save(checkpoint_number=2)


@pytest.mark.parametrize("removed", [".index", ".data-00000-of-00001"])
def test_a_newest_checkpoint_with_a_file_missing_is_named_not_skipped(tmp_path, removed):
    newest = _save_two_checkpoints(str(tmp_path))
    assert checkpoints.latest_checkpoint(str(tmp_path)) == newest
    os.remove(newest + removed)
    with pytest.raises(UserError) as error:
        checkpoints.latest_checkpoint(str(tmp_path))
    assert str(error.value) == (
        f"{tmp_path}/checkpoints: its newest checkpoint ckpt-2 (named in its 'checkpoint' file) "
        f"is incomplete: ckpt-2{removed} is missing; copy the run's files again, or name an "
        "earlier complete checkpoint as model_checkpoint_path in that file to resume from it")


def test_a_checkpoint_data_file_cut_short_is_one_line_at_the_restore(tmp_path):
    variable = tf.Variable(tf.zeros([1000]))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=variable, optimizer=variable),
                                         str(tmp_path), max_to_keep=1)
    path = manager.save(checkpoint_number=3)
    data = path + ".data-00000-of-00001"
    with open(data, "r+b") as damaged:
        damaged.truncate(os.path.getsize(data) // 2)
    with pytest.raises(UserError) as error:
        checkpoints.restore(manager)
    assert str(error.value).startswith(f"checkpoint {path} cannot be read (")
    assert str(error.value).endswith(
        "): its files are damaged, as a partial copy leaves them; copy the run's files again, "
        "or resume from an earlier checkpoint (model_checkpoint_path in the directory's "
        "'checkpoint' file)")


def test_an_init_checkpoint_that_is_another_file_is_one_line_before_any_work(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n")
    (tmp_path / "fake.index").write_text("not a checkpoint index")
    (tmp_path / "fake.data-00000-of-00001").write_text("")
    config = config_lib.load_config(resnet_train.ResNetConfig)
    new_run = str(tmp_path / "new_run")
    for given, message in [
            (str(vocab), f"{vocab}.index is missing, so {vocab} is not a complete TensorFlow "
                         "checkpoint; give phase 1's model_dir"),
            (str(tmp_path / "fake"), f"{tmp_path}/fake.index cannot be read as a checkpoint's (")]:
        config.train.init_checkpoint = given
        with pytest.raises(UserError) as error:
            driver.check_init_checkpoint(config, new_run, "train")
        assert str(error.value).startswith(f"train.init_checkpoint={given!r}: {message}")
        assert "\n" not in str(error.value)
    assert not os.path.exists(new_run)


@pytest.mark.parametrize("mode", ["train", "export"])
def test_a_run_whose_newest_checkpoint_lost_its_index_stops_before_any_work(tmp_path, mode):
    """Was: training started again from step 0 (and eval/export said there was no
    checkpoint), after TensorFlow's 'Couldn't match files' errors on the console."""
    run = tmp_path / "run"
    config_lib.save_config(config_lib.load_config(resnet_train.ResNetConfig, [TINY_RESNET]),
                           str(run))
    newest = _save_two_checkpoints(str(run))
    os.remove(newest + ".index")
    before = sorted(os.listdir(run)) + sorted(os.listdir(run / "checkpoints"))
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "recipes.resnet.train", f"--config_file={TINY_RESNET}",
         f"--model_dir={run}", f"--mode={mode}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: {run}/checkpoints: its newest checkpoint ckpt-2 (named in its 'checkpoint' "
        "file) is incomplete: ckpt-2.index is missing; copy the run's files again, or name an "
        "earlier complete checkpoint as model_checkpoint_path in that file to resume from it"]
    assert sorted(os.listdir(run)) + sorted(os.listdir(run / "checkpoints")) == before


@pytest.mark.parametrize("text", ["", "# only a comment\n", "train: [1,\n"])
def test_a_runs_damaged_config_yaml_is_named_as_damaged_not_another_programs(tmp_path, text):
    """Was: an empty config.yaml read as the defaults ('model.hidden_size was 128 in the
    run', which was trained with 16), a broken one as 'is it another program's run?'."""
    run = tmp_path / "run"
    _save_two_checkpoints(str(run))
    (run / "config.yaml").write_text(text)
    task = resnet_train.ResNetClassification(config_lib.load_config(resnet_train.ResNetConfig))
    with pytest.raises(UserError) as error:
        driver.check_same_program(task, str(run), "eval")
    message = str(error.value)
    assert message.startswith(f"--model_dir {run}: its config.yaml is damaged ({run}/config.yaml")
    assert message.endswith("); put the run's config back (a copy of the run, or the config "
                            "files it was started with), or give a new --model_dir")
    assert "another program" not in message and "\n" not in message


def test_a_runs_checkpoints_directory_given_as_model_dir_names_the_run(tmp_path):
    """`--model_dir=RUN/checkpoints --mode=eval` said "no checkpoint in
    RUN/checkpoints/checkpoints; train first", of a trained run."""
    run = str(tmp_path / "run")
    _save_two_checkpoints(run)
    given = os.path.join(run, "checkpoints")
    with pytest.raises(UserError) as raised:
        checkpoints.require_checkpoint(given)
    assert str(raised.value) == (
        f"no checkpoint in {os.path.join(given, 'checkpoints')}: {given} is the checkpoints "
        f"directory of the run in {run}; give --model_dir={run}")
    with pytest.raises(UserError, match="; train first"):  # no run there: as before
        checkpoints.require_checkpoint(str(tmp_path / "empty" / "checkpoints"))
    assert checkpoints.require_checkpoint(run).endswith("ckpt-2")


@pytest.mark.parametrize("mode, verb, advice", [
    ("train", "resume", "Give a new --model_dir"),
    ("train_and_eval", "resume", "Give a new --model_dir"),
    ("eval", "evaluate", "Evaluate it with the program that trained it"),
    ("export", "export", "Export it with the program that trained it")])
def test_another_programs_run_is_named_for_what_the_mode_does_with_it(tmp_path, mode, verb,
                                                                      advice):
    """Was: 'cannot resume' for --mode=eval and --mode=export too, and 'Give a new
    --model_dir' (which holds no checkpoint to evaluate)."""
    run = tmp_path / "run"
    _save_two_checkpoints(str(run))
    (run / "config.yaml").write_text("data:\n  corpus: stdlib\n")  # a BERT run's key
    task = resnet_train.ResNetClassification(config_lib.load_config(resnet_train.ResNetConfig))
    with pytest.raises(UserError) as error:
        driver.check_same_program(task, str(run), mode)
    assert str(error.value) == (
        f"--model_dir {run} holds a run this program cannot {verb}: its config.yaml does not "
        "load as this program's (unknown config key 'data.corpus'); is it another program's "
        f"run? {advice}")
