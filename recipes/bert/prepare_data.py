r"""Raw text -> BERT pretraining TFRecords (Google BERT / Model Garden format).

  python -m recipes.bert.prepare_data --output_dir=/tmp/bert_data            # embedded corpus
  python -m recipes.bert.prepare_data --input_path='corpus/*.txt' \
      --output_dir=/tmp/bert_data --seq_length=512 --max_predictions_per_seq=80

Steps, streamed chunk by chunk so memory does not grow with the corpus:
1. the text files (or the embedded corpus, written as text files first: `corpus.py`);
2. each document goes to the training or the held-out split (a seeded coin per document);
3. the WordPiece vocabulary is learned from the training documents
   (`vocabulary.py`), unless a `vocab.txt` is given;
4. per chunk of documents: tokenize (`tensorflow_text.BertTokenizer`), build sentence pairs
   `dupe_factor` times (`sentence_pairs.py`), shuffle them, mask them (`masking.py`), and
   append them round-robin to the shards (`tfrecords.py`).

Everything random comes from `seed`: the same inputs and arguments give byte-identical files.
"""

import contextlib
import dataclasses
import itertools
import json
import os
import random
import shutil
import sys
import time
from typing import Iterator, List, Optional, Sequence

from absl import flags
from absl import logging
import tensorflow as tf
import tqdm

from recipes.bert import corpus
from recipes.bert import masking
from recipes.bert import sentence_pairs
from recipes.bert import text_files
from recipes.bert import tfrecords
from recipes.bert import vocabulary
from recipes.common import errors

# Defaults from Google BERT's create_pretraining_data.py flags: masked_lm_prob 0.15,
# short_seq_prob 0.1, dupe_factor 10. seq_length 128 with 20 predictions is BERT's phase 1
# (and 512 with 80 phase 2; README of google-research/bert, "Pre-training with BERT").
MASKED_LM_PROB = 0.15
SHORT_SEQ_PROB = 0.1
DUPE_FACTOR = 10
# Project choices (not from a reference): an 8k-piece vocabulary is the largest the
# embedded corpus (~10k distinct words) supports without becoming a word list.
VOCAB_SIZE = 8192
NUM_SHARDS = 8
HELDOUT_FRACTION = 0.05
SEED = 12345
CHUNK_SENTENCES = 10_000  # Sentences per chunk: bounds memory, and the random-B pool.
_MASK_BATCH = 2048  # Sequences per call of the masking graph.
_VOCAB_BATCH = 1024  # Sentences per batch fed to the vocabulary learner.


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """What `prepare_pretraining_data` wrote. Globs match exactly this run's shards."""

    train_files: str
    eval_files: str
    vocab_file: str
    vocab_size: int
    seq_length: int
    max_predictions_per_seq: int
    num_train_sequences: int
    num_eval_sequences: int
    num_train_documents: int
    num_eval_documents: int
    num_words: int  # Whitespace-separated words of the source text, both splits.


