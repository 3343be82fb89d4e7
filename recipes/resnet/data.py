"""The ResNet recipe's data: the embedded digits or the configured ImageNet-format
TFRecords, and the one-line explanation of a record the input pipeline cannot read."""

import collections
import os
import re

import numpy as np
import tensorflow as tf
from google.protobuf import message as message_lib  # tf.train.Example's DecodeError

from recipes.common import corrupt_data
from recipes.common.errors import UserError
from recipes.resnet import convert, convert_checks, digits
from recipes.resnet import export as export_lib
from recipes.resnet import input as input_lib

DIGITS_SUBDIR = "digits"

# The globs (for messages) and the files they matched when the run started: every chunk's
# pipeline and every evaluation of the run reads those files, and no others.
Data = collections.namedtuple(
    "Data",
    ["train_pattern", "eval_pattern", "train_files", "eval_files", "eval_examples",
     "labels_file"],
)


def prepare_digits(output_dir, validation_fraction, num_shards, jpeg_quality, seed):
    """Converts the digits into `output_dir` once (train + held-out validation); returns the info.

    An existing conversion with the same settings is reused, so a resumed run reads the same
    records.
    """
    settings = {
        "validation_fraction": validation_fraction,
        "num_shards": num_shards,
        "jpeg_quality": jpeg_quality,
        "seed": seed,
    }
    if tf.io.gfile.exists(os.path.join(output_dir, convert.INFO_FILE)):  # local or gs://
        info = convert.read_info(output_dir)
        if info.get("digits_settings") == settings:
            return info
        saved = info.get("digits_settings") or {}
        changed = ", ".join(f"{name} {saved.get(name)!r} (now {value!r})"
                            for name, value in settings.items() if saved.get(name) != value)
        raise UserError(
            f"{output_dir} holds digits converted with other settings ({changed}); use a new "
            "--model_dir (deleting them would evaluate the run on digits it trained on)")
    images, labels, names = digits.load_digits()
    info = convert.convert_arrays(
        images,
        labels,
        output_dir,
        class_names=names,
        num_shards=num_shards,
        validation_fraction=validation_fraction,
        jpeg_quality=jpeg_quality,
        seed=seed,
    )
    info["digits_settings"] = settings
    convert.write_info(output_dir, info)
    return info


def check_digits_config(data):
    """A UserError, before the digits are converted, if `data` does not fit them (10
    classes, labels from `convert.LABEL_OFFSET`, a held-out split and a training split
    that both get digits of every class: the evaluation reads the held-out one)."""
    if not data.embedded_digits:
        return
    for key in ("train_file_pattern", "eval_file_pattern"):
        if getattr(data, key):  # the user's files, which the digits would replace silently
            raise UserError(
                f"data.{key}={getattr(data, key)} is set, but data.embedded_digits=true trains "
                "and evaluates on the embedded digits and does not read it; set "
                "data.embedded_digits=false to use your files (or leave the patterns empty)")
    if (data.num_classes, data.label_offset) != (len(digits.CLASS_NAMES), convert.LABEL_OFFSET):
        raise UserError(
            f"data.embedded_digits needs data.num_classes={len(digits.CLASS_NAMES)} and "
            f"data.label_offset={convert.LABEL_OFFSET}, got {data.num_classes} and "
            f"{data.label_offset}"
        )
    fraction = data.digits_validation_fraction
    if not 0 < fraction < 1:
        raise UserError(
            f"data.digits_validation_fraction={fraction} must be above 0 and below 1: the "
            "share of the embedded digits held out for the evaluation; give e.g. 0.2"
        )
    held_out = convert_checks.held_out_count(fraction, digits.PER_CLASS)
    if not 0 < held_out < digits.PER_CLASS:
        raise UserError(
            f"data.digits_validation_fraction={fraction} holds out {held_out} of the "
            f"{digits.PER_CLASS} embedded digits of each class, leaving "
            f"{'no held-out' if not held_out else 'no training'} digit; give e.g. 0.2"
        )


