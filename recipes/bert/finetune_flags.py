"""Fine-tuning's flag besides the shared ones, in a module without TensorFlow: the program
defines it before TensorFlow loads (recipes/common/startup.py's `check_command_line`)."""

from recipes.common import flags as flags_lib

COMPARE_FLAG = flags_lib.ExtraFlag(
    "compare_with_random_init",
    "Also fine-tune an encoder of the same shape from random weights, with the same "
    "config, and print both held-out results (runs in <model_dir>/pretrained and "
    "<model_dir>/random_init).")
