"""Mistakes in the BERT programs' configs found before any work (one line naming the key,
its value and what to do), called directly: `train.init_checkpoint` (the driver's check
for every recipe), fine-tuning's task files, labels and `encoder.pretraining_dir`; and
the console's held-out line naming each number as results.json does."""
import os
import re
import types

import pytest
import tensorflow as tf

from recipes.bert import classification, finetune, finetune_config, finetune_data, pretrain
from recipes.common import config as config_lib
from recipes.common import driver
from recipes.common.errors import UserError


# ---- train.init_checkpoint ----------------------------------------------------------------

def _save_checkpoint(prefix):
    """A one-variable checkpoint at `prefix`-1 (its `checkpoint` file beside it)."""
    return tf.train.Checkpoint(v=tf.Variable(1.0)).save(prefix)


def _init_config(init_checkpoint):
    return types.SimpleNamespace(train=types.SimpleNamespace(init_checkpoint=init_checkpoint))


def test_init_checkpoint_takes_a_run_a_checkpoint_directory_or_a_prefix(tmp_path):
    new_run = str(tmp_path / "new_run")
    phase_one = tmp_path / "phase_one"  # a run's model_dir: <model_dir>/checkpoints/ckpt-N
    prefix = _save_checkpoint(str(phase_one / "checkpoints" / "ckpt"))
    exported = _save_checkpoint(str(tmp_path / "model_garden" / "encoder"))  # its own dir
    for given in (str(phase_one), prefix, str(tmp_path / "model_garden"), exported):
        driver.check_init_checkpoint(_init_config(given), new_run, "train")
    assert not os.path.exists(new_run)


def test_an_init_checkpoint_of_another_programs_run_is_one_line_before_any_work(tmp_path):
    from recipes.resnet import train as resnet_train

    bert_run = tmp_path / "bert_run"  # a BERT run's model_dir: checkpoint and config.yaml
    _save_checkpoint(str(bert_run / "checkpoints" / "ckpt"))
    config_lib.save_config(config_lib.load_config(pretrain.BertPretraining.config_class),
                           str(bert_run))
    override = f"train.init_checkpoint={bert_run}"
    resnet_config = config_lib.load_config(resnet_train.ResNetConfig, [], override)
    new_run = str(tmp_path / "new_run")
    with pytest.raises(UserError) as error:
        driver.check_init_checkpoint(resnet_config, new_run, "train")
    assert str(error.value).startswith(
        f"train.init_checkpoint='{bert_run}' holds a run of another program: its config.yaml "
        "does not load as this program's (unknown config key 'data.")
    assert str(error.value).endswith("); give a run of this program")
    bert_config = config_lib.load_config(pretrain.BertPretraining.config_class, [], override)
    driver.check_init_checkpoint(bert_config, new_run, "train")  # phase 2 of a BERT run
    assert not os.path.exists(new_run)


@pytest.mark.parametrize("given", ["none", "empty_dir", "phase_one/checkpoints/ckpt-9"])
def test_an_init_checkpoint_without_a_checkpoint_is_one_line_naming_the_key(tmp_path, given):
    (tmp_path / "empty_dir").mkdir()
    _save_checkpoint(str(tmp_path / "phase_one" / "checkpoints" / "ckpt"))
    path = str(tmp_path / given)
    for mode in ("train", "train_and_eval"):
        with pytest.raises(UserError, match=re.escape(
                f"train.init_checkpoint={path!r} holds no checkpoint; give phase 1's model_dir "
                "or a checkpoint path such as <model_dir>/checkpoints/ckpt-7038")):
            driver.check_init_checkpoint(_init_config(path), str(tmp_path / "run"), mode)