def prepare_pretraining_data(
    input_path: Optional[str],
    output_dir: str,
    *,
    vocab_file: Optional[str] = None,
    vocab_size: int = VOCAB_SIZE,
    lower_case: bool = True,
    seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    masked_lm_prob: float = MASKED_LM_PROB,
    short_seq_prob: float = SHORT_SEQ_PROB,
    dupe_factor: int = DUPE_FACTOR,
    num_shards: int = NUM_SHARDS,
    heldout_fraction: float = HELDOUT_FRACTION,
    seed: int = SEED,
    chunk_sentences: int = CHUNK_SENTENCES,
    progress: Optional[bool] = None,
) -> PreparedData:
    """Writes train and held-out pretraining shards and the vocabulary into `output_dir`.

    Args:
      input_path: a directory (all `.txt` files below it), a glob, or one file, in Google's
        format (a sentence per line, blank lines between documents). None: the embedded
        corpus (`corpus.py`), written to `output_dir/corpus/` first.
      output_dir: receives `train-*.tfrecord`, `heldout-*.tfrecord`, `vocab.txt`,
        `metadata.json`.
      vocab_file: an existing `vocab.txt` (copied to `output_dir`); None learns one of at
        most `vocab_size` pieces from the training documents.
      vocab_size: target size of a learned vocabulary (ignored with `vocab_file`).
      lower_case: lower-case text before WordPiece (uncased BERT).
      seq_length: tokens per sequence, [CLS] A [SEP] B [SEP] plus padding.
      max_predictions_per_seq: cap on masked positions per sequence.
      masked_lm_prob: fraction of non-special tokens masked.
      short_seq_prob: probability of a shorter target length for a document's pairs.
      dupe_factor: passes over the training documents, each with new pairs and masks (the
        held-out split is written once).
      num_shards: files per split.
      heldout_fraction: fraction of documents written to the held-out shards instead.
      seed: seeds all randomness.
      chunk_sentences: sentences per processing chunk (memory bound, random-B pool).
      progress: show progress bars (None: only on a terminal).

    Returns:
      A `PreparedData`.

    Raises:
      TypeError: an argument of the wrong type (named, with its value).
      ArgumentError (a ValueError): an argument out of range (named, with its value).
      UserError: the corpus or vocabulary cannot be used (one line: what, where, what to do).
    """
    _check_arguments(
        seq_length=seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        masked_lm_prob=masked_lm_prob,
        short_seq_prob=short_seq_prob,
        dupe_factor=dupe_factor,
        num_shards=num_shards,
        heldout_fraction=heldout_fraction,
        vocab_size=vocab_size,
        chunk_sentences=chunk_sentences,
    )
    started = time.time()
    os.makedirs(output_dir, exist_ok=True)
    # metadata.json marks a finished preparation: remove it first, so that a run that fails
    # half-way (after replacing vocab.txt) never looks finished.
    metadata_path = os.path.join(output_dir, "metadata.json")
    if os.path.exists(metadata_path):
        os.remove(metadata_path)
    if input_path is None:
        files = corpus.write_embedded_corpus(os.path.join(output_dir, "corpus"))
        source = "the embedded corpus (stdlib docstrings + pydoc_data.topics)"
    else:
        files = text_files.resolve_text_files(input_path)
        source = input_path
    logging.info(
        "Corpus: %d file(s) from %s, %d bytes.", len(files), source, text_files.total_bytes(files)
    )

    # --- Vocabulary -------------------------------------------------------------------
    vocab_path = os.path.join(output_dir, "vocab.txt")
    if vocab_file is not None:
        tokens = vocabulary.read_vocabulary(vocab_file)
        if os.path.abspath(vocab_file) != os.path.abspath(vocab_path):
            shutil.copyfile(vocab_file, vocab_path)
    else:
        train_documents = (
            document
            for heldout, document in _split_documents(
                files, heldout_fraction, seed, progress, "learning vocabulary"
            )
            if not heldout
        )
        sentences = (sentence for document in train_documents for sentence in document)
        tokens = vocabulary.learn_vocabulary(
            _batched(sentences, _VOCAB_BATCH), vocab_size, lower_case=lower_case
        )
        vocabulary.write_vocabulary(tokens, vocab_path)
    logging.info("Vocabulary: %d pieces in %s.", len(tokens), vocab_path)

    # --- Pairs, masks, shards -----------------------------------------------------------
    special_ids = vocabulary.special_ids(tokens)
    tokenizer = vocabulary.make_tokenizer(vocab_path, lower_case=lower_case)
    splits = {
        heldout: _SplitWriter(
            output_dir,
            tfrecords.HELDOUT_PREFIX if heldout else tfrecords.TRAIN_PREFIX,
            num_shards=num_shards,
            tokenizer=tokenizer,
            special_ids=special_ids,
            masker=masking.Masker(
                vocab_size=len(tokens),
                special_ids=special_ids,
                masked_lm_prob=masked_lm_prob,
                max_predictions_per_seq=max_predictions_per_seq,
                seed=seed + 2 if heldout else seed + 1,
            ),
            seq_length=seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            short_seq_prob=short_seq_prob,
            dupe_factor=1 if heldout else dupe_factor,
            rng=random.Random(seed + 4 if heldout else seed + 3),
        )
        for heldout in (False, True)
    }
    num_words = 0
    # Shards are renamed into place only if the whole block succeeds (see ShardedWriter).
    with contextlib.ExitStack() as open_writers:
        for split in splits.values():
            open_writers.enter_context(split.writer)
        for heldout, document in _split_documents(
            files, heldout_fraction, seed, progress, "writing sequences"
        ):
            num_words += sum(len(sentence.split()) for sentence in document)
            splits[heldout].add(document, chunk_sentences)
        for split in splits.values():
            split.flush()
        train, heldout = splits[False], splits[True]
        if train.writer.num_records == 0:
            raise errors.UserError(
                f"text corpus {source} yields no training sentence pairs "
                f"({train.num_documents} training document(s)): give several documents of "
                "several sentences each, one sentence per line, blank lines between documents"
            )
        if heldout_fraction > 0 and heldout.writer.num_records == 0:
            raise errors.UserError(
                f"text corpus {source} yields no held-out sentence pairs with heldout_fraction="
                f"{heldout_fraction} ({heldout.num_documents} held-out document(s)): give more "
                "documents or raise the fraction"
            )

    prepared = PreparedData(
        train_files=train.writer.pattern,
        eval_files=heldout.writer.pattern,
        vocab_file=vocab_path,
        vocab_size=len(tokens),
        seq_length=seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        num_train_sequences=train.writer.num_records,
        num_eval_sequences=heldout.writer.num_records,
        num_train_documents=train.num_documents,
        num_eval_documents=heldout.num_documents,
        num_words=num_words,
    )
    with open(metadata_path + ".tmp", "w", encoding="utf-8") as out:
        json.dump(dataclasses.asdict(prepared), out, indent=2)
    os.replace(metadata_path + ".tmp", metadata_path)
    logging.info(
        "Wrote %d training sequences (%d documents) and %d held-out sequences (%d "
        "documents) from %d words to %s in %.1f s.",
        prepared.num_train_sequences,
        prepared.num_train_documents,
        prepared.num_eval_sequences,
        prepared.num_eval_documents,
        num_words,
        output_dir,
        time.time() - started,
    )
    return prepared


