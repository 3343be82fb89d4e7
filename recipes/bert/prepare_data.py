r"""Raw text -> BERT pretraining TFRecords (Google BERT / Model Garden format).

  python -m recipes.bert.prepare_data --output_dir=/tmp/bert_data            # embedded corpus
  python -m recipes.bert.prepare_data --input_path='corpus/*.txt' \
      --output_dir=/tmp/bert_data --seq_length=512 --max_predictions_per_seq=80
  python -m recipes.bert.prepare_data --input_path='corpus/*.txt' --output_dir=/tmp/bert_data \
      --runner=FnApiRunner --direct_num_workers=2 --direct_running_mode=multi_processing

Without `--runner` everything runs in this process; with `--runner` (any Beam runner:
FnApiRunner, DirectRunner, PrismRunner, DataflowRunner, FlinkRunner, SparkRunner, ...) the
same steps run as an Apache Beam pipeline (`beam_pipeline.py`), and every flag this module
does not define is passed to Beam as a pipeline option. Both write the same bytes
(docs/bert_data.md). The steps:
1. the text files (or the embedded corpus, written as text files first: `corpus.py`);
2. pass 1, per file: each document goes to the training or the held-out split (a seeded
   coin per document id), sentences are counted and, unless a `vocab.txt` is given, the
   words of the training documents (`chunks.py`, `vocabulary.count_words`); bad files are
   refused here, before anything is written;
3. the WordPiece vocabulary is learned from the summed word counts (`vocabulary.py`);
4. pass 2, per chunk of consecutive documents (`chunks.py`): tokenize
   (`tensorflow_text.BertTokenizer`), build sentence pairs `dupe_factor` times
   (`sentence_pairs.py`), shuffle them, mask them (`masking.py`) and write them to the shards
   (`chunk_records.py`, `tfrecords.py`).

Everything random comes from `seed` and stable document ids: the same inputs and arguments
give byte-identical files, whatever the runner and the number of workers.
"""

if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    from recipes.common import startup  # (before TensorFlow: its start-up lines off the console)
    from recipes.bert import prepare_data_flags

    startup.check_program_flags(prepare_data_flags.define_flags,
                                prepare_data_flags.check_command_line)

import collections
import contextlib
import dataclasses
import fnmatch
import json
import logging as python_logging
import os
import shutil
import sys
import time
from typing import List, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import tqdm

from recipes.bert import chunk_records
from recipes.bert import chunks
from recipes.bert import corpus
from recipes.bert import prepare_data_flags
from recipes.bert import preparation_files
from recipes.bert import text_files
from recipes.bert import tfrecords
from recipes.bert import vocabulary
from recipes.bert.prepare_data_flags import (  # the defaults, shared with the flags
    CHUNK_SENTENCES, DUPE_FACTOR, HELDOUT_FRACTION, MASKED_LM_PROB, NUM_SHARDS, SEED,
    SHORT_SEQ_PROB, VOCAB_SIZE)
from recipes.common import errors, storage

_SPLIT_PREFIX = {chunks.TRAIN: preparation_files.TRAIN_PREFIX,
                 chunks.HELDOUT: preparation_files.HELDOUT_PREFIX}


@dataclasses.dataclass(frozen=True)
class PreparationInputs:
    """What a preparation was made from: the arguments of `prepare_pretraining_data` that
    decide the bytes it writes (seq_length and max_predictions_per_seq: `PreparedData`'s
    own). Paths are absolute (a remote one, gs://, as given): a run in another working
    directory compares them with its own (`recipes/bert/data.py`)."""

    corpus: Optional[str]  # the input_path; None: the embedded corpus
    vocab_file: Optional[str]  # the vocab_file given; None: learned from the corpus
    vocab_size: int  # asked for (ignored with vocab_file); PreparedData.vocab_size: learned
    lower_case: bool
    masked_lm_prob: float
    short_seq_prob: float
    dupe_factor: int
    seed: int
    heldout_fraction: float
    num_shards: int
    chunk_sentences: int


