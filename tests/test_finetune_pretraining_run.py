"""A damaged or incomplete pretraining run (`encoder.pretraining_dir`) is one line naming
the file and what to do, at the config check (`finetune_data.PretrainingRun`), before
anything is printed or written: each of these was a traceback (exit 1), most after
<model_dir>/data/ or labels.json were written, one after training had started."""
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import REPO_ROOT
from recipes.bert import finetune_data
from recipes.common.errors import UserError
from test_finetune import pretraining_dir  # noqa: F401  (the tiny run, a fixture)


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _edit_encoder_yaml(run, key, value):
    path = os.path.join(run, "model_garden", "encoder.yaml")
    with open(path) as f:
        config = yaml.safe_load(f)
    config["bert_v2"][key] = value
    _write(path, yaml.safe_dump(config))


def _truncate_data_file(run):
    garden = os.path.join(run, "model_garden")
    data = [name for name in os.listdir(garden) if ".data-" in name][0]
    with open(os.path.join(garden, data), "r+b") as f:
        f.truncate(os.path.getsize(f.name) // 2)


def _add_word_pieces(run):
    with open(os.path.join(run, "model_garden", "vocab.txt"), "a") as f:
        f.write("zzextra1\nzzextra2\n")


EXPORT_AGAIN = "; export the run's encoder again (python -m recipes.bert.ecosystem_export"
DAMAGES = {  # what is done to a copy of the run: (damage, start of the message after the dir)
    "vocab.txt deleted": (lambda run: os.remove(os.path.join(run, "model_garden", "vocab.txt")),
                          "vocabulary file {run}/model_garden/vocab.txt does not exist: "
                          "export the run's encoder again"),
    # an export's vocabulary: "add them" (the reserved tokens) was the advice, which would
    # shift the ids the encoder trained on; the run's export is what is damaged
    "vocab.txt empty": (lambda run: _write(os.path.join(run, "model_garden", "vocab.txt"), "\n"),
                        "{run}/model_garden/vocab.txt is empty, not the vocabulary the run "
                        "trained with (an export or copy that stopped early?)" + EXPORT_AGAIN),
    "vocab.txt without reserved tokens": (
        lambda run: _write(os.path.join(run, "model_garden", "vocab.txt"), "cat\ndog\n"),
        "vocabulary file {run}/model_garden/vocab.txt lacks the reserved token(s) [PAD] [UNK] "
        "[CLS] [SEP] [MASK]: the run trained with a BERT vocabulary, so its export is "
        "damaged" + EXPORT_AGAIN),
    "vocab.txt longer than vocab_size": (
        _add_word_pieces, "{run}/model_garden/vocab.txt has 75 word pieces, more than the "
        "vocab_size 73 of the encoder (encoder.yaml)"),
    "encoder.yaml deleted": (
        lambda run: os.remove(os.path.join(run, "model_garden", "encoder.yaml")),
        "{run}/model_garden/encoder.yaml does not exist" + EXPORT_AGAIN),
    "encoder.yaml not YAML": (
        lambda run: _write(os.path.join(run, "model_garden", "encoder.yaml"), "bert_v2: [a\n"),
        "{run}/model_garden/encoder.yaml is not a Model Garden encoder config ("),
    "config.yaml without seq_length": (
        lambda run: _write(os.path.join(run, "config.yaml"), "data: {corpus: my_texts}\n"),
        "{run}/config.yaml is not a BERT pretraining run's config (no data.seq_length): give "
        "the --model_dir of a pretraining run"),
    "checkpoint data cut short": (_truncate_data_file,
                                  "{run}/model_garden/encoder-1 is cut short: its data files "
                                  "hold "),
    "encoder.yaml of another shape": (
        lambda run: _edit_encoder_yaml(run, "num_layers", 2),
        "{run}/model_garden/encoder-1 does not fit the encoder of its model_garden/encoder.yaml "
        "(the encoder has 39 variables, the checkpoint 23;"),
    "encoder.yaml of another width": (
        lambda run: _edit_encoder_yaml(run, "intermediate_size", 48),
        "{run}/model_garden/encoder-1 does not fit the encoder of its model_garden/encoder.yaml "
        "(the encoder has 23 variables, the checkpoint 23; shape [32, 48] is in the encoder "
        "only)" + EXPORT_AGAIN),
}


def _damaged_copy(pretraining_dir, tmp_path, damage):  # noqa: F811
    run = str(tmp_path / "run")
    shutil.copytree(pretraining_dir, run)
    DAMAGES[damage][0](run)
    return run


@pytest.mark.slow  # exports a pretraining run's encoder (SavedModels), once
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_pretraining_run_is_one_line_at_the_check(pretraining_dir, tmp_path,  # noqa: F811
                                                           damage):
    run = _damaged_copy(pretraining_dir, tmp_path, damage)
    with pytest.raises(UserError) as error:
        finetune_data.PretrainingRun(run)
    message = str(error.value)
    assert message.startswith("encoder.pretraining_dir: " + DAMAGES[damage][1].format(run=run))
    assert "\n" not in message


@pytest.mark.slow  # exports a pretraining run's encoder (SavedModels), once
def test_the_program_refuses_a_run_without_vocabulary_before_writing(pretraining_dir,  # noqa: F811
                                                                    tmp_path):
    """The program: exit 2, one line, and --model_dir not created (prepare wrote labels.json
    and then failed in the tokenizer)."""
    run = _damaged_copy(pretraining_dir, tmp_path, "vocab.txt deleted")
    data = tmp_path / "train.tsv"
    data.write_text("sentence\tlabel\nthe cat sat\tfeline\nthe dog sat\tcanine\n")
    model_dir = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "recipes.bert.finetune", f"--model_dir={model_dir}",
         "--params_override=" + ",".join([
             f"encoder.pretraining_dir={run}", "data.task=classification",
             f"data.train_file={data}", f"data.eval_file={data}"])],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": REPO_ROOT})
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"error: encoder.pretraining_dir: vocabulary file {run}/model_garden/vocab.txt does "
        "not exist")
    assert done.stdout.strip() == "" and not model_dir.exists()
