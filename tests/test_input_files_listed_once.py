"""A run lists its data globs once, when it starts: every checkpoint chunk's pipeline and
every evaluation reads the files listed then, and a listed file that goes missing mid-run
is one line naming it and the checkpoint to resume from (both recipes, through the
driver, in this process); a BERT file of another kind is one line too. While a run reads
its files, their directories are refused to a preparation or conversion into them."""

import collections
import os
import shutil

import pytest
import tensorflow as tf
import yaml

import tiny_bert_data
from recipes.bert import pretrain
from recipes.common import driver, training
from recipes.common import flags as flags_lib
from recipes.common import task as task_lib
from recipes.common.errors import UserError
from recipes.resnet import convert, digits
from recipes.resnet import train as resnet_train

pytestmark = pytest.mark.slow  # whole runs through the driver, several fits each

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESNET_CONFIG = os.path.join(REPO_ROOT, "configs", "resnet", "tiny_cpu.yaml")


@pytest.fixture(scope="module")
def resnet_files(tmp_path_factory):
    """(train glob, held-out glob) of 48 real digits in 2 + 2 ImageNet-format TFRecords."""
    directory = tmp_path_factory.mktemp("digits")
    images, labels, names = digits.load_digits()
    convert.convert_arrays(images[:48], labels[:48], str(directory), class_names=names,
                           validation_fraction=0.25, num_shards=2)
    return f"{directory}/train-*", f"{directory}/validation-*"


@pytest.fixture(scope="module")
def bert_files(tmp_path_factory):
    return tiny_bert_data.prepare(tmp_path_factory.mktemp("bert"))


def run(task_class, model_dir, *flags):
    """The driver's program for `task_class` with these flags, in this process."""
    from absl import flags as absl_flags

    if "model_dir" not in absl_flags.FLAGS:
        flags_lib.define_flags()
    absl_flags.FLAGS(["recipe", f"--model_dir={model_dir}", "--mode=train_and_eval", *flags])
    try:
        return driver.run_from_flags(task_class, ["recipe"])
    finally:
        absl_flags.FLAGS.unparse_flags()


def resnet_run(files, model_dir, steps):
    train_glob, eval_glob = files
    return run(resnet_train.ResNetClassification, model_dir, f"--config_file={RESNET_CONFIG}",
               "--params_override=data.embedded_digits=false,"
               f"data.train_file_pattern={train_glob},data.eval_file_pattern={eval_glob},"
               "data.shuffle_buffer_size=16,train.global_batch_size=8,"
               f"train.micro_batch_size=8,train.steps={steps},train.checkpoint_every=1,"
               "train.log_every=1,optimizer.warmup_steps=1,eval.global_batch_size=8,"
               "export.enabled=false")


def bert_run(prepared, model_dir, steps, tmp_path):
    config = tiny_bert_data.config(prepared, micro_batch_size=16, steps=steps,
                                   checkpoint_every=1, dropout_rate=0.0)
    config["export"] = {"enabled": False}
    config_file = tmp_path / "bert.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    return run(pretrain.BertPretraining, model_dir, f"--config_file={config_file}")


def runs(recipe, resnet_files, bert_files, tmp_path):
    """(a function of (model_dir, steps) that runs `recipe`, its train and held-out globs)."""
    if recipe == "resnet":
        return (lambda model_dir, steps: resnet_run(resnet_files, model_dir, steps),
                *resnet_files)
    return (lambda model_dir, steps: bert_run(bert_files, model_dir, steps, tmp_path),
            bert_files.train_files, bert_files.eval_files)


@pytest.mark.parametrize("recipe", ["resnet", "bert"])
def test_a_run_lists_each_glob_once_for_its_chunks_and_evaluations(
        recipe, resnet_files, bert_files, tmp_path, monkeypatch):
    train_recipe, train_glob, eval_glob = runs(recipe, resnet_files, bert_files, tmp_path)
    listed = collections.Counter()
    real_glob = tf.io.gfile.glob

    def counting_glob(pattern):
        listed[pattern] += 1
        return real_glob(pattern)

    monkeypatch.setattr(tf.io.gfile, "glob", counting_glob)
    # 3 checkpoint chunks, in 3 fits; evaluated before and after training
    monkeypatch.setattr(training, "CHUNKS_PER_FIT", 1)
    train_recipe(str(tmp_path / "run"), 3)
    assert listed[train_glob] == 1 and listed[eval_glob] == 1, dict(listed)


@pytest.mark.parametrize("recipe", ["resnet", "bert"])
def test_a_run_holds_the_directories_it_reads_from_another_writer_until_it_ends(
        recipe, resnet_files, bert_files, tmp_path, monkeypatch):
    """`python -m recipes.bert.prepare_data` or `recipes.resnet.convert` into the data of a
    running training wrote new files over the ones it read, without a word."""
    from lock_holder import held_by_some_process

    train_recipe, train_glob, eval_glob = runs(recipe, resnet_files, bert_files, tmp_path)
    directories = {os.path.dirname(train_glob), os.path.dirname(eval_glob)}
    seen = []
    real_train = driver._Run.train  # pylint: disable=protected-access

    def train_seeing_the_holds(run_self):
        seen.extend((held_by_some_process(directory),  # a writer: refused
                     held_by_some_process(directory, shared=True))  # a reader: not
                    for directory in sorted(directories))
        return real_train(run_self)

    monkeypatch.setattr(driver._Run, "train", train_seeing_the_holds)
    train_recipe(str(tmp_path / "run"), 2)
    assert seen == [(True, False)] * len(directories)
    assert not any(held_by_some_process(directory) for directory in directories)  # ended


