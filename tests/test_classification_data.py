"""Sentence (pair) classification data (recipes/bert/classification.py): TSV and JSONL
files, one-line errors, and the in-graph packing that training and serving share."""
import json

import pytest

from recipes.bert import classification, finetune_data
from recipes.common.errors import UserError

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "dog", "ran",
         "far", "##s", "."]


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in VOCAB))
    return str(path)


def test_tsv_and_jsonl_give_the_same_examples(tmp_path):
    (tmp_path / "a.tsv").write_text("sentence1\tsentence2\tlabel\nthe cat\tthe dog\tyes\n"
                                    "a b\tc\tno\n")
    (tmp_path / "a.jsonl").write_text(
        json.dumps({"sentence1": "the cat", "sentence2": "the dog", "label": "yes"}) + "\n\n"
        + json.dumps({"sentence1": "a b", "sentence2": "c", "label": "no"}) + "\n")
    expected = [classification.Example("the cat", "the dog", "yes"),
                classification.Example("a b", "c", "no")]
    assert classification.read_examples(str(tmp_path / "a.tsv")) == expected
    assert classification.read_examples(str(tmp_path / "a.jsonl")) == expected
    assert classification.label_ids(expected, ["no", "yes"], "a.tsv") == [1, 0]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_line_separator_or_form_feed_inside_a_sentence_is_not_a_line_break(tmp_path,
                                                                             newline):
    # str.splitlines also breaks at U+2028, U+0085, \x0c, ...: a valid JSONL line written
    # with ensure_ascii=False was "not a JSON object", a TSV row "lacks 'label'"
    sentences = ["one\u2028two", "page\x0cbreak", "next\x85line"]
    (tmp_path / "a.jsonl").write_bytes(newline.join(
        json.dumps({"sentence": s, "label": "x"}, ensure_ascii=False) for s in sentences)
        .encode())
    (tmp_path / "a.tsv").write_bytes(newline.join(
        ["sentence\tlabel"] + [f"{s}\tx" for s in sentences]).encode() + newline.encode())
    expected = [classification.Example(s, None, "x") for s in sentences]
    assert classification.read_examples(str(tmp_path / "a.jsonl")) == expected
    assert classification.read_examples(str(tmp_path / "a.tsv")) == expected


def test_label_ids_follow_the_given_label_order_not_the_sorted_one():
    # data.labels is the class-id order: "yes" first is class 0 although "no" sorts first.
    examples = [classification.Example("a", None, "no"),
                classification.Example("b", None, "yes"),
                classification.Example("c", None, "no")]
    assert classification.label_ids(examples, ["yes", "no"], "a.tsv") == [1, 0, 1]


def test_without_data_labels_the_class_ids_are_the_sorted_training_labels(tmp_path):
    # data.labels: null = the sorted labels of the training file (8 labels, so that a set's
    # iteration order is not sorted by chance), whatever order the file gives them in.
    shuffled = ["hotel", "charlie", "alpha", "golf", "echo", "bravo", "foxtrot", "delta"]
    (tmp_path / "train.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"s{i}\t{label}\n" for i, label in enumerate(shuffled)))
    (tmp_path / "eval.tsv").write_text("sentence\tlabel\nx\tbravo\ny\thotel\n")
    examples = finetune_data.read_examples(str(tmp_path / "train.tsv"),
                                           str(tmp_path / "eval.tsv"), None)
    assert examples.labels == ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
                               "hotel"]
    assert examples.label_ids == [[7, 2, 0, 6, 4, 1, 5, 3], [1, 7]]


