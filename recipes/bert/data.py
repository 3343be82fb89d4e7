"""The pretraining data of a run: the configured files, a finished preparation, or a new
preparation of the corpus (recipes.bert.prepare_data)."""

import collections
import os

import tensorflow as tf

from recipes.bert import input as input_lib
from recipes.bert import prepare_data, text_files, vocabulary
from recipes.common import config as config_lib
from recipes.common import corrupt_data, storage
from recipes.common.errors import UserError

# A run's TFRecords, as globs (for messages) and as the lists of files they matched when
# the run started (every chunk's pipeline and every evaluation reads those), and vocabulary.
DataFiles = collections.namedtuple(  # eval_sequences: from a preparation's metadata, or None
    "DataFiles", ["train_pattern", "eval_pattern", "train_files", "eval_files", "vocab_file",
                  "eval_sequences"])
_PREPARED = ("train_files", "eval_files", "vocab_file")  # the keys of a preparation's metadata
_PREPARE_AGAIN = ("it is the last file a preparation writes (python -m recipes.bert.prepare_data): "
                  "prepare the data again into an empty directory")


def check_data_config(data_config):
    """The data keys prepare_data takes, checked by its own rules, and configured files
    that come with their held-out files and vocabulary; a one-line UserError."""
    try:
        prepare_data.check_arguments(
            seq_length=data_config.seq_length,
            max_predictions_per_seq=data_config.max_predictions_per_seq,
            vocab_size=data_config.vocab_size, dupe_factor=data_config.dupe_factor)
    except prepare_data.ArgumentError as error:
        raise UserError(f"data.{error}") from None  # `data.seq_length=4: expected ...`
    if data_config.train_files:
        missing = [key for key in ("eval_files", "vocab_file") if not getattr(data_config, key)]
        if missing:
            raise UserError(
                f"data.train_files is set but data.{missing[0]} is empty; give the held-out "
                "files and the vocabulary the training files were made with"
            )


def list_data_files(data_config):
    """The files of configured globs, `{"train_files": [...], "eval_files": [...]}`,
    listed once for the run (every chunk's pipeline and every evaluation reads them, and no
    others), checked: each glob matches, the vocabulary reads, and the files fit the rest
    of the config (`check_against_preparation`); a one-line UserError. None when the data
    is prepared (`locate_or_prepare_data` lists it)."""
    if not data_config.train_files:
        return None
    files = {key: input_lib.list_files(getattr(data_config, key), f"data.{key}")
             for key in ("train_files", "eval_files")}
    try:  # (the advice to learn one is for a corpus to prepare)
        pieces = len(vocabulary.read_vocabulary(
            data_config.vocab_file, fix="give the vocab.txt the training files were made with"))
    except UserError as error:
        raise UserError(f"data.vocab_file: {error}") from None
    check_against_preparation(data_config, files, pieces)
    return files


def check_first_records(data_config, data_files, vocab_size, type_vocab_size, evaluates):
    """A UserError, before the model is built, for configured files whose first record
    (of the first file that holds one) Model Garden's reader cannot make a pretraining
    example of the config's lengths (files of another kind or length:
    `describe_unparsable_record` words a record found later, while training), whose ids
    the model has no embedding for (another vocabulary, or model.type_vocab_size below the
    data's segments), or whose files hold no record at all (training would wait for one
    forever). Not in `list_data_files`: reading a record starts TensorFlow's runtime, after
    which no multi-worker strategy can be made. The held-out files only for a mode that
    `evaluates` (a preparation with --heldout_fraction=0 writes them empty)."""
    for key in ("train_files", "eval_files") if evaluates else ("train_files",):
        setting, files = f"data.{key}", getattr(data_files, key)
        for path in files:
            example = _first_example(setting, path, data_config)
            if example is not None:
                break
        else:
            raise UserError(
                f"{setting}: the {len(files)} file(s) of {getattr(data_config, key)} hold no "
                "record; give TFRecords written by `python -m recipes.bert.prepare_data`")
        piece = max(example["input_word_ids"].max(), example["masked_lm_ids"].max())
        if piece >= vocab_size:
            raise UserError(
                f"{setting}: the first record of {path} holds piece id {piece}, outside the "
                f"{vocab_size:,} pieces of data.vocab_file={data_config.vocab_file}: the files "
                "were made with another vocabulary; give theirs")
        segment = example["input_type_ids"].max()
        if segment >= type_vocab_size:
            raise UserError(
                f"{setting}: the first record of {path} holds segment id {segment}, which "
                f"model.type_vocab_size={type_vocab_size} has no embedding for; give "
                f"model.type_vocab_size={segment + 1} or more (BERT: 2)")