def list_data_files(data, mode):
    """The files of each configured glob that `mode` reads, `{"train": [...], "eval":
    [...]}` (empty for a split `mode` does not read), listed once for the run; a UserError,
    writing nothing, for a glob that is empty or matches no file. None for the embedded
    digits (converted, then listed, in `resolve_data`)."""
    if data.embedded_digits:
        return None
    listed = _list_files(data.train_file_pattern, data.eval_file_pattern, mode)
    directories = sorted({os.path.dirname(path) for files in listed.values() for path in files}
                         | _pattern_directory(data.train_file_pattern))  # (eval: the trained)
    classes = {}  # class names -> the first conversion naming them
    for directory in directories:
        names = _check_against_conversion(data, directory)
        if names is not None:
            classes.setdefault(tuple(names), directory)
    if len(classes) > 1:
        raise _other_classes_error(*list(classes.items())[:2])
    return listed


def _other_classes_error(one, other):
    """The UserError for two conversions (class names, directory) whose class ids mean
    other classes (each conversion numbers the sorted names of its own class folders)."""
    (first, one_dir), (second, other_dir) = one, other
    i = next((i for i, (a, b) in enumerate(zip(first, second)) if a != b),
             min(len(first), len(second)))
    name = lambda names: repr(names[i]) if i < len(names) else "no class"
    return UserError(
        f"the records in {one_dir} and {other_dir} come from conversions of other class "
        f"folders: class id {i} is {name(first)} in one, {name(second)} in the other (their "
        f"{convert.INFO_FILE}); convert both splits in one conversion (--validation_fraction) "
        "or from folders of the same classes")


def _pattern_directory(pattern):
    """{the directory of `pattern`} when it is one (no glob character in it), else {}."""
    directory = os.path.dirname(pattern or "")
    return {directory} if directory and not set("*?[") & set(directory) else set()


def _check_against_conversion(data, directory):
    """A UserError, before any work, for data.num_classes below the classes, or a
    data.label_offset other than the offset, that the converter's dataset_info.json in
    `directory` gives (files without one, such as Google's, are not checked here: their
    first record is, before the model is built); else its class names (None without one)."""
    path = os.path.join(directory, convert.INFO_FILE)
    if not tf.io.gfile.exists(path):
        return None
    info = convert.read_info(directory)
    classes, offset = len(info.get("class_names", [])), info.get("label_offset")
    if classes > data.num_classes:
        raise UserError(
            f"data.num_classes={data.num_classes}, but {path} (written by "
            f"recipes.resnet.convert) names {classes} classes; give data.num_classes={classes}")
    if offset is not None and offset != data.label_offset:
        raise UserError(
            f"data.label_offset={data.label_offset}, but {path} (written by "
            f"recipes.resnet.convert) gives the records' labels from {offset}; give "
            f"data.label_offset={offset}")
    return info.get("class_names")


def resolve_data(data, work_dir, mode, listed=None):
    """The `Data` of this config: the digits converted into work_dir/digits, or the
    configured files (`listed`: `list_data_files`' result; listed here if None), the first
    record of each glob checked (`check_first_record`)."""
    if data.embedded_digits:
        digits_dir = os.path.join(work_dir, DIGITS_SUBDIR)
        info = prepare_digits(
            digits_dir,
            validation_fraction=data.digits_validation_fraction,
            num_shards=4,
            jpeg_quality=95,
            seed=data.seed,
        )
        splits = info["splits"]
        train_pattern, eval_pattern = (os.path.join(digits_dir, splits[split]["file_pattern"])
                                       for split in ("train", "validation"))
        eval_examples = data.eval_num_examples or splits["validation"]["num_examples"]
        labels_file = export_lib.labels_file_for(digits_dir)
        listed = _list_files(train_pattern, eval_pattern, mode)  # converted above: ours
    else:
        train_pattern, eval_pattern = data.train_file_pattern, data.eval_file_pattern
        eval_examples = data.eval_num_examples
        labels_dir = os.path.dirname(train_pattern or eval_pattern)
        labels_file = export_lib.labels_file_for(labels_dir) if labels_dir else None
        listed = listed or _list_files(train_pattern, eval_pattern, mode)
        for split, files in listed.items():
            if files:
                check_first_record(split, files, data)
    resolved = Data(train_pattern, eval_pattern, listed["train"], listed["eval"],
                    eval_examples, labels_file)
    return _counted(resolved, mode)


def _list_files(train_pattern, eval_pattern, mode):
    listed = {"train": [], "eval": []}
    if mode in ("train", "train_and_eval"):
        listed["train"] = input_lib.list_files(train_pattern, "data.train_file_pattern")
    if mode in ("eval", "train_and_eval"):
        listed["eval"] = input_lib.list_files(eval_pattern, "data.eval_file_pattern")
    return listed


