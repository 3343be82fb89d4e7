"""`--mode=eval` and `--mode=export` do not redo the training data's work: the task's
`prepare` packed (classification) or converted to windows (SQuAD: Model Garden's
tokenization of the whole training file) the training examples in every mode, though only
training reads them; export needs no held-out windows either."""
import json
import os
import shutil
import types

import pytest

from conftest import REPO_ROOT
from recipes.bert import finetune_data
from test_finetune import SEQ_LENGTH, pretraining_dir  # noqa: F401  (the tiny run, a fixture)
from test_finetune import finetune_cli, serve_in_fresh_process

TINY_SQUAD = os.path.join(REPO_ROOT, "tests", "data", "tiny_squad.json")


@pytest.mark.slow  # exports a pretraining run's encoder (SavedModels), once
@pytest.mark.parametrize("mode", ["train", "train_and_eval", "eval", "export"])
def test_squad_converts_the_training_questions_only_to_train(pretraining_dir, mode,  # noqa: F811
                                                             capsys):
    data = types.SimpleNamespace(train_file=TINY_SQUAD, eval_file=TINY_SQUAD, doc_stride=12,
                                 max_query_length=16)
    questions = finetune_data.read_squad(data, mode)
    prepared = finetune_data.prepare_squad(data, finetune_data.PretrainingRun(pretraining_dir),
                                           SEQ_LENGTH, questions, mode)
    line = capsys.readouterr().out.splitlines()[-1]
    held_out = len(finetune_data.read_squad(data).evaluation)
    if mode in ("train", "train_and_eval"):
        assert len(prepared.train_arrays[1]["start_logits"]) >= len(questions.train) > 0
        assert line.startswith(f"data: squad, {len(questions.train)} training questions (")
    else:  # the training file not even read
        assert prepared.train_arrays is None and questions.train == []
    if mode == "eval":
        assert line.startswith(f"data: squad, the training questions not read (--mode=eval) "
                               f"and {held_out} held-out questions (")
    assert (len(prepared.eval_features) == 0) == (mode == "export")
    # an export reads no question: not "(0 windows)", which reads as a failure
    assert (line == "data: squad, no questions read (--mode=export)" if mode == "export"
            else line.endswith(" windows)"))


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
    # an export packs no held-out example either
    assert (prepared.eval_arrays[1]["logits"].tolist() if mode != "export"
            else prepared.eval_arrays) == ([1, 0, 1] if mode != "export" else None)
    assert prepared.labels == ["canine", "feline"]