def line_when_a_file_goes(train_recipe, gone, at_step, tmp_path, monkeypatch):
    """The one line of `train_recipe` run for 2 steps, one fit per checkpoint chunk, when
    the file `gone` is moved away as the fit from `at_step` starts (put back after)."""
    moved = str(tmp_path / "moved")
    real_train_dataset = task_lib.train_dataset

    def train_dataset_moving_a_file(task, strategy, plan, first_step, end_step):
        if first_step == at_step:
            os.rename(gone, moved)
        return real_train_dataset(task, strategy, plan, first_step, end_step)

    monkeypatch.setattr(training, "CHUNKS_PER_FIT", 1)
    monkeypatch.setattr(task_lib, "train_dataset", train_dataset_moving_a_file)
    try:
        with pytest.raises(UserError) as raised:
            train_recipe(str(tmp_path / "run"), 2)
    finally:
        os.rename(moved, gone)
    message = str(raised.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("recipe", ["resnet", "bert"])
def test_a_training_file_gone_after_a_checkpoint_is_one_line_naming_it_and_the_checkpoint(
        recipe, resnet_files, bert_files, tmp_path, monkeypatch):
    train_recipe, train_glob, _ = runs(recipe, resnet_files, bert_files, tmp_path)
    gone = sorted(tf.io.gfile.glob(train_glob))[-1]
    # the second fit, after the checkpoint of step 1
    message = line_when_a_file_goes(train_recipe, gone, 1, tmp_path, monkeypatch)
    assert message.startswith(f"the training file {gone} went missing during training ("), \
        message
    assert message.endswith(
        f"resume from the last checkpoint ({tmp_path}/run/checkpoints/ckpt-1)")


@pytest.mark.parametrize("recipe", ["resnet", "bert"])
def test_a_held_out_file_gone_before_the_last_evaluation_is_one_line_naming_it(
        recipe, resnet_files, bert_files, tmp_path, monkeypatch):
    train_recipe, _, eval_glob = runs(recipe, resnet_files, bert_files, tmp_path)
    gone = sorted(tf.io.gfile.glob(eval_glob))[0]
    # as training starts, after the evaluation before it
    message = line_when_a_file_goes(train_recipe, gone, 0, tmp_path, monkeypatch)
    assert message.startswith(f"the held-out file {gone} went missing during evaluation ("), \
        message
    assert message.endswith(
        f"resume from the last checkpoint ({tmp_path}/run/checkpoints/ckpt-2)")


def test_a_bert_training_file_of_another_kind_found_while_training_is_one_line(
        resnet_files, bert_files, tmp_path):
    """The first file of the glob is BERT's (checked before any work); the next one holds
    ResNet's records, found when training reads them."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(sorted(tf.io.gfile.glob(bert_files.train_files))[0], mixed / "a-00000")
    shutil.copy(sorted(tf.io.gfile.glob(resnet_files[0]))[0], mixed / "b-00000")
    config = tiny_bert_data.config(bert_files, micro_batch_size=16, steps=2,
                                   checkpoint_every=1, dropout_rate=0.0,
                                   train_files=f"{mixed}/*")
    config_file = tmp_path / "bert.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(UserError) as raised:
        run(pretrain.BertPretraining, str(tmp_path / "run"), f"--config_file={config_file}")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        f"data.train_files: {mixed}/* holds a record that is not a BERT pretraining example "
        f"of data.seq_length={tiny_bert_data.SEQ_LENGTH} and data.max_predictions_per_seq="
        f"{tiny_bert_data.MAX_PREDICTIONS_PER_SEQ} (Feature: input_ids"), message


def test_a_resumed_train_and_eval_run_does_not_evaluate_before_training_again(
        resnet_files, tmp_path, capsys):
    """Every resume evaluated the whole held-out set once more, labelled "[before training]",
    before going on."""
    model_dir = str(tmp_path / "run")

    def held_out_lines(steps):
        resnet_run(resnet_files, model_dir, steps)
        return [line.rsplit("  ", 1)[-1] for line in capsys.readouterr().out.splitlines()
                if line.startswith("held-out ")]

    assert held_out_lines(2) == ["[before training]", "[after training]"]
    assert held_out_lines(3) == ["[after training]"]  # resumed from step 2


def test_a_bert_run_holds_its_vocabularys_directory_while_it_exports(bert_files, tmp_path,
                                                                     monkeypatch):
    """The export serves the run's vocabulary, read when it exports: its directory (here
    not the data's) was not held, and `--mode=export` held nothing."""
    from lock_holder import held_by_some_process

    vocabulary_dir = tmp_path / "vocabulary"
    vocabulary_dir.mkdir()
    shutil.copy(bert_files.vocab_file, vocabulary_dir / "vocab.txt")
    config = tiny_bert_data.config(bert_files, micro_batch_size=16, steps=2,
                                   checkpoint_every=2, dropout_rate=0.0)
    config["data"]["vocab_file"] = str(vocabulary_dir / "vocab.txt")
    config_file = tmp_path / "bert.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    seen = []
    monkeypatch.setattr(pretrain.BertPretraining, "export", lambda task, export_dir: seen.append(
        (held_by_some_process(vocabulary_dir), held_by_some_process(vocabulary_dir, True))))
    for mode in ("train", "export"):
        run(pretrain.BertPretraining, str(tmp_path / "run"), f"--config_file={config_file}",
            f"--mode={mode}")
    assert seen == [(True, False)] * 2  # a writer refused, a reader not
    assert not held_by_some_process(vocabulary_dir)