def recorded_path(path: Optional[str]) -> Optional[str]:
    """`path` as `PreparationInputs` records it: absolute, a remote one (gs://) as given,
    None for None."""
    if path is None:
        return None
    path = os.fspath(path)
    return os.path.abspath(path) if storage.all_local([path]) else path


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """What `prepare_pretraining_data` wrote (metadata.json holds it as JSON). Globs match
    exactly this run's shards."""

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
    inputs: PreparationInputs  # what it was made from (absent in older metadata.json files)


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
    beam_options: Optional[Sequence[str]] = None,
    output_setting: str = "--output_dir",
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
      progress: show progress bars (None: only on a terminal; single-process path).
      beam_options: None runs in this process; a list of Beam pipeline options
        (e.g. `["--runner=FnApiRunner", "--direct_num_workers=2"]`, the runner defaulting
        to FnApiRunner) runs the same steps as a Beam pipeline, with the same output.
      output_setting: what the caller's user calls `output_dir`, for the lines refusing
        it (`data.data_dir` in a pretraining run).

    Returns:
      A `PreparedData`, its `inputs` the arguments above but `output_dir`, `seq_length`,
      `max_predictions_per_seq`, `progress`, `beam_options` and `output_setting` (paths
      made absolute).

    Raises:
      TypeError: an argument of the wrong type (named, with its value).
      ArgumentError (a ValueError): an argument out of range (named, with its value).
      UserError: the corpus, vocabulary or Beam options cannot be used (one line: what,
        where, what to do).
    """
    input_path, output_dir, vocab_file = _local_paths(input_path, output_dir, vocab_file)
    inputs = PreparationInputs(
        corpus=recorded_path(input_path), vocab_file=recorded_path(vocab_file),
        vocab_size=vocab_size, lower_case=lower_case, masked_lm_prob=masked_lm_prob,
        short_seq_prob=short_seq_prob, dupe_factor=dupe_factor, seed=seed,
        heldout_fraction=heldout_fraction, num_shards=num_shards,
        chunk_sentences=chunk_sentences)
    check_arguments(seq_length=seq_length, max_predictions_per_seq=max_predictions_per_seq,
                    **{name: getattr(inputs, name) for name in _CHECKED_INPUTS})
    beam = _Beam(beam_options, output_dir) if beam_options is not None else None
    tokens = vocabulary.read_vocabulary(vocab_file) if vocab_file is not None else None
    started = time.time()
    with held_for_preparation(output_dir):  # one preparation at a time; none left if refused
        _check_output_dir(output_setting, output_dir, vocab_file, num_shards)  # before corpus/
        files, source = _corpus_files(input_path, output_dir)  # a bad path: before any file
        os.makedirs(output_dir, exist_ok=True)
        # Pass 1: split, count, refuse bad files; then the vocabulary.
        if beam is not None:
            summaries, counts = beam.summarize(files, seed, heldout_fraction, lower_case,
                                               count_words=tokens is None)
        else:
            summaries, counts = _summarize(files, seed, heldout_fraction, lower_case,
                                           tokens is None, progress)
        corpus_counts = _CorpusCounts(source, summaries)
        tokens = tokens or _learn_vocabulary(counts, vocab_size, corpus_counts)
        metadata_path = _remove_finished_mark(output_dir)  # (pass 1 refused nothing)
        settings = chunk_records.RecordSettings(  # Pass 2: chunks -> pairs, masks -> shards.
            vocab_tokens=tuple(tokens), lower_case=lower_case, seq_length=seq_length,
            max_predictions_per_seq=max_predictions_per_seq, masked_lm_prob=masked_lm_prob,
            short_seq_prob=short_seq_prob, dupe_factor=dupe_factor, num_shards=num_shards,
            seed=seed)
        plan = chunks.ChunkPlan.from_summaries(summaries, chunk_sentences)
        num_sequences = _write_shards(beam, files, plan, settings, output_dir,
                                      heldout_fraction, progress, corpus_counts)
        vocab_path = _write_vocabulary(tokens, vocab_file, output_dir)  # after the shards
        prepared = _prepared_data(output_dir, settings, vocab_path, num_sequences,
                                  corpus_counts, inputs)
        _write_metadata(prepared, metadata_path)
    _log_finished(prepared, output_dir, time.time() - started, beam)
    return prepared


# --- The steps of prepare_pretraining_data, in order --------------------------------------


def _local_paths(input_path, output_dir, vocab_file):
    """The three paths as strings (path objects too), `output_dir` as a local path: a
    remote one is a UserError (the preparation writes with Python's own files)."""
    storage.refuse_remote("output_dir", os.fspath(output_dir), "a preparation")
    return (None if input_path is None else os.fspath(input_path),
            storage.local_path(os.fspath(output_dir)),  # (file:// as its path)
            None if vocab_file is None else os.fspath(vocab_file))


def check_no_other_dataset(setting, output_dir):
    """A UserError naming `setting` (`--output_dir`, `data.data_dir`) if the local
    `output_dir` holds another dataset (ResNet records: `storage.check_no_other_dataset`),
    among whose files a preparation would write its own."""
    storage.check_no_other_dataset(setting, output_dir, preparation_files.BERT_DATA,
                                   prepare_data_flags.OTHER_DATASETS)


def _check_output_dir(setting, output_dir, vocab_file, num_shards):
    """A UserError if `output_dir` holds files the preparation would mix its own with or
    replace: another dataset's (ResNet records), or shards of an earlier preparation of
    another shard count (naming it as `setting`), or someone's vocab.txt."""
    check_no_other_dataset(setting, output_dir)
    _check_no_vocabulary_of_the_users(output_dir, vocab_file)  # (its words: the CLI's)
    _check_no_earlier_shards(setting, output_dir, num_shards)


def _check_no_vocabulary_of_the_users(output_dir, vocab_file):
    """A vocab.txt in `output_dir` beside no preparation's files (no metadata.json, no shard;
    a preparation writes its vocab.txt after its shards) is someone's own: the preparation
    would replace it, unless it is the `vocab_file` to prepare with."""
    vocab_path = os.path.join(output_dir, "vocab.txt")
    if not os.path.exists(vocab_path) or (
            vocab_file is not None and os.path.abspath(vocab_file) == os.path.abspath(vocab_path)):
        return
    ours = preparation_files.BERT_DATA
    if not any(name == ours.mark or ours.shards.fullmatch(name)
               for name in os.listdir(output_dir)):
        raise errors.UserError(
            f"--output_dir={output_dir} holds a vocab.txt that no preparation wrote there, "
            "and the preparation would replace it; pass it as --vocab_file="
            f"{vocab_path} to prepare with it, or give another --output_dir")


def _check_no_earlier_shards(setting, output_dir, num_shards):
    for prefix in _SPLIT_PREFIX.values():
        storage.check_no_earlier_shards(
            setting, output_dir, f"{prefix}-*{preparation_files.SHARD_EXTENSION}",
            preparation_files.shard_paths(output_dir, prefix, num_shards))


def _remove_finished_mark(output_dir):
    """The path of `output_dir`'s metadata.json, removed if present.

    metadata.json marks a finished preparation: it goes before anything is replaced, so
    that a run that fails half-way (after replacing shards and vocab.txt) never looks
    finished; and after pass 1, so that a run pass 1 refuses leaves an earlier one whole."""
    metadata_path = os.path.join(output_dir, preparation_files.METADATA_FILE)
    if os.path.exists(metadata_path):
        os.remove(metadata_path)
    return metadata_path


@contextlib.contextmanager
def held_for_preparation(output_dir):
    """Holds `output_dir` (made if missing) for this preparation alone
    (`storage.exclusive_use`): a second one into it at the same time, which would replace
    the shards the first is writing, or one while a run reads the shards there, is a
    UserError, and leaves the directory as it is (the other process's). On a UserError while
    it holds it, removes `output_dir` with what is in it if this run made it (all of it is
    this run's: the embedded corpus's text, no finished shard), so that a refused
    preparation leaves no directory behind; an `output_dir` that existed is left as it is
    (`_write_shards` removes its unfinished shards)."""
    made = not os.path.exists(output_dir)
    with storage.exclusive_use(f"the preparation directory {output_dir}", output_dir,
                               "wait for that preparation to finish (a run then reuses it), "
                               "or give another directory", advice_if_read="wait for the run "
                               "reading it to end, or give another directory"):
        try:
            yield
        except errors.UserError:
            if made and os.path.isdir(output_dir):
                shutil.rmtree(output_dir)
            raise


def _corpus_files(input_path, output_dir):
    """(the text files, a description of where they came from for messages)."""
    if input_path is None:
        files = corpus.write_embedded_corpus(os.path.join(output_dir, "corpus"))
        source = "the embedded corpus (stdlib docstrings + pydoc_data.topics)"
    else:
        files = text_files.resolve_text_files(input_path)
        source = input_path
        if _corpus_reads(input_path, files, os.path.join(output_dir, "vocab.txt")):
            raise errors.UserError(
                f"--output_dir={output_dir} is where --input_path={input_path} reads corpus "
                "text: the vocab.txt written there would be a document of the next "
                "preparation; give an --output_dir outside the corpus")
    logging.info("Corpus: %s from %s.", "1 file" if len(files) == 1 else f"{len(files):,} files",
                 source)
    return files, source


def _corpus_reads(input_path, files, output_file):
    """Whether `input_path` (its resolved `files`) reads `output_file`'s directory: a corpus
    file is there, or a directory or glob of it would match `output_file` (local paths)."""
    if "://" in input_path + output_file:
        return False
    output_dir = os.path.dirname(os.path.abspath(output_file))
    corpus = os.path.abspath(input_path)
    return (any(storage.is_inside(path, output_dir) for path in files)
            or (os.path.isdir(corpus) and storage.is_inside(output_dir, corpus))
            or fnmatch.fnmatch(os.path.abspath(output_file), corpus))


class _CorpusCounts:
    """Pass 1's totals over the file summaries, and the corpus' name for messages."""

    def __init__(self, source, summaries):
        self.source = source
        self.num_documents = [sum(s.documents[split] for s in summaries) for split in (0, 1)]
        self.num_words = sum(s.words for s in summaries)


def _learn_vocabulary(counts, vocab_size, corpus_counts):
    """The WordPiece tokens learned from the training documents' word `counts`."""
    if not counts:
        raise errors.UserError(
            f"text corpus {corpus_counts.source} has no training words to learn a "
            f"vocabulary from ({corpus_counts.num_documents[0]} training document(s)): "
            "give more text, or a vocab_file"
        )
    return vocabulary.learn_from_counts(counts, vocab_size)


def _write_vocabulary(tokens, vocab_file, output_dir):
    """`output_dir`/vocab.txt: a copy of the given `vocab_file`, or the learned `tokens`; its
    path. Written after the shards, so that a preparation that fails leaves none."""
    vocab_path = os.path.join(output_dir, "vocab.txt")
    if vocab_file is None:
        vocabulary.write_vocabulary(tokens, vocab_path)
    elif os.path.abspath(vocab_file) != os.path.abspath(vocab_path):
        vocabulary.copy_vocabulary(vocab_file, vocab_path)  # (gs:// too)
    logging.info("Vocabulary: %s pieces in %s.", f"{len(tokens):,}", vocab_path)
    return vocab_path


def _write_shards(beam, files, plan, settings, output_dir, heldout_fraction, progress,
                  corpus_counts):
    """Pass 2 (in this process or on Beam); returns the sequences written per split. The
    shards are renamed into place only if the whole pass succeeds."""
    shard_paths = {
        (split, shard): path
        for split in chunks.SPLITS
        for shard, path in enumerate(
            preparation_files.shard_paths(output_dir, _SPLIT_PREFIX[split], settings.num_shards)
        )
    }
    try:
        if beam is not None:
            num_sequences = beam.write_records(files, plan, settings, shard_paths, heldout_fraction)
        else:
            num_sequences = _write_records(
                files, plan, settings, shard_paths, heldout_fraction, progress
            )
        _check_sequences(num_sequences, heldout_fraction, corpus_counts)
    except BaseException:
        for path in shard_paths.values():
            if os.path.exists(path + preparation_files.TEMPORARY_SUFFIX):
                os.remove(path + preparation_files.TEMPORARY_SUFFIX)
        raise
    for path in shard_paths.values():
        os.replace(path + preparation_files.TEMPORARY_SUFFIX, path)
    return num_sequences


def _check_sequences(num_sequences, heldout_fraction, corpus_counts):
    """A UserError when a split that should have sentence pairs has none."""
    source, num_documents = corpus_counts.source, corpus_counts.num_documents
    if num_sequences[chunks.TRAIN] == 0:
        raise errors.UserError(
            f"text corpus {source} yields no training sentence pairs "
            f"({num_documents[0]} training document(s)): give several documents of "
            "several sentences each, one sentence per line, blank lines between documents"
        )
    if heldout_fraction > 0 and num_sequences[chunks.HELDOUT] == 0:
        raise errors.UserError(
            f"text corpus {source} yields no held-out sentence pairs with heldout_fraction="
            f"{heldout_fraction} ({num_documents[1]} held-out document(s)): give more "
            "documents or raise the fraction"
        )


def _prepared_data(output_dir, settings, vocab_path, num_sequences, corpus_counts, inputs):
    return PreparedData(
        train_files=preparation_files.shard_pattern(
            output_dir, preparation_files.TRAIN_PREFIX, settings.num_shards
        ),
        eval_files=preparation_files.shard_pattern(
            output_dir, preparation_files.HELDOUT_PREFIX, settings.num_shards
        ),
        vocab_file=vocab_path,
        vocab_size=len(settings.vocab_tokens),
        seq_length=settings.seq_length,
        max_predictions_per_seq=settings.max_predictions_per_seq,
        num_train_sequences=num_sequences[chunks.TRAIN],
        num_eval_sequences=num_sequences[chunks.HELDOUT],
        num_train_documents=corpus_counts.num_documents[0],
        num_eval_documents=corpus_counts.num_documents[1],
        num_words=corpus_counts.num_words,
        inputs=inputs,
    )


def _write_metadata(prepared, metadata_path):
    """metadata.json, written last and atomically: the mark of a finished preparation."""
    storage.write_text(metadata_path, json.dumps(dataclasses.asdict(prepared), indent=2))


def _log_finished(prepared, output_dir, seconds, beam):
    logging.info(
        "Wrote %s training sequences (%s) and %s held-out sequences (%s) from %s words to %s "
        "in %.1f s (%s words/s, %s).",
        f"{prepared.num_train_sequences:,}",
        _documents(prepared.num_train_documents),
        f"{prepared.num_eval_sequences:,}",
        _documents(prepared.num_eval_documents),
        f"{prepared.num_words:,}",
        output_dir,
        seconds,
        f"{prepared.num_words / max(seconds, 1e-9):,.0f}",
        "single process" if beam is None else f"Beam, {beam.runner}",
    )


def _documents(count):
    return f"{count:,} document" + ("" if count == 1 else "s")


class ArgumentError(ValueError):
    """An argument of `prepare_pretraining_data` is out of range."""


_FLOAT_ARGUMENTS = ("masked_lm_prob", "short_seq_prob", "heldout_fraction")
# The `PreparationInputs` that `check_arguments` checks, in the order it reports them.
_CHECKED_INPUTS = ("masked_lm_prob", "short_seq_prob", "dupe_factor", "num_shards",
                   "heldout_fraction", "vocab_size", "chunk_sentences")


def check_arguments(**values):
    """Raises TypeError / ArgumentError naming the first of the given arguments of a wrong
    type or range (max_predictions_per_seq is checked with seq_length)."""
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
            f"an int in [1, seq_length={values.get('seq_length')}]",
        ),
        "masked_lm_prob": (lambda v: 0 < v <= 1, "a float in (0, 1]"),
        "short_seq_prob": (lambda v: 0 <= v <= 1, "a float in [0, 1]"),
        "dupe_factor": (lambda v: v >= 1, "an int >= 1"),
        "num_shards": (lambda v: v >= 1, "an int >= 1"),
        "heldout_fraction": (lambda v: 0 <= v < 1, "a float in [0, 1)"),
        "vocab_size": (
            lambda v: v > len(vocabulary.RESERVED_TOKENS),
            f"an int > {len(vocabulary.RESERVED_TOKENS)} (its {len(vocabulary.RESERVED_TOKENS)} "
            "reserved tokens and a word piece at least)",
        ),
        "chunk_sentences": (lambda v: v >= 1, "an int >= 1"),
    }
    for name, (is_valid, expected) in rules.items():
        if name in values and not is_valid(values[name]):
            raise ArgumentError(f"{name}={values[name]!r}: expected {expected}")


