"""Training's preprocessing of one ImageNet-format example, its random draws keyed by the
example's place in the run.

The steps and their parameters are those of Model Garden's classification `Parser` for
training (`official.vision.dataloaders.classification_input`, `_parse_train_image`, as
`input.make_parser` configures it): an Inception-style random-resized crop (area in
[data.crop_area_min, 1], aspect ratio in [3/4, 4/3], 10 attempts, the central crop when
none fits; fused JPEG decode-and-crop with data.decode_jpeg_only), a random horizontal
flip, a bilinear resize to data.image_size and ImageNet's per-channel normalisation. (One
difference: without data.decode_jpeg_only a GIF is read as its first frame, where Model
Garden's parser fails on its 4-D frames.)

Written out, not called, for one reason: Model Garden draws the crop and the flip with
stateful random ops, whose draws start again with every new input pipeline. The recipes
make one pipeline per checkpoint chunk, so a run resumed inside a chunk (after SIGTERM
saved its step) drew the first draws of the chunk for the examples after the resumed step,
and trained to other weights than the run never stopped. Here each draw is a stateless op
seeded by (the chunk's seed, the example's place in the chunk's pipeline), so the same
example gets the same crop and flip whichever pipeline reads it.
"""
import tensorflow as tf
from official.vision.ops import preprocess_ops

_ASPECT_RATIO_RANGE = (3.0 / 4.0, 4.0 / 3.0)  # Model Garden's random_crop_image default
_MAX_ATTEMPTS = 10  # idem


def example_seed(seed, place, num_pipelines, pipeline_id):
    """The stateless seed (shape [2], int64) of the example at `place` (0-based) in input
    pipeline `pipeline_id` of `num_pipelines` of a chunk whose pipelines are seeded `seed`:
    every example of the chunk, on every host, its own."""
    global_place = tf.cast(place, tf.int64) * num_pipelines + pipeline_id
    return tf.stack([tf.cast(seed, tf.int64), global_place])


def train_image(image_bytes, data, dtype, seed):
    """The training image of one encoded image: cropped, flipped, resized, normalised, in
    `dtype`, its draws made from `seed` (`example_seed`)."""
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    image = _random_crop(image_bytes, data, crop_seed)
    if data.random_flip:
        image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    image = tf.image.resize(image, [data.image_size, data.image_size], method="bilinear")
    image.set_shape([data.image_size, data.image_size, 3])
    image = preprocess_ops.normalize_image(
        image, offset=preprocess_ops.MEAN_RGB, scale=preprocess_ops.STDDEV_RGB)
    return tf.image.convert_image_dtype(image, dtype)


def _random_crop(image_bytes, data, seed):
    """A random-resized crop of the image, or its central crop when the draw is the whole
    image (as Model Garden's parser), decoded from JPEG bytes only within the crop with
    data.decode_jpeg_only."""
    if data.decode_jpeg_only:
        shape = tf.image.extract_jpeg_shape(image_bytes)
    else:
        image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
        image.set_shape([None, None, 3])
        shape = tf.shape(image)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape, tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]), seed=seed,
        min_object_covered=data.crop_area_min, aspect_ratio_range=_ASPECT_RATIO_RANGE,
        area_range=(data.crop_area_min, 1.0), max_attempts=_MAX_ATTEMPTS)
    # Model Garden compares the crop, decoded to 3 channels, with the image's shape: a
    # grayscale or CMYK JPEG (1 or 4 channels) never matches, and keeps the whole image
    crop = tf.concat([size[:2], [3]], axis=0)
    whole = tf.reduce_all(tf.equal(crop, tf.cast(shape, size.dtype)))
    if data.decode_jpeg_only:
        return tf.cond(
            whole, lambda: preprocess_ops.center_crop_image_v2(image_bytes, shape),
            lambda: tf.image.decode_and_crop_jpeg(
                image_bytes, tf.stack([begin[0], begin[1], size[0], size[1]]), channels=3))
    return tf.cond(whole, lambda: preprocess_ops.center_crop_image(image),
                   lambda: tf.slice(image, begin, size))