def test_an_init_checkpoint_is_not_read_when_the_run_resumes_or_does_not_train(tmp_path):
    """A resumed run restores its own checkpoint, eval and export the latest: the key is
    not used, so a phase 1 directory deleted since is no error."""
    resumed = tmp_path / "resumed"
    _save_checkpoint(str(resumed / "checkpoints" / "ckpt"))
    missing = _init_config(str(tmp_path / "deleted_phase_one"))
    driver.check_init_checkpoint(missing, str(resumed), "train")
    for mode in ("eval", "export"):
        driver.check_init_checkpoint(missing, str(tmp_path / "run"), mode)


# ---- fine-tuning: the task's files and keys -----------------------------------------------

def _finetune_task(override):
    config = config_lib.load_config(finetune.BertFinetuneConfig, (), override)
    return finetune.BertFinetuneTask(config)


@pytest.mark.parametrize("key", ["data.train_file", "data.eval_file", "data.labels"])
def test_a_key_the_stdlib_task_does_not_read_is_refused(tmp_path, key):
    value = "[a,b]" if key == "data.labels" else str(tmp_path / "train.tsv")
    with pytest.raises(UserError, match=re.escape(
            f"{key} is set, but data.task=stdlib does not read it")) as raised:
        _finetune_task(f"encoder.pretraining_dir={tmp_path},{key}={value}").check_config()
    assert "set data.task=classification" in str(raised.value)


def test_squad_does_not_read_labels(tmp_path):
    (tmp_path / "s.json").write_text('{"data": []}')
    files = f"data.train_file={tmp_path}/s.json,data.eval_file={tmp_path}/s.json"
    with pytest.raises(UserError, match=re.escape(
            "data.labels is set, but data.task=squad does not read it")):
        _finetune_task(f"encoder.pretraining_dir={tmp_path},data.task=squad,{files},"
                       "data.labels=[a,b]").check_config()


@pytest.mark.parametrize("seq_length, max_query_length", [(64, 64), (67, 64), (16, 13)])
def test_a_squad_window_without_room_for_the_context_is_refused(seq_length, max_query_length):
    # Model Garden's windowing never ends there (memory climbing without bound)
    data = finetune_config.DataConfig(task="squad", seq_length=0,
                                      max_query_length=max_query_length)
    run = types.SimpleNamespace(corpus="stdlib", seq_length=seq_length)
    with pytest.raises(UserError) as raised:
        finetune_data.check_task_run(data, run)
    assert str(raised.value) == (
        f"data.seq_length={seq_length} leaves no room for the context after a question of "
        f"data.max_query_length={max_query_length} pieces and [CLS] [SEP] [SEP]; give a "
        f"data.max_query_length below {seq_length - 3}, or a pretraining run of a longer "
        "data.seq_length (BERT: 384 with 64)")
    data.max_query_length = seq_length - 4  # one piece of context per window
    assert finetune_data.check_task_run(data, run) == seq_length


@pytest.mark.parametrize("key", ["doc_stride", "max_query_length", "n_best_size",
                                 "max_answer_length"])
def test_a_squad_length_of_zero_is_refused_as_not_positive(tmp_path, key):
    # doc_stride 0 would never move the window; the others leave no question, candidate
    # or answer piece
    with pytest.raises(UserError) as raised:
        _finetune_task(f"encoder.pretraining_dir={tmp_path},data.{key}=0").check_config()
    assert str(raised.value) == f"data.{key}=0 must be positive"


@pytest.mark.parametrize("task", ["classification", "squad"])
@pytest.mark.parametrize("given", ["data.train_file", "data.eval_file"])
def test_a_task_given_only_one_of_its_two_files_is_told_it_needs_both(tmp_path, task, given):
    (tmp_path / "data.tsv").write_text("sentence\tlabel\na\tx\n")
    with pytest.raises(UserError) as raised:
        _finetune_task(f"encoder.pretraining_dir={tmp_path},data.task={task},"
                       f"{given}={tmp_path}/data.tsv").check_config()
    assert str(raised.value) == f"data.task={task} needs data.train_file and data.eval_file"


