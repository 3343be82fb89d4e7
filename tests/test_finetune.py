"""The fine-tuning program (`python -m recipes.bert.finetune`, a task on the shared driver):
SQuAD on the tiny SQuAD-format file trains, decodes and scores with the official metric (on
a context longer than the sequence, read in windows), and its raw-string SavedModel,
reloaded in a fresh process, gives the answers evaluation scored;
sentence-pair classification with gradient accumulation serves labels (LAMB fine-tunes
in tests/test_ecosystem_export.py and in the embedded default); user
mistakes are one line and exit status 2.

The "pretraining run" is a tiny random encoder written in the layout the pretraining program
exports (`ecosystem_export.export_for_ecosystem` + config.yaml), so no pretraining runs here.
"""
import dataclasses
import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
import tf_keras
import yaml

import preloaded_cli
import tensorboard_events
from conftest import REPO_ROOT, built_once
from recipes.bert import ecosystem_export
from recipes.bert import finetune, finetune_compare, finetune_data
from recipes.bert import model as model_lib
from recipes.bert import squad

TINY_SQUAD = os.path.join(REPO_ROOT, "tests", "data", "tiny_squad.json")
SEQ_LENGTH = 48
TINY_MODEL = types.SimpleNamespace(
    hidden_size=32, num_layers=1, num_attention_heads=2, intermediate_size=64,
    max_sequence_length=64, type_vocab_size=2, dropout_rate=0.0, attention_dropout_rate=0.0,
    initializer_range=0.02)
CLASSIFICATION_WORDS = ["cat", "dog", "sat", "ran", "on", "mat", "far", "away", "home"]


@pytest.fixture(scope="module")
def pretraining_dir(tmp_path_factory):
    """A tiny pretraining run's exports (read only), built once for the files that import
    this fixture (`conftest.built_once`: its SavedModels take most of a minute)."""
    tf_keras.utils.set_random_seed(5)  # (as when this process builds it)
    return built_once(tmp_path_factory, "pretraining_run", _write_pretraining_run)


