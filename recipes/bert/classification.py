"""Sentence and sentence-pair classification (GLUE-style): data files, packing, the model.

Data: a `.tsv` file with a header row, or a `.jsonl` file with one object per line, with
the fields `sentence` (or `sentence1` and `sentence2` for pairs), strings, and `label`, a
non-empty string (or, in `.jsonl`, a whole number, taken as its digits). A UTF-8 byte-order
mark at the start is skipped. A `.tsv` has no quoting: a row of more fields than its header
(a tab inside a sentence) is refused, unless the extra fields are blank (trailing tabs).
GLUE's own TSVs use other column names per task; rename the header row.

Packing: `TextPacker` turns raw strings into the encoder's three int32 inputs in the graph
(tensorflow-text's `BertTokenizer` over the pretraining vocabulary, `[CLS] a [SEP]` or
`[CLS] a [SEP] b [SEP]`, round-robin trimming of a pair, as Model Garden's
`BertPackInputs`). Training, evaluation and the serving SavedModel all use this one
packer, so serving sees exactly the inputs training saw.
"""

import csv
import dataclasses
import io
import json
import os
from typing import List, Optional

import tensorflow as tf
import tensorflow_text as tf_text
import tf_keras
from official.nlp.modeling import models

from recipes.bert import vocabulary
from recipes.common.errors import UserError

FEATURE_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


@dataclasses.dataclass(frozen=True)
class Example:
    first: str
    second: Optional[str]
    label: str


def read_examples(path, key=None) -> List[Example]:
    """Examples of a `.tsv` (header row) or `.jsonl` file; one-line errors naming the config
    `key` that gave the file (e.g. data.train_file), if any, and the line."""
    name = f"{key}={path}" if key else f"classification file {path}"
    problem = file_problem(path)
    if problem:
        raise UserError(f"{name} {problem}")
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"{name} is not UTF-8 text ({error.reason} at byte {error.start}); "
                        "save it as UTF-8") from None
    # a byte-order mark (U+FEFF), as Windows programs (Excel) start UTF-8 files, is no text
    text = text[1:] if text.startswith("\ufeff") else text
    rows = _rows(name, text, os.path.splitext(path)[1])
    examples = [_example(name, number, row) for number, row in rows]
    if not examples:
        raise UserError(f"{name} holds no example; give at least one row after the header")
    pairs = {example.second is not None for example in examples}
    if len(pairs) > 1:
        raise UserError(f"{name} mixes single sentences and pairs; use one kind per file")
    return examples