class ArgumentError(ValueError):
    """An argument of `prepare_pretraining_data` is out of range."""


_FLOAT_ARGUMENTS = ("masked_lm_prob", "short_seq_prob", "heldout_fraction")


def _check_arguments(**values):
    """Raises TypeError / ArgumentError naming the first argument of a wrong type or range."""
    for name, value in values.items():
        expected_type = (int, float) if name in _FLOAT_ARGUMENTS else int
        if isinstance(value, bool) or not isinstance(value, expected_type):
            raise TypeError(
                f"{name}={value!r}: expected {'a float' if name in _FLOAT_ARGUMENTS else 'an int'}"
            )
    rules = {
        "seq_length": (lambda v: v >= 5, "an int >= 5 ([CLS] A [SEP] B [SEP])"),
        "max_predictions_per_seq": (
            lambda v: 1 <= v <= values["seq_length"],
            "an int in [1, seq_length]",
        ),
        "masked_lm_prob": (lambda v: 0 < v <= 1, "a float in (0, 1]"),
        "short_seq_prob": (lambda v: 0 <= v <= 1, "a float in [0, 1]"),
        "dupe_factor": (lambda v: v >= 1, "an int >= 1"),
        "num_shards": (lambda v: v >= 1, "an int >= 1"),
        "heldout_fraction": (lambda v: 0 <= v < 1, "a float in [0, 1)"),
        "vocab_size": (
            lambda v: v > len(vocabulary.RESERVED_TOKENS),
            f"an int > {len(vocabulary.RESERVED_TOKENS)}",
        ),
        "chunk_sentences": (lambda v: v >= 1, "an int >= 1"),
    }
    for name, (is_valid, expected) in rules.items():
        if not is_valid(values[name]):
            raise ArgumentError(f"{name}={values[name]!r}: expected {expected}")