def _counted(resolved, mode):
    """`resolved` with the held-out examples counted (when `mode` evaluates and the config
    does not give their number), or a UserError if there are none."""
    if mode in ("eval", "train_and_eval"):
        count = resolved.eval_examples or input_lib.count_records(resolved.eval_files)
        if not count:
            raise _no_records_error("eval", resolved.eval_pattern)
        resolved = resolved._replace(eval_examples=count)
    return resolved


def _no_records_error(split, pattern):
    if split == "eval":
        return UserError(
            f"data.eval_file_pattern={pattern!r} holds no records: nothing to evaluate; give "
            "held-out TFRecords (`python -m recipes.resnet.convert --validation_fraction=0.1` "
            "writes some)")
    return UserError(f"data.train_file_pattern={pattern!r} holds no records: nothing to train "
                     "on; give ImageNet-format TFRecords (`python -m recipes.resnet.convert` "
                     "writes them)")


def explain_input_error(error, pattern, data):
    """A UserError naming the corrupt record and file behind a decode failure, or the record
    whose label is outside the classes, if any (`data`: the config's data section)."""
    message = getattr(error, "message", str(error))
    label_error = input_lib.LABEL_RANGE_ERROR in message
    if not pattern:
        return _label_range_error(message) if label_error else None
    wanted = "whose label is outside the classes" if label_error else "it cannot read"
    print(f"input error ({corrupt_data.first_line(error)}); scanning {pattern} for the record "
          f"{wanted} ...", flush=True)
    if label_error:
        return _label_outside_error(pattern, data, message)
    return _corrupt_record_error(pattern, data.decode_jpeg_only)


_NO_LABEL = -(2**63)  # what the scan parses for a record without image/class/label


def _first_label_outside(data, path):
    """(index, label) of the first record of `path` whose image/class/label minus
    data.label_offset is outside [0, data.num_classes) (label None: it has none), or
    (None, records in the file); (None, None) if a record cannot be parsed or read."""
    feature = {input_lib.LABEL_KEY: tf.io.FixedLenFeature((), tf.int64, _NO_LABEL)}
    labels = tf.data.TFRecordDataset(path).map(
        lambda record: tf.io.parse_single_example(record, feature)[input_lib.LABEL_KEY])
    low, read = data.label_offset, 0
    try:
        for batch in labels.batch(4096).as_numpy_iterator():
            outside = np.flatnonzero((batch < low) | (batch >= low + data.num_classes))
            if outside.size:
                label = int(batch[outside[0]])
                return read + int(outside[0]), None if label == _NO_LABEL else label
            read += len(batch)
    except tf.errors.OpError:  # not an Example, or truncated: the decode scan's to name
        return None, None
    return None, read


def _label_outside_error(pattern, data, message):
    """The UserError for a label outside the classes met while the run reads `pattern`:
    the record and its file when the scan finds it, with advice that fits a record among
    records whose labels are inside (the first record was checked when the run started).
    A file the scan cannot read is passed over (the run reads its files interleaved, so the
    record may be in a later one) and named if the scan finds no such record."""
    inside, unreadable = 0, []  # records before it, all inside the classes; files passed over
    for path in convert.record_files(pattern):
        index, found = _first_label_outside(data, path)
        if index is None:
            if found is None:
                unreadable.append(path)
            inside += found or 0
            continue
        inside += index
        where = f"record {index} (0-based) in {path}"
        if not inside:  # the first record scanned: the offset is not vouched for
            it_gives = (f" (it has no {input_lib.LABEL_KEY})" if found is None else
                        f" (it gives {found - data.label_offset})")
            return _label_range_error(message, f"{where}: ", it_gives)
        gives = (f"has no {input_lib.LABEL_KEY}" if found is None else
                 f"gives {input_lib.LABEL_KEY}={found}, class {found - data.label_offset} with "
                 f"data.label_offset={data.label_offset}, outside [0, data.num_classes="
                 f"{data.num_classes})")
        too_few = (f"; or, if class {found - data.label_offset} is one of yours, "
                   "data.num_classes is too small"
                   if found is not None and found - data.label_offset >= data.num_classes else "")
        readable = " (of the files the scan could read)" if unreadable else ""
        before = (f"the record before it{readable} fits" if inside == 1 else
                  f"the {inside:,} records before it{readable} fit")
        return UserError(
            f"{where} {gives}, while {before} data.label_offset and "
            "data.num_classes: a damaged record, or one from another dataset, among good ones; "
            f"re-create that file with `python -m recipes.resnet.convert` or drop the "
            f"record{too_few}")
    if unreadable:
        return _corrupt_record_error(pattern, data.decode_jpeg_only) or UserError(
            f"{input_lib.LABEL_RANGE_ERROR}{_label_value(message)}, and {unreadable[0]} cannot "
            "be read as tf.train.Example records to find it: re-create that file with "
            "`python -m recipes.resnet.convert`")
    return UserError(
        f"{input_lib.LABEL_RANGE_ERROR}{_label_value(message)}, but a scan of {pattern} found "
        "no such record: were its files changed while the run read them?")


