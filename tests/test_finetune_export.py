"""The SQuAD serving model (recipes/bert/finetune_export.py) answers long contexts with the
evaluation's decoding: contexts longer than the sequence are read in windows `doc_stride`
apart and the best span over all windows wins, as `squad_lib.convert_examples_to_features`
+ `squad_lib.postprocess_output` (recipes/bert/squad.py) decide.

The expected answers come from Model Garden's functions on the model's logits for Model
Garden's features, not from the serving code. The model is a tiny random span labeler
(no training): its logits are arbitrary but fixed, which is all a decoding test needs. The
fresh-process check after real fine-tuning is in tests/test_finetune.py.
"""
import json
import re
import types
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from recipes.bert import finetune_export
from recipes.bert import model as model_lib
from recipes.bert import squad

SEQ_LENGTH = 24
DOC_STRIDE = 5
N_BEST_SIZE = 4
MAX_ANSWER_LENGTH = 3
TINY_MODEL = types.SimpleNamespace(
    hidden_size=16, num_layers=1, num_attention_heads=2, intermediate_size=32,
    max_sequence_length=SEQ_LENGTH, type_vocab_size=2, dropout_rate=0.0,
    attention_dropout_rate=0.0, initializer_range=0.5)  # wide logits: no near-ties
PEOPLE = [("Alice", "Paris", "bread"), ("Bob", "Rome", "pasta"), ("Carol", "Oslo", "fish"),
          ("Dave", "Lima", "corn"), ("Erin", "Cairo", "dates"), ("Frank", "Quito", "rice"),
          ("Grace", "Seoul", "kimchi"), ("Heidi", "Delhi", "curry")]
LONG_CONTEXT = " ".join(f"{name} lives in {city}, where {name} eats {food} every day."
                        for name, city, food in PEOPLE)


def squad_file(path):
    paragraphs = [
        {"context": LONG_CONTEXT, "qas": [
            {"id": f"long-{name}", "question": f"Where does {name} live?", "answers": [
                {"text": city, "answer_start": LONG_CONTEXT.index(city)}]}
            for name, city, _ in PEOPLE]},
        {"context": "Alice eats bread.", "qas": [
            {"id": "short", "question": "What does Alice eat?",
             "answers": [{"text": "bread", "answer_start": 11}]}]},
    ]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                            "paragraphs": paragraphs}]}))
    return str(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("qa_serving")
    words = set(re.findall(r"\w+|[^\w\s]", (LONG_CONTEXT + " where does live what eat "
                                            "alice eats bread").lower()))
    vocab_file = str(root / "vocab.txt")
    (root / "vocab.txt").write_text("".join(
        t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words)))
    tf_keras.utils.set_random_seed(3)
    encoder = model_lib.build_encoder(TINY_MODEL, len(words) + 5)
    network = squad.build_model(encoder, SEQ_LENGTH, TINY_MODEL.initializer_range)
    data_file = squad_file(root / "long.json")
    examples = squad.read_examples(data_file, is_training=False)
    features = squad.convert_examples(
        examples, squad.make_tokenizer(vocab_file), SEQ_LENGTH, is_training=False,
        doc_stride=DOC_STRIDE)
    outputs = network.predict(squad.feature_arrays(features, is_training=False),
                              batch_size=len(features), verbose=0)
    expected = squad.decode(examples, features, outputs["start_logits"],
                            outputs["end_logits"], N_BEST_SIZE, MAX_ANSWER_LENGTH)
    serving = finetune_export.QuestionAnsweringServing(
        network, vocab_file, SEQ_LENGTH, squad.MAX_QUERY_LENGTH, N_BEST_SIZE,
        MAX_ANSWER_LENGTH, DOC_STRIDE)
    return types.SimpleNamespace(examples=examples, features=features, expected=expected,
                                 serving=serving, vocab_file=vocab_file)


def test_long_contexts_are_read_in_many_overlapping_windows(setup):
    windows = [sum(f.example_index == i for f in setup.features)
               for i in range(len(setup.examples))]
    assert min(windows[:-1]) >= 10 and windows[-1] == 1  # the short context fits in one


def test_served_answers_are_the_ones_evaluation_decodes_over_all_windows(setup):
    questions = [e.question_text for e in setup.examples]
    contexts = [" ".join(e.doc_tokens) for e in setup.examples]
    served = setup.serving.answer(tf.constant(questions), tf.constant(contexts))
    answers = [a.decode() for a in served["answer"].numpy()]
    assert answers == [setup.expected[e.qas_id] for e in setup.examples]
    # The spans come from many windows: one window would see only the first ~11 pieces.
    first_window_end = LONG_CONTEXT.index(PEOPLE[1][0])
    starts = served["start"].numpy()
    assert len({s for s in starts[:-1] if s > first_window_end}) >= 2
    for context, answer, start, end in zip(contexts, answers, starts, served["end"].numpy()):
        if start == -1:  # no valid span: squad_lib's placeholder
            assert answer == finetune_export.NO_SPAN_ANSWER and end == -1
        else:
            assert context.encode()[start:end].decode() == answer


