"""A run whose --model_dir is on a remote file system (gs:// on a TPU) resumes and is
evaluated: its config.yaml, written through TensorFlow's file systems, was read back with
Python's `open`, so every run after the first into a gs:// --model_dir stopped with "its
config.yaml is damaged (... does not exist)". TensorFlow's in-memory file system (ram://)
stands in for Cloud Storage here: it is reached only through `tf.io.gfile`, as gs:// is."""
import json
import tempfile

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
def test_a_run_on_a_remote_model_dir_resumes_and_is_evaluated(capsys, monkeypatch, tmp_path):
    from recipes.resnet.train import ResNetClassification

    # a remote run's tensorflow.log goes to a new local temporary directory: into tmp_path
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

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


def test_a_bert_preparation_into_a_remote_data_dir_is_refused_and_one_there_is_reused():
    """It was written with Python's files into a local directory named `gs:/...`; a
    finished preparation copied to Cloud Storage was not seen (os.path.exists)."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import BertPretrainingConfig

    data_config = BertPretrainingConfig().data
    with pytest.raises(UserError, match=r"^data.data_dir=ram://bert_run/data \(by default "
                                        r"<model_dir>/data\) is remote, and a preparation "
                                        r"writes local files"):
        data_lib.check_corpus(data_config, "ram://bert_run")
    with tf.io.gfile.GFile("ram://bert_run/data/metadata.json", "w") as f:  # one copied there
        json.dump({"seq_length": data_config.seq_length,
                   "max_predictions_per_seq": data_config.max_predictions_per_seq}, f)
    data_lib.check_corpus(data_config, "ram://bert_run")  # reused: nothing to refuse
    assert data_lib.finished_preparation("ram://bert_run/data") == (
        "ram://bert_run/data/metadata.json")


def test_a_file_url_model_dir_is_the_local_path_it_names(monkeypatch):
    """--model_dir=file:///... (a URL of this machine's file system) is the local path for the
    whole run: a BERT run with one prepared its corpus into ./file:/... and stopped on Beam's
    "Unable to get filesystem" traceback, and a refused run left its directory behind."""
    import sys

    from absl import flags

    if "model_dir" not in flags.FLAGS:
        flags_lib.define_flags()
    monkeypatch.setattr(sys, "argv", ["program", "--model_dir=file:///tmp/a_run"])
    flags.FLAGS(sys.argv)
    try:
        assert flags_lib.read_options(["program"]).model_dir == "/tmp/a_run"
    finally:
        flags.FLAGS.unparse_flags()
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    assert data_lib.data_directory(DataConfig(data_dir="file:///tmp/d"), "/unused") == "/tmp/d"