def _progress_bar(files, progress, description):
    return tqdm.tqdm(
        total=len(files),
        unit="file",
        desc=description,
        disable=None if progress is None else not progress,
        file=sys.stderr,
    )


def _summarize(files, seed, heldout_fraction, lower_case, count_words, progress):
    """Pass 1 in this process: file summaries, and word counts of the training sentences."""
    summaries, counts = [], collections.Counter()
    with _progress_bar(files, progress, "counting") as bar:
        for file_index, path in enumerate(files):
            documents = chunks.TrainingSentences(
                text_files.read_file_documents(path), seed, file_index, heldout_fraction
            )
            summaries.append(
                chunks.summarize_file(file_index, documents, seed, heldout_fraction)
            )
            if count_words:
                counts.update(
                    vocabulary.count_words_in_batches(
                        documents.training_sentences, lower_case
                    )
                )
            bar.update()
    return summaries, counts


def _write_records(files, plan, settings, shard_paths, heldout_fraction, progress):
    """Pass 2 in this process: chunk by chunk, in (file, document) order."""
    processor = chunk_records.ChunkProcessor(settings)
    writers = {
        split: tfrecords.ShardedWriter(
            os.path.dirname(shard_paths[(split, 0)]), _SPLIT_PREFIX[split], settings.num_shards
        )
        for split in chunks.SPLITS
    }
    pending = {split: (None, []) for split in chunks.SPLITS}  # (chunk, documents)

    def flush(split):
        chunk, documents = pending[split]
        if documents:
            for shard, _, record in processor.records(split, chunk, documents):
                writers[split].write(shard, record)
        pending[split] = (None, [])

    with writers[chunks.TRAIN], writers[chunks.HELDOUT], _progress_bar(
        files, progress, "writing sequences"
    ) as bar:
        for file_index, path in enumerate(files):
            for (split, chunk), (_, document) in plan.keyed_documents(
                file_index,
                text_files.read_file_documents(path),
                settings.seed,
                heldout_fraction,
            ):
                if pending[split][0] != chunk:
                    flush(split)
                    pending[split] = (chunk, [])
                pending[split][1].append(document)
            bar.update()
        for split in chunks.SPLITS:
            flush(split)
    return {split: writers[split].num_records for split in chunks.SPLITS}