def _write_pretraining_run(root):
    """What fine-tuning reads of a pretraining run, in `root`: its encoder exports
    (model_garden/, hub/, with a vocabulary of the tests' words) and a config.yaml."""
    words = set(CLASSIFICATION_WORDS)
    with open(TINY_SQUAD) as f:
        for article in json.load(f)["data"]:
            for paragraph in article["paragraphs"]:
                for text in [paragraph["context"]] + [q["question"] for q in paragraph["qas"]]:
                    words |= set(re.findall(r"\w+|[^\w\s]", text.lower()))
    vocab_file = str(root / "vocab.txt")
    with open(vocab_file, "w") as f:
        f.write("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                        + sorted(words)))
    tf_keras.utils.set_random_seed(5)
    encoder = ecosystem_export.create_weights(
        model_lib.build_encoder(TINY_MODEL, len(words) + 5), SEQ_LENGTH)
    ecosystem_export.export_for_ecosystem(str(root), encoder, TINY_MODEL, vocab_file, SEQ_LENGTH)
    with open(root / "config.yaml", "w") as f:
        yaml.safe_dump({"data": {"corpus": "my_texts", "seq_length": SEQ_LENGTH, "seed": 1}}, f)


def finetune_cli(cwd, *args):
    """`python -m recipes.bert.finetune *args` in `cwd` (its CompletedProcess, text), through
    tests/preloaded_cli.py: TensorFlow imported once for the test process's runs."""
    return preloaded_cli.run("recipes.bert.finetune", args, cwd=cwd, timeout=900,
                             env={**os.environ, "PYTHONPATH": REPO_ROOT})


def run_finetune(model_dir, override, *extra):
    return finetune_cli(REPO_ROOT, f"--model_dir={model_dir}", f"--params_override={override}",
                        *extra)


def serve_in_fresh_process(export_dir, inputs):
    """Calls serving_default in a new Python process (only TF and tensorflow-text loaded)."""
    script = (
        "import json, sys\n"
        "import tensorflow as tf, tensorflow_text\n"
        "serve = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "inputs = {k: tf.constant(v) for k, v in json.loads(sys.argv[2]).items()}\n"
        "out = serve(**inputs)\n"
        "print(json.dumps({k: [x.decode() if isinstance(x, bytes) else x for x in "
        "v.numpy().tolist()] for k, v in out.items()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, export_dir, json.dumps(inputs)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_eval_file(path):
    """The tiny file plus its questions asked again (ids "joined-...") of one context: its
    four contexts joined (about 70 word pieces; a window of SEQ_LENGTH holds about 37)."""
    with open(TINY_SQUAD) as f:
        articles = json.load(f)["data"]
    context, joined = "", []
    for paragraph in [p for a in articles for p in a["paragraphs"]]:
        offset = len(context) + (1 if context else 0)
        context = f"{context} {paragraph['context']}" if context else paragraph["context"]
        joined += [dict(q, id=f"joined-{q['id']}", answers=[
            dict(a, answer_start=a["answer_start"] + offset) for a in q["answers"]])
            for q in paragraph["qas"]]
    for q in joined:
        for a in q["answers"]:
            assert context[a["answer_start"]:].startswith(a["text"])
    path.write_text(json.dumps({"version": "1.1", "data": articles + [
        {"title": "joined", "paragraphs": [{"context": context, "qas": joined}]}]}))
    return str(path), articles, context, joined


def first_window_end(pretraining_dir, eval_file, question_id):
    """The character offset in its context where the first window of `question_id` ends
    (Model Garden's windows, as evaluation cuts them)."""
    examples = squad.read_examples(eval_file, is_training=False)
    index = next(i for i, e in enumerate(examples) if e.qas_id == question_id)
    features = squad.convert_examples(
        examples[index:index + 1], squad.make_tokenizer(
            os.path.join(pretraining_dir, "model_garden", "vocab.txt")),
        SEQ_LENGTH, is_training=False, doc_stride=12)
    last_word = max(features[0].token_to_orig_map.values())
    return len(" ".join(examples[index].doc_tokens[:last_word + 1]))


@pytest.mark.slow  # command-line runs
def test_squad_trains_scores_and_serves_the_scored_answers_in_a_fresh_process(
        pretraining_dir, tmp_path):
    eval_file, articles, context, joined = write_eval_file(tmp_path / "eval.json")
    model_dir = tmp_path / "squad"
    done = run_finetune(model_dir, ",".join([
        f"encoder.pretraining_dir={pretraining_dir}", "encoder.dropout_rate=0.0",
        "encoder.attention_dropout_rate=0.0", "data.task=squad",
        f"data.train_file={TINY_SQUAD}", f"data.eval_file={eval_file}", "data.doc_stride=12",
        "data.max_query_length=16",  # the run's length is 48: room for the context
        "optimizer.name=adamw", "optimizer.learning_rate=0.001", "optimizer.warmup_steps=10",
        "train.steps=150", "train.checkpoint_every=150", "train.global_batch_size=8",
        "train.micro_batch_size=4", "eval.global_batch_size=8"]))
    assert done.returncode == 0, done.stderr[-3000:]
    windows = int(re.search(r"16 held-out questions \((\d+) windows\)", done.stdout)[1])
    assert windows >= 8 + 8 * 3  # one per short context, about 3 per joined one
    results = json.loads((model_dir / "results.json").read_text())
    assert results["accumulation_steps"] == 2
    assert re.search(r"held-out exact_match=[\d.]+ f1=[\d.]+", done.stdout)
    # the held-out scores reach TensorBoard `eval/` (the last write: after training)
    written = {tag: value for _, tag, value in tensorboard_events.scalars(model_dir / "eval")}
    assert written == pytest.approx(results["eval"], rel=1e-6) and written, written
    predictions = json.loads((model_dir / squad.PREDICTIONS_FILE).read_text())
    # The 8 training questions in their own contexts: the span head has memorised them.
    scores = squad.squad_scores(articles, predictions)
    assert scores["f1"] >= 90.0 and scores["exact_match"] >= 87.5
    questions = [(q["id"], q["question"], p["context"]) for a in articles
                 for p in a["paragraphs"] for q in p["qas"]]
    questions += [(q["id"], q["question"], context) for q in joined]
    served = serve_in_fresh_process(str(model_dir / "export"), {
        "question": [q for _, q, _ in questions], "context": [c for _, _, c in questions]})
    assert served["answer"] == [predictions[qid] for qid, _, _ in questions]
    for (_, _, text), answer, start, end in zip(questions, served["answer"], served["start"],
                                                 served["end"]):
        assert text.encode()[start:end].decode() == answer
    # Some answers in the joined context come from past its first window.
    assert max(served["start"][8:]) >= first_window_end(pretraining_dir, eval_file,
                                                         joined[0]["id"])


@pytest.mark.slow  # command-line runs
def test_pair_classification_with_accumulation_serves_labels(pretraining_dir,
                                                                      tmp_path):
    rows = ["sentence1\tsentence2\tlabel"]
    for first in ("the cat sat", "a cat ran far", "cat on the mat", "the cat ran home"):
        for second in ("on the mat", "far away"):
            rows.append(f"{first}\t{second}\tfeline")
            rows.append(f"{first.replace('cat', 'dog')}\t{second}\tcanine")
    data = tmp_path / "pairs.tsv"
    data.write_text("\n".join(rows) + "\n")
    model_dir = tmp_path / "pairs"
    done = run_finetune(model_dir, ",".join([
        f"encoder.pretraining_dir={pretraining_dir}", "data.task=classification",
        f"data.train_file={data}", f"data.eval_file={data}", "data.seq_length=16",
        "optimizer.name=adamw", "optimizer.learning_rate=0.005", "optimizer.warmup_steps=10",
        "train.steps=120", "train.checkpoint_every=60", "train.global_batch_size=16",
        "train.micro_batch_size=8", "eval.global_batch_size=16"]))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["accumulation_steps"] == 2 and results["steps"] == 120
    assert results["eval"]["accuracy"] == 1.0
    served = serve_in_fresh_process(str(model_dir / "export"), {
        "sentence1": ["the cat sat", "the dog sat"], "sentence2": ["far away", "far away"]})
    assert served["label"] == ["feline", "canine"]
    assert all(abs(sum(p) - 1) < 1e-5 for p in served["probabilities"])


def test_the_data_line_names_a_training_question_the_reader_skipped(pretraining_dir, tmp_path,
                                                                    capsys):
    """Model Garden's reader skipped a training question whose answer is not at its
    answer_start with an absl warning, and the data line counted the rest as if nothing had
    gone."""
    with open(TINY_SQUAD) as f:
        content = json.load(f)
    moved = content["data"][0]["paragraphs"][0]["qas"][0]
    moved["answers"][0]["answer_start"] = 0  # the words there ("The Eiffel") are not its
    train_file = tmp_path / "train.json"
    train_file.write_text(json.dumps(content))
    data = types.SimpleNamespace(train_file=str(train_file), eval_file=TINY_SQUAD,
                                 doc_stride=12, max_query_length=16)
    questions = finetune_data.read_squad(data)
    finetune_data.prepare_squad(data, finetune_data.PretrainingRun(pretraining_dir), SEQ_LENGTH,
                                questions)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        "data: 1 training question(s) skipped, as Model Garden's reader skips them (their "
        "answer's words are not at its answer_start), such as data[0].paragraphs[0].qas[0] "
        f"(id \"{moved['id']}\") of data.train_file")
    assert lines[-2].startswith(f"data: squad, {len(questions.evaluation) - 1} training "
                                "questions")


@pytest.mark.slow  # command-line runs
def test_a_run_given_relative_paths_is_evaluated_and_resumed_from_any_directory(
        pretraining_dir, tmp_path):
    """Its config.yaml kept `encoder.pretraining_dir` (and the task files) as given,
    relative: evaluated from another directory, the run found no pretraining run there, and
    the same directory given absolute was refused as another one (a key a run keeps)."""
    work = tmp_path / "work"
    work.mkdir()
    rows = ["sentence\tlabel"] + [f"the {w} sat\t{w}" for w in ("cat", "dog")] * 4
    (work / "train.tsv").write_text("\n".join(rows) + "\n")
    relative = ",".join([
        f"encoder.pretraining_dir={os.path.relpath(pretraining_dir, work)}",
        "data.task=classification", "data.train_file=train.tsv", "data.eval_file=train.tsv",
        "data.seq_length=16", "train.steps=2", "train.checkpoint_every=2",
        "train.global_batch_size=8", "train.micro_batch_size=8", "optimizer.warmup_steps=1",
        "eval.global_batch_size=8", "export.enabled=false"])
    command = ["--model_dir=run", f"--params_override={relative}"]
    first = finetune_cli(work, *command)
    assert first.returncode == 0, first.stderr[-3000:]
    saved = yaml.safe_load((work / "run" / "config.yaml").read_text())
    assert saved["encoder"]["pretraining_dir"] == pretraining_dir
    assert saved["data"]["train_file"] == saved["data"]["eval_file"] == str(work / "train.tsv")
    # the run's own config.yaml, from the repository's root
    elsewhere = finetune_cli(REPO_ROOT, f"--model_dir={work / 'run'}", "--mode=eval")
    assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]
    again = finetune_cli(work, *command)  # the first command again: no key changed
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already trained to step 2" in again.stdout
    assert "config: encoder" not in again.stdout and "config: data" not in again.stdout