@pytest.mark.slow  # command-line runs
@pytest.mark.parametrize("task", ["classification", "squad"])
def test_a_run_is_evaluated_and_exported_without_its_training_file(pretraining_dir,  # noqa: F811
                                                                   tmp_path, task):
    """`--mode=eval` and `--mode=export` of a run (its config.yaml naming data.train_file)
    read the training file anyway: deleted or moved, they were refused. And an evaluation
    on another held-out file (data.eval_file given) was refused as a change of the run's
    data.* keys (`_evaluate_on_another_held_out_file`)."""
    if task == "squad":
        shutil.copy(TINY_SQUAD, tmp_path / "train.json")
        shutil.copy(TINY_SQUAD, tmp_path / "dev.json")
        with open(TINY_SQUAD) as f:  # its first article only
            tiny = json.load(f)
        (tmp_path / "other.json").write_text(json.dumps({**tiny, "data": tiny["data"][:1]}))
        files = ["data.task=squad", f"data.train_file={tmp_path / 'train.json'}",
                 f"data.eval_file={tmp_path / 'dev.json'}", "data.doc_stride=12",
                 "data.max_query_length=16"]
    else:  # sentence pairs: an export must know it without either file
        rows = ["sentence1\tsentence2\tlabel", "the cat\tsat\tfeline", "the dog\tran\tcanine"]
        (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
        (tmp_path / "dev.tsv").write_text("\n".join(rows[:2]) + "\n")
        files = ["data.task=classification", f"data.train_file={tmp_path / 'train.tsv'}",
                 f"data.eval_file={tmp_path / 'dev.tsv'}", "data.seq_length=16"]
    run = tmp_path / "run"
    trained = finetune_cli(REPO_ROOT, f"--model_dir={run}", "--mode=train", "--params_override="
                           + ",".join([f"encoder.pretraining_dir={pretraining_dir}", *files,
                                       "train.steps=1", "train.checkpoint_every=1",
                                       "train.global_batch_size=2", "train.micro_batch_size=2",
                                       "optimizer.warmup_steps=0", "eval.global_batch_size=2",
                                       "export.enabled=false"]))
    assert trained.returncode == 0, trained.stderr[-3000:]
    os.remove(tmp_path / ("train.json" if task == "squad" else "train.tsv"))
    evaluated = finetune_cli(tmp_path, f"--model_dir={run}", "--mode=eval")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "training examples not read (--mode=eval)" in evaluated.stdout or (
        "training questions not read (--mode=eval)" in evaluated.stdout)
    scores = json.loads((run / "results.json").read_text())["eval"]
    assert set(scores) == ({"exact_match", "f1"} if task == "squad" else {"accuracy"})
    if task == "squad":  # another held-out file, once (SQuAD: its predictions.json too)
        _evaluate_on_another_held_out_file(run, tmp_path / "other.json", tiny["data"][0],
                                           set(scores))
    dev = tmp_path / ("dev.json" if task == "squad" else "dev.tsv")
    os.remove(dev)
    missing = finetune_cli(tmp_path, f"--model_dir={run}", "--mode=eval")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert [line for line in missing.stderr.splitlines() if line.startswith("error:")] == [
        f"error: data.eval_file={dev} does not exist; check the path " + (
            "(a SQuAD v1.1 JSON file)" if task == "squad"
            else "(a .tsv file with a header row, or .jsonl)")]
    exported = finetune_cli(tmp_path, f"--model_dir={run}", "--mode=export")
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "no examples read (--mode=export)" in exported.stdout or (
        "no questions read (--mode=export)" in exported.stdout)
    if task == "classification":
        served = serve_in_fresh_process(str(run / "export"), {
            "sentence1": ["the cat"], "sentence2": ["sat"]})
        assert set(served["label"]) <= {"feline", "canine"}


def _evaluate_on_another_held_out_file(run, other, article, metrics):
    """`--mode=eval` of the SQuAD `run` on `other`, a file of the one `article`: its
    results, TensorBoard scalars and answers in <run>/eval_other/, the run's own untouched."""
    own = {name: (run / name).read_bytes()
           for name in ("results.json", "config.yaml", "predictions.json")}
    own_events = sorted(os.listdir(run / "eval"))
    evaluated = finetune_cli(run.parent, f"--model_dir={run}", "--mode=eval",
                             f"--params_override=data.eval_file={other}")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert {name: (run / name).read_bytes() for name in own} == own
    assert sorted(os.listdir(run / "eval")) == own_events  # its scalars went elsewhere
    results = json.loads((run / "eval_other" / "results.json").read_text())
    assert set(results["eval"]) == metrics and results["mode"] == "eval"
    assert results["held_out"] == {"data.eval_file": str(other)}
    assert os.listdir(run / "eval_other" / "eval")  # its TensorBoard scalars
    answers = json.loads((run / "eval_other" / "predictions.json").read_text())
    assert len(answers) == sum(len(p["qas"]) for p in article["paragraphs"])
    # another file of that name would replace them: refused before any work
    (run.parent / "elsewhere").mkdir()
    namesake = run.parent / "elsewhere" / other.name
    shutil.copy(other, namesake)
    kept = (run / "eval_other" / "results.json").read_bytes()
    refused = finetune_cli(run.parent, f"--model_dir={run}", "--mode=eval",
                           f"--params_override=data.eval_file={namesake}")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert [line for line in refused.stderr.splitlines() if line.startswith("error:")] == [
        f"error: data.eval_file={namesake}: {run / 'eval_other'}/ holds the evaluation of "
        f"{other}, which this one would replace; move or remove eval_other/, or give the "
        "file another name"]
    assert (run / "eval_other" / "results.json").read_bytes() == kept


def test_an_export_of_a_run_without_inputs_json_says_what_to_write(tmp_path):
    # runs trained before inputs.json existed: its export needs the training file or the file
    from recipes.bert import finetune_config, finetune_data
    from recipes.common.errors import UserError

    (tmp_path / "labels.json").write_text(json.dumps(["neg", "pos"]))
    data = finetune_config.DataConfig(task="classification",
                                      train_file=str(tmp_path / "gone.tsv"),
                                      eval_file=str(tmp_path / "dev.tsv"))
    with pytest.raises(UserError) as refused:
        finetune_data.labels_of_run(data, "export", str(tmp_path), None)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'inputs.json'} is missing or damaged (whether it "
                              f"reads sentence pairs of the run), and data.train_file="
                              f"{tmp_path / 'gone.tsv'}, which gives them, does not exist")
    assert message.endswith('or write it: {"sentence_pairs": true} (or false: one sentence an '
                            'example), as the run was trained')
    (tmp_path / "inputs.json").write_text(json.dumps({"sentence_pairs": False}))  # as told
    assert finetune_data.labels_of_run(data, "export", str(tmp_path), None).labels == [
        "neg", "pos"]
