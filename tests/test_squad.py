"""SQuAD v1.1 pieces (recipes/bert/squad.py): the official metric on hand-scored cases,
Model Garden's windowing with doc stride, and n-best decoding back to the original text.

Every expected number below is worked out by hand in the comments, from the rules of the
official v1.1 script: lower-case, drop punctuation, drop the articles a/an/the, split on
whitespace; EM = normalised strings equal; F1 = 2PR/(P+R) over the bag of tokens; the
max over the reference answers; a question without a prediction scores 0.
"""
import json
import os

import numpy as np
import pytest

from recipes.bert import squad
from recipes.common.errors import UserError

TINY_SQUAD = os.path.join(os.path.dirname(__file__), "data", "tiny_squad.json")


def write_vocab(path, words):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(words))
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tokens))
    return str(path)


def question(qid, answers):
    return {"id": qid, "question": "q", "answers": [{"text": a, "answer_start": 0} for a in answers]}


def test_official_metric_on_hand_scored_answers():
    dataset = [{"paragraphs": [{"context": "c", "qas": [
        question("a", ["the Eiffel Tower", "Eiffel Tower"]),
        question("b", ["New York City"]),
        question("c", ["42", "forty two"]),
        question("d", ["apple"]),
        question("e", ["unanswered"]),
    ]}]}]
    predictions = {
        # "eiffel tower" == "eiffel tower" (case, "!" dropped): EM 1, F1 1.
        "a": "Eiffel tower!",
        # [york, city, in] vs [new, york, city]: 2 common, P = R = 2/3, F1 = 2/3; EM 0.
        "b": "York City in",
        # the hyphen is deleted, not spaced: [fortytwo] shares nothing with [forty, two]
        # or [42]: EM 0, F1 0.
        "c": "forty-two",
        # "an" is an article: "apple" == "apple": EM 1, F1 1.
        "d": "an apple",
        # "e" has no prediction: 0 and 0.
    }
    scores = squad.squad_scores(dataset, predictions)
    # EM = (1 + 0 + 0 + 1 + 0) / 5 = 40 %; F1 = (1 + 2/3 + 0 + 1 + 0) / 5 = 8/15 = 53.33 %.
    assert scores["exact_match"] == pytest.approx(40.0)
    assert scores["f1"] == pytest.approx(100 * 8 / 15)


def test_partial_overlap_takes_the_best_reference():
    dataset = [{"paragraphs": [{"context": "c", "qas": [
        question("a", ["the big red house", "red house"])]}]}]
    # [red, house, door] vs [big, red, house]: 2 common, P = 2/3, R = 2/3 -> 2/3.
    # vs [red, house]: 2 common, P = 2/3, R = 1 -> 2 * (2/3) / (5/3) = 4/5 (the max).
    scores = squad.squad_scores(dataset, {"a": "red house door"})
    assert scores["exact_match"] == 0.0
    assert scores["f1"] == pytest.approx(80.0)


def test_long_context_is_split_into_windows_doc_stride_apart(tmp_path):
    words = [f"w{i}" for i in range(20)]
    context = " ".join(words)
    vocab = write_vocab(tmp_path / "vocab.txt", words + ["where", "is", "it", "?"])
    data = {"data": [{"paragraphs": [{"context": context, "qas": [{
        "id": "x", "question": "where is it",
        "answers": [{"text": "w15", "answer_start": context.index("w15")}]}]}]}]}
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data))
    examples = squad.read_examples(str(path), is_training=True)
    features = squad.convert_examples(examples, squad.make_tokenizer(vocab), seq_length=16,
                                      is_training=True, doc_stride=4)
    # Room for the context: 16 - 3 question tokens - [CLS] [SEP] [SEP] = 10 pieces.
    # Windows start at 0, 4, 8 (each 10 long) and 12 (8 long: 12 + 8 = 20 ends the loop).
    assert [f.tokens[5] for f in features] == ["w0", "w4", "w8", "w12"]
    assert [len(f.tokens) for f in features] == [16, 16, 16, 14]
    # w15 is in the windows starting at 8 and 12: position 5 (after [CLS] where is it
    # [SEP]) + 15 - 8 = 12, and 5 + 15 - 12 = 8; elsewhere the target is [CLS] (0).
    assert [f.start_position for f in features] == [0, 0, 12, 8]
    assert [f.end_position for f in features] == [0, 0, 12, 8]
    # Max context: w15 is 7 from the start / 2 from the end of window 8..17 (min 2) and
    # 3 / 4 in window 12..19 (min 3): it is scored in the last window only.
    assert [f.token_is_max_context.get(f.tokens.index("w15"), None) if "w15" in f.tokens
            else None for f in features] == [None, None, False, True]
    arrays = squad.feature_arrays(features, is_training=True)
    assert arrays["input_word_ids"].shape == (4, 16)
    assert arrays["input_mask"][3].tolist() == [1] * 14 + [0] * 2
    assert arrays["input_type_ids"][0].tolist() == [0] * 5 + [1] * 11