@pytest.mark.slow  # command-line runs
def test_longer_sequences_than_pretraining_are_one_line_and_exit_2(pretraining_dir, tmp_path):
    done = run_finetune(tmp_path / "x", ",".join([
        f"encoder.pretraining_dir={pretraining_dir}", "data.task=squad",
        f"data.train_file={TINY_SQUAD}", f"data.eval_file={TINY_SQUAD}",
        f"data.seq_length={SEQ_LENGTH + 16}"]))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    # (TensorFlow's C++ start-up lines, e.g. about CUDA, may precede it on stderr.)
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
        f"error: data.seq_length={SEQ_LENGTH + 16} is longer than the pretraining run's "
        f"{SEQ_LENGTH}; use at most {SEQ_LENGTH} (0 = the run's)"]
    assert not (tmp_path / "x" / "checkpoints").exists()


@pytest.mark.slow  # command-line run
def test_an_evaluation_question_without_answers_is_refused_before_any_work(pretraining_dir,
                                                                          tmp_path):
    """It used to pass the reader and break the official metric after training."""
    with open(TINY_SQUAD) as f:
        content = json.load(f)
    content["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
    eval_file = tmp_path / "dev.json"
    eval_file.write_text(json.dumps(content))
    done = run_finetune(tmp_path / "x", ",".join([
        f"encoder.pretraining_dir={pretraining_dir}", "data.task=squad",
        f"data.train_file={TINY_SQUAD}", f"data.eval_file={eval_file}"]))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    qid = content["data"][0]["paragraphs"][0]["qas"][0]["id"]
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
        f"error: data.eval_file={eval_file}: data[0].paragraphs[0].qas[0] (id \"{qid}\") has "
        "no answer: the metric needs at least one"]
    assert done.stdout == "" and not (tmp_path / "x").exists()