def _split_documents(
    files: Sequence[str],
    heldout_fraction: float,
    seed: int,
    progress: Optional[bool],
    description: str,
):
    """Yields (is_heldout, document); the same seed gives the same split on every pass."""
    split_rng = random.Random(seed)
    with tqdm.tqdm(
        total=text_files.total_bytes(files),
        unit="B",
        unit_scale=True,
        desc=description,
        disable=None if progress is None else not progress,
        file=sys.stderr,
    ) as bar:
        for document in text_files.read_documents(files):
            bar.update(sum(len(sentence) + 1 for sentence in document) + 1)
            yield split_rng.random() < heldout_fraction, document
        bar.update(max(0, bar.total - bar.n))  # The byte count per document is approximate.


def _batched(items, size: int) -> Iterator[List]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


class _SplitWriter:
    """Chunks, tokenizes, pairs, masks and writes the documents of one split."""

    def __init__(
        self,
        output_dir,
        prefix,
        *,
        num_shards,
        tokenizer,
        special_ids,
        masker,
        seq_length,
        max_predictions_per_seq,
        short_seq_prob,
        dupe_factor,
        rng,
    ):
        self.writer = tfrecords.ShardedWriter(output_dir, prefix, num_shards)
        self.num_documents = 0
        self._tokenizer = tokenizer
        self._special_ids = special_ids
        self._masker = masker
        self._seq_length = seq_length
        self._max_predictions_per_seq = max_predictions_per_seq
        self._short_seq_prob = short_seq_prob
        self._dupe_factor = dupe_factor
        self._rng = rng
        self._pending = []  # Documents (lists of sentence strings) of the current chunk.
        self._pending_sentences = 0
        self._previous_chunk = []  # Tokenized documents of the previous chunk (random-B pool).

    def add(self, document: List[str], chunk_sentences: int):
        self._pending.append(document)
        self._pending_sentences += len(document)
        if self._pending_sentences >= chunk_sentences:
            self.flush()

    def flush(self):
        """Processes the pending chunk; afterwards only its tokenized documents are kept."""
        if not self._pending:
            return
        chunk = self._tokenize(self._pending)
        self.num_documents += len(chunk)
        self._pending, self._pending_sentences = [], 0
        pool = self._previous_chunk + chunk
        pairs = []
        for _ in range(self._dupe_factor):  # Google: for each dupe, for each document.
            for index in range(len(self._previous_chunk), len(pool)):
                pairs.extend(
                    sentence_pairs.pairs_from_document(
                        index,
                        pool,
                        seq_length=self._seq_length,
                        short_seq_prob=self._short_seq_prob,
                        rng=self._rng,
                    )
                )
        self._rng.shuffle(pairs)  # Google shuffles all pairs; here within the chunk.
        for batch in _batched(pairs, _MASK_BATCH):
            self._write(batch)
        self._previous_chunk = chunk

    def _tokenize(self, documents: List[List[str]]) -> List[List[List[int]]]:
        """Documents of strings -> documents of id lists; empty sentences/documents dropped."""
        sentences = [sentence for document in documents for sentence in document]
        ids = self._tokenizer.tokenize(tf.constant(sentences)).merge_dims(-2, -1)
        values = ids.flat_values.numpy().tolist()
        splits = ids.row_splits.numpy().tolist()
        rows = iter(values[splits[i] : splits[i + 1]] for i in range(len(sentences)))
        tokenized = []
        for document in documents:
            sentences_of_document = [row for row in itertools.islice(rows, len(document)) if row]
            if sentences_of_document:
                tokenized.append(sentences_of_document)
        return tokenized

    def _write(self, pairs: List[sentence_pairs.SentencePair]):
        cls, sep = self._special_ids.cls, self._special_ids.sep
        sequences = [[cls] + p.tokens_a + [sep] + p.tokens_b + [sep] for p in pairs]
        masked_ids, positions, original_ids = self._masker(sequences)
        for i, pair in enumerate(pairs):
            segment_a = len(pair.tokens_a) + 2  # [CLS] A [SEP]
            segment_ids = [0] * segment_a + [1] * (len(pair.tokens_b) + 1)  # B [SEP]
            self.writer.write(
                tfrecords.serialize_example(
                    input_ids=masked_ids[i],
                    segment_ids=segment_ids,
                    masked_lm_positions=positions[i],
                    masked_lm_ids=original_ids[i],
                    next_sentence_label=pair.next_sentence_label,
                    seq_length=self._seq_length,
                    max_predictions_per_seq=self._max_predictions_per_seq,
                    pad_id=self._special_ids.pad,
                )
            )


