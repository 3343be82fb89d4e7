"""The WordPiece vocabulary: learn one from text with tensorflow-text, or read a `vocab.txt`.

Tokenization is `tensorflow_text.BertTokenizer` with `lower_case=True` (uncased BERT), the
same basic tokenizer that `bert_vocab_from_dataset` uses while learning, so a learned
vocabulary and the tokenizer always agree. Learning is split in two so that it scales: word
counts (`count_words`, summed per file or by a Beam combine), then tensorflow-text's WordPiece
learner on the counts (`learn_from_counts`).
"""

import collections
import dataclasses
import functools
from typing import List, Mapping, Sequence

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops import bert_tokenizer
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

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


def count_words(sentences: Sequence[str], lower_case: bool = True) -> collections.Counter:
    """Word counts of `sentences` after BERT's basic tokenization (the learner's input).

    The same split into words as `bert_vocab_from_dataset` (a `BasicTokenizer` with the
    tokenizer's parameters), so a vocabulary learned from these counts agrees with the
    tokenizer.
    """
    if not sentences:
        return collections.Counter()
    words = _basic_tokenizer(lower_case).tokenize(tf.constant(list(sentences)))
    return collections.Counter(word.decode("utf-8") for word in words.flat_values.numpy())


def count_words_in_batches(
    sentences: Sequence[str], lower_case: bool = True, batch_size: int = 1024
) -> collections.Counter:
    """`count_words` over `sentences`, `batch_size` sentences per tokenizer call."""
    counts = collections.Counter()
    for start in range(0, len(sentences), batch_size):
        counts.update(count_words(sentences[start : start + batch_size], lower_case))
    return counts


@functools.lru_cache(maxsize=None)
def _basic_tokenizer(lower_case: bool):
    return bert_tokenizer.BasicTokenizer(lower_case=lower_case)


def learn_from_counts(word_counts: Mapping[str, int], vocab_size: int) -> List[str]:
    """A WordPiece vocabulary of at most `vocab_size` pieces from word counts.

    `tensorflow_text`'s `wordpiece_tokenizer_learner_lib.learn` (what
    `bert_vocab_from_dataset` calls after counting), with the reserved tokens first. The
    counts are given sorted by word, so the result does not depend on the order in which
    they were added up (one process, or a Beam combine over many workers).
    """
    tokens = learner.learn(
        sorted(word_counts.items()), vocab_size, list(RESERVED_TOKENS), **_LEARN_PARAMS
    )
    # The learner's bisection over thresholds can stop above `vocab_size` (which it
    # documents as the maximum) when it runs out of thresholds. Its output is ordered:
    # reserved tokens, single characters, then pieces by descending count, so cutting the
    # tail drops only the rarest pieces.
    return tokens[:vocab_size]


def write_vocabulary(tokens: Sequence[str], path: str) -> None:
    """Writes one token per line (the `vocab.txt` format)."""
    with open(path, "w", encoding="utf-8") as out:
        out.write("".join(token + "\n" for token in tokens))


def copy_vocabulary(source: str, path: str) -> None:
    """Copies the `vocab.txt` at `source` (local or gs://) to `path`, byte for byte."""
    tf.io.gfile.copy(source, path, overwrite=True)


LEARN_ONE = "pass a vocab.txt with one WordPiece token per line, or omit it to learn one"


def read_vocabulary(path: str, fix: str = LEARN_ONE,
                    fix_missing_reserved: str = "") -> List[str]:
    """Reads and checks a `vocab.txt`; raises `UserError` (one line, ending with `fix`) if it
    cannot be used. `fix_missing_reserved`: the advice when BERT's reserved tokens are
    missing (default: add them, for a vocabulary no model was trained with yet)."""
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
    if tokens and tokens[0].startswith("\ufeff"):  # (invisible: "lacks [PAD]" misled)
        raise UserError(f"vocabulary file {path} starts with a byte-order mark (U+FEFF), which "
                        f"its first token would hold: save it as UTF-8 without one; {fix}")
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
            f"{' '.join(missing)}: "
            f"{fix_missing_reserved or f'add them (BERT needs {chr(32).join(RESERVED_TOKENS)})'}"
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


def tokenizer_from_tokens(tokens: Sequence[str], lower_case: bool = True):
    """`make_tokenizer` from the tokens in memory (Beam workers need no shared file)."""
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(tokens)), tf.range(len(tokens), dtype=tf.int64)
        ),
        num_oov_buckets=1,
    )
    return tf_text.BertTokenizer(table, token_out_type=tf.int64, lower_case=lower_case)