def check_first_record(split, files, data):
    """A UserError, before the model is built, if the input pipeline cannot make an example
    of the first record of `split`'s listed files (of the first file that holds one): records
    of another kind, an image it cannot decode, a label outside the config's classes; or
    if no file holds a record (training would wait for one forever). Later records are
    checked as the run reads them (`explain_input_error`). Not in `list_data_files`:
    reading a record starts TensorFlow's runtime, after which no multi-worker strategy can
    be made."""
    setting = f"data.{split}_file_pattern"
    for path in files:
        if _check_first_example(setting, path, data):
            return
    raise _no_records_error(split, getattr(data, f"{split}_file_pattern"))


def _check_first_example(setting, path, data):
    """Whether `path` holds a record, the first of which makes an example; else a UserError."""
    try:
        return input_lib.first_example(data, path) is not None
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
        reason, message = corrupt_data.first_line(error), getattr(error, "message", str(error))
    # a record of another kind fails its label check or its image decode, whichever of the
    # two ops runs first: its features are looked at before the label is blamed
    features = _first_record_features(path)
    if features is not None and "image/encoded" not in features:  # records of another kind
        raise UserError(
            f"{setting}: the first record of {path} is not an ImageNet-format example (no "
            f"image/encoded; it holds {', '.join(sorted(features)) or 'no feature'}); give "
            "ImageNet-format TFRecords (`python -m recipes.resnet.convert` writes them)")
    if features is not None and input_lib.LABEL_KEY not in features:  # (parsed as label -1)
        raise UserError(
            f"{setting}: the first record of {path} has no {input_lib.LABEL_KEY}; give "
            "labelled ImageNet-format TFRecords (`python -m recipes.resnet.convert` writes them)")
    if input_lib.LABEL_RANGE_ERROR in message:
        raise _label_range_error(message, f"the first record of {path}: ")
    raise _corrupt_record_error(path, data.decode_jpeg_only) or UserError(
        f"{setting}: the first record of {path} cannot be read ({reason}); give "
        "ImageNet-format TFRecords (`python -m recipes.resnet.convert` writes them)")


def _first_record_features(path):
    """The feature names of the first record of `path` as a tf.train.Example, or None if
    it is not one (Model Garden's parser fills a missing feature with its default, so a
    record of another kind fails as an image that does not decode)."""
    try:
        record = next(iter(tf.data.TFRecordDataset(path).take(1)))
        return set(tf.train.Example.FromString(record.numpy()).features.feature)
    except (tf.errors.OpError, message_lib.DecodeError):
        return None


def _label_value(message):
    """' (a record gives N)': the label minus data.label_offset the check printed, or ''."""
    value = re.search(re.escape(input_lib.LABEL_RANGE_ERROR) + r"\] \[(-?\d+)\]", message)
    return f" (a record gives {value.group(1)})" if value else ""


def _label_range_error(message, where="", value=None):
    """The UserError for the label check's failure (its `message`), with the value it printed
    (or `value`, the text for the record `where` names)."""
    value = _label_value(message) if value is None else value
    return UserError(
        f"{where}{input_lib.LABEL_RANGE_ERROR}{value}; check data.label_offset "
        "(1 for the ImageNet conversion scripts' 1..1000 labels) and data.num_classes"
    )


def _corrupt_record_error(pattern, jpeg_only):
    corrupt = convert.find_corrupt_records(pattern, jpeg_only=jpeg_only, limit=1)
    return UserError(convert.describe_corrupt_record(corrupt[0])) if corrupt else None
