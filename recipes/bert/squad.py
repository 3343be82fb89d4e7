"""Extractive question answering in SQuAD v1.1 format, with Model Garden's pieces.

Everything that defines the benchmark is Model Garden's, called rather than re-written:
- reading `train-v1.1.json` / `dev-v1.1.json`: `official.nlp.data.squad_lib.read_squad_examples`;
- features: `squad_lib.convert_examples_to_features` ([CLS] question [SEP] context-window
  [SEP], windows `doc_stride` word pieces apart, the "max context" bookkeeping);
- the model head: `official.nlp.modeling.models.BertSpanLabeler` (start and end logits);
- decoding: `squad_lib.postprocess_output` (n-best start x end pairs, the longest-answer
  cap, projection back to the original text);
- the metric: `official.nlp.tools.squad_evaluate_v1_1.evaluate`, the official v1.1 script
  (answer normalisation, exact match and token F1, max over the reference answers).
  Model Garden's copy returns fractions; `squad_scores` reports them x100 as the official
  script and the paper do (F1 90.395 for the paper's baseline).

Tokenization is Google BERT's Python `FullTokenizer` over the pretraining run's
`vocab.txt` (lower-cased), which is what `squad_lib` is written against; it splits text into
the same word pieces as the `tensorflow_text.BertTokenizer` used in pretraining.
"""

import collections
import json
import os

import numpy as np
import tensorflow as tf
import tf_keras
from absl import logging as absl_logging
from official.nlp.data import squad_lib
from official.nlp.modeling import models
from official.nlp.tools import squad_evaluate_v1_1
from official.nlp.tools import tokenization

from recipes.bert import squad_format
from recipes.common import storage
from recipes.common.errors import UserError

# Model Garden's squad experiment / Google BERT's run_squad.py defaults.
DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64
N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30

# What `squad_lib.postprocess_output` reads from a model output.
RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])

FEATURE_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


def make_tokenizer(vocab_file):
    """Google BERT's `FullTokenizer` (lower-cased, as the pretraining vocabulary is)."""
    return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


def read_dataset(path, key=None):
    """The `data` list of a SQuAD-format JSON file (what the official metric reads);
    errors name the config `key` that gave the file, if any."""
    name = squad_format.name(path, key)
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read()
        if text.startswith("\ufeff"):  # json.load (squad_lib's reader too) fails at it
            raise UserError(f"{name} starts with a UTF-8 byte-order mark (U+FEFF), which Model "
                            "Garden's SQuAD reader cannot read: save it as UTF-8 without one")
        content = json.loads(text)
    except tf.errors.NotFoundError:
        raise UserError(f"{name} does not exist: give a SQuAD v1.1 JSON file") from None
    except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
        raise UserError(f"{name} is not JSON ({str(error)[:100]}): give a SQuAD v1.1 "
                        "JSON file") from None
    if not isinstance(content, dict) or "data" not in content:
        raise UserError(f'{name} has no "data" at its top: SQuAD v1.1 is '
                        f"{squad_format.SHAPE}")
    return content["data"]


def read_examples(path, is_training, key=None):
    """`squad_lib.SquadExample`s of a SQuAD v1.1 file, checked first by
    `squad_format.check_dataset` (a malformed file is one line naming the place)."""
    return read_examples_and_skipped(path, is_training, key)[0]


def read_examples_and_skipped(path, is_training, key=None):
    """(`read_examples`, the places of the training questions Model Garden's reader skipped:
    `data[i].paragraphs[j].qas[k] (id "...")`). It skips a question whose answer's words,
    split on whitespace, are not the text found at its `answer_start`, with a warning per
    question (Google BERT's run_squad skips the same: a few dozen of SQuAD v1.1's
    training questions); those warnings go to the console only with --verbose."""
    places = squad_format.check_dataset(path, read_dataset(path, key), is_training, key)
    verbosity = absl_logging.get_verbosity()
    if verbosity <= absl_logging.WARNING:  # (not --verbose, which leaves INFO)
        absl_logging.set_verbosity(min(verbosity, absl_logging.ERROR))
    try:
        examples = squad_lib.read_squad_examples(
            path, is_training=is_training, version_2_with_negative=False)
    finally:
        absl_logging.set_verbosity(verbosity)
    kept = {example.qas_id for example in examples}
    skipped = [f'{place} (id "{qid}")' for qid, place in places.items() if qid not in kept]
    if not examples:
        raise UserError(
            f"{squad_format.name(path, key)}: no answer's text is found at its answer_start "
            f"(such as {skipped[0]}): Model Garden's reader skips such a question; fix the "
            "answers' answer_start")
    return examples, skipped


