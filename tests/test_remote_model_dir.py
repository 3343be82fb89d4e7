"""A run whose --model_dir is on a remote file system (gs:// on a TPU) resumes and is
evaluated: its config.yaml, written through TensorFlow's file systems, was read back with
Python's `open`, so every run after the first into a gs:// --model_dir stopped with "its
config.yaml is damaged (... does not exist)". TensorFlow's in-memory file system (ram://)
stands in for Cloud Storage here: it is reached only through `tf.io.gfile`, as gs:// is."""
import json

import pytest
import tensorflow as tf
import tf_keras

from recipes.common import config as config_lib
from recipes.common import driver
from recipes.common import flags as flags_lib
from recipes.common.errors import UserError
from recipes.resnet.config import ResNetConfig

STEPS_2 = "train.steps=2,train.checkpoint_every=1,optimizer.warmup_steps=1,export.enabled=false"


def test_a_config_file_on_a_remote_file_system_is_read(tmp_path):
    path = "ram://configs/resnet.yaml"
    with tf.io.gfile.GFile(path, "w") as f:
        f.write("train:\n  steps: 7\n")
    assert config_lib.load_config(ResNetConfig, [path]).train.steps == 7
    with pytest.raises(UserError, match="config file 'ram://configs/none.yaml' does not exist"):
        config_lib.load_config(ResNetConfig, ["ram://configs/none.yaml"])


def _options(model_dir, mode, params_override):
    return flags_lib.RunOptions(
        config_files=("configs/resnet/tiny_cpu.yaml",), params_override=params_override,
        model_dir=model_dir, mode=mode, tpu="", strategy="", communication="auto",
        deterministic=False)


@pytest.mark.slow  # three tiny ResNet runs
def test_a_run_on_a_remote_model_dir_resumes_and_is_evaluated(capsys):
    from recipes.resnet.train import ResNetClassification

    model_dir = "ram://runs/resnet"
    driver.run(ResNetClassification, _options(model_dir, "train", STEPS_2))
    tf_keras.backend.clear_session()
    driver.run(ResNetClassification,
               _options(model_dir, "train", STEPS_2.replace("steps=2", "steps=3")))
    tf_keras.backend.clear_session()
    results = driver.run(ResNetClassification, _options(model_dir, "eval", STEPS_2))
    out = capsys.readouterr().out
    assert f"restored {model_dir}/checkpoints/ckpt-2 at step 2" in out, out
    assert f"restored {model_dir}/checkpoints/ckpt-3 at step 3" in out, out
    assert "config: train.steps 2 -> 3" in out and "config: train.steps 3 -> 2" in out, out
    with tf.io.gfile.GFile(f"{model_dir}/results.json") as f:
        assert json.load(f)["eval"]["top_1_accuracy"] == pytest.approx(
            results["top_1_accuracy"])
