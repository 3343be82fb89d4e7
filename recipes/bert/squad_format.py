"""What a SQuAD v1.1 file must hold, checked before any work with the place named.

Model Garden's `squad_lib.read_squad_examples` and the official v1.1 metric index the JSON
without checks: a file that is not quite SQuAD fails inside them as a `KeyError: 'id'` with
no position, or, for an evaluation file, passes the reader and breaks the metric after
training. `check_dataset` walks the `data` list once and names the first place that breaks
what they read:

    {"data": [{"paragraphs": [{"context": str,
                               "qas": [{"id": str, "question": str,
                                        "answers": [{"text": str, "answer_start": int}]}]}]}]}

Training questions have exactly one answer, inside the context (squad_lib's rule: it
finds the answer's words from `answer_start`); evaluation questions at least one (the
metric takes the best over them). SQuAD v2.0's unanswerable questions are refused.
"""

from recipes.common.errors import UserError

SHAPE = ('{"data": [{"paragraphs": [{"context", "qas": [{"id", "question", '
         '"answers": [{"text", "answer_start"}]}]}]}]}')


def name(path, key):
    return f"{key}={path}" if key else f"SQuAD file {path}"


def _kind(value):
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), "a number")


def _field(record, key, expected, where):
    """`record[key]`, which must be an instance of `expected`."""
    if not isinstance(record, dict):
        raise ValueError(f"{where} is {_kind(record)}, not an object")
    if key not in record:
        raise ValueError(f'{where} has no "{key}"')
    value = record[key]
    if not isinstance(value, expected) or isinstance(value, bool):
        want = {list: "a list", str: "a string", int: "a whole number"}[expected]
        raise ValueError(f'{where}.{key} is {_kind(value)}, not {want}')
    return value


def _check_answers(qa, context, where, is_training):
    answers = _field(qa, "answers", list, where)
    if qa.get("is_impossible"):
        raise ValueError(f"{where} is an unanswerable SQuAD v2.0 question: give SQuAD v1.1")
    if is_training and len(answers) != 1:
        raise ValueError(f"{where} has {len(answers)} answers: a training question needs "
                         "exactly one")
    if not answers:
        raise ValueError(f"{where} has no answer: the metric needs at least one")
    for k, answer in enumerate(answers):
        text = _field(answer, "text", str, f"{where}.answers[{k}]")
        if is_training:
            start = _field(answer, "answer_start", int, f"{where}.answers[{k}]")
            if not text:
                raise ValueError(f"{where}.answers[{k}].text is empty")
            if start < 0 or start + len(text) > len(context):
                raise ValueError(
                    f"{where}.answers[{k}]: answer_start={start} with a {len(text)}-character "
                    f"text does not fit in its {len(context)}-character context")


def check_dataset(path, dataset, is_training, key=None):
    """Raises `UserError` naming the first place where `dataset` (the `data` list of the
    SQuAD file `path`, given as config key `key`) is not what the reader and metric read;
    returns the place of each question, by id (`data[i].paragraphs[j].qas[k]`)."""
    seen = {}
    try:
        if not isinstance(dataset, list):
            raise ValueError(f'"data" is {_kind(dataset)}, not a list of articles: SQuAD v1.1 '
                             f"is {SHAPE}")
        for i, article in enumerate(dataset):
            for j, paragraph in enumerate(_field(article, "paragraphs", list, f"data[{i}]")):
                where = f"data[{i}].paragraphs[{j}]"
                context = _field(paragraph, "context", str, where)
                for n, qa in enumerate(_field(paragraph, "qas", list, where)):
                    qa_where = f"{where}.qas[{n}]"
                    qid = _field(qa, "id", str, qa_where)
                    if qid in seen:
                        raise ValueError(f'{qa_where} repeats the id "{qid}" of {seen[qid]}')
                    seen[qid] = qa_where
                    _field(qa, "question", str, qa_where)
                    _check_answers(qa, context, f'{qa_where} (id "{qid}")', is_training)
    except ValueError as error:
        raise UserError(f"{name(path, key)}: {error}") from None
    if not seen:
        raise UserError(f"{name(path, key)} holds no question; SQuAD v1.1 is {SHAPE}")
    return seen
