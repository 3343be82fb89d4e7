"""ImageNet-format TFRecords -> batches of (image, label[, weight]) for ResNet training and eval.

Decoding and preprocessing are Model Garden's (`official.vision.dataloaders.classification_input`
Decoder and Parser): training takes an Inception-style random-resized crop (area in
[data.crop_area_min, 1], aspect ratio in [3/4, 4/3]; fused JPEG decode-and-crop) and a random
horizontal flip, drawn per example from its place in the run (`recipes.resnet.augment`, which
says why it is written out); eval takes a central crop of `data.center_crop_fraction` of the
image; both resize to `data.image_size` and normalise each channel with ImageNet's mean and
std (`preprocess_ops.MEAN_RGB`, `STDDEV_RGB`). The labels are `image/class/label - label_offset`.

File reading, sharding, shuffling and batching are written here rather than through Model
Garden's `InputReader`, which needs its `hyperparams` DataConfig; what it would do is simple:

* per-host sharding through `tf.distribute.InputContext` (this is a dataset *function* for
  `strategy.distribute_datasets_from_function`): each input pipeline reads its own files,
  or every N-th record when there are fewer files than pipelines;
* training: files shuffled each epoch, endless, up to 16 read at once (in turn on local
  disk, by parallel workers from gs://: `recipes.common.storage`), examples shuffled in a
  buffer, all with `seed` (the training chunk's: see
  `recipes.common.task.chunk_input_position`), so the order is deterministic;
  `skip_batches` skips records before decoding;
* `drop_remainder=True` everywhere, so every batch has a fixed shape (TPUs need it). Eval
  pads the last batches with zero-weight examples instead of dropping any: top-1 counts
  every eval example exactly once.
"""

import math
import os

import tensorflow as tf
from official.vision.dataloaders import classification_input

from recipes.common import corrupt_data
from recipes.common import storage
from recipes.common.errors import UserError
from recipes.resnet import augment

LABEL_KEY = classification_input.DEFAULT_LABEL_FIELD_KEY  # "image/class/label"
LABEL_RANGE_ERROR = "image/class/label minus data.label_offset is outside [0, data.num_classes)"
_READ_BUFFER_BYTES = 8 * 1024 * 1024


def list_files(file_pattern, what):
    """Sorted files matching a glob (local or gs://), or a UserError naming the config key."""
    if not file_pattern:
        raise UserError(
            f"{what} is empty; set it to a TFRecord glob such as "
            "gs://bucket/imagenet/train-* or use data.embedded_digits=true"
        )
    files = sorted(tf.io.gfile.glob(file_pattern))
    if not files:
        raise UserError(
            f"{what}={file_pattern!r} matches no file; check the path, or convert "
            "your images with `python -m recipes.resnet.convert`"
        )
    # (local only: a stat per file of a remote glob of 1,024 shards would take a minute)
    directories = [path for path in files if "://" not in path and os.path.isdir(path)]
    if directories:  # read as a file: FailedPreconditionError's traceback
        raise UserError(
            f"{what}={file_pattern!r} matches the directory {directories[0]}; give a glob of "
            f"its TFRecord files, such as {directories[0].rstrip('/')}/train-*")
    return files


def files_to_read(files, what):
    """The files a pipeline reads: `files` as listed (a run lists its globs once, when it
    starts: recipes.resnet.data), or those a glob matches now (`list_files`)."""
    return list_files(files, what) if isinstance(files, str) else list(files)


def count_records(files):
    """Records in the files (a list, or a glob; reads them all: for small eval sets)."""
    files = files_to_read(files, "data.eval_file_pattern")
    return int(tf.data.TFRecordDataset(files).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))


def make_parser(data, dtype):
    """Model Garden's classification Parser with the recipe's preprocessing settings."""
    return classification_input.Parser(
        output_size=[data.image_size, data.image_size],
        num_classes=data.num_classes,
        decode_jpeg_only=data.decode_jpeg_only,
        aug_rand_hflip=data.random_flip,
        aug_crop=True,
        crop_area_range=(data.crop_area_min, 1.0),
        center_crop_fraction=data.center_crop_fraction,
        dtype=dtype,
    )


def _eval_parse_fn(data, dtype):
    """(serialized record) -> (image, label) for evaluation: Model Garden's parser (training
    draws its own random crops: `_train_parse_fn`)."""
    decoder = classification_input.Decoder()
    parse = make_parser(data, dtype).parse_fn(False)

    def parse_record(serialized):
        return _checked_label(data, *parse(decoder.decode(serialized)))

    return parse_record


def _train_parse_fn(data, dtype, seed, input_context):
    """(place in the pipeline, serialized record) -> (image, label) for training, the
    random crop and flip drawn from the example's place (`recipes.resnet.augment`)."""
    decoder = classification_input.Decoder()
    num_pipelines, pipeline_id = _pipeline(input_context)

    def parse_record(place, serialized):
        decoded = decoder.decode(serialized)
        image = augment.train_image(decoded[classification_input.DEFAULT_IMAGE_FIELD_KEY],
                                    data, dtype,
                                    augment.example_seed(seed, place, num_pipelines, pipeline_id))
        return _checked_label(data, image, tf.cast(decoded[LABEL_KEY], tf.int32))

    return parse_record


def _checked_label(data, image, label):
    """(image, label - data.label_offset), failing with LABEL_RANGE_ERROR outside the classes."""
    label = label - data.label_offset
    in_range = tf.logical_and(label >= 0, label < data.num_classes)
    with tf.control_dependencies([tf.debugging.Assert(in_range, [LABEL_RANGE_ERROR, label])]):
        return tf.identity(image), tf.identity(label)