def _rows(name, text, extension):
    """[(line number, row as a dict)] of the file's `text` (blank lines skipped)."""
    if extension == ".tsv":
        # (lines end at \n, \r\n or \r only: str.splitlines also splits at U+2028, a form
        # feed, ... which a sentence may hold)
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t",
                                quoting=csv.QUOTE_NONE, restkey=_EXTRA)
        _check_header(name, reader.fieldnames or [])
        rows = []
        for row in reader:  # (reader.line_num: the row's line, blank lines counted)
            extra = row.pop(_EXTRA, [])
            if any(field.strip() for field in extra):  # trailing tabs: blank fields, dropped
                _refuse_extra_fields(name, reader.line_num, reader.fieldnames, extra)
            rows.append((reader.line_num, row))
        return rows
    rows = []
    for number, line in enumerate(io.StringIO(text, newline=""), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            raise UserError(
                f"{name} line {number} is not a JSON object; give one object per line, "
                'such as {"sentence": "...", "label": "..."}, or fix that line')
        rows.append((number, row))
    return rows


_EXTRA = object()  # csv.DictReader's key of a .tsv row's fields beyond the header's


def _refuse_extra_fields(name, number, header, extra):
    """A .tsv row of more fields than its header names (a tab inside a sentence): read by
    the header, its first fields were taken for the sentence and label, the rest dropped."""
    raise UserError(
        f"{name} line {number} has {len(header) + len(extra)} tab-separated fields where the "
        f"header row names {len(header)} ({', '.join(header)}): a sentence holds a tab, it "
        "seems; replace tabs inside sentences by spaces (a .tsv has no quoting), or give the "
        "file as .jsonl")


def _kind(value):
    return {dict: "an object", list: "a list", bool: "true/false", float: "a fraction",
            int: "a whole number"}.get(type(value), type(value).__name__)


def _example(name, number, row):
    """The `Example` of line `number`'s `row`: text fields are strings, the label a
    non-empty string or a whole number (a JSON integer, taken as its digits)."""
    first = row.get("sentence", row.get("sentence1"))
    second, label = row.get("sentence2"), row.get("label")
    if first is None or label is None:
        raise UserError(
            f"{name} line {number} lacks 'sentence' (or 'sentence1') or 'label'; fields "
            "are sentence | sentence1 + sentence2, and label"
        )
    field = "sentence" if "sentence" in row else "sentence1"
    for key, value in ((field, first), ("sentence2", second)):
        if value is not None and not isinstance(value, str):
            raise UserError(f"{name} line {number}: {key!r} is {_kind(value)} ({value!r:.40}), "
                            "not text; give it as a string")
    if isinstance(label, int) and not isinstance(label, bool):
        label = str(label)
    if not isinstance(label, str):
        raise UserError(f"{name} line {number}: 'label' is {_kind(label)} ({label!r:.40}), not "
                        'a string or a whole number; give the label as a string, such as "1"')
    if not label.strip():
        raise UserError(f"{name} line {number} has an empty label; give every example its "
                        "label, or drop the line")
    return Example(first, second, label)


def _check_header(name, fields):
    """A .tsv's header row (line 1) names the columns that every row is read by."""
    if ({"sentence", "sentence1"} & set(fields)) and "label" in fields:
        return
    if not fields:
        raise UserError(f"{name} is empty; give a header row naming the columns sentence (or "
                        "sentence1 and sentence2) and label, then one example per row")
    shown = fields[0][:80] if len(fields) == 1 else fields[:6]
    hint = ("; its columns look comma-separated: a .tsv separates them with tabs"
            if len(fields) == 1 and "," in fields[0] else "")
    raise UserError(
        f"{name} header row (line 1) is {shown!r}{hint}; it must name the columns sentence "
        "(or sentence1 and sentence2) and label")


def file_problem(path):
    """What makes `path` no classification file, as the end of a sentence naming it, or
    None: it does not exist, is a directory, or is not .tsv / .jsonl."""
    if not tf.io.gfile.exists(path):
        return "does not exist; check the path (a .tsv file with a header row, or .jsonl)"
    if tf.io.gfile.isdir(path):
        return "is a directory; give a .tsv file with a header row, or a .jsonl file"
    if os.path.splitext(path)[1] not in (".tsv", ".jsonl"):
        return "is not a .tsv or .jsonl file; convert it (or rename it, if it is one)"
    return None


def label_ids(examples, labels, source):
    """The index of each example's label in `labels`; an unknown label is one line naming
    `source` (the file, or `data.eval_file=<path>`)."""
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted({e.label for e in examples} - set(index))
    if unknown:
        raise UserError(
            f"{source} has label(s) {unknown[:5]} that are not in the label list {list(labels)} "
            "(data.labels, or the training file's labels when it is null); add them to "
            "data.labels (every label, in class-id order) or fix the file"
        )
    return [index[e.label] for e in examples]


class TextPacker(tf.Module):
    """Raw strings -> `input_word_ids`, `input_mask`, `input_type_ids` ([batch, seq_length]
    int32) with the pretraining vocabulary."""

    def __init__(self, vocab_file, seq_length, name="text_packer"):
        super().__init__(name=name)
        self.tokenizer = vocabulary.make_tokenizer(vocab_file)
        ids = vocabulary.special_ids(vocabulary.read_vocabulary(vocab_file))
        self.cls_id, self.sep_id, self.pad_id = ids.cls, ids.sep, ids.pad
        self.seq_length = seq_length

    def word_pieces(self, text):
        """[batch, (pieces)] int64 word-piece ids of a [batch] string tensor."""
        return self.tokenizer.tokenize(text).merge_dims(-2, -1)

    def __call__(self, first, second=None):
        segments = [self.word_pieces(first)]
        if second is not None:
            segments.append(self.word_pieces(second))
        # Room for [CLS] and one [SEP] per segment; pairs are trimmed round-robin.
        budget = self.seq_length - 1 - len(segments)
        segments = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments)
        return self.pack(segments)

    def pack(self, segments):
        """[CLS] s1 [SEP] (s2 [SEP]) padded to seq_length; segments already fit."""
        word_ids, type_ids = tf_text.combine_segments(
            segments, start_of_sequence_id=self.cls_id, end_of_segment_id=self.sep_id
        )
        word_ids, mask = tf_text.pad_model_inputs(word_ids, self.seq_length, self.pad_id)
        type_ids, _ = tf_text.pad_model_inputs(type_ids, self.seq_length)
        return {
            "input_word_ids": tf.cast(word_ids, tf.int32),
            "input_mask": tf.cast(mask, tf.int32),
            "input_type_ids": tf.cast(type_ids, tf.int32),
        }


def pack_examples(packer, examples, batch_size=512):
    """All examples packed, as a dict of [num_examples, seq_length] int32 tensors."""
    parts = []
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        first = tf.constant([e.first for e in chunk])
        second = tf.constant([e.second for e in chunk]) if chunk[0].second is not None else None
        parts.append(packer(first, second))
    return {name: tf.concat([p[name] for p in parts], 0) for name in FEATURE_NAMES}


def build_model(encoder, seq_length, num_classes, dropout_rate, initializer_range):
    """Model Garden's `BertClassifier` (the encoder's pooled output -> dropout -> dense)
    as a functional model with one float32 output, `logits` [batch, num_classes]."""
    classifier = models.BertClassifier(
        network=encoder,
        num_classes=num_classes,
        initializer=tf_keras.initializers.TruncatedNormal(stddev=initializer_range),
        dropout_rate=dropout_rate,
        use_encoder_pooler=True,
    )
    inputs = {name: tf_keras.Input((seq_length,), dtype=tf.int32, name=name)
              for name in FEATURE_NAMES}
    logits = tf_keras.layers.Activation("linear", dtype="float32", name="logits")(
        classifier(inputs))
    return tf_keras.Model(inputs, {"logits": logits}, name="bert_classifier")