@pytest.mark.slow  # exports a pretraining run's encoder (SavedModels)
@pytest.mark.parametrize("override, message", [
    ("data.task=ner", "data.task='ner' is not one of stdlib, classification, squad"),
    ("encoder.init=random", "encoder.init='random' is not one of pretrained, none"),
    ("data.task=squad", "data.task=squad needs data.train_file and data.eval_file"),
])
def test_config_mistakes_are_one_line(pretraining_dir, override, message):
    from recipes.common import config as config_lib
    config = config_lib.load_config(finetune.BertFinetuneConfig, (),
                                    f"encoder.pretraining_dir={pretraining_dir},{override}")
    with pytest.raises(finetune.UserError, match=re.escape(message)):
        finetune.BertFinetuneTask(config).check_config()


def test_pretraining_dir_without_encoder_export_names_the_fix(tmp_path):
    """A pretraining run (its config.yaml) whose model_garden/ export was never written."""
    from recipes.bert import ecosystem_export
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "model": {key: 2 for key in ecosystem_export.MODEL_KEYS}, "data": {"seq_length": 16}}))
    with pytest.raises(finetune.UserError,
                       match="python -m recipes.bert.ecosystem_export --model_dir="):
        finetune_data.PretrainingRun(str(tmp_path))


def test_fine_tuning_encoder_takes_each_dropout_rate_from_its_own_key():
    """encoder.dropout_rate and encoder.attention_dropout_rate reach the encoder apart (the
    run's encoder.yaml had 0.0 for both). A run made without its directory: its
    encoder config is all `build_encoder` reads with encoder.init: none."""
    run = finetune_data.PretrainingRun.__new__(finetune_data.PretrainingRun)
    run.encoder_config = ecosystem_export.encoder_config(TINY_MODEL, vocab_size=20)
    settings = types.SimpleNamespace(dropout_rate=0.1, attention_dropout_rate=0.3, init="none")
    encoder = run.build_encoder(16, settings)
    config = encoder.get_config()
    assert (config["output_dropout"], config["attention_dropout"]) == (0.1, 0.3)


def test_a_file_as_pretraining_dir_is_named_as_a_file(tmp_path):
    (tmp_path / "config.yaml").write_text("")  # e.g. the run's config.yaml, not its directory
    with pytest.raises(finetune.UserError, match=re.escape(
            f"encoder.pretraining_dir={tmp_path / 'config.yaml'} is a file: give the "
            "--model_dir of a pretraining run")):
        finetune_data.PretrainingRun(str(tmp_path / "config.yaml"))


@pytest.mark.slow  # exports a pretraining run's encoder (SavedModels)
def test_stdlib_task_needs_a_run_on_the_embedded_corpus(pretraining_dir, tmp_path):
    from recipes.common import config as config_lib
    config = config_lib.load_config(finetune.BertFinetuneConfig, (),
                                    f"encoder.pretraining_dir={pretraining_dir}")
    with pytest.raises(finetune.UserError, match="data.task=stdlib needs a pretraining run"):
        finetune.BertFinetuneTask(config).check_config()  # before any work


@pytest.mark.parametrize("sentences, expected", [
    ("abcd", ["a b", "c d"]),  # a document's last passage is kept
    ("abcde", ["a b", "c d"]),  # a last sentence that makes no whole passage is left out
    ("a", []),
])
def test_the_stdlib_tasks_passages_are_runs_of_whole_sentences(sentences, expected):
    from recipes.bert import stdlib_classification

    assert stdlib_classification.passages(list(sentences), 2) == expected


