"""Corrupt or missing input data: finding the damaged file or record, and the one-line
message.

Training and evaluation read TFRecords through tf.data; when a read fails deep inside a
step, the error names no file. These helpers scan the files once to name it.
"""

import collections
import re

import tensorflow as tf

from recipes.common.errors import UserError

CorruptRecord = collections.namedtuple("CorruptRecord", ["file", "index", "problem"])


def find_corrupt_tfrecord(file_patterns):
    """(path, records readable before the damage, TF's message) of the first TFRecord file
    matched by the comma-separated globs that cannot be read to its end, or None."""
    for pattern in file_patterns.split(","):
        for path in sorted(tf.io.gfile.glob(pattern.strip())):
            readable = 0
            try:
                for _ in tf.data.TFRecordDataset(path):
                    readable += 1
            except tf.errors.DataLossError as error:
                return path, readable, first_line(error)
    return None


def describe_corrupt_data(file_patterns, error):
    """One line naming the damaged TFRecord file behind a DataLossError during training."""
    found = find_corrupt_tfrecord(file_patterns)
    if found is None:
        return (
            f"corrupt training data in {file_patterns} ({first_line(error)}); check or "
            "re-create the TFRecord files"
        )
    path, readable, message = found
    return (
        f"corrupt TFRecord file {path}: unreadable after {readable} record(s) ({message}); "
        "re-create it (or remove it from the training files)"
    )


def describe_missing_data(file_patterns, error, checkpoint):
    """One line for a training file that could not be opened during training (deleted or
    moved after the run started)."""
    return (
        f"a training file of {file_patterns} could not be read during training "
        f"({first_line(error)}); restore it, or point the config at the files that exist, "
        "and rerun the same command to resume from "
        + (f"the last checkpoint ({checkpoint})" if checkpoint else "step 0 (no checkpoint yet)")
    )


def describe_missing_file(path, split, error, checkpoint):
    """One line for a file of the run's data (`split`: "train" or "eval") that was listed
    when the run started and could not be opened later (deleted or moved since)."""
    reason = first_line(error).replace(path, "").strip(" ;:") or first_line(error)
    what = ("training file", "training") if split == "train" else ("held-out file", "evaluation")
    return (
        f"the {what[0]} {path} went missing during {what[1]} ({reason}); a run reads the "
        "files its globs matched when it started: restore it, or rerun the same command "
        "without it (the globs are listed again), to resume from "
        + (f"the last checkpoint ({checkpoint})" if checkpoint else "step 0 (no checkpoint yet)")
    )


def first_line(error):
    """The first informative line of TF's message (not "Graph execution error:" nor the
    "Detected at node" traceback or its "<stack traces unavailable>" stand-in), without
    tf.data's "Error in user-defined function" wrapper, graph-node prefix and op suffix,
    bounded."""
    lines = str(getattr(error, "message", error)).strip().splitlines()
    informative = [
        line
        for line in lines
        if line.strip()
        and not line[0].isspace()
        and not line.startswith(("Graph execution error", "Detected at node", "File ",
                                 "<stack traces unavailable>"))
    ]
    message = (informative or lines or [""])[0]
    message = re.sub(r"\{\{[^}]*\}\}\s*", "", message)
    # tf.data's wrapper of an error inside a `map`: the pipeline's path, not the reason
    message = re.sub(r"^Error in user-defined function passed to \S+ transformation with "
                     r"iterator: \S+: ", "", message)
    # TF's "truncated record at 34425' failed with ..." has a quote without its opening one
    message = re.sub(r"(record at \d+)' failed with", r"\1: failed with", message)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", message)[:200]




def describe_corrupt_record(record, remedy):
    """One line naming the record (a `CorruptRecord`), its file, the problem and `remedy`."""
    return (
        f"corrupt record {record.index} (0-based) in {record.file}: {record.problem}; "
        f"{remedy}"
    )


def check_pipeline_reads_a_record(setting, files, input_context):
    """A UserError if `files`, the share of the training files one input pipeline (host)
    reads, hold no record: that pipeline would wait for one forever while the others train.
    The check before the model (the first file that holds a record) covers one pipeline;
    with several, each one's share is checked here as its dataset is made. A file that
    cannot be read counts as holding a record: the read of the training names it."""
    for path in files:
        try:
            if next(iter(tf.data.TFRecordDataset(path).take(1)), None) is not None:
                return
        except tf.errors.OpError:
            return
    more = f" and {len(files) - 1} more" if len(files) > 1 else ""
    raise UserError(
        f"{setting}: input pipeline {input_context.input_pipeline_id} of "
        f"{input_context.num_input_pipelines} reads {files[0]}{more}, which hold no record: "
        "it would wait for one forever; remove the empty files, or give each input pipeline "
        "a file with records (files are shared out one by one)")


def check_every_pipeline_reads_a_record(setting, files, input_context):
    """A UserError if `files` hold fewer records than there are input pipelines, where the
    records (not the files: fewer files than pipelines) are shared out one by one, before
    they repeat: pipeline `i` reads records i, i + n, ..., and with fewer than n records the
    last pipelines read none and their data ends at once. Every pipeline makes the same
    count, so all of them stop here."""
    pipelines = input_context.num_input_pipelines
    records = tf.data.TFRecordDataset(files).take(pipelines)
    try:
        found = sum(1 for _ in records)
    except tf.errors.OpError:
        return  # a file that cannot be read: the read of the training names it
    if found < pipelines:
        raise UserError(
            f"{setting}: {found} record{'' if found == 1 else 's'} in {len(files)} "
            f"file{'' if len(files) == 1 else 's'} shared out one by one among {pipelines} "
            f"input pipelines: {_pipelines_from(found, pipelines)} of {pipelines} would read "
            f"none, and stop the training at its first step; give the training at least "
            f"{pipelines} records")


def _pipelines_from(first, pipelines):
    """'pipeline 3' or 'pipelines 1 to 3': the pipelines from `first` to the last."""
    if first == pipelines - 1:
        return f"pipeline {first}"
    return f"pipelines {first} to {pipelines - 1}"