@pytest.mark.parametrize("key", ["encoder.dropout_rate", "encoder.attention_dropout_rate"])
def test_an_encoder_dropout_rate_outside_0_1_is_refused_with_the_config(tmp_path, key):
    with pytest.raises(UserError, match=re.escape(f"{key}=1.5 must be at least 0 and below 1")):
        _finetune_task(f"encoder.pretraining_dir={tmp_path},{key}=1.5").check_config()


@pytest.mark.parametrize("task", ["classification", "squad"])
@pytest.mark.parametrize("key", ["data.train_file", "data.eval_file"])
def test_a_missing_task_file_is_found_before_the_pretraining_run_is_read(tmp_path, task, key):
    (tmp_path / "good.tsv").write_text("sentence\tlabel\na\tx\n")
    files = {"data.train_file": str(tmp_path / "good.tsv"),
             "data.eval_file": str(tmp_path / "good.tsv"), key: str(tmp_path / "nope.tsv")}
    override = ",".join([f"encoder.pretraining_dir={tmp_path}/no_run", f"data.task={task}"]
                        + [f"{k}={v}" for k, v in files.items()])
    with pytest.raises(UserError, match=re.escape(
            f"{key}={tmp_path}/nope.tsv does not exist; check the path")):
        _finetune_task(override).check_config()


def test_a_classification_file_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "binary.tsv").write_bytes(b"sentence\tlabel\n\xff\tx\n")
    with pytest.raises(UserError) as raised:
        classification.read_examples(str(tmp_path / "binary.tsv"), "data.train_file")
    assert str(raised.value) == (f"data.train_file={tmp_path}/binary.tsv is not UTF-8 text "
                                 "(invalid start byte at byte 15); save it as UTF-8")


def test_a_pretraining_dir_without_the_runs_config_is_one_line(tmp_path):
    # its model_garden/ copied alone
    _save_checkpoint(str(tmp_path / "copied" / "model_garden" / "encoder"))
    with pytest.raises(UserError) as raised:
        finetune_data.PretrainingRun(str(tmp_path / "copied"))
    assert str(raised.value) == (
        f"encoder.pretraining_dir: {tmp_path}/copied/config.yaml does not exist: give the "
        "--model_dir of a pretraining run (python -m recipes.bert.pretrain)")


def test_classification_file_errors_name_the_key_and_the_remedy(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"sentence": "a", "label": "x"}\n[1, 2]\n')
    with pytest.raises(UserError, match=re.escape(
            f"data.train_file={tmp_path}/bad.jsonl line 2 is not a JSON object; give one "
            "object per line")):
        classification.read_examples(str(tmp_path / "bad.jsonl"), "data.train_file")
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\tpos\nb\tneg\n")
    (tmp_path / "newlabel.tsv").write_text("sentence\tlabel\nc\tzzz\n")
    data = types.SimpleNamespace(train_file=str(tmp_path / "train.tsv"),
                                 eval_file=str(tmp_path / "newlabel.tsv"), labels=None)
    with pytest.raises(UserError, match=re.escape(
            f"data.eval_file={tmp_path}/newlabel.tsv has label(s) ['zzz'] that are not in the "
            "label list ['neg', 'pos']")) as raised:
        finetune_data.read_classification(data)
    assert "add them to data.labels" in str(raised.value)
    assert "or fix the file" in str(raised.value)


def test_classification_data_mistakes_are_found_in_the_config_check(tmp_path):
    """Before the strategy and batch lines, before --model_dir: the driver runs
    check_config first (the pretraining run may be missing: the files come first)."""
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\tpos\nb\tneg\n")
    (tmp_path / "newlabel.tsv").write_text("sentence\tlabel\nc\tzzz\n")
    with pytest.raises(UserError, match=r"has label\(s\) \['zzz'\]"):
        _finetune_task(f"encoder.pretraining_dir={tmp_path}/no_run,data.task=classification,"
                       f"data.train_file={tmp_path}/train.tsv,"
                       f"data.eval_file={tmp_path}/newlabel.tsv").check_config()


