"""Image folder or NumPy arrays -> ImageNet-format TFRecords, and a check for corrupt records.

The output is what the usual ImageNet conversion scripts write (tensorflow/tpu
`tools/datasets/imagenet_to_gcs.py`, the older `build_imagenet_data.py`), so the ResNet recipe
reads the user's data and real ImageNet through one pipeline:

    <output_dir>/train-00000-of-00004 ...       sharded TFRecords of tf.train.Example:
      image/encoded      the encoded image (JPEG by default; PNG on request, lossless)
      image/format       b"JPEG" | b"PNG"
      image/height, image/width, image/channels (3: every image is stored as RGB)
      image/colorspace   b"RGB"
      image/class/label  class index + 1: label 0 is reserved for "background", as in
                         those scripts; the recipe subtracts `data.label_offset` (1)
      image/class/synset the class folder name;  image/class/text  the same name
      image/filename     the source file name (folder input) or "array_<i>"
      image/source_id    Model Garden's hash of the encoded bytes
    <output_dir>/labels.txt            one class name per line, line i = label i + 1
    <output_dir>/dataset_info.json     class names, label offset, examples per split

Folder input is `image_dir/<class_name>/<image file>`. JPEG files that already are RGB keep
their bytes; other images (PNG, grayscale/CMYK JPEG, BMP, GIF) are decoded and re-encoded.
Each shard is written under a temporary name and renamed into place, so an interrupted run
never leaves a half-written shard under a real name.

CLI:
    python -m recipes.resnet.convert --image_dir=photos/ --output_dir=records/
    python -m recipes.resnet.convert --npz=digits.npz --output_dir=records/  # keys images, labels
    python -m recipes.resnet.convert --digits --output_dir=records/          # the embedded default
    python -m recipes.resnet.convert --check='records/train-*'               # find corrupt records
"""

if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    from recipes.common import startup  # (before TensorFlow: its start-up lines off the console)
    from recipes.resnet import convert_flags

    startup.check_program_flags(convert_flags.define_flags, convert_flags.check_flags)

import collections
import dataclasses
import json
import os
import sys

import numpy as np
import tensorflow as tf
from official.vision.data import tf_example_builder

from recipes.common import corrupt_data, native_log, storage
from recipes.common.errors import UserError, doing
from recipes.resnet import convert_checks, convert_flags, digits
from recipes.resnet.conversion_files import (  # (INFO_FILE, shard_paths: convert's names too)
    IMAGE_RECORDS, INFO_FILE, LABELS_FILE, shard_paths, temporary_paths)

LABEL_OFFSET = 1  # labels are class index + 1; 0 = background (ImageNet conversion scripts)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
IMAGE_FORMATS = convert_flags.IMAGE_FORMATS
JPEG_MAGIC = b"\xff\xd8\xff"  # start of every JPEG file

CorruptRecord = corrupt_data.CorruptRecord


@dataclasses.dataclass
class Source:
    """One image to convert: pixels or already-encoded bytes, and where it came from."""

    label: int  # class index, 0-based
    filename: str
    pixels: np.ndarray = None  # uint8 [H, W, 3]
    jpeg_bytes: bytes = None  # an RGB JPEG kept as is


# ----------------------------------------------------------------------------- reading


def list_image_folder(image_dir):
    """(class names sorted, [(path, class index)]) of `image_dir/<class>/<image>`;
    one-line errors."""
    if not os.path.isdir(image_dir):
        what = "is a file, not a folder" if os.path.exists(image_dir) else "does not exist"
        raise UserError(
            f"image folder {image_dir!r} {what}; pass --image_dir=<folder with "
            "one subfolder per class>"
        )
    entries = sorted(os.listdir(image_dir))
    stray_files = [
        e
        for e in entries
        if os.path.isfile(os.path.join(image_dir, e)) and e.lower().endswith(IMAGE_EXTENSIONS)
    ]
    class_names = [
        e for e in entries if os.path.isdir(os.path.join(image_dir, e)) and not e.startswith(".")
    ]
    if not entries:
        raise UserError(
            f"image folder {image_dir!r} is empty; put images in "
            f"{image_dir}/<class_name>/<image>.jpg"
        )
    if stray_files:
        raise UserError(
            f"image folder {image_dir!r} has {len(stray_files)} image(s) outside class "
            f"folders (e.g. {stray_files[0]!r}), so their class is unknown; move each "
            f"into {image_dir}/<class_name>/"
        )
    if not class_names:
        raise UserError(
            f"image folder {image_dir!r} has no class subfolders; put images in "
            f"{image_dir}/<class_name>/<image>.jpg"
        )
    files = []
    for label, class_name in enumerate(class_names):
        class_dir = os.path.join(image_dir, class_name)
        images = sorted(
            f
            for f in os.listdir(class_dir)
            if f.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(class_dir, f))
        )
        if not images:
            raise UserError(
                f"class folder {class_dir!r} holds no image "
                f"({', '.join(IMAGE_EXTENSIONS)}); add images or remove the folder"
            )
        files.extend((os.path.join(class_dir, f), label) for f in images)
    return class_names, files