class _Beam:
    """Both passes as Beam pipelines; the options are checked when this is made."""

    def __init__(self, arguments: Sequence[str], output_dir: str):
        # Beam logs at import (optional GCP modules missing) and while running (worker
        # start-up, one line per event): keep the console for the counts, unless
        # --verbosity asks for more.
        quiet = logging.get_verbosity() < logging.DEBUG
        root = python_logging.getLogger()
        level = root.level
        if quiet:
            root.setLevel(python_logging.ERROR)
            python_logging.getLogger("apache_beam").setLevel(python_logging.ERROR)
        try:
            from recipes.bert import beam_pipeline  # pylint: disable=g-import-not-at-top
        finally:
            root.setLevel(level)

        self._pipeline = beam_pipeline
        self._options = beam_pipeline.pipeline_options(arguments)
        self.runner = beam_pipeline.runner_name(self._options)
        self._work_dir = os.path.join(output_dir, ".beam")

    def _run(self, function, files, **arguments):
        """One pipeline; its small outputs in `output_dir/.beam` are removed afterwards."""
        try:
            return function(files, self._work_dir, options=self._options, **arguments)
        finally:
            shutil.rmtree(self._work_dir, ignore_errors=True)

    def summarize(self, files, seed, heldout_fraction, lower_case, count_words):
        summaries, counts = self._run(
            self._pipeline.summarize,
            files,
            seed=seed,
            heldout_fraction=heldout_fraction,
            lower_case=lower_case,
            count_words=count_words,
        )
        failed = sorted((s for s in summaries if "error" in s), key=lambda s: s["file_index"])
        if failed:
            raise errors.UserError(failed[0]["error"])
        return [
            chunks.FileSummary(
                s["file_index"], tuple(s["sentences"]), tuple(s["documents"]), s["words"]
            )
            for s in summaries
        ], counts

    def write_records(self, files, plan, settings, shard_paths, heldout_fraction):
        return self._run(
            self._pipeline.write_records,
            files,
            plan=plan,
            settings=settings,
            shard_paths=shard_paths,
            heldout_fraction=heldout_fraction,
        )