def _first_example(setting, path, data_config):
    """The first record of `path` as Model Garden's reader makes it (NumPy arrays), or None
    for a file without records; a UserError for one it cannot read or parse."""
    batches = input_lib.read_pretraining_batches(
        [path], seq_length=data_config.seq_length,
        max_predictions_per_seq=data_config.max_predictions_per_seq, batch_size=1,
        is_training=False)
    try:
        batch = next(iter(batches), None)
    except tf.errors.DataLossError as error:  # not a TFRecord file, or a damaged one
        raise UserError(corrupt_data.describe_corrupt_data(path, error)) from None
    except tf.errors.InvalidArgumentError as error:
        raise UserError(describe_unparsable_record(setting, path, data_config, error)) from None
    return None if batch is None else {name: value.numpy() for name, value in batch.items()}


def describe_unparsable_record(setting, files, data_config, error):
    """One line for a record of `files` that Model Garden's reader cannot parse."""
    return (
        f"{setting}: {files} holds a record that is not a BERT pretraining example of "
        f"data.seq_length={data_config.seq_length} and data.max_predictions_per_seq="
        f"{data_config.max_predictions_per_seq} ({corrupt_data.first_line(error)}); give "
        "TFRecords written by `python -m recipes.bert.prepare_data` with those lengths"
    )


def data_directory(data_config, model_dir):
    """Where the run's corpus is prepared: data.data_dir (a file:// URL as its local path:
    a preparation writes with Python's own files), or `<model_dir>/data`."""
    return storage.local_path(data_config.data_dir) or os.path.join(model_dir, "data")


def check_corpus(data_config, model_dir, compare_inputs=True):
    """Without writing: a finished preparation in the data directory was made from the
    config's data.* values (`check_preparation_inputs`; with `compare_inputs` False, as in
    an evaluation or export, which read its held-out files and vocabulary and no corpus,
    only its lengths), and then its corpus is not read;
    otherwise the corpus and vocabulary a new preparation would read are usable (data.corpus
    names text files, data.vocab_file reads), and its local data directory holds no other
    dataset (ResNet records). A one-line UserError naming the key."""
    data_dir = data_directory(data_config, model_dir)
    metadata_path = finished_preparation(data_dir)
    if metadata_path:  # (its required keys: read when the run locates the preparation)
        check_preparation_inputs(data_config, data_dir,
                                 storage.read_mapping(metadata_path, advice=_PREPARE_AGAIN),
                                 compare_inputs)
        return
    if not storage.all_local([data_dir]):  # prepare_data writes with Python's own files
        raise UserError(
            f"data.data_dir={data_dir} (by default <model_dir>/data) is remote, and a "
            "preparation writes local files: prepare the corpus into a local directory "
            "(python -m recipes.bert.prepare_data, or a run with a local data.data_dir), copy "
            "it there (gsutil -m cp -r), and give that directory as data.data_dir")
    prepare_data.check_no_other_dataset("data.data_dir", data_dir)  # (ResNet records)
    if data_config.corpus != "stdlib":
        text_files.resolve_text_files(data_config.corpus, setting="data.corpus",
                                      advice=_corpus_advice(data_config))
    if data_config.vocab_file:
        try:
            vocabulary.read_vocabulary(data_config.vocab_file)
        except UserError as error:
            raise UserError(f"data.vocab_file: {error}") from None


def _corpus_advice(data_config):
    """The end of the line of a data.corpus that names no text files: "did you mean" the
    embedded corpus when its last component misspells "stdlib" (`stdlibb`, `Stdlib`)."""
    files = "a directory of .txt files or a glob such as 'corpus/*.txt'"
    meant = config_lib.misspelled_name(type(data_config), "corpus", data_config.corpus)
    if meant:
        return f"did you mean '{meant}' (the embedded corpus)? otherwise give {files}"
    return f"give 'stdlib' (the embedded corpus), {files}"