def read_image_file(path, label):
    """A `Source` for one image file; UserError when it cannot be decoded."""
    with open(path, "rb") as f:
        contents = f.read()
    try:
        pixels = tf.io.decode_image(contents, channels=3, expand_animations=False).numpy()
    except tf.errors.InvalidArgumentError as error:
        raise UserError(
            f"image {path!r} cannot be decoded ({corrupt_data.first_line(error)}); replace or "
            "delete the file"
        ) from None
    min_side = convert_checks.MIN_SIDE
    if min(pixels.shape[:2]) < min_side:
        raise UserError(f"image {path!r} is {pixels.shape[0]} x {pixels.shape[1]} pixels; images "
                        f"must be at least {min_side} x {min_side} (a central crop of 1 pixel is "
                        "empty): replace or delete the file")
    is_rgb_jpeg = (
        contents.startswith(JPEG_MAGIC) and int(tf.image.extract_jpeg_shape(contents)[2]) == 3
    )
    if is_rgb_jpeg:
        return Source(
            label=label, filename=os.path.basename(path), pixels=pixels, jpeg_bytes=contents
        )
    return Source(label=label, filename=os.path.basename(path), pixels=pixels)


def sources_from_arrays(images, labels):
    """`Source`s from uint8 images [N, H, W] or [N, H, W, 1|3] and integer labels [N]."""
    convert_checks.check_arrays(images, labels)
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., np.newaxis]
    if images.shape[-1] == 1:
        images = np.repeat(images, 3, axis=-1)  # stored as RGB, like grayscale ImageNet JPEGs
    return [
        Source(label=int(label), filename=f"array_{i}", pixels=image)
        for i, (image, label) in enumerate(zip(images, labels))
    ]


# ----------------------------------------------------------------------------- writing


def encode(source, image_format, jpeg_quality):
    """(encoded bytes, b"JPEG" | b"PNG") for a `Source`."""
    if image_format == "png":
        return tf.io.encode_png(source.pixels).numpy(), "PNG"
    if source.jpeg_bytes is not None:
        return source.jpeg_bytes, "JPEG"
    return tf.io.encode_jpeg(source.pixels, quality=jpeg_quality).numpy(), "JPEG"


def make_example(source, class_names, image_format, jpeg_quality):
    """The serialized ImageNet-format tf.train.Example for one `Source`."""
    encoded, format_name = encode(source, image_format, jpeg_quality)
    height, width, channels = source.pixels.shape
    class_name = class_names[source.label].encode("utf-8")
    builder = tf_example_builder.TfExampleBuilder()  # Model Garden's image/* keys
    builder.add_encoded_image_feature(
        encoded,
        image_format=format_name,
        height=height,
        width=width,
        num_channels=channels,
        label=source.label + LABEL_OFFSET,
    )
    builder.add_bytes_feature("image/colorspace", b"RGB")
    builder.add_bytes_feature("image/class/synset", class_name)
    builder.add_bytes_feature("image/class/text", class_name)
    builder.add_bytes_feature("image/filename", source.filename.encode("utf-8"))
    return builder.example.SerializeToString()


def write_split(sources, output_dir, split, num_shards, class_names, image_format, jpeg_quality):
    """Writes `sources` round-robin into `num_shards` shards; returns the shard paths."""
    paths = shard_paths(output_dir, split, num_shards)
    temporaries = temporary_paths(paths)  # (hidden: a `split-*` glob never reads them)
    writers = [tf.io.TFRecordWriter(path) for path in temporaries]
    try:
        for i, source in enumerate(sources):
            writers[i % num_shards].write(
                make_example(source, class_names, image_format, jpeg_quality)
            )
        for writer in writers:
            writer.close()
        for temporary, path in zip(temporaries, paths):
            tf.io.gfile.rename(temporary, path, overwrite=True)
    except BaseException:  # Ctrl-C too, or a failed rename: nothing half-written stays
        for writer in writers:
            writer.close()  # (again, if closed: nothing)
        for temporary in temporaries:
            if tf.io.gfile.exists(temporary):
                tf.io.gfile.remove(temporary)
        raise
    return paths