# --- Command line ----------------------------------------------------------------------


def _define_flags():
    flags.DEFINE_string(
        "input_path",
        None,
        "Directory of .txt files, a glob, or one file "
        "(a sentence per line, blank line between documents). Unset: the "
        "embedded corpus.",
    )
    flags.DEFINE_string("output_dir", None, "Where the shards, vocab.txt and metadata.json go.")
    flags.DEFINE_string("vocab_file", None, "An existing vocab.txt. Unset: learn one.")
    flags.DEFINE_integer("vocab_size", VOCAB_SIZE, "Size of a learned vocabulary.")
    flags.DEFINE_bool("lower_case", True, "Lower-case the text (uncased BERT).")
    flags.DEFINE_integer("seq_length", 128, "Tokens per sequence (128 or 512 in BERT).")
    flags.DEFINE_integer(
        "max_predictions_per_seq",
        20,
        "Maximum masked positions per sequence (20 for 128, 80 for 512).",
    )
    flags.DEFINE_float("masked_lm_prob", MASKED_LM_PROB, "Fraction of tokens masked.")
    flags.DEFINE_float(
        "short_seq_prob", SHORT_SEQ_PROB, "Probability of a shorter-than-maximum target length."
    )
    flags.DEFINE_integer(
        "dupe_factor",
        DUPE_FACTOR,
        "Passes over the training documents, each with new pairs and masks.",
    )
    flags.DEFINE_integer("num_shards", NUM_SHARDS, "TFRecord files per split.")
    flags.DEFINE_float(
        "heldout_fraction",
        HELDOUT_FRACTION,
        "Fraction of documents written to the held-out shards.",
    )
    flags.DEFINE_integer("seed", SEED, "Seed of all randomness (same seed, same bytes).")
    flags.DEFINE_integer(
        "chunk_sentences", CHUNK_SENTENCES, "Sentences processed per chunk (bounds memory)."
    )
    flags.mark_flag_as_required("output_dir")


def main(argv):
    if len(argv) > 1:
        raise errors.UserError(
            f"unexpected arguments {' '.join(argv[1:])}: all options are " "--flags (see --help)"
        )
    values = flags.FLAGS
    logging.set_verbosity(logging.INFO)
    try:
        prepared = prepare_pretraining_data(
            values.input_path,
            values.output_dir,
            vocab_file=values.vocab_file,
            vocab_size=values.vocab_size,
            lower_case=values.lower_case,
            seq_length=values.seq_length,
            max_predictions_per_seq=values.max_predictions_per_seq,
            masked_lm_prob=values.masked_lm_prob,
            short_seq_prob=values.short_seq_prob,
            dupe_factor=values.dupe_factor,
            num_shards=values.num_shards,
            heldout_fraction=values.heldout_fraction,
            seed=values.seed,
            chunk_sentences=values.chunk_sentences,
        )
    except ArgumentError as error:
        raise errors.UserError(f"--{error}") from None
    print(json.dumps(dataclasses.asdict(prepared), indent=2))


if __name__ == "__main__":
    _define_flags()
    errors.run(main)