def test_a_missing_pretraining_dir_is_found_in_the_config_check(tmp_path):
    missing = str(tmp_path / "no_run")
    with pytest.raises(UserError, match=re.escape(
            f"encoder.pretraining_dir={missing} does not exist: give the --model_dir of a "
            "pretraining run")):
        _finetune_task(f"encoder.pretraining_dir={missing}").check_config()
    (tmp_path / "config.yaml").write_text("data: {}\n")  # a directory without the export
    with pytest.raises(UserError, match="^encoder.pretraining_dir: "):
        _finetune_task(f"encoder.pretraining_dir={tmp_path}").check_config()


# ---- the console's held-out line ----------------------------------------------------------

def test_the_held_out_line_names_each_number_as_results_json_does():
    """Keras' `masked_lm_loss` (the training loss term: summed cross-entropy over batch x
    max_predictions_per_seq) and `masked_lm_cross_entropy` (per masked token) differ; the
    console prints each value under the key it has in results.json."""
    results = {"loss": 8.1, "masked_lm_loss": 7.1319, "masked_lm_cross_entropy": 7.5539,
               "masked_lm_accuracy": 0.0123, "next_sentence_loss": 0.69,
               "next_sentence_accuracy": 0.51}
    task = pretrain.BertPretraining(None)
    task.evaluated_sequences, task.evaluated_step = 1280, 120
    line = task.describe_evaluation(results)
    assert line.endswith(" (1,280 sequences, step 120)"), line
    printed = dict(pair.split("=") for pair in line.split(" (")[0].split())
    assert "masked_lm_cross_entropy" in printed and "masked_lm_accuracy" in printed
    for name, value in printed.items():
        assert value == f"{results[name]:.4f}", (name, line)


# ---- eval.global_batch_size against the held-out sequences --------------------------------

@pytest.mark.parametrize("held_out, refused", [(8, False), (7, True)])
def test_an_eval_batch_of_all_the_held_out_sequences_is_one_batch_not_none(
        held_out, refused, tmp_path, monkeypatch):
    """The evaluation drops a last partial batch: 8 sequences make one batch of 8, 7 none."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    monkeypatch.setattr(pretrain.data_lib, "locate_or_prepare_data", lambda *_: (
        types.SimpleNamespace(vocab_file=str(vocab), eval_sequences=held_out)))
    task = pretrain.BertPretraining(config_lib.load_config(
        pretrain.BertPretraining.config_class, [], "eval.global_batch_size=8"))
    if refused:
        with pytest.raises(UserError, match=re.escape(
                "eval.global_batch_size=8 is more than the 7 held-out sequences hold")):
            task.prepare(str(tmp_path), "train_and_eval")
    else:
        task.prepare(str(tmp_path), "train_and_eval")


@pytest.mark.parametrize("held_out, fix", [
    (0, "give --mode=train, or prepare with a held-out fraction above 0"),
    (3, "lower eval.global_batch_size"),
])
def test_an_evaluation_of_no_batch_says_what_to_do_for_a_preparation_holding_none_out(
        held_out, fix):
    """A preparation with --heldout_fraction=0 holds no held-out sequence: "lower
    eval.global_batch_size" could not help."""
    recipe = pretrain.BertPretraining(config_lib.load_config(
        pretrain.BertPretrainingConfig, ["configs/bert/tiny_cpu.yaml"]))
    recipe.data = types.SimpleNamespace(eval_sequences=held_out)
    message = recipe._no_eval_batch(f"the {held_out} held-out sequences")
    assert message == (f"eval.global_batch_size=128 is more than the {held_out} held-out "
                       "sequences hold, so the evaluation reads no batch (it drops a last "
                       f"partial one: static shapes); {fix}")