@pytest.mark.parametrize("corpus, read", [
    ("", "its own data.train_files"), ("/data/books", "data.corpus=/data/books")])
def test_stdlib_task_from_a_run_on_other_data_says_what_that_run_read(corpus, read):
    run = types.SimpleNamespace(corpus=corpus, data_dir="/unused", seq_length=16)
    with pytest.raises(finetune.UserError) as error:
        finetune_data.check_task_run(types.SimpleNamespace(task="stdlib", seq_length=0), run)
    assert str(error.value) == (
        "data.task=stdlib needs a pretraining run on the embedded corpus (data.corpus: "
        f"stdlib, no data.train_files); the pretraining run read {read}; give such a run as "
        "encoder.pretraining_dir, or use data.task=classification with your own files")


def test_stdlib_task_from_a_run_whose_prepared_corpus_is_gone_names_it(tmp_path):
    """A pretraining run on the embedded corpus whose data/ was deleted since: named by the
    config check, before any work (it was told it was not a run on the embedded corpus)."""
    run = types.SimpleNamespace(corpus="stdlib", data_dir=str(tmp_path / "data"), seq_length=16)
    data = types.SimpleNamespace(task="stdlib", seq_length=0)
    with pytest.raises(finetune.UserError, match=re.escape(
            f"{tmp_path}/data/corpus/stdlib_docstrings.txt does not exist: data.task=stdlib "
            "reads the embedded corpus its pretraining run prepared there")):
        finetune_data.check_task_run(data, run)


def test_a_pretraining_runs_relative_data_dir_is_found_from_another_directory(tmp_path,
                                                                              monkeypatch):
    """The run's config.yaml keeps data.data_dir as given (relative to where it ran): from
    another directory the stdlib task was told the corpus "does not exist", as if deleted."""
    run, data_dir = tmp_path / "work" / "runs" / "bert", tmp_path / "work" / "runs" / "data"
    run.mkdir(parents=True)
    data_dir.mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert finetune_data.resolve_data_dir(str(run), "runs/data") == (str(data_dir), None)
    assert finetune_data.resolve_data_dir(str(run), "") == (str(run / "data"), None)
    assert finetune_data.resolve_data_dir(str(run), "/abs/data") == ("/abs/data", None)
    monkeypatch.chdir(tmp_path / "work")  # where it ran: as before
    assert finetune_data.resolve_data_dir(str(run), "runs/data") == (str(data_dir), None)
    monkeypatch.chdir(tmp_path / "elsewhere")
    found, problem = finetune_data.resolve_data_dir(str(run), "gone/data")
    assert found is None and problem == (
        f"encoder.pretraining_dir: {run}/config.yaml gives the relative data.data_dir="
        f"gone/data, relative to the directory pretraining ran in, and neither "
        f"{tmp_path}/elsewhere/gone/data nor gone/data in {run} or a directory above it "
        "exists; run fine-tuning from the directory pretraining ran in, or write that "
        "data.data_dir there as an absolute path")
    pretraining = types.SimpleNamespace(corpus="stdlib", data_dir=None, data_dir_problem=problem,
                                        seq_length=16)
    with pytest.raises(finetune.UserError) as error:
        finetune_data.check_task_run(types.SimpleNamespace(task="stdlib", seq_length=0),
                                     pretraining)
    assert str(error.value) == problem


def test_comparison_adds_the_init_to_either_override_form():
    assert finetune_compare.with_init("", "none") == "encoder.init=none"
    assert finetune_compare.with_init("train.steps=5", "none") == "train.steps=5,encoder.init=none"
    assert json.loads(finetune_compare.with_init("{train: {steps: 5}}", "none")) == {
        "train": {"steps": 5}, "encoder": {"init": "none"}}


@pytest.mark.parametrize("mode, doing", [("train_and_eval", "fine-tuning"),
                                         ("eval", "evaluating"), ("export", "exporting")])
def test_comparison_says_what_it_does_with_each_encoder(mode, doing, tmp_path, monkeypatch,
                                                        capsys):
    from recipes.common import flags as flags_lib

    monkeypatch.setattr(finetune_compare.driver, "load_task", lambda *_: types.SimpleNamespace(
        config=types.SimpleNamespace(encoder=types.SimpleNamespace(init="pretrained")),
        held_out_keys=()))
    monkeypatch.setattr(finetune_compare.driver, "run", lambda *_: {"accuracy": 0.5})
    options = flags_lib.RunOptions(
        config_files=(), params_override="", model_dir=str(tmp_path), mode=mode, tpu="",
        strategy="", communication="auto", deterministic=False)
    finetune_compare.compare_inits(None, options)
    banners = [line for line in capsys.readouterr().out.splitlines() if line.startswith("====")]
    assert banners == [f"==== {doing} the pretrained encoder ====",
                       f"==== {doing} the random init encoder ===="]