def test_bad_files_are_one_line_errors_naming_the_line(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        classification.read_examples(str(tmp_path / "none.tsv"))
    (tmp_path / "x.csv").write_text("sentence,label\n")
    with pytest.raises(UserError, match=".tsv or .jsonl"):
        classification.read_examples(str(tmp_path / "x.csv"))
    (tmp_path / "b.jsonl").write_text('{"sentence": "a", "label": "x"}\n[1, 2]\n')
    with pytest.raises(UserError, match="line 2 is not a JSON object"):
        classification.read_examples(str(tmp_path / "b.jsonl"))
    (tmp_path / "c.tsv").write_text("sentence\tlabel\nhello\n")
    with pytest.raises(UserError, match="line 2 lacks 'sentence'"):
        classification.read_examples(str(tmp_path / "c.tsv"))
    examples = [classification.Example("a", None, "maybe")]
    with pytest.raises(UserError, match=r"label\(s\) \['maybe'\]"):
        classification.label_ids(examples, ["no", "yes"], "d.tsv")


def test_packing_single_sentences_and_trimmed_pairs(vocab_file):
    packer = classification.TextPacker(vocab_file, seq_length=8)
    single = packer(["The cats sat."])
    # [CLS]=2 the=5 cat=6 ##s=11 sat=7 .=12 [SEP]=3, then [PAD]=0.
    assert single["input_word_ids"].numpy().tolist() == [[2, 5, 6, 11, 7, 12, 3, 0]]
    assert single["input_mask"].numpy().tolist() == [[1, 1, 1, 1, 1, 1, 1, 0]]
    assert single["input_type_ids"].numpy().tolist() == [[0] * 8]
    pair = packer(["the cat sat"], ["the dog ran far"])
    # 8 - [CLS] - 2 [SEP] = 5 pieces, given one at a time to A, B, A, B, A:
    # A keeps "the cat sat" (3), B keeps "the dog" (2).
    assert pair["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 3, 5, 8, 3]]
    assert pair["input_type_ids"].numpy().tolist() == [[0, 0, 0, 0, 0, 1, 1, 1]]
    examples = [classification.Example("the cat", None, "x"),
                classification.Example("dog", None, "y")]
    packed = classification.pack_examples(packer, examples, batch_size=1)
    assert packed["input_word_ids"].numpy().tolist() == [[2, 5, 6, 3, 0, 0, 0, 0],
                                                         [2, 8, 3, 0, 0, 0, 0, 0]]


@pytest.mark.parametrize("content, message", [
    # every row used to be blamed: "line 2 lacks 'sentence' (or 'sentence1') or 'label'"
    ("sentence,label\nhello,x\n", "header row (line 1) is 'sentence,label'; its columns look "
     "comma-separated: a .tsv separates them with tabs; it must name the columns sentence "
     "(or sentence1 and sentence2) and label"),
    ("text\tlabel\nhello\tx\n", "header row (line 1) is ['text', 'label']; it must name the "
     "columns sentence (or sentence1 and sentence2) and label"),
    ("", "is empty; give a header row naming the columns sentence (or sentence1 and "
     "sentence2) and label, then one example per row"),
])
def test_a_tsv_header_without_the_columns_is_named_as_the_header(tmp_path, content, message):
    (tmp_path / "train.tsv").write_text(content)
    with pytest.raises(UserError) as raised:
        classification.read_examples(str(tmp_path / "train.tsv"), "data.train_file")
    assert str(raised.value) == f"data.train_file={tmp_path / 'train.tsv'} {message}"


def test_a_run_keeps_the_labels_its_class_ids_were_trained_on(tmp_path):
    """Without data.labels the class ids are the training file's labels, sorted: a file
    whose labels were edited between two commands on one run (`io` renamed `zio`) made the
    export answer `zio` where the run had trained `math`, silently."""
    run = tmp_path / "run"
    finetune_data.keep_labels(str(run), ["io", "math"], "train.tsv")  # the first command
    assert json.loads((run / finetune_data.LABELS_FILE).read_text()) == ["io", "math"]
    _save_a_checkpoint(run)  # it trained
    finetune_data.keep_labels(str(run), ["io", "math"], "train.tsv")  # the same: no error
    with pytest.raises(UserError) as error:
        finetune_data.keep_labels(str(run), ["math", "zio"], "train.tsv")
    assert str(error.value) == (
        f"the run in {run} trained the labels ['io', 'math'] (class ids 0, 1, ...; "
        f"{run / finetune_data.LABELS_FILE}), but data.train_file=train.tsv now gives "
        "['math', 'zio']: restore the file's labels, or train a new run in another --model_dir")
    assert json.loads((run / finetune_data.LABELS_FILE).read_text()) == ["io", "math"]


def _save_a_checkpoint(run):
    import tensorflow as tf
    tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)),
                               str(run / "checkpoints"), max_to_keep=1).save()


