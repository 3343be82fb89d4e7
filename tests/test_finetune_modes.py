"""`--mode=eval` and `--mode=export` do not redo the training data's work: the task's
`prepare` packed (classification) or converted to windows (SQuAD: Model Garden's
tokenization of the whole training file) the training examples in every mode, though only
training reads them; export needs no held-out windows either."""
import os
import types

import pytest

from conftest import REPO_ROOT
from recipes.bert import finetune_data
from test_finetune import SEQ_LENGTH, pretraining_dir  # noqa: F401  (the tiny run, a fixture)

TINY_SQUAD = os.path.join(REPO_ROOT, "tests", "data", "tiny_squad.json")


@pytest.mark.slow  # exports a pretraining run's encoder (SavedModels), once
@pytest.mark.parametrize("mode", ["train", "train_and_eval", "eval", "export"])
def test_squad_converts_the_training_questions_only_to_train(pretraining_dir, mode,  # noqa: F811
                                                             capsys):
    data = types.SimpleNamespace(train_file=TINY_SQUAD, eval_file=TINY_SQUAD, doc_stride=12,
                                 max_query_length=16)
    questions = finetune_data.read_squad(data)
    prepared = finetune_data.prepare_squad(data, finetune_data.PretrainingRun(pretraining_dir),
                                           SEQ_LENGTH, questions, mode)
    line = capsys.readouterr().out.splitlines()[-1]
    held_out = len(questions.evaluation)
    if mode in ("train", "train_and_eval"):
        assert len(prepared.train_arrays[1]["start_logits"]) >= len(questions.train)
        assert line.startswith(f"data: squad, {len(questions.train)} training questions (")
    else:
        assert prepared.train_arrays is None
        assert line.startswith(f"data: squad, the training questions not converted "
                               f"(--mode={mode}) and {held_out} held-out questions (")
    assert (len(prepared.eval_features) == 0) == (mode == "export")
    # an export converts no held-out question: not "(0 windows)", which reads as a failure
    assert line.endswith("held-out questions (not converted: --mode=export)"
                         if mode == "export" else " windows)")


@pytest.mark.slow  # exports a pretraining run's encoder (SavedModels), once
@pytest.mark.parametrize("mode", ["train", "eval", "export"])
def test_classification_packs_the_training_examples_only_to_train(pretraining_dir,  # noqa: F811
                                                                  tmp_path, mode):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nthe cat sat\tfeline\n"
                                        "the dog sat\tcanine\nthe cat ran\tfeline\n")
    data = types.SimpleNamespace(task="classification", train_file=str(tmp_path / "train.tsv"),
                                 eval_file=str(tmp_path / "train.tsv"), labels=None)
    prepared = finetune_data.prepare_classification(
        data, finetune_data.PretrainingRun(pretraining_dir), 16, str(tmp_path / "run"), 1,
        finetune_data.read_classification(data), mode)
    assert (prepared.train_arrays is None) == (mode != "train")
    assert prepared.eval_arrays[1]["logits"].tolist() == [1, 0, 1]
    assert prepared.labels == ["canine", "feline"]