def split_holdout(sources, validation_fraction, seed):
    """(train, validation): a shuffled, per-class (stratified) hold-out of `validation_fraction`."""
    rng = np.random.default_rng(seed)
    by_class = collections.defaultdict(list)
    for source in sources:
        by_class[source.label].append(source)
    train, validation = [], []
    for label in sorted(by_class):
        members = by_class[label]
        order = rng.permutation(len(members))
        held_out = convert_checks.held_out_count(validation_fraction, len(members))
        validation.extend(members[i] for i in order[:held_out])
        train.extend(members[i] for i in order[held_out:])
    # interleave classes inside each shard, as the ImageNet scripts do
    return (
        [train[i] for i in rng.permutation(len(train))],
        [validation[i] for i in rng.permutation(len(validation))],
    )


def convert(
    sources,
    class_names,
    output_dir,
    *,
    num_shards=4,
    validation_fraction=0.0,
    split="train",
    image_format="jpeg",
    jpeg_quality=95,
    seed=0,
):
    """Writes `sources` as ImageNet TFRecords; returns the dataset info dict (also saved).

    With `validation_fraction > 0` a stratified hold-out goes to split "validation" and the
    rest to "train"; otherwise everything goes to `split`.
    """
    if image_format not in IMAGE_FORMATS:
        raise UserError(f"image_format={image_format!r} is not one of {IMAGE_FORMATS}")
    if not 1 <= jpeg_quality <= 100:
        raise UserError(f"jpeg_quality={jpeg_quality} must be in 1..100")
    if num_shards < 1:
        raise UserError(f"num_shards={num_shards} must be >= 1")
    if not 0.0 <= validation_fraction < 1.0:
        raise UserError(f"validation_fraction={validation_fraction} must be in [0, 1)")
    if not sources:
        raise UserError("no images to convert")
    num_classes = max(source.label for source in sources) + 1
    if len(class_names) < num_classes:
        raise UserError(
            f"labels go up to {num_classes - 1} but only {len(class_names)} class "
            "names were given; pass one name per class"
        )
    if validation_fraction > 0:
        convert_checks.check_holdout(validation_fraction, [s.label for s in sources],
                                     class_names)
        train, validation = split_holdout(sources, validation_fraction, seed)
        splits = {"train": train, "validation": validation}
    else:
        order = np.random.default_rng(seed).permutation(len(sources))
        splits = {split: [sources[i] for i in order]}
    shard_counts = {name: min(num_shards, max(1, len(members))) for name, members in splits.items()}
    return _write_splits(splits, shard_counts, output_dir, class_names, image_format,
                         jpeg_quality)


def _write_splits(splits, shard_counts, output_dir, class_names, image_format, jpeg_quality):
    """`convert`'s writing: each split's shards, then dataset_info.json and labels.txt; one
    conversion into `output_dir` at a time, and none while a run reads the files there."""
    with storage.exclusive_use(f"output_dir={output_dir}", output_dir,
                               "wait for that conversion to finish, or give another output_dir",
                               advice_if_read="wait for the run reading it to end, or give "
                               "another output_dir"):
        storage.check_no_other_dataset("output_dir", output_dir, IMAGE_RECORDS,
                                       convert_flags.OTHER_DATASETS)
        for name, shards in shard_counts.items():
            storage.check_no_earlier_shards("output_dir", output_dir, f"{name}-*",
                                            shard_paths(output_dir, name, shards))
        tf.io.gfile.makedirs(output_dir)
        info = _read_info(output_dir, class_names)
        for name, members in splits.items():
            shards = shard_counts[name]
            write_split(members, output_dir, name, shards, class_names, image_format,
                        jpeg_quality)
            info["splits"][name] = {
                "num_examples": len(members),
                "file_pattern": f"{name}-*-of-{shards:05d}",
            }
        write_info(output_dir, info)
    return info


