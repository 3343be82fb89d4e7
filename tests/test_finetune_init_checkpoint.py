"""`train.init_checkpoint` of a fine-tuning run that cannot fit its model (a Model Garden
encoder checkpoint, whose encoder belongs in encoder.pretraining_dir; a fine-tuning run of
another number of labels) was refused by the restore, after the data was prepared (labels.json
written into a new --model_dir) and the model built: now one line, exit 2, nothing written."""
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from test_finetune import pretraining_dir  # noqa: F401  (the tiny run, a fixture)

SETTINGS = ["data.task=classification", "data.seq_length=16", "train.steps=1",
            "train.checkpoint_every=1", "train.global_batch_size=2", "train.micro_batch_size=2",
            "optimizer.warmup_steps=0", "eval.global_batch_size=2", "export.enabled=false"]


def _train(model_dir, data, pretraining, *more):
    override = ",".join([f"encoder.pretraining_dir={pretraining}", f"data.train_file={data}",
                         f"data.eval_file={data}", *SETTINGS, *more])
    return subprocess.run(
        [sys.executable, "-m", "recipes.bert.finetune", f"--model_dir={model_dir}",
         "--mode=train", f"--params_override={override}"], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=900, env={**os.environ, "PYTHONPATH": REPO_ROOT})


def _error_lines(done):
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.slow  # command-line runs
def test_an_init_checkpoint_that_cannot_fit_is_refused_first(pretraining_dir,  # noqa: F811
                                                             tmp_path):
    two = tmp_path / "two.tsv"
    two.write_text("sentence\tlabel\nthe cat sat\tfeline\nthe dog sat\tcanine\n")
    three = tmp_path / "three.tsv"
    three.write_text("sentence\tlabel\nthe cat sat\tfeline\nthe dog sat\tcanine\n"
                     "the mat sat\tobject\n")
    first = _train(tmp_path / "first", two, pretraining_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    # a run of the same task and labels: its weights are restored (the check refuses no fit)
    again = _train(tmp_path / "again", two, pretraining_dir,
                   f"train.init_checkpoint={tmp_path / 'first'}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "initialised weights from" in again.stdout
    garden = os.path.join(pretraining_dir, "model_garden")
    refused = _train(tmp_path / "garden", two, pretraining_dir, f"train.init_checkpoint={garden}")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert _error_lines(refused) == [
        f"error: train.init_checkpoint={garden!r}: {garden}/encoder-1 holds no weights of a "
        "fine-tuning run (its variables are under encoder/, not model/inner_model/: a Model "
        "Garden encoder checkpoint?); give a fine-tuning run of this task and its labels, or "
        "none; the pretrained encoder comes from encoder.pretraining_dir (give its pretraining "
        "run there)"]
    other_labels = _train(tmp_path / "three", three, pretraining_dir,
                          f"train.init_checkpoint={tmp_path / 'first'}")
    assert other_labels.returncode == 2 and "Traceback" not in other_labels.stderr
    assert _error_lines(other_labels) == [
        f"error: train.init_checkpoint='{tmp_path / 'first'}' is a run of 2 labels "
        f"({tmp_path / 'first'}/labels.json), this one has 3; give a fine-tuning run of this "
        "task and its labels, or none; the pretrained encoder comes from "
        "encoder.pretraining_dir (give its pretraining run there)"]
    assert not (tmp_path / "garden").exists() and not (tmp_path / "three").exists()