# Every vowel accented (precomposed and combining marks, capitals too) and a zero-width
# space: each is normalized away by the tokenizer, so the model sees the same pieces as
# without them, and whatever span it picks holds accents.
ACCENTS = {"a": "á", "e": "e\u0301", "i": "ï", "o": "ö", "u": "u\u0300", "A": "Á",
           "E": "É", "O": "Ö"}


def _accented(text):
    return "".join(ACCENTS.get(c, c) for c in text.replace("lives", "li\u200bves"))


def _strip_accents(text):
    """Python's own NFD without the non-spacing marks, and no zero-width spaces."""
    return "".join(c for c in unicodedata.normalize("NFD", text)
                   if unicodedata.category(c) != "Mn").replace("\u200b", "")


def test_answers_of_accented_contexts_are_whole_characters_of_the_context(setup):
    """tensorflow-text's offsets count bytes of the text it normalized (é is 2 bytes, e 1):
    answers after an accented letter were cut short, inside a character, by one byte per
    accent before them. The pieces and so the spans are those of the plain context."""
    questions = [e.question_text for e in setup.examples]
    plain = [" ".join(e.doc_tokens) for e in setup.examples]
    accented = [_accented(c) for c in plain]
    assert all(_strip_accents(a) == p for a, p in zip(accented, plain))
    served = setup.serving.answer(tf.constant(questions), tf.constant(accented))
    answers = [a.decode() for a in served["answer"].numpy()]  # whole UTF-8 characters
    assert [_strip_accents(a) for a in answers] == [setup.expected[e.qas_id]
                                                    for e in setup.examples]
    found = [a for a, start in zip(answers, served["start"].numpy()) if start != -1]
    assert len(found) >= 2 and all(a != _strip_accents(a) for a in found if re.search(
        "[aeiouAEO]", _strip_accents(a)))  # answers holding accents
    for context, answer, start, end in zip(accented, answers, served["start"].numpy(),
                                           served["end"].numpy()):
        if start != -1:
            assert context.encode()[start:end].decode() == answer


def test_each_example_is_decoded_on_its_own_windows(setup):
    # One example per call gives the same answer as in a mixed batch.
    for example in setup.examples[::3]:
        served = setup.serving.answer(tf.constant([example.question_text]),
                                      tf.constant([" ".join(example.doc_tokens)]))
        assert served["answer"].numpy()[0].decode() == setup.expected[example.qas_id]


def test_windows_and_max_context_are_squad_libs(setup):
    # squad_lib's features of the long example: each window's pieces and, per piece,
    # whether this window is its "max context" one.
    example = setup.examples[0]
    features = [f for f in setup.features if f.example_index == 0]
    pieces = [p for word in example.doc_tokens
              for p in squad.make_tokenizer(setup.vocab_file).tokenize(word)]
    query_length = features[0].tokens.index("[SEP]") - 1
    windows = finetune_export.Windows(tf.constant([query_length], tf.int64),
                                      tf.constant([len(pieces)], tf.int64), SEQ_LENGTH,
                                      DOC_STRIDE)
    assert windows.count.numpy().tolist() == [len(features)]
    max_context = windows.max_context(SEQ_LENGTH).numpy()
    for w, feature in enumerate(features):
        first, start, length = (int(t.numpy()[w]) for t in (windows.first, windows.start,
                                                             windows.length))
        assert first == query_length + 2
        assert feature.tokens[first:first + length] == pieces[start:start + length]
        assert feature.tokens[first + length:] == ["[SEP]"]
        for position in range(first, first + length):
            assert bool(max_context[w, position]) == feature.token_is_max_context[position]


def test_an_empty_or_blank_context_gets_the_placeholder_answer(setup):
    """What docs/finetune.md says of it: squad_lib's "empty", start = end = -1."""
    served = setup.serving.answer(tf.constant(["Who?", "Who?"]), tf.constant(["", " \t "]))
    assert [a.decode() for a in served["answer"].numpy()] == [
        finetune_export.NO_SPAN_ANSWER] * 2
    assert served["start"].numpy().tolist() == [-1, -1]
    assert served["end"].numpy().tolist() == [-1, -1]