def test_squad_end_position_is_the_answers_last_piece(tmp_path):
    words = [f"w{i}" for i in range(20)]
    context = " ".join(words)
    vocab = write_vocab(tmp_path / "vocab.txt", words + ["where", "is", "it", "?"])
    data = {"data": [{"paragraphs": [{"context": context, "qas": [{
        "id": "x", "question": "where is it",
        "answers": [{"text": "w15 w16", "answer_start": context.index("w15")}]}]}]}]}
    path = tmp_path / "two_pieces.json"
    path.write_text(json.dumps(data))
    examples = squad.read_examples(str(path), is_training=True)
    features = squad.convert_examples(examples, squad.make_tokenizer(vocab), seq_length=16,
                                      is_training=True, doc_stride=4)
    arrays = squad.feature_arrays(features, is_training=True)
    # Windows of 10 context pieces start at 0, 4, 8, 12 (as above). "w15 w16" lies whole
    # in the windows starting at 8 (positions 5 + 15 - 8 = 12 and 13) and 12 (8 and 9);
    # the windows 0..9 and 4..13 do not hold it: [CLS] (0) for start and end.
    assert arrays["start_positions"].tolist() == [0, 0, 12, 8]
    assert arrays["end_positions"].tolist() == [0, 0, 13, 9]


def test_decoding_picks_the_best_valid_span_and_returns_original_text(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", [
        "where", "does", "the", "eiffel", "tower", "stand", "?", "stands", "in", "paris",
        ",", "france", ".", "it", "was", "finished", "1889", "for", "a", "world", "fair"])
    examples = squad.read_examples(TINY_SQUAD, is_training=False)[:1]  # q1
    features = squad.convert_examples(examples, squad.make_tokenizer(vocab), seq_length=48,
                                      is_training=False)
    tokens = features[0].tokens
    # [CLS] where does the eiffel tower stand ? [SEP] the eiffel tower stands in paris , ...
    paris, france = tokens.index("paris"), tokens.index("france")
    start = np.zeros((1, 48))
    end = np.zeros((1, 48))
    start[0, 1] = end[0, 1] = 10.0  # "where" is in the question: never an answer
    start[0, paris], end[0, paris] = 5.0, 3.0
    end[0, france] = 2.9
    # Valid spans (start <= end, both in the context): "Paris" 5 + 3 = 8, "Paris, France"
    # 5 + 2.9 = 7.9, spans over zero logits 0 or less. "Paris," in the whitespace-split
    # context is projected back to "Paris".
    assert squad.decode(examples, features, start, end) == {"q1": "Paris"}
    # "Paris, France" 5 + 4 = 9 now beats "Paris" 8 (and "France" alone 0 + 4 = 4).
    end[0, france] = 4.0
    assert squad.decode(examples, features, start, end) == {"q1": "Paris, France"}
    # Longest answer 1 piece: "Paris , France" (3 pieces) is out; "Paris" 8 > "France" 4.
    assert squad.decode(examples, features, start, end, max_answer_length=1) == {"q1": "Paris"}
    # A start after the end is invalid: start "France" 6 with end "Paris" 3 would be 9.
    start[0, france] = 6.0
    end[0, france] = -1.0
    # Valid: "Paris" 8, "France" 6 - 1 = 5, "Paris, France" 5 - 1 = 4.
    assert squad.decode(examples, features, start, end) == {"q1": "Paris"}