def finished_preparation(data_dir):
    """The metadata.json of a finished preparation in `data_dir` (a preparation writes it
    last), or None."""
    metadata_path = os.path.join(data_dir, "metadata.json")
    return metadata_path if tf.io.gfile.exists(metadata_path) else None


def check_preparation_inputs(data_config, data_dir, metadata, compare_inputs=True):
    """A one-line UserError when the finished preparation in `data_dir` (its metadata.json,
    `metadata`) was made from other values of the data.* keys that decide a preparation
    than the config's: reused, it would train on data other than the config (and the run's
    config.yaml) names. Paths compare absolute, so a relative one given in another working
    directory that names the same file matches; a data.vocab_file naming the vocab.txt the
    preparation learned matches it (the same pieces); data.vocab_size is compared only when
    both learn the vocabulary. The arguments no data.* key sets (lower_case, masked_lm_prob,
    num_shards, ...) are not compared: a preparation of `python -m recipes.bert.prepare_data`
    with its own may be reused. With `compare_inputs` False, only the lengths are (the data
    its records hold: an evaluation of a run an older version saved with a relative
    data.corpus, from another working directory where it names another path, reads the
    preparation as it is)."""
    for key, recorded, configured in _recorded_and_configured(data_config, data_dir, metadata):
        if recorded != configured and (compare_inputs or key in _LENGTHS):
            shown = _SHOWN.get(key, lambda value: value)
            raise UserError(
                f"{data_dir} holds a preparation of data.{key}={shown(recorded)!r}, but "
                f"data.{key}={getattr(data_config, key)!r}; keep data.{key}="
                f"{shown(recorded)!r} or give another data.data_dir (a new preparation is "
                "written there)")


# How a recorded input is named in a message: as the config gives it.
_SHOWN = {"corpus": lambda path: "stdlib" if path is None else path,
          "vocab_file": lambda path: path or ""}


# The data.* keys of the records' shapes.
_LENGTHS = ("seq_length", "max_predictions_per_seq")


def _recorded_and_configured(data_config, data_dir, metadata):
    """(key, the preparation's value, the config's in the form the preparation records)
    for each data.* key that decides a preparation and that its `metadata` records."""
    pairs = [(key, metadata[key], getattr(data_config, key))
             for key in _LENGTHS if key in metadata]
    inputs = metadata.get("inputs")
    if not isinstance(inputs, dict):
        # A preparation from before metadata.json recorded its inputs: accepted as it is
        # (only its lengths are compared), as every earlier version of the recipe did.
        return pairs
    corpus = data_config.corpus
    vocab_file = prepare_data.recorded_path(data_config.vocab_file or None)
    learned = inputs.get("vocab_file") is None
    learns = vocab_file is None
    if learned and vocab_file == prepare_data.recorded_path(os.path.join(data_dir, "vocab.txt")):
        vocab_file = None  # the vocabulary it learned, named: the same pieces
    pairs += [("corpus", inputs.get("corpus"),
               None if corpus == "stdlib" else prepare_data.recorded_path(corpus)),
              ("vocab_file", inputs.get("vocab_file"), vocab_file)]
    if learned and learns:  # (data.vocab_size is not read with a vocabulary)
        pairs.append(("vocab_size", inputs.get("vocab_size"), data_config.vocab_size))
    pairs += [(key, inputs.get(key), getattr(data_config, key))
              for key in ("dupe_factor", "seed")]
    return pairs


def check_against_preparation(data_config, files, pieces):
    """Configured files (`files`: the listed paths of data.train_files and data.eval_files)
    that sit beside the metadata.json of the preparation that wrote them must fit the
    config, in every directory they come from: TFRecords of another length fail to parse
    deep inside training or evaluation, and a vocabulary other than theirs fails in the
    embedding lookup (smaller) or trains on the wrong pieces (larger). Files without that
    metadata are not checked. `pieces`: the entries of data.vocab_file."""
    for key, paths in files.items():
        for data_dir in sorted({os.path.dirname(path) for path in paths}):
            metadata_path = os.path.join(data_dir, "metadata.json")
            if tf.io.gfile.exists(metadata_path):
                metadata = storage.read_mapping(metadata_path, advice=_PREPARE_AGAIN)
                _check_preparation(data_config, f"data.{key}", data_dir, metadata, pieces)