def test_a_comparison_into_a_run_of_its_own_is_refused_before_any_work(tmp_path, monkeypatch):
    """--compare_with_random_init wrote pretrained/, random_init/ and comparison.json into
    a ResNet run's directory: the check of another program's run looks at the two runs
    it starts, not at the directory it is given."""
    from recipes.common import flags as flags_lib

    monkeypatch.setattr(finetune_compare.driver, "load_task", lambda *_: types.SimpleNamespace(
        config=types.SimpleNamespace(encoder=types.SimpleNamespace(init="pretrained"))))
    started = []
    monkeypatch.setattr(finetune_compare.driver, "run", lambda *args: started.append(args))
    (tmp_path / "config.yaml").write_text("train: {steps: 2}\n")
    options = flags_lib.RunOptions(
        config_files=(), params_override="", model_dir=str(tmp_path), mode="train_and_eval",
        tpu="", strategy="", communication="auto", deterministic=False)
    with pytest.raises(finetune.UserError) as error:
        finetune_compare.compare_inits(None, options)
    assert str(error.value) == (
        f"--model_dir {tmp_path} holds a run (its config.yaml); --compare_with_random_init "
        "writes its two runs into pretrained/ and random_init/ of a directory of their own: "
        "give a new --model_dir")
    assert started == [] and sorted(os.listdir(tmp_path)) == ["config.yaml"]


