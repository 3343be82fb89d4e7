"""The command line of `python -m recipes.bert.prepare_data`, and the defaults it shares with
`prepare_data.prepare_pretraining_data`, in a module without TensorFlow: the program defines
and checks its flags before TensorFlow loads (`recipes.common.startup.check_program_flags`),
so that `--help` and a flag mistake are answered at once instead of after about 5 s."""

import difflib
from typing import List, Sequence, Tuple

from absl import flags

from recipes.bert import preparation_files
from recipes.common import errors
from recipes.common import flags as flags_lib
from recipes.common import storage
from recipes.common.errors import UserError
from recipes.resnet import conversion_files

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
# The datasets of the other data tools, refused in --output_dir (`storage.check_output_dir`).
OTHER_DATASETS = (conversion_files.IMAGE_RECORDS,)


def define_flags():
    """Defines the program's flags, once (a second call adds nothing), as ones `--help`
    lists."""
    flags_lib.define_program_flags(_define_flags, __name__)


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
    flags.DEFINE_string(
        "runner",
        None,
        "Run as an Apache Beam pipeline on this runner (FnApiRunner for local processes, "
        "DataflowRunner, FlinkRunner, SparkRunner, ...); every flag not defined here is "
        "passed to Beam as a pipeline option. Unset: one local process, no Beam.",
    )


def split_beam_arguments(arguments: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(arguments for absl, arguments for Beam) of the command line's `arguments` (without
    the program's name): a `--name[=value]` that absl does not define goes to Beam, with the
    next argument if it is its value (`--name value`)."""
    ours, beam, index = [], [], 0
    while index < len(arguments):
        argument = arguments[index]
        name = argument[2:].split("=", 1)[0] if argument.startswith("--") else None
        defined = name is not None and (
            name in flags.FLAGS or (name.startswith("no") and name[2:] in flags.FLAGS)
        )
        if name is None or defined or argument == "--":
            ours.append(argument)
            index += 1
            continue
        beam.append(argument)
        index += 1
        if "=" not in argument and index < len(arguments) and not arguments[index].startswith("-"):
            beam.append(arguments[index])
            index += 1
    return ours, beam


def check_command_line(values, arguments):
    """`check_flags` of what absl's parse left of the command line (`startup.
    check_program_flags`: the flags it does not define are there)."""
    check_flags(values, *split_beam_arguments(arguments))


def check_flags(values, positional, beam_arguments):
    """A `UserError` (one line: what, where, what to do) for a mistake the flags alone show:
    before anything is read or written (the ranges of the values: `prepare_data.
    check_arguments`). `positional`: arguments that are not flags."""
    if positional:
        raise UserError(errors.unexpected_arguments(positional))
    if beam_arguments and values.runner is None:
        given = beam_arguments[0].split("=")[0].lstrip("-")
        close = difflib.get_close_matches(given, list(flags.FLAGS), n=1)
        hint = (f"did you mean --{close[0]}? (" if close else "") + (
            "Beam pipeline options need --runner, e.g. --runner=FnApiRunner for local processes"
        ) + (")" if close else "")
        raise UserError(f"{beam_arguments[0]}: not a prepare_data flag; {hint}")
    if not values.output_dir:
        raise UserError("--output_dir is required: where to write the shards, vocab.txt "
                        "and metadata.json")
    for name in ("input_path", "output_dir", "vocab_file"):
        storage.refuse_unexpanded_home(f"--{name}", getattr(values, name) or "")
    storage.refuse_remote("--output_dir", values.output_dir, "a preparation")
    storage.check_writable(f"--output_dir={values.output_dir}", values.output_dir)
    storage.check_output_dir("--output_dir", values.output_dir, preparation_files.BERT_DATA,
                             OTHER_DATASETS)
