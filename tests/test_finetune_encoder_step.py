"""The step of the pretraining run's encoder that fine-tuning starts from: the export
(model_garden/) records it (step.json); an export older than the run's newest checkpoint (a
run trained on after it) was fine-tuned without a word, and a run trained with
export.enabled=false was told to use a command line that needs an export it does not have."""
import types

import pytest
import tensorflow as tf
import yaml

from recipes.bert import ecosystem_export, finetune_data
from recipes.bert import model as model_lib
from recipes.common.errors import UserError
from test_finetune import TINY_MODEL

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cat", "dog"]
SETTINGS = types.SimpleNamespace(dropout_rate=0.1, attention_dropout_rate=0.1, init="pretrained")


def _pretraining_run(root, exported=None, newest=None):
    """A pretraining run's files fine-tuning reads, in `root`: config.yaml, the encoder
    export of step `exported` (None: no export; 0: one that records no step) and a
    checkpoint of step `newest` (None: none)."""
    root.mkdir()
    (root / "config.yaml").write_text(yaml.safe_dump({
        "model": vars(TINY_MODEL), "data": {"corpus": "my_texts", "seq_length": 16}}))
    (root / "vocab.txt").write_text("".join(word + "\n" for word in VOCAB))
    if exported is not None:
        encoder = ecosystem_export.create_weights(
            model_lib.build_encoder(TINY_MODEL, len(VOCAB)), 16)
        ecosystem_export.write_encoder_checkpoint(
            str(root / "model_garden"), encoder,
            ecosystem_export.encoder_config(TINY_MODEL, len(VOCAB)), str(root / "vocab.txt"),
            exported or None)
    if newest is not None:
        tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(newest)),
                                   str(root / "checkpoints"), max_to_keep=1).save(newest)
    return str(root)


def test_an_export_older_than_the_runs_newest_checkpoint_is_said_with_both_steps(tmp_path,
                                                                                 capsys):
    run_dir = _pretraining_run(tmp_path / "bert", exported=120, newest=140)
    run = finetune_data.PretrainingRun(run_dir)
    run.build_encoder(16, SETTINGS)
    assert capsys.readouterr().out.splitlines() == [
        f"encoder: pretrained weights from {run_dir}/model_garden/encoder-1 (step 120 of the "
        "pretraining run)",
        f"encoder: warning: the export in {run_dir}/model_garden is of step 120, older than "
        "the run's newest checkpoint (step 140); fine-tuning the step-120 encoder; to "
        f"fine-tune the newest, export it first: python -m recipes.bert.pretrain "
        f"--model_dir={run_dir} --mode=export"]
    # a resumed fine-tuning run, say: its checkpoint's weights
    run.build_encoder(16, SETTINGS, starts_from_export=False)
    assert len(capsys.readouterr().out.splitlines()) == 1


@pytest.mark.parametrize("exported, newest, step", [
    (140, 140, "step 140 of the pretraining run"),
    (140, None, "step 140 of the pretraining run"),  # a run copied without its checkpoints
    (0, 140, "its step not recorded: exported by recipes.bert.ecosystem_export or an older "
             "version"),
])
def test_the_encoder_line_names_the_step_of_the_export(tmp_path, capsys, exported, newest,
                                                       step):
    run_dir = _pretraining_run(tmp_path / "bert", exported=exported, newest=newest)
    finetune_data.PretrainingRun(run_dir).build_encoder(16, SETTINGS)
    assert capsys.readouterr().out.splitlines() == [
        f"encoder: pretrained weights from {run_dir}/model_garden/encoder-1 ({step})"]


@pytest.mark.parametrize("mode, resumed, starts_from_export", [
    ("train", False, True),
    ("train_and_eval", False, True),
    ("train", True, False),  # the fine-tuning run's checkpoint is restored over them
    ("eval", True, False),
    ("export", True, False),
])
def test_the_warning_is_for_a_run_that_fine_tunes_the_pretrained_weights(tmp_path, mode,
                                                                         resumed,
                                                                         starts_from_export):
    if resumed:
        tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(3)),
                                   str(tmp_path / "checkpoints"), max_to_keep=1).save(3)
    config = types.SimpleNamespace(train=types.SimpleNamespace(init_checkpoint=""))
    assert finetune_data.starts_from_export(config, mode, str(tmp_path)) is starts_from_export


def test_a_run_trained_without_its_export_is_told_to_export_it(tmp_path):
    # "pretrain first, or write it ... with python -m recipes.bert.ecosystem_export", which
    # then said "export holds no SavedModel export; run the pretraining with --mode=export"
    run_dir = _pretraining_run(tmp_path / "bert", newest=140)
    with pytest.raises(UserError) as error:
        finetune_data.PretrainingRun(run_dir)
    assert str(error.value) == (
        f"encoder.pretraining_dir: {run_dir}/model_garden holds no encoder checkpoint; export "
        f"the run's encoder: python -m recipes.bert.pretrain --model_dir={run_dir} "
        "--mode=export")


def test_the_export_records_its_step_and_replaces_an_earlier_one(tmp_path):
    directory = str(tmp_path / "model_garden")
    encoder = ecosystem_export.create_weights(model_lib.build_encoder(TINY_MODEL, len(VOCAB)), 16)
    (tmp_path / "vocab.txt").write_text("".join(word + "\n" for word in VOCAB))
    config = ecosystem_export.encoder_config(TINY_MODEL, len(VOCAB))
    ecosystem_export.write_encoder_checkpoint(directory, encoder, config,
                                              str(tmp_path / "vocab.txt"), 120)
    assert ecosystem_export.exported_step(directory) == 120
    assert ecosystem_export.replace_problem(str(tmp_path)) is None  # step.json: the export's
