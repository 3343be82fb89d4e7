"""SavedModel export: a serving signature from encoded JPEG bytes to class probabilities.

    serving_default(image_bytes: tf.string [N]) -> {"probabilities": float32 [N, num_classes],
                                                    "classes": int32 [N]}

Each image goes through the recipe's eval preprocessing (Model Garden's classification
Parser: central crop, resize, per-channel normalisation), so a served image gets exactly
the numbers the held-out evaluation saw. Class i is line i of the converter's labels.txt
(copied into the export's assets/ when known). The export is atomic
(`recipes.common.export.export_saved_model`).

Use it:
    served = tf.saved_model.load(export_dir).signatures["serving_default"]
    served(image_bytes=tf.constant([open("digit.jpg", "rb").read()]))["probabilities"]
"""

import dataclasses
import os

import tensorflow as tf

from recipes.common import export as export_common
from recipes.resnet import input as input_lib

SIGNATURE_INPUT = "image_bytes"


class ServingModule(tf.Module):
    """The trained classifier behind a bytes-in, probabilities-out signature."""

    def __init__(self, model, data_config, jpeg_only=True, labels_file=None):
        super().__init__()
        self.model = model
        self._image_size = data_config.image_size
        serving_data = dataclasses.replace(data_config, decode_jpeg_only=jpeg_only)
        self._parse = input_lib.make_parser(serving_data, "float32").parse_fn(is_training=False)
        if labels_file:
            self.labels = tf.saved_model.Asset(labels_file)

    def preprocess(self, image_bytes):
        """One encoded image -> the normalised [size, size, 3] float32 model input."""
        decoded = {
            "image/encoded": image_bytes,
            input_lib.LABEL_KEY: tf.constant(0, tf.int64),  # the Parser wants one; unused
        }
        image, _ = self._parse(decoded)
        return image

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=SIGNATURE_INPUT)])
    def serve(self, image_bytes):
        images = tf.map_fn(
            self.preprocess,
            image_bytes,
            fn_output_signature=tf.TensorSpec([self._image_size, self._image_size, 3], tf.float32),
        )
        logits = tf.cast(self.model(images, training=False), tf.float32)
        return {
            "probabilities": tf.nn.softmax(logits),
            "classes": tf.argmax(logits, axis=-1, output_type=tf.int32),
        }


def export(model, data_config, export_dir, jpeg_only=True, labels_file=None):
    """Writes the SavedModel to `export_dir` atomically; returns `export_dir`."""
    if labels_file and not tf.io.gfile.exists(labels_file):
        labels_file = None
    module = ServingModule(model, data_config, jpeg_only, labels_file)
    return export_common.export_saved_model(
        export_dir, module, signatures={"serving_default": module.serve}
    )


def labels_file_for(data_dir):
    """`data_dir/labels.txt` (the converter's class list), or None."""
    path = os.path.join(data_dir, "labels.txt")
    return path if tf.io.gfile.exists(path) else None