def convert_examples(examples, tokenizer, seq_length, is_training, doc_stride=DOC_STRIDE,
                     max_query_length=MAX_QUERY_LENGTH):
    """`squad_lib.InputFeatures`, one per context window (`doc_stride` apart)."""
    features = []

    def collect(feature, is_padding=False):
        if not is_padding:
            features.append(feature)

    squad_lib.convert_examples_to_features(
        examples,
        tokenizer=tokenizer,
        max_seq_length=seq_length,
        doc_stride=doc_stride,
        max_query_length=max_query_length,
        is_training=is_training,
        output_fn=collect,
        batch_size=1,  # no padding features: evaluation batches may be partial
    )
    return features


def feature_arrays(features, is_training):
    """Model inputs (and, for training features, `start_positions`/`end_positions`) as
    NumPy arrays, in feature order."""
    arrays = {
        "input_word_ids": np.array([f.input_ids for f in features], np.int32),
        "input_mask": np.array([f.input_mask for f in features], np.int32),
        "input_type_ids": np.array([f.segment_ids for f in features], np.int32),
    }
    if is_training:
        arrays["start_positions"] = np.array([f.start_position for f in features], np.int32)
        arrays["end_positions"] = np.array([f.end_position for f in features], np.int32)
    return arrays


def build_model(encoder, seq_length, initializer_range):
    """Model Garden's `BertSpanLabeler` over `encoder`, as a functional model with named
    float32 outputs `start_logits`, `end_logits` ([batch, seq_length] each)."""
    span_labeler = models.BertSpanLabeler(
        network=encoder,
        initializer=tf_keras.initializers.TruncatedNormal(stddev=initializer_range),
    )
    inputs = {name: tf_keras.Input((seq_length,), dtype=tf.int32, name=name)
              for name in FEATURE_NAMES}
    start_logits, end_logits = span_labeler(inputs)
    named = lambda name, x: tf_keras.layers.Activation("linear", dtype="float32", name=name)(x)
    return tf_keras.Model(
        inputs,
        {"start_logits": named("start_logits", start_logits),
         "end_logits": named("end_logits", end_logits)},
        name="bert_squad",
    )


def decode(examples, features, start_logits, end_logits, n_best_size=N_BEST_SIZE,
           max_answer_length=MAX_ANSWER_LENGTH):
    """{question id: answer text} by `squad_lib.postprocess_output` (v1.1: always an
    answer) from per-feature logits [num_features, length]."""
    results = [
        RawResult(unique_id=f.unique_id, start_logits=list(map(float, s)),
                  end_logits=list(map(float, e)))
        for f, s, e in zip(features, start_logits, end_logits)
    ]
    predictions, _, _ = squad_lib.postprocess_output(
        examples,
        features,
        results,
        n_best_size=n_best_size,
        max_answer_length=max_answer_length,
        do_lower_case=True,
        version_2_with_negative=False,
    )
    return dict(predictions)


def decode_evaluated(examples, features, start_logits, end_logits, dataset, n_best_size,
                     max_answer_length):
    """(predictions, dataset) of the questions whose every feature has logits: the first
    `len(start_logits)` of `features` (fewer than all when `eval.steps` limits the
    evaluation), `dataset` (the JSON `data` list) cut down to those questions, for
    `squad_scores`. All features: `decode`'s predictions and `dataset` as they are."""
    evaluated = len(start_logits)
    predictions = decode(examples, features[:evaluated], start_logits, end_logits,
                         n_best_size, max_answer_length)
    if evaluated == len(features):
        return predictions, dataset
    complete = {feature.example_index for feature in features[:evaluated]} - {
        feature.example_index for feature in features[evaluated:]}
    ids = {examples[index].qas_id for index in complete}
    predictions = {qas_id: answer for qas_id, answer in predictions.items() if qas_id in ids}
    return predictions, [
        {**article, "paragraphs": [
            {**paragraph, "qas": [qa for qa in paragraph["qas"] if qa["id"] in ids]}
            for paragraph in article["paragraphs"]]}
        for article in dataset]


def squad_scores(dataset, predictions):
    """The official SQuAD v1.1 exact match and F1, in percent, over every question of
    `dataset` (the JSON `data` list); a question without a prediction scores 0."""
    scores = squad_evaluate_v1_1.evaluate(dataset, predictions)
    return {"exact_match": 100.0 * scores["exact_match"], "f1": 100.0 * scores["final_f1"]}


def describe_scores(scores, scored, questions):
    """The console's words for `squad_scores` over `scored` of the held-out `questions`
    (fewer when `eval.steps` limits the evaluation: `decode_evaluated`)."""
    text = f"exact_match={scores['exact_match']:.2f} f1={scores['f1']:.2f}"
    return text if scored == questions else f"{text} over {scored} of {questions} questions"


PREDICTIONS_FILE = "predictions.json"  # {question id: answer} of a run's last evaluation


def write_predictions(model_dir, predictions):
    """The answers the scores are computed on, in <model_dir>/predictions.json, as the
    official script reads them."""
    tf.io.gfile.makedirs(model_dir)
    storage.write_text(os.path.join(model_dir, PREDICTIONS_FILE),
                       json.dumps(predictions, indent=1) + "\n")