def test_labels_of_a_start_that_saved_no_checkpoint_are_replaced(tmp_path):
    """A start that failed (or was stopped) before its first checkpoint had written
    labels.json: a new start with other labels was refused, "the run trained the labels
    ...", though nothing had trained."""
    run = tmp_path / "run"
    finetune_data.keep_labels(str(run), ["neg", "pos"], "train.tsv")
    finetune_data.keep_labels(str(run), ["io", "math", "zio"], "other.tsv")
    assert json.loads((run / finetune_data.LABELS_FILE).read_text()) == ["io", "math", "zio"]


def test_a_training_file_of_one_label_is_refused(tmp_path):
    # it trained one class and scored accuracy=1.0000 (chance 1.0000)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\tio\nb\tio\n")
    with pytest.raises(UserError) as error:
        finetune_data.read_examples(str(tmp_path / "train.tsv"), str(tmp_path / "train.tsv"),
                                    None, keys=("data.train_file", "data.eval_file"))
    assert str(error.value) == (f"data.train_file={tmp_path / 'train.tsv'} has one label, "
                                "'io'; a classification needs examples of at least 2")


@pytest.mark.parametrize("labels, message", [
    (["io", "math", "io"], "data.labels=['io', 'math', 'io'] holds 'io' twice; give each label "
                           "once, in class-id order"),
    (["io"], "data.labels=['io'] holds one label; a classification needs at least 2 (or leave "
             "data.labels unset: the training file's labels)"),
])
def test_data_labels_of_a_repeated_or_single_label_are_refused(labels, message):
    # a repeated label made a class no example trains ("3 labels")
    from recipes.bert import finetune_config
    from recipes.common import config as config_lib

    config = config_lib.load_config(
        finetune_config.BertFinetuneConfig, (), "encoder.pretraining_dir=/runs/bert,"
        "data.task=classification,data.train_file=t.tsv,data.eval_file=t.tsv,"
        f"data.labels=[{','.join(labels)}]")
    with pytest.raises(UserError) as error:
        finetune_config.check(config)
    assert str(error.value) == message


@pytest.mark.parametrize("seq_length", [1, 4])
def test_a_sequence_length_without_room_for_text_is_refused(seq_length):
    # seq_length 1 or 2 trained on [CLS] [SEP] alone; 3-4 cut a pair's second sentence whole
    import types

    data = types.SimpleNamespace(task="classification", seq_length=seq_length)
    run = types.SimpleNamespace(corpus=None, seq_length=128)
    with pytest.raises(UserError) as error:
        finetune_data.check_task_run(data, run)
    assert str(error.value) == (
        f"data.seq_length={seq_length} leaves no room for text beside [CLS] and one [SEP] per "
        "sentence (a sentence pair's second sentence would be cut whole); give at least 5 "
        "(0 = the pretraining run's)")
    data.seq_length = 5
    assert finetune_data.check_task_run(data, run) == 5


@pytest.mark.parametrize("name, content, message", [
    # an empty label field became the class "" (labels.json ["", "neg", "pos"])
    ("train.tsv", "sentence\tlabel\na\tpos\nb\t\n", "line 3 has an empty label; give every "
     "example its label, or drop the line"),
    ("train.jsonl", '{"sentence": "a", "label": "pos"}\n{"sentence": "b", "label": " "}\n',
     "line 2 has an empty label; give every example its label, or drop the line"),
    # a list was trained on as the text "['a', 'b']"
    ("train.jsonl", '{"sentence": ["a", "b"], "label": "pos"}\n',
     "line 1: 'sentence' is a list (['a', 'b']), not text; give it as a string"),
    ("train.jsonl", '{"sentence1": "a", "sentence2": 7, "label": "pos"}\n',
     "line 1: 'sentence2' is a whole number (7), not text; give it as a string"),
    # true and 1.0 became the classes "True" and "1.0"
    ("train.jsonl", '{"sentence": "a", "label": true}\n', "line 1: 'label' is true/false "
     "(True), not a string or a whole number; give the label as a string, such as \"1\""),
    ("train.jsonl", '{"sentence": "a", "label": "x"}\n{"sentence": "a", "label": 1.0}\n',
     "line 2: 'label' is a fraction (1.0), not a string or a whole number; give the label as "
     "a string, such as \"1\""),
])
def test_a_row_with_an_empty_label_or_a_field_of_another_type_is_named(tmp_path, name,
                                                                       content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(UserError) as raised:
        classification.read_examples(str(tmp_path / name), "data.train_file")
    assert str(raised.value) == f"data.train_file={tmp_path / name} {message}"


def test_a_whole_number_label_is_taken_as_its_digits(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"sentence": "a", "label": 1}\n'
                                          '{"sentence": "b", "label": "0"}\n')
    assert [e.label for e in classification.read_examples(str(tmp_path / "train.jsonl"))] == [
        "1", "0"]


