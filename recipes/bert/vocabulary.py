"""The WordPiece vocabulary: learn one from text with tensorflow-text, or read a `vocab.txt`.

Tokenization is `tensorflow_text.BertTokenizer` with `lower_case=True` (uncased BERT), the
same basic tokenizer that `bert_vocab_from_dataset` uses while learning, so a learned
vocabulary and the tokenizer always agree.
"""

import dataclasses
from typing import Iterable, List, Sequence

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

from recipes.common.errors import UserError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
# [PAD] first so that its id is 0, as in Google's vocabularies (padding is id 0).
RESERVED_TOKENS = (PAD, UNK, CLS, SEP, MASK)

# Passed to the vocabulary learner: its binary search over the word-count threshold runs
# between these bounds. The learner's defaults (10 .. 1e7) cannot go below a count of 10,
# which caps a vocabulary learned from a few hundred thousand words at ~3.5k pieces, and
# spend ~23 bisection steps; 1 .. 1000 reaches 8k pieces on the embedded corpus.
_LEARN_PARAMS = {"lower_thresh": 1, "upper_thresh": 1000}


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """Ids of the reserved tokens in one vocabulary."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int


def learn_vocabulary(
    sentence_batches: Iterable[Sequence[str]], vocab_size: int, lower_case: bool = True
) -> List[str]:
    """Learns a WordPiece vocabulary of at most `vocab_size` pieces from batches of text.

    Uses `tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset` with the reserved
    tokens first. `sentence_batches` is re-iterable lazily through a generator dataset, so
    only the word counts (which grow with the number of distinct words, not the corpus
    size) are held in memory.
    """
    reading_errors = []

    def batches():
        try:
            for batch in sentence_batches:
                yield list(batch)
        except Exception as error:  # tf.data would replace it with an opaque OpError.
            reading_errors.append(error)
            raise

    dataset = tf.data.Dataset.from_generator(
        batches, output_signature=tf.TensorSpec([None], tf.string)
    )
    try:
        tokens = bert_vocab_from_dataset.bert_vocab_from_dataset(
            dataset,
            vocab_size=vocab_size,
            reserved_tokens=list(RESERVED_TOKENS),
            bert_tokenizer_params={"lower_case": lower_case},
            learn_params=_LEARN_PARAMS,
        )
    except tf.errors.OpError:
        if reading_errors:
            raise reading_errors[0] from None  # E.g. the UserError for a non-UTF-8 file.
        raise
    # The learner's bisection over thresholds can stop above `vocab_size` (which it
    # documents as the maximum) when it runs out of thresholds. Its output is ordered:
    # reserved tokens, single characters, then pieces by descending count, so cutting the
    # tail drops only the rarest pieces.
    return tokens[:vocab_size]


def write_vocabulary(tokens: Sequence[str], path: str) -> None:
    """Writes one token per line (the `vocab.txt` format)."""
    with open(path, "w", encoding="utf-8") as out:
        out.write("".join(token + "\n" for token in tokens))


def read_vocabulary(path: str) -> List[str]:
    """Reads and checks a `vocab.txt`; raises `UserError` (one line) if it cannot be used."""
    fix = "pass a vocab.txt with one WordPiece token per line, or omit it to learn one"
    if not tf.io.gfile.exists(path):  # local or gs://
        raise UserError(f"vocabulary file {path} does not exist: {fix}")
    try:
        with tf.io.gfile.GFile(path, "rb") as vocab_file:
            tokens = [line.rstrip("\r\n") for line in vocab_file.read().decode("utf-8").split("\n")]
        if tokens and tokens[-1] == "":
            tokens.pop()  # the final newline
    except (OSError, UnicodeDecodeError, tf.errors.OpError) as error:
        raise UserError(
            f"vocabulary file {path} cannot be read ({error.__class__.__name__}: "
            f"{error}): {fix}"
        ) from None
    for line_number, token in enumerate(tokens, start=1):
        if not token or token != token.strip() or any(c.isspace() for c in token):
            raise UserError(
                f"vocabulary file {path} line {line_number} is malformed "
                f"({token!r}: empty or contains whitespace): {fix}"
            )
    seen = {}
    for line_number, token in enumerate(tokens, start=1):
        if token in seen:
            raise UserError(
                f"vocabulary file {path} line {line_number} repeats the token "
                f"{token!r} of line {seen[token]}: {fix}"
            )
        seen[token] = line_number
    missing = [token for token in RESERVED_TOKENS if token not in seen]
    if missing:
        raise UserError(
            f"vocabulary file {path} lacks the reserved token(s) "
            f"{' '.join(missing)}: add them (BERT needs {' '.join(RESERVED_TOKENS)})"
        )
    return tokens


def special_ids(tokens: Sequence[str]) -> SpecialIds:
    """The ids of [PAD], [UNK], [CLS], [SEP], [MASK] in `tokens`."""
    index = {token: i for i, token in enumerate(tokens)}
    return SpecialIds(
        pad=index[PAD], unk=index[UNK], cls=index[CLS], sep=index[SEP], mask=index[MASK]
    )


def make_tokenizer(vocab_file: str, lower_case: bool = True):
    """A `tensorflow_text.BertTokenizer` over `vocab_file` that returns int64 ids."""
    return tf_text.BertTokenizer(vocab_file, token_out_type=tf.int64, lower_case=lower_case)