def _check_preparation(data_config, setting, data_dir, metadata, pieces):
    """One preparation's metadata against the config (see check_against_preparation)."""
    for key in ("seq_length", "max_predictions_per_seq"):
        if key in metadata and metadata[key] != getattr(data_config, key):
            raise UserError(
                f"{setting}: {data_dir} holds data prepared with {key}={metadata[key]}, "
                f"but data.{key}={getattr(data_config, key)}; set data.{key}={metadata[key]} "
                "or give files prepared for it")
    if "vocab_size" in metadata and pieces != metadata["vocab_size"]:
        raise UserError(
            f"data.vocab_file {data_config.vocab_file} holds {pieces} pieces, but the "
            f"files in {data_dir} were made with a vocabulary of {metadata['vocab_size']}; "
            f"give that one ({os.path.join(data_dir, 'vocab.txt')})")


def locate_or_prepare_data(data_config, model_dir, listed=None, compare_inputs=True):
    """The `DataFiles` of the run, its TFRecords listed once: the configured files
    (`listed`: `list_data_files`' result; listed here if None; their first records are
    `check_first_records`' to check, once the vocabulary is read), a finished preparation in
    the data directory (`compare_inputs`: as `check_corpus`), or a new preparation of the
    corpus there."""
    if data_config.train_files:
        listed = listed or list_data_files(data_config)
        return DataFiles(data_config.train_files, data_config.eval_files,
                         listed["train_files"], listed["eval_files"], data_config.vocab_file,
                         None)
    train_pattern, eval_pattern, vocab_file, eval_sequences = _locate_or_prepare(
        data_config, model_dir, compare_inputs)
    return DataFiles(train_pattern, eval_pattern, input_lib.list_files(train_pattern),
                     input_lib.list_files(eval_pattern), vocab_file, eval_sequences)


def _locate_or_prepare(data_config, model_dir, compare_inputs):
    """(train glob, held-out glob, vocabulary, held-out sequences) of a finished
    preparation in the data directory, or of a new preparation of the corpus there."""
    data_dir = data_directory(data_config, model_dir)
    metadata_path = finished_preparation(data_dir)
    if not metadata_path:
        with prepare_data.held_for_preparation(data_dir):
            metadata_path = finished_preparation(data_dir)  # another run's, finished meanwhile
            if not metadata_path:
                return _prepare(data_config, data_dir)
    metadata = storage.read_mapping(metadata_path, (*_LENGTHS, *_PREPARED), _PREPARE_AGAIN)
    check_preparation_inputs(data_config, data_dir, metadata, compare_inputs)  # (as check_corpus)
    print(f"data: reusing the preparation in {data_dir}", flush=True)
    # A preparation writes every file into its directory; its metadata names them as they
    # were given then (relative to that run's working directory), so they are found in
    # `data_dir` itself: from any working directory, and after a move or copy.
    return (*(os.path.join(data_dir, os.path.basename(metadata[key])) for key in _PREPARED),
            metadata.get("num_eval_sequences"))


def _prepare(data_config, data_dir):
    """`_locate_or_prepare`'s new preparation of the corpus into `data_dir`."""
    print(f"data: preparing {data_config.corpus} into {data_dir}", flush=True)
    try:
        prepared = prepare_data.prepare_pretraining_data(
            None if data_config.corpus == "stdlib" else data_config.corpus,
            data_dir,
            output_setting="data.data_dir",
            vocab_file=data_config.vocab_file or None,
            vocab_size=data_config.vocab_size,
            seq_length=data_config.seq_length,
            max_predictions_per_seq=data_config.max_predictions_per_seq,
            dupe_factor=data_config.dupe_factor,
            seed=data_config.seed,
        )
    except prepare_data.ArgumentError as error:
        raise UserError(f"data.{error}") from None  # `data.seq_length=4: expected ...`
    print(
        f"data: {prepared.num_train_sequences:,} training and "
        f"{prepared.num_eval_sequences:,} held-out sequences from {prepared.num_words:,} "
        f"words, vocabulary of {prepared.vocab_size:,} pieces",
        flush=True,
    )
    return (prepared.train_files, prepared.eval_files, prepared.vocab_file,
            prepared.num_eval_sequences)