@pytest.mark.parametrize("name, content", [
    ("train.tsv", "sentence\tlabel\nthe cat\tpos\n"),
    ("train.jsonl", '{"sentence": "the cat", "label": "pos"}\n'),
])
def test_a_file_that_starts_with_a_byte_order_mark_is_read(tmp_path, name, content):
    """Windows programs (Excel's "CSV UTF-8") start a file with U+FEFF: the .tsv header was
    refused as ['\\ufeffsentence', 'label'], the .jsonl's line 1 as no JSON object."""
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + content.encode("utf-8"))
    assert classification.read_examples(str(tmp_path / name)) == [
        classification.Example("the cat", None, "pos")]


def test_a_byte_order_mark_leaves_the_byte_of_a_decoding_error_as_in_the_file(tmp_path):
    (tmp_path / "binary.tsv").write_bytes(b"\xef\xbb\xbfsentence\tlabel\n\xff\tx\n")
    with pytest.raises(UserError, match=r"\(invalid start byte at byte 18\)"):
        classification.read_examples(str(tmp_path / "binary.tsv"))


@pytest.mark.parametrize("header, row, fields", [
    ("sentence\tlabel", "nice\tday\tpos", "3 tab-separated fields where the header row names 2 "
     "(sentence, label)"),
    ("sentence1\tsentence2\tlabel", "a\tb\tc\td\tyes", "5 tab-separated fields where the "
     "header row names 3 (sentence1, sentence2, label)"),
])
def test_a_tsv_row_of_more_fields_than_the_header_is_refused(tmp_path, header, row, fields):
    """A tab inside a sentence: the row was read by the header's first fields, the rest put
    aside: it trained on the sentence 'nice' labelled 'day' (labels.json ['day', ...])."""
    (tmp_path / "train.tsv").write_text(f"{header}\n{row}\n")
    with pytest.raises(UserError) as raised:
        classification.read_examples(str(tmp_path / "train.tsv"), "data.train_file")
    assert str(raised.value) == (
        f"data.train_file={tmp_path / 'train.tsv'} line 2 has {fields}: a sentence holds a "
        "tab, it seems; replace tabs inside sentences by spaces (a .tsv has no quoting), or "
        "give the file as .jsonl")


@pytest.mark.parametrize("row", ["nice day\tpos\t", "nice day\tpos\t\t ", "nice day\tpos\t\r"])
def test_a_tsv_row_with_trailing_tabs_is_read_by_its_fields(tmp_path, row):
    """Trailing tabs (a spreadsheet's empty columns) add blank fields, no text: the row is
    its sentence and label, as before the refusal of extra fields."""
    (tmp_path / "train.tsv").write_text(f"sentence\tlabel\n{row}\n")
    assert classification.read_examples(str(tmp_path / "train.tsv"), "data.train_file") == [
        classification.Example("nice day", None, "pos")]


def test_a_tsv_row_with_text_after_blank_extra_fields_is_refused(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nnice\tpos\t\tday\n")
    with pytest.raises(UserError, match="line 2 has 4 tab-separated fields where the header "
                                        "row names 2"):
        classification.read_examples(str(tmp_path / "train.tsv"), "data.train_file")


@pytest.mark.parametrize("name, content", [
    ("train.tsv", "sentence\tlabel\na\tpos\n\n\nb\t\n"),
    ("train.jsonl", '{"sentence": "a", "label": "pos"}\n\n\n{"sentence": "b", "label": ""}\n'),
])
def test_a_row_after_blank_lines_is_named_by_its_own_line(tmp_path, name, content):
    # the blank lines were not counted: "line 3" for the row on line 5 (4 in .jsonl)
    (tmp_path / name).write_text(content)
    with pytest.raises(UserError, match=f"line {5 if name.endswith('.tsv') else 4} has an "
                                        "empty label"):
        classification.read_examples(str(tmp_path / name), "data.train_file")
