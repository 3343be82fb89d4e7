"""Fine-tuning's --mode=eval / --mode=export of a --model_dir that holds no fine-tuning run
(without --config_file): the run's own config.yaml was not there to load, so the schema's
defaults were checked and refused first, "encoder.pretraining_dir is empty: give a
pretraining run's model_dir", whatever the directory held. Each now says what it holds, as
the other programs say it."""
import os

import pytest
import tensorflow as tf

from recipes.bert import finetune, finetune_compare
from recipes.bert.config import BertPretrainingConfig
from recipes.common import config as config_lib
from recipes.common import driver
from recipes.common import flags as flags_lib
from recipes.common.errors import UserError
from recipes.resnet.config import ResNetConfig


def _run_of(config_class, model_dir):
    """A run of the program of `config_class` in `model_dir`: its config.yaml (the schema's
    defaults) and a checkpoint."""
    config_lib.save_config(config_lib.load_config(config_class, ()), str(model_dir))
    tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)),
                               str(model_dir / "checkpoints"), max_to_keep=1).save()
    return str(model_dir)


def _comparison(model_dir):
    """A directory of fine-tuning's --compare_with_random_init: two runs, none of its own."""
    for name in ("pretrained", "random_init"):
        _run_of(finetune.BertFinetuneConfig, model_dir / name)
    return str(model_dir)


def _load(model_dir, mode, config_files=()):
    options = flags_lib.RunOptions(
        config_files=config_files, params_override="", model_dir=model_dir, mode=mode, tpu="",
        strategy="", communication="auto", deterministic=False)
    return driver.load_task(finetune.BertFinetuneTask, options, mode)


@pytest.mark.parametrize("mode, verb", [("eval", "evaluate"), ("export", "export")])
def test_each_wrong_model_dir_says_what_it_holds(tmp_path, mode, verb):
    comparison = _comparison(tmp_path / "comparison")
    with pytest.raises(UserError) as error:
        _load(comparison, mode)
    assert str(error.value) == (
        f"--model_dir {comparison} holds other runs in pretrained/, random_init/ (each with "
        f"its config.yaml), not a run of its own to {verb}: give one of those runs as "
        "--model_dir")
    for config_class, name in ((BertPretrainingConfig, "bert_tiny"), (ResNetConfig, "resnet")):
        run = _run_of(config_class, tmp_path / name)
        with pytest.raises(UserError) as error:
            _load(run, mode)
        assert str(error.value).startswith(
            f"--model_dir {run} holds a run this program cannot {verb}: its config.yaml does "
            "not load as this program's ("), str(error.value)
        assert str(error.value).endswith(
            f"is it another program's run? {verb.capitalize()} it with the program that "
            "trained it")
    missing = str(tmp_path / "nowhere")
    with pytest.raises(UserError) as error:
        _load(missing, mode)
    assert str(error.value) == (
        f"no checkpoint in {os.path.join(missing, 'checkpoints')}; train first (--mode=train) "
        "or point --model_dir at a trained run")
    assert not os.path.exists(missing)


def test_an_evaluation_of_a_comparison_given_its_config_file_names_its_runs(tmp_path):
    # with --config_file the config loads; the directory was "no checkpoint in ...; train
    # first", though it holds two trained runs
    comparison = _comparison(tmp_path / "comparison")
    with pytest.raises(UserError, match=r"holds other runs in pretrained/, random_init/ .*"
                       r"not a run of its own to evaluate: give one of those runs"):
        driver.check_model_dir(comparison, "eval")


@pytest.mark.parametrize("mode", ["train", "eval", "export"])
def test_fine_tuning_without_the_comparison_flag_on_a_comparison_names_the_flag(tmp_path,
                                                                                mode):
    # the fine-tuning program, before the driver reads or writes anything: the flag that goes
    # on with both runs, which the shared driver (every program's) does not name
    comparison = _comparison(tmp_path / "comparison")
    options = flags_lib.RunOptions(
        config_files=(), params_override="", model_dir=comparison, mode=mode, tpu="",
        strategy="", communication="auto", deterministic=False,
        extra={"compare_with_random_init": False})
    before = sorted(os.listdir(comparison))
    with pytest.raises(UserError) as error:
        finetune_compare.run(finetune.BertFinetuneTask, options)
    assert str(error.value) == (
        f"--model_dir {comparison} holds the runs of a comparison made with "
        "--compare_with_random_init (pretrained/, random_init/), not a run of its own: add "
        "--compare_with_random_init to go on with both (train, eval or export), or give one "
        "of those runs as --model_dir")
    assert sorted(os.listdir(comparison)) == before
    # one run of a comparison stopped early names it too; a run of its own does not
    os.rename(os.path.join(comparison, "random_init"), str(tmp_path / "elsewhere"))
    with pytest.raises(UserError, match=r"made with --compare_with_random_init \(pretrained/\)"):
        finetune_compare.check_not_a_comparison(comparison)
    finetune_compare.check_not_a_comparison(os.path.join(comparison, "pretrained"))
    finetune_compare.check_not_a_comparison(str(tmp_path / "new"))


@pytest.mark.parametrize("mode, verb", [("eval", "evaluate"), ("export", "export")])
def test_a_folder_of_other_runs_is_not_told_of_fine_tunings_flag(tmp_path, mode, verb):
    # the shared driver told a pretraining (or ResNet) user who gave a folder of runs
    # "... with that flag added", naming --compare_with_random_init, which only fine-tuning has
    runs = tmp_path / "runs"
    for name in ("bert_tiny", "bert_tiny_lamb"):
        _run_of(BertPretrainingConfig, runs / name)
    with pytest.raises(UserError) as error:
        driver.check_model_dir(str(runs), mode)
    assert str(error.value) == (
        f"--model_dir {runs} holds other runs in bert_tiny/, bert_tiny_lamb/ (each with its "
        f"config.yaml), not a run of its own to {verb}: give one of those runs as --model_dir")
    with pytest.raises(UserError) as error:
        driver._check_no_runs_inside(str(runs), "train")  # (check_same_program's)
    assert "compare_with_random_init" not in str(error.value)
