"""Sentence and sentence-pair classification (GLUE-style): data files, packing, the model.

Data: a `.tsv` file with a header row, or a `.jsonl` file with one object per line, with
the fields `sentence` (or `sentence1` and `sentence2` for pairs) and `label` (any string).
GLUE's own TSVs use other column names per task; rename the header row.

Packing: `TextPacker` turns raw strings into the encoder's three int32 inputs in the graph
(tensorflow-text's `BertTokenizer` over the pretraining vocabulary, `[CLS] a [SEP]` or
`[CLS] a [SEP] b [SEP]`, round-robin trimming of a pair, as Model Garden's
`BertPackInputs`). Training, evaluation and the serving SavedModel all use this one
packer, so serving sees exactly the inputs training saw.
"""

import csv
import dataclasses
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


def read_examples(path) -> List[Example]:
    """Examples of a `.tsv` (header row) or `.jsonl` file; one-line errors naming the line."""
    if not tf.io.gfile.exists(path):
        raise UserError(f"classification file {path} does not exist")
    extension = os.path.splitext(path)[1]
    if extension not in (".tsv", ".jsonl"):
        raise UserError(f"classification file {path}: expected a .tsv or .jsonl file")
    with tf.io.gfile.GFile(path, "r") as f:
        text = f.read()
    if extension == ".tsv":
        rows = list(csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))
        first_line = 2  # after the header
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise UserError(f"{path} line {number} is not a JSON object") from None
            if not isinstance(row, dict):
                raise UserError(f"{path} line {number} is not a JSON object")
            rows.append(row)
        first_line = 1
    examples = []
    for number, row in enumerate(rows, start=first_line):
        first = row.get("sentence", row.get("sentence1"))
        second = row.get("sentence2")
        if first is None or row.get("label") is None:
            raise UserError(
                f"{path} line {number} lacks 'sentence' (or 'sentence1') or 'label'; fields "
                "are sentence | sentence1 + sentence2, and label"
            )
        examples.append(Example(str(first), None if second is None else str(second),
                                str(row["label"])))
    if not examples:
        raise UserError(f"classification file {path} holds no example")
    pairs = {example.second is not None for example in examples}
    if len(pairs) > 1:
        raise UserError(f"{path} mixes single sentences and pairs; use one kind per file")
    return examples


def label_ids(examples, labels, path):
    """The index of each example's label in `labels`; an unknown label is one line."""
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted({e.label for e in examples} - set(index))
    if unknown:
        raise UserError(
            f"{path} has label(s) {unknown[:5]} that are not in the label list {list(labels)}"
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