def test_an_evaluation_of_the_first_features_scores_the_questions_they_cover_whole(tmp_path):
    """Fine-tuning's eval.steps evaluated every question whatever it said (the scores need
    the questions whose every window has logits, and only those)."""
    with open(TINY_SQUAD, encoding="utf-8") as f:
        dataset = json.load(f)["data"]
    examples = squad.read_examples(TINY_SQUAD, is_training=False)
    vocab = write_vocab(tmp_path / "vocab.txt", [])  # every word [UNK]: shapes only
    features = squad.convert_examples(examples, squad.make_tokenizer(vocab), seq_length=24,
                                      doc_stride=4, max_query_length=8, is_training=False)
    windows = [feature.example_index for feature in features]
    assert len(windows) > len(examples)  # questions of several windows
    # cut inside the windows of a question after the first: it is not scored, the first is
    cut = next(i for i in range(1, len(windows))
               if windows[i] == windows[i - 1] and windows[i] > windows[0])
    logits = np.zeros((cut, 24))
    predictions, questions = squad.decode_evaluated(examples, features, logits, logits,
                                                    dataset, 20, 30)
    whole = {examples[i].qas_id for i in set(windows[:cut]) - set(windows[cut:])}
    assert set(predictions) == whole and whole
    assert {qa["id"] for a in questions for p in a["paragraphs"] for qa in p["qas"]} == whole
    assert [p["context"] for a in questions for p in a["paragraphs"]] == [
        p["context"] for a in dataset for p in a["paragraphs"]]
    every = np.zeros((len(features), 24))
    predictions, questions = squad.decode_evaluated(examples, features, every, every, dataset,
                                                    20, 30)
    assert questions is dataset and len(predictions) == len(examples)
    scores = {"exact_match": 12.5, "f1": 20.0}
    assert squad.describe_scores(scores, len(whole), len(examples)) == (
        f"exact_match=12.50 f1=20.00 over {len(whole)} of {len(examples)} questions")
    assert squad.describe_scores(scores, len(examples), len(examples)) == (
        "exact_match=12.50 f1=20.00")


def test_bad_squad_files_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        squad.read_examples(str(tmp_path / "missing.json"), is_training=True)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UserError, match="bad.json is not JSON"):
        squad.read_examples(str(tmp_path / "bad.json"), is_training=True)
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(UserError, match='list.json has no "data" at its top'):
        squad.read_examples(str(tmp_path / "list.json"), is_training=True)
    (tmp_path / "empty.json").write_text('{"data": [{"paragraphs": []}]}')
    with pytest.raises(UserError, match="empty.json holds no question"):
        squad.read_examples(str(tmp_path / "empty.json"), is_training=False)


def test_a_squad_file_with_a_byte_order_mark_is_named_as_such(tmp_path):
    """Was: "is not JSON (Unexpected UTF-8 BOM (decode using utf-8-sig) ...": Model Garden's
    reader (json.load of the text) cannot read it, so the line says what to save."""
    path = tmp_path / "dev.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"data": []}).encode())
    with pytest.raises(UserError) as raised:
        squad.read_examples(str(path), is_training=False, key="data.eval_file")
    assert str(raised.value) == (
        f"data.eval_file={path} starts with a UTF-8 byte-order mark (U+FEFF), which Model "
        "Garden's SQuAD reader cannot read: save it as UTF-8 without one")


CONTEXT = "Paris is the capital of France."


def one_question(**changes):
    """A SQuAD v1.1 file of two questions on one context; `changes` apply to the second."""
    first = {"id": "q0", "question": "What is Paris?", "answers": [
        {"text": "the capital of France", "answer_start": 9}]}
    second = dict({"id": "q1", "question": "Which city?", "answers": [
        {"text": "Paris", "answer_start": 0}]}, **changes)
    return {"data": [{"title": "t", "paragraphs": [{"context": CONTEXT,
                                                    "qas": [first, second]}]}]}