def convert_image_folder(image_dir, output_dir, **kwargs):
    """`convert` for `image_dir/<class>/<image>`; see `convert` for the keyword arguments."""
    class_names, files = list_image_folder(image_dir)
    sources = [read_image_file(path, label) for path, label in files]
    return convert(sources, class_names, output_dir, **kwargs)


def convert_arrays(images, labels, output_dir, class_names=None, **kwargs):
    """`convert` for uint8 arrays; class names default to "0", "1", ..."""
    sources = sources_from_arrays(images, labels)
    if class_names is None:
        class_names = convert_checks.default_class_names(labels)
    return convert(sources, list(class_names), output_dir, **kwargs)


def _read_info(output_dir, class_names):
    path = os.path.join(output_dir, INFO_FILE)
    if tf.io.gfile.exists(path):
        info = storage.read_mapping(path, advice=_CONVERT_AGAIN)
        if info.get("class_names") != list(class_names):
            raise UserError(
                f"{path} lists other class names than this conversion; use another "
                "--output_dir or convert every split from the same classes"
            )
        return info
    return {
        "format": "imagenet-tfrecord",
        "label_offset": LABEL_OFFSET,
        "class_names": list(class_names),
        "splits": {},
    }


def write_info(output_dir, info):
    for name, text in (
        (LABELS_FILE, "".join(f"{c}\n" for c in info["class_names"])),
        (INFO_FILE, json.dumps(info, indent=2) + "\n"),
    ):
        storage.write_text(os.path.join(output_dir, name), text)


def read_info(data_dir):
    """The dataset_info.json dict the converter wrote into `data_dir`."""
    path = os.path.join(data_dir, INFO_FILE)
    if not tf.io.gfile.exists(path):
        raise UserError(
            f"{path} does not exist; convert the data first with "
            "`python -m recipes.resnet.convert`"
        )
    return storage.read_mapping(path, advice=_CONVERT_AGAIN)


_CONVERT_AGAIN = ("it is what `python -m recipes.resnet.convert` writes there: convert the data "
                  "again into a new directory")


# ----------------------------------------------------------------------------- checking