def first_example(data, path):
    """The (image, label) the evaluation makes of the first record of `path` (None for an
    empty file); raises TF's error for a record it cannot make one of. Reads that record
    alone: no other record is decoded (libjpeg prints a line for each image it cannot)."""
    records = tf.data.TFRecordDataset(path).take(1)
    return next(iter(records.map(_eval_parse_fn(data, "float32"))), None)


def _pipeline(input_context):
    if input_context is None:
        return 1, 0
    return input_context.num_input_pipelines, input_context.input_pipeline_id


def make_train_dataset(
    data,
    files,
    per_replica_batch_size,
    *,
    input_context=None,
    skip_batches=0,
    dtype="float32",
    seed=0,
):
    """Endless, shuffled (image, label) batches of `per_replica_batch_size` for this pipeline,
    from `files` (a list, or a glob: `files_to_read`).

    `skip_batches` batches *of this pipeline* are skipped (as serialized records) first;
    `seed` shuffles the files and the examples.
    """
    files = files_to_read(files, "data.train_file_pattern")
    num_pipelines, pipeline_id = _pipeline(input_context)
    dataset = tf.data.Dataset.from_tensor_slices(files)
    shard_by_file = len(files) >= num_pipelines
    if num_pipelines > 1 and shard_by_file:
        dataset = dataset.shard(num_pipelines, pipeline_id)
        corrupt_data.check_pipeline_reads_a_record("data.train_file_pattern",
                                                   files[pipeline_id::num_pipelines],
                                                   input_context)
    dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    # Local files are read in turn, remote ones by parallel workers: the same records in
    # the same order either way (recipes.common.storage).
    parallel_reads = {} if storage.all_local(files) else {
        "num_parallel_calls": tf.data.AUTOTUNE, "deterministic": True}
    dataset = dataset.interleave(
        lambda path: tf.data.TFRecordDataset(path, buffer_size=_READ_BUFFER_BYTES),
        cycle_length=min(16, len(files)),
        **parallel_reads,
    )
    if num_pipelines > 1 and not shard_by_file:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    dataset = dataset.shuffle(
        data.shuffle_buffer_size, seed=seed + 1, reshuffle_each_iteration=True
    )
    # each example's place, counted before the skip: its random crop and flip are drawn from it
    dataset = dataset.enumerate().skip(skip_batches * per_replica_batch_size)
    dataset = dataset.map(_train_parse_fn(data, dtype, seed, input_context),
                          num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.batch(per_replica_batch_size, drop_remainder=True)
    # Endless, as a parallel interleave says; a sequential one leaves it unknown (stated
    # once a batch, not once a record).
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    return dataset.prefetch(tf.data.AUTOTUNE)


def num_input_pipelines(strategy):
    """Input pipelines `distribute_datasets_from_function` creates: one per host.

    Needed before the eval dataset exists (to size its padding); TF has no public
    accessor, so: TPUStrategy's `num_hosts`, MultiWorkerMirroredStrategy's worker count,
    else 1.
    """
    extended = strategy.extended
    if hasattr(extended, "num_hosts"):
        return extended.num_hosts
    return getattr(extended, "_num_workers", 1)  # pylint: disable=protected-access


def eval_steps(num_examples, global_batch_size, num_pipelines=1):
    """Eval steps that cover every example once when each pipeline reads every N-th record."""
    per_pipeline_examples = math.ceil(num_examples / num_pipelines)
    per_pipeline_batch = global_batch_size // num_pipelines
    return max(1, math.ceil(per_pipeline_examples / per_pipeline_batch))


def eval_examples_read(num_examples, steps, pipeline_batch_size, num_pipelines=1):
    """Real (not padding) examples that `steps` eval steps of `pipeline_batch_size` examples
    per pipeline read: each pipeline's share (every N-th record), up to its batch slots."""
    slots = steps * pipeline_batch_size
    return sum(min(len(range(pipeline_id, num_examples, num_pipelines)), slots)
               for pipeline_id in range(num_pipelines))


def make_eval_dataset(
    data, files, per_replica_batch_size, steps, *, input_context=None, dtype="float32",
    num_examples=None,
):
    """Exactly `steps` steps of (image, label, weight) batches of `files` (a list, or a
    glob: `files_to_read`), of their first `num_examples` records (None: all); padding has
    weight 0.

    Each pipeline reads every N-th record of all files, in file order, so the pipelines'
    shares differ by at most one example and `eval_steps` covers them all.
    """
    files = files_to_read(files, "data.eval_file_pattern")
    num_pipelines, pipeline_id = _pipeline(input_context)
    replicas_per_pipeline = 1
    if input_context is not None:
        replicas_per_pipeline = input_context.num_replicas_in_sync // num_pipelines
    dataset = tf.data.TFRecordDataset(files, buffer_size=_READ_BUFFER_BYTES)
    if num_examples is not None:  # data.eval_num_examples below the records: that many
        dataset = dataset.take(num_examples)
    if num_pipelines > 1:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    parse = _eval_parse_fn(data, dtype)
    dataset = dataset.map(
        lambda record: (*parse(record), tf.constant(1.0)), num_parallel_calls=tf.data.AUTOTUNE
    )
    padding = tf.data.Dataset.from_tensors(
        (
            tf.zeros([data.image_size, data.image_size, 3], dtype),
            tf.constant(0, tf.int32),
            tf.constant(0.0),
        )
    ).repeat()
    dataset = dataset.concatenate(padding).take(
        steps * replicas_per_pipeline * per_replica_batch_size
    )
    dataset = dataset.batch(per_replica_batch_size, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
