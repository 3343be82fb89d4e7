"""What every recipe's program sets before TensorFlow is imported (import this first).

- `TF_USE_LEGACY_KERAS=1`: Model Garden models are tf_keras models.
- TensorFlow's C++ start-up lines (CUDA probing on a machine without a GPU, CPU feature
  notes, end-of-dataset notices) stay off the console unless `--verbose` is given; a value
  of `TF_CPP_MIN_LOG_LEVEL` set by the user wins.
"""

import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv[1:] else "3")