def test_a_run_into_the_directory_of_a_comparison_is_refused(tmp_path):
    """A pretraining run given a comparison's directory (no config.yaml of its own) trained
    into it, beside pretrained/ and random_init/."""
    from recipes.common import driver

    for name in ("pretrained", "random_init"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text("train: {steps: 2}\n")
    (tmp_path / "notes").mkdir()  # not a run: not named
    with pytest.raises(finetune.UserError) as error:
        driver.check_same_program(None, str(tmp_path), "train")
    assert str(error.value) == (
        f"--model_dir {tmp_path} holds other runs in pretrained/, random_init/ (each with its "
        "config.yaml), which this run's files would sit beside; give a new --model_dir")
    # a run of its own: not here
    driver.check_same_program(None, str(tmp_path / "pretrained"), "train")
    driver.check_same_program(None, str(tmp_path / "new"), "train")  # not there yet


@pytest.mark.parametrize("mode", ["eval", "export"])
def test_a_comparison_is_evaluated_and_exported_with_its_own_runs_config(mode, tmp_path,
                                                                         monkeypatch):
    """`--model_dir=DIR --compare_with_random_init --mode=eval` without the training's flags
    loaded the schema's defaults ("encoder.pretraining_dir is empty"), and an export wrote
    empty results over comparison.json."""
    from recipes.common import flags as flags_lib

    loaded = []
    monkeypatch.setattr(finetune_compare.driver, "load_task", lambda _, options, mode=None: (
        loaded.append((options.model_dir, mode)) or types.SimpleNamespace(
            config=types.SimpleNamespace(encoder=types.SimpleNamespace(init="pretrained")),
            held_out_keys=())))
    monkeypatch.setattr(finetune_compare.driver, "run", lambda _, options: (
        {"accuracy": 0.5} if options.mode == "eval" else {}))
    for name in ("pretrained", "random_init"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text("train: {steps: 2}\n")
    (tmp_path / "comparison.json").write_text('{"pretrained": {"accuracy": 0.75}}\n')
    options = flags_lib.RunOptions(
        config_files=(), params_override="", model_dir=str(tmp_path), mode=mode, tpu="",
        strategy="", communication="auto", deterministic=False)
    finetune_compare.compare_inits(None, options)
    assert loaded == [(str(tmp_path / "pretrained"), mode)]
    assert json.loads((tmp_path / "comparison.json").read_text()) == (
        {"pretrained": {"accuracy": 0.5}, "random_init": {"accuracy": 0.5}} if mode == "eval"
        else {"pretrained": {"accuracy": 0.75}})
    given = tmp_path / "given.yaml"  # a --config_file given: that config, as before
    given.write_text("train: {steps: 2}\n")
    loaded.clear()
    finetune_compare.compare_inits(None, dataclasses.replace(options, config_files=(str(given),)))
    assert loaded == [(str(tmp_path), mode)]


def test_a_comparison_evaluated_on_another_held_out_file_keeps_its_comparison(tmp_path,
                                                                              monkeypatch):
    """Each run's results of another data.eval_file go to its eval_<name>/; the comparison's
    of both went over comparison.json, the comparison of the runs' own held-out data."""
    from recipes.common import flags as flags_lib

    monkeypatch.setattr(finetune_compare.driver, "load_task", lambda *_: types.SimpleNamespace(
        config=types.SimpleNamespace(encoder=types.SimpleNamespace(init="pretrained"))))
    monkeypatch.setattr(finetune_compare.driver, "other_held_out", lambda task, run, mode: (
        ("data.eval_file", "/data/other.tsv"),) if run == str(tmp_path / "pretrained") else ())
    monkeypatch.setattr(finetune_compare.driver, "run", lambda *_: {"accuracy": 0.25})
    (tmp_path / "comparison.json").write_text('{"pretrained": {"accuracy": 0.75}}\n')
    options = flags_lib.RunOptions(
        config_files=(), params_override="", model_dir=str(tmp_path), mode="eval", tpu="",
        strategy="", communication="auto", deterministic=False)
    finetune_compare.compare_inits(None, options)
    assert (tmp_path / "comparison.json").read_text() == '{"pretrained": {"accuracy": 0.75}}\n'
    assert json.loads((tmp_path / "eval_other" / "comparison.json").read_text()) == {
        "pretrained": {"accuracy": 0.25}, "random_init": {"accuracy": 0.25}}


def test_both_runs_of_a_comparison_name_their_variables_alike(tmp_path, monkeypatch):
    """The random-init run's encoder was bert_encoder_v2_1/... (Keras numbers a second
    layer of a name in one process): in its console, exclusions.txt and checkpoint."""
    from recipes.common import flags as flags_lib

    monkeypatch.setattr(finetune_compare.driver, "load_task", lambda *_: types.SimpleNamespace(
        config=types.SimpleNamespace(encoder=types.SimpleNamespace(init="pretrained"))))
    names = []
    monkeypatch.setattr(finetune_compare.driver, "run", lambda *_: names.append(
        tf_keras.layers.Dense(1).name) or {"accuracy": 0.5})
    options = flags_lib.RunOptions(
        config_files=(), params_override="", model_dir=str(tmp_path), mode="train_and_eval",
        tpu="", strategy="", communication="auto", deterministic=False)
    finetune_compare.compare_inits(None, options)
    assert len(names) == 2 and names[0] == names[1], names


@pytest.mark.parametrize("eval_steps, rows", [(0, 10), (2, 8), (9, 10)])
def test_a_classification_evaluation_reads_eval_steps_batches_and_scores_those(eval_steps,
                                                                                 rows):
    """eval.steps ("Batches to evaluate; 0 = the whole held-out set once") was not read:
    every row was evaluated whatever it said."""
    task = finetune.BertFinetuneTask.__new__(finetune.BertFinetuneTask)
    task.config = finetune.BertFinetuneConfig()
    task.config.data.task = "classification"
    task.config.eval.global_batch_size, task.config.eval.steps = 4, eval_steps
    labels = np.array([0, 1] * 5)
    task.data = types.SimpleNamespace(eval_arrays=({"x": np.arange(10)}, {"logits": labels}))

    class FirstRowsRight:  # right for the rows of the first two batches, wrong after
        @staticmethod
        def predict(dataset, verbose):
            del verbose
            seen = np.concatenate([batch["x"].numpy() for batch in dataset])
            right = np.eye(2)[labels[seen]]
            return {"logits": np.where((seen < 8)[:, None], right, 1 - right)}

    task.network = FirstRowsRight()
    assert task.evaluate(None, None) == {"accuracy": pytest.approx(8 / rows)}


@pytest.mark.parametrize("scored, line", [
    (3, "exact_match=50.00 f1=60.00"),
    (2, "exact_match=50.00 f1=60.00 over 2 of 3 questions"),  # eval.steps cut the third
])
def test_a_partial_squad_evaluation_says_how_many_questions_it_scores(scored, line):
    """The line gave the scores alone, though eval.steps>0 scores only the questions whose
    every window was evaluated."""
    task = finetune.BertFinetuneTask.__new__(finetune.BertFinetuneTask)
    task.config = finetune.BertFinetuneConfig()
    task.config.data.task = "squad"
    task.predictions = {f"q{i}": "an answer" for i in range(scored)}
    task.data = types.SimpleNamespace(eval_examples=[object()] * 3)
    assert task.describe_evaluation({"exact_match": 50.0, "f1": 60.0}) == line


@pytest.mark.parametrize("task, refused", [("stdlib", True), ("classification", False)])
def test_the_stdlib_tasks_seed_is_kept_by_a_resumed_or_evaluated_run(task, refused, tmp_path):
    """The stdlib task's train.seed draws its train/test split: evaluating (or resuming) a
    run with another seed wrote a new split, whose held-out passages the run had trained on,
    and scored it."""
    import tensorflow as tf

    from recipes.common import checkpoints
    from recipes.common import config as config_lib
    from recipes.common import driver

    task_keys = "" if task == "stdlib" else (
        ",data.task=classification,data.train_file=t.tsv,data.eval_file=t.tsv")
    saved = config_lib.load_config(finetune.BertFinetuneConfig, (),
                                   "encoder.pretraining_dir=/runs/bert" + task_keys)
    config_lib.save_config(saved, str(tmp_path))
    tf.train.Checkpoint(step=tf.Variable(1)).save(
        str(tmp_path / checkpoints.CHECKPOINT_SUBDIR / "ckpt"))
    changed = finetune.BertFinetuneTask(config_lib.load_config(
        finetune.BertFinetuneConfig, (), "encoder.pretraining_dir=/runs/bert,train.seed=7"
        + task_keys))
    if not refused:
        assert driver.compare_with_saved_config(changed, str(tmp_path), "eval") == [
            f"config: train.seed 1 -> 7 (evaluating the run in {tmp_path})"]
        return
    with pytest.raises(finetune.UserError) as error:
        driver.compare_with_saved_config(changed, str(tmp_path), "eval")
    assert str(error.value) == (
        f"train.seed was 1 in the run in {tmp_path}, now 7: a run keeps train.seed from its "
        "first step to its last (they define what it trains); keep train.seed=1 to evaluate "
        "the run (without --config_file, its own config.yaml is the config)")


def test_only_an_evaluation_or_export_reads_another_held_out_file(tmp_path):
    """A Model Garden user scores a trained model on any held-out data; `--mode=eval` of a
    fine-tuning run with another data.eval_file was refused as a change of its data.* keys.
    Training it further on other data still is (its results go to eval_<the file's name>/
    of the run, tests/test_finetune_modes.py)."""
    import tensorflow as tf

    from recipes.common import checkpoints
    from recipes.common import config as config_lib
    from recipes.common import driver

    files = "encoder.pretraining_dir=/runs/bert,data.task=classification,data.train_file=t.tsv"
    config_lib.save_config(config_lib.load_config(
        finetune.BertFinetuneConfig, (), files + ",data.eval_file=/data/dev.tsv"), str(tmp_path))
    tf.train.Checkpoint(step=tf.Variable(1)).save(
        str(tmp_path / checkpoints.CHECKPOINT_SUBDIR / "ckpt"))
    other = finetune.BertFinetuneTask(config_lib.load_config(
        finetune.BertFinetuneConfig, (), files + ",data.eval_file=/data/other_dev.tsv"))
    for mode, doing in (("eval", "evaluating"), ("export", "exporting")):
        assert driver.compare_with_saved_config(other, str(tmp_path), mode) == [
            f"config: data.eval_file '/data/dev.tsv' -> '/data/other_dev.tsv' ({doing} the run "
            f"in {tmp_path})"]
    held_out = driver.other_held_out(other, str(tmp_path), "eval")
    assert held_out == (("data.eval_file", "/data/other_dev.tsv"),)
    assert driver.held_out_subdir(held_out) == "eval_other_dev"
    assert driver.other_held_out(other, str(tmp_path), "export") == ()  # nothing evaluated
    for mode in ("train", "train_and_eval"):
        with pytest.raises(finetune.UserError) as error:
            driver.compare_with_saved_config(other, str(tmp_path), mode)
        assert str(error.value) == (
            f"data.eval_file was '/data/dev.tsv' in the run in {tmp_path}, now "
            "'/data/other_dev.tsv': a run keeps its data.* keys from its first step to its last "
            "(they define what it trains); keep data.eval_file='/data/dev.tsv' or use a new "
            "--model_dir")


@pytest.mark.slow  # exports a pretraining run's encoder (SavedModels)
def test_a_model_garden_checkpoint_of_another_encoder_is_one_line(pretraining_dir):
    """encoder.yaml of one run beside the model_garden/ checkpoint of another (copied in by
    hand): the restore's ValueError ended in a traceback, exit 1."""
    real = finetune_data.PretrainingRun(pretraining_dir)
    run = finetune_data.PretrainingRun.__new__(finetune_data.PretrainingRun)
    run.directory, run.checkpoint = real.directory, real.checkpoint
    run.encoder_config = ecosystem_export.encoder_config(TINY_MODEL, vocab_size=20)
    settings = types.SimpleNamespace(dropout_rate=0.0, attention_dropout_rate=0.0,
                                     init="pretrained")
    with pytest.raises(finetune.UserError) as error:
        run.build_encoder(SEQ_LENGTH, settings)
    message = str(error.value)
    assert message.startswith(
        f"encoder.pretraining_dir: {real.checkpoint} does not fit the encoder of "
        f"{pretraining_dir}'s model_garden/encoder.yaml (") and "\n" not in message
    assert message.endswith(
        "); export the run's encoder again (python -m recipes.bert.ecosystem_export "
        f"--model_dir={pretraining_dir})")
