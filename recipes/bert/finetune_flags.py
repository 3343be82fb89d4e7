"""Fine-tuning's flag besides the shared ones, in a module without TensorFlow: the program
defines it before TensorFlow loads (recipes/common/startup.py's `check_command_line`)."""

from recipes.common import flags as flags_lib

# The subdirectories of --model_dir that --compare_with_random_init writes its two runs into
# (the pretrained encoder's, the random one's); without the flag, the program names it when
# it finds them (finetune_compare.check_not_a_comparison)
COMPARED_RUNS = ("pretrained", "random_init")

COMPARE_FLAG = flags_lib.ExtraFlag(
    "compare_with_random_init",
    "Also fine-tune an encoder of the same shape from random weights, with the same "
    "config, and print both held-out results (runs in "
    + " and ".join(f"<model_dir>/{name}" for name in COMPARED_RUNS) + ").")