SECOND = 'data[0].paragraphs[0].qas[1]'


@pytest.mark.parametrize("changes, is_training, message", [
    # Each of these used to fail inside Model Garden's reader with no position given.
    ({"id": None}, True, f"{SECOND}.id is null, not a string"),
    ({"question": ["Which city?"]}, False, f"{SECOND}.question is a list, not a string"),
    ({"answers": "Paris"}, True, f'{SECOND} (id "q1").answers is a string, not a list'),
    ({"answers": [{"text": "Paris", "answer_start": "0"}]}, True,
     f'{SECOND} (id "q1").answers[0].answer_start is a string, not a whole number'),
    ({"answers": [{"text": "Paris", "answer_start": 40}]}, True,
     f'{SECOND} (id "q1").answers[0]: answer_start=40 with a 5-character text does not '
     f"fit in its 31-character context"),
    ({"answers": [{"text": "Paris", "answer_start": 0}] * 2}, True,
     f'{SECOND} (id "q1") has 2 answers: a training question needs exactly one'),
    ({"id": "q0"}, False, f'{SECOND} repeats the id "q0" of data[0].paragraphs[0].qas[0]'),
    ({"is_impossible": True, "answers": []}, False,
     f'{SECOND} (id "q1") is an unanswerable SQuAD v2.0 question: give SQuAD v1.1'),
    # These passed the reader of an evaluation file and broke the official metric (a
    # ValueError from max() over no answers, a TypeError indexing a string) after training.
    ({"answers": []}, False, f'{SECOND} (id "q1") has no answer: the metric needs at least'),
    ({"answers": "Paris"}, False, f'{SECOND} (id "q1").answers is a string, not a list'),
    ({"answers": [{"answer_start": 0}]}, False, f'{SECOND} (id "q1").answers[0] has no "text"'),
])
def test_a_malformed_question_is_named_by_its_place(tmp_path, changes, is_training, message):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(one_question(**changes)))
    with pytest.raises(UserError) as error:
        squad.read_examples(str(path), is_training=is_training, key="data.eval_file")
    assert str(error.value).startswith(f"data.eval_file={path}: {message}")


def test_the_well_formed_two_question_file_reads_in_both_roles(tmp_path):
    """The file the malformed cases change is itself accepted (so each case fails on its
    change), and an evaluation answer needs no answer_start (the metric reads only text)."""
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(one_question()))
    assert [e.qas_id for e in squad.read_examples(str(path), is_training=True)] == ["q0", "q1"]
    path.write_text(json.dumps(one_question(answers=[{"text": "Paris"}])))
    assert len(squad.read_examples(str(path), is_training=False)) == 2


def test_a_training_answer_not_at_its_start_is_skipped_and_named_quietly(tmp_path, caplog):
    """Model Garden's reader skipped such a question with an absl warning on the console
    ("Could not find answer") and nothing of ours; all of them skipped was a line naming
    none."""
    path = tmp_path / "squad.json"
    # "Paris" at 9: the words there are "the capital", not the answer's
    path.write_text(json.dumps(one_question(answers=[{"text": "Paris", "answer_start": 9}])))
    examples, skipped = squad.read_examples_and_skipped(str(path), is_training=True)
    assert [e.qas_id for e in examples] == ["q0"]
    assert skipped == [f'{SECOND} (id "q1")']
    assert "Could not find answer" not in caplog.text  # (a WARNING: absl's default level)
    both = one_question(answers=[{"text": "Paris", "answer_start": 9}])
    both["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 0
    path.write_text(json.dumps(both))
    with pytest.raises(UserError) as error:
        squad.read_examples(str(path), is_training=True, key="data.train_file")
    assert str(error.value) == (
        f"data.train_file={path}: no answer's text is found at its answer_start (such as "
        f"data[0].paragraphs[0].qas[0] (id \"q0\")): Model Garden's reader skips such a "
        "question; fix the answers' answer_start")