# --- Command line ----------------------------------------------------------------------


_BEAM_ARGUMENTS: List[str] = []  # Filled from the command line before absl parses it.


class _ConsoleFormatter(python_logging.Formatter):
    """A log line as its message alone; a warning or an error says which it is."""

    def format(self, record):
        message = super().format(record)
        if record.levelno >= python_logging.WARNING:
            return f"{record.levelname.lower()}: {message}"
        return message


def main(argv):
    values = flags.FLAGS
    prepare_data_flags.check_flags(values, argv[1:], _BEAM_ARGUMENTS)
    logging.set_verbosity(logging.INFO)
    # the console is for people: the progress lines without absl's `I1205 12:00:00.1 ...]`
    logging.get_absl_handler().python_handler.setFormatter(_ConsoleFormatter())
    beam_options = None
    if values.runner is not None:
        beam_options = [f"--runner={values.runner}"] + _BEAM_ARGUMENTS
    try:
        with errors.doing("while preparing the data"):
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
                beam_options=beam_options,
            )
    except ArgumentError as error:
        raise errors.UserError(f"--{error}") from None
    print(json.dumps(dataclasses.asdict(prepared), indent=2))


if __name__ == "__main__":
    prepare_data_flags.define_flags()
    app.define_help_flags()  # so that --help and --helpfull are ours, not Beam options
    _OURS, _BEAM_ARGUMENTS[:] = prepare_data_flags.split_beam_arguments(sys.argv[1:])
    sys.argv[1:] = _OURS
    errors.run(main, trains=False)