def _decodes(serialized, jpeg_only):
    """In-graph: parses one record and decodes its image the way the input pipeline will."""
    features = tf.io.parse_single_example(
        serialized,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    encoded = features["image/encoded"]
    if jpeg_only:
        # the pipeline's fused path (Model Garden random_crop_image_v2 / center_crop_image_v2):
        # it refuses PNG, which tf.io.decode_jpeg would quietly accept
        shape = tf.image.extract_jpeg_shape(encoded)
        window = tf.stack([0, 0, shape[0], shape[1]])
        return tf.shape(tf.image.decode_and_crop_jpeg(encoded, window, channels=3))
    return tf.shape(tf.io.decode_image(encoded, channels=3, expand_animations=False))


# What a record of another image format says to do when only JPEG is decoded: training's
# fix; `--check`'s is its own flag.
NOT_JPEG_FIX = "data.decode_jpeg_only is true: set it to false or convert with --image_format=jpeg"
CHECK_NOT_JPEG_FIX = ("--image_format=jpeg (the default) expects JPEG: check PNG records with "
                      "--image_format=png")


def find_corrupt_records(file_pattern, jpeg_only=True, limit=10):
    """[CorruptRecord(file, index, problem)] of records the input pipeline cannot decode.

    Decodes every record in parallel with tf.data and keeps the indices that fail (a missing
    field, an undecodable image, a non-JPEG when `jpeg_only`, or a truncated file). Stops
    after `limit` findings.
    """
    return scan_records(file_pattern, jpeg_only, limit).corrupt


RecordScan = collections.namedtuple("RecordScan", ["corrupt", "records", "files"])


def scan_records(file_pattern, jpeg_only=True, limit=10, not_jpeg_fix=NOT_JPEG_FIX):
    """RecordScan(corrupt: what `find_corrupt_records` returns, records: how many were read,
    files: how many files were read): the files matching `file_pattern` in order, until
    `limit` corrupt records are found (then the counts are of the files read so far).
    `not_jpeg_fix`: what a record of another image format, when `jpeg_only`, says to do."""
    corrupt, records, files = [], 0, 0
    for path in record_files(file_pattern):
        found, readable = _corrupt_in_file(path, jpeg_only, limit - len(corrupt), not_jpeg_fix)
        corrupt += found
        records += readable
        files += 1
        if len(corrupt) >= limit:
            break
    return RecordScan(corrupt, records, files)


def record_files(file_pattern):
    """The files `file_pattern` matches, in order, but the conversion's own labels.txt and
    dataset_info.json, which are not TFRecords (`records/*` matches them too)."""
    return [path for path in sorted(tf.io.gfile.glob(file_pattern))
            if os.path.basename(path) not in (LABELS_FILE, INFO_FILE)]


def _corrupt_in_file(path, jpeg_only, limit, not_jpeg_fix):
    """(at most `limit` CorruptRecords of the TFRecord file `path`, its readable records)."""
    records = tf.data.TFRecordDataset(path)
    found = []
    readable = 0
    try:
        for _ in records:
            readable += 1
    except tf.errors.DataLossError as error:
        found.append(
            CorruptRecord(
                path,
                readable,
                f"the file is truncated or damaged after "
                f"{readable} records ({corrupt_data.first_line(error)})",
            )
        )
    if len(found) >= limit:
        return found, readable
    decoded = (
        records.take(readable)
        .enumerate()
        .map(
            lambda i, r: (i, _decodes(r, jpeg_only)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        .ignore_errors()
    )
    good = {int(i) for i, _ in decoded.as_numpy_iterator()}
    for index, serialized in enumerate(records.take(readable)):
        if index not in good:
            found.append(CorruptRecord(path, index, _why_undecodable(serialized, jpeg_only,
                                                                     not_jpeg_fix)))
            if len(found) >= limit:
                break
    return found, readable


def _why_undecodable(serialized, jpeg_only, not_jpeg_fix=NOT_JPEG_FIX):
    try:
        _decodes(serialized, jpeg_only)
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as error:
        message = corrupt_data.first_line(error)
        example = tf.train.Example.FromString(serialized.numpy())
        encoded = example.features.feature["image/encoded"].bytes_list.value
        if jpeg_only and encoded and not encoded[0].startswith(JPEG_MAGIC):
            if _decodes_as_another_format(serialized):  # not damaged: a PNG, say
                return f"{ANOTHER_FORMAT} ({_format_name(encoded[0])}) and {not_jpeg_fix}"
            message += f" (the image is not a JPEG and {not_jpeg_fix})"
        return message
    return "decodes when read alone"


# The problem of a record whose image decodes, but not as a JPEG: not a damaged record.
ANOTHER_FORMAT = "holds an image that is not a JPEG"


def _decodes_as_another_format(serialized):
    try:
        _decodes(serialized, jpeg_only=False)
        return True
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
        return False


def _format_name(encoded):
    for magic, name in ((b"\x89PNG", "PNG"), (b"GIF8", "GIF"), (b"BM", "BMP")):
        if encoded.startswith(magic):
            return name
    return "another format"


def describe_corrupt_record(record):
    """One line naming the record, its file, the problem and what to do (an image of another
    format, which is not damaged, is not called corrupt: its problem says what to do)."""
    if record.problem.startswith(ANOTHER_FORMAT):
        return f"record {record.index} (0-based) in {record.file} {record.problem}"
    return corrupt_data.describe_corrupt_record(
        record,
        "re-create that file with `python -m recipes.resnet.convert` or drop the record",
    )


# ----------------------------------------------------------------------------- CLI


def main(argv):
    """The program: `--check`, or a conversion. The lines C code writes to stderr (libjpeg's
    `Not a JPEG file: starts with 0x74 0x68` for an image the error line names) are dropped
    unless --verbose: the program has no log file of its own (`native_log.discarded`)."""
    from absl import flags  # pylint: disable=g-import-not-at-top

    FLAGS = flags.FLAGS
    convert_flags.check_flags(FLAGS, argv[1:])
    with native_log.discarded(FLAGS.verbose):
        if FLAGS.check:
            check_files(FLAGS.check, jpeg_only=FLAGS.image_format == "jpeg")
        else:
            _convert_from_flags(FLAGS)


def _convert_from_flags(values):
    """The conversion the flags ask for; prints where each split went."""
    options = dict(
        num_shards=values.num_shards,
        validation_fraction=values.validation_fraction,
        split=values.split,
        image_format=values.image_format,
        jpeg_quality=values.jpeg_quality,
        seed=values.seed,
    )
    with doing("while converting"):  # what a SIGTERM's line says
        if values.image_dir:
            info = convert_image_folder(values.image_dir, values.output_dir, **options)
        elif values.npz:
            images, labels, names = convert_checks.read_npz(values.npz)
            info = convert_arrays(images, labels, values.output_dir, class_names=names,
                                  **options)
        else:
            images, labels, names = digits.load_digits()
            info = convert_arrays(images, labels, values.output_dir, class_names=names,
                                  **options)
    for name, split in info["splits"].items():
        print(
            f"{name}: {split['num_examples']} examples in "
            f"{os.path.join(values.output_dir, split['file_pattern'])}"
        )
    print(
        f"{len(info['class_names'])} classes, labels {LABEL_OFFSET}..{len(info['class_names'])}"
        f" in {os.path.join(values.output_dir, LABELS_FILE)}"
    )


CHECK_LIMIT = 10  # corrupt records `--check` lists before it stops


def check_files(pattern, jpeg_only):
    """`--check`: prints how many records of the files matching `pattern` were decoded, or
    lists the corrupt ones (at most `CHECK_LIMIT`) on stderr and raises a UserError."""
    paths = _refuse_check_pattern(pattern)
    scan = scan_records(pattern, jpeg_only=jpeg_only, limit=CHECK_LIMIT,
                        not_jpeg_fix=CHECK_NOT_JPEG_FIX)
    for record in scan.corrupt:
        print(describe_corrupt_record(record), file=sys.stderr)
    redo = ("re-create the files named above with `python -m recipes.resnet.convert` (or drop "
            "those records), then check again")
    if scan.corrupt and all(CHECK_NOT_JPEG_FIX in record.problem for record in scan.corrupt):
        redo = "if they hold PNG images, check them with --image_format=png"
    kind = "corrupt record(s)"
    if scan.corrupt and all(record.problem.startswith(ANOTHER_FORMAT) for record in scan.corrupt):
        kind = "record(s) of another image format than JPEG"
    if len(scan.corrupt) >= CHECK_LIMIT:
        raise UserError(
            f"at least {len(scan.corrupt)} {kind} in {pattern} (the check stops "
            f"at {CHECK_LIMIT}: it stopped in file {scan.files} of {len(paths)}); {redo}")
    if scan.corrupt:
        raise UserError(f"{len(scan.corrupt)} {kind} in {pattern} ({scan.records} "
                        f"record(s) read from {scan.files} file(s)); {redo}")
    print(f"every record in {pattern} decodes: {scan.records} record(s) in {scan.files} "
          "file(s) checked")


def _refuse_check_pattern(pattern):
    """The files a `--check` glob matches; a UserError, before any record is decoded, for one
    that matches no file, matches a directory (TFRecordDataset fails on it with a traceback)
    or matches only files that hold no record (in which the check would find nothing
    wrong)."""
    paths = record_files(pattern)
    if not paths:
        side_files = " (but the conversion's labels.txt or dataset_info.json)" if (
            tf.io.gfile.glob(pattern)) else ""
        raise UserError(f"--check={pattern!r} matches no file{side_files}")
    directories = [path for path in paths if tf.io.gfile.isdir(path)]
    if directories:
        what = ("is a directory" if os.path.normpath(pattern) == os.path.normpath(
            directories[0]) else f"matches a directory ({directories[0]!r})")
        raise UserError(
            f"--check={pattern!r} {what}, not TFRecord files; give a glob of the files in "
            f"it, such as --check='{os.path.join(directories[0], 'train-*')}'")
    if not any(_holds_a_record(path) for path in paths):
        size = tf.io.gfile.stat(paths[0]).length
        example = os.path.join(os.path.dirname(pattern), "train-*")
        raise UserError(
            f"--check={pattern!r} matches {len(paths)} file(s) that hold no TFRecord record "
            f"({paths[0]!r} {f'holds {size} byte(s)' if size else 'is empty'}); give a glob "
            f"of the files the converter wrote, such as --check='{example}'")
    return paths


def _holds_a_record(path):
    """Whether the TFRecord file `path` starts with a record, damaged or not (a file too
    short for one, such as an empty file, reads as no record)."""
    try:
        return bool(list(tf.data.TFRecordDataset(path).take(1)))
    except tf.errors.DataLossError:  # something is there: the scan reports its damage
        return True


if __name__ == "__main__":
    from recipes.common import errors  # pylint: disable=g-import-not-at-top

    convert_flags.define_flags()
    errors.run(main, trains=False)
