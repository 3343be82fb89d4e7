"""A path that starts with '~' (`--model_dir=~/run`: a shell expands '~' only at the start of
a word, and nothing expands it in a config) is one line naming the setting and the full
path to give, before any work; it would otherwise name a directory called '~' in the
working directory (recipes/common/storage.py: refuse_unexpanded_home)."""
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from recipes.bert import config as bert_config
from recipes.common import config as config_lib
from recipes.common.errors import UserError
from recipes.resnet import config as resnet_config

TINY_BERT = os.path.join(REPO_ROOT, "configs", "bert", "tiny_cpu.yaml")


@pytest.mark.parametrize("schema_cls, key", [
    (bert_config.BertPretrainingConfig, "data.train_files"),
    (bert_config.BertPretrainingConfig, "data.corpus"),
    (bert_config.BertPretrainingConfig, "data.vocab_file"),
    (bert_config.BertPretrainingConfig, "train.init_checkpoint"),
    (resnet_config.ResNetConfig, "data.eval_file_pattern"),
])
def test_a_path_key_starting_with_a_tilde_names_the_key_and_the_full_path(schema_cls, key):
    section, name = key.split(".")
    with pytest.raises(UserError) as error:  # a mapping: the value holds a comma
        config_lib.load_config(schema_cls, [], f"{{{section}: {{{name}: '/data/a-*,~/data/b-*'}}}}")
    home = os.path.expanduser("~")
    assert str(error.value) == (
        f"--params_override: config key {key}=/data/a-*,~/data/b-*: '~' is not expanded here "
        "(a shell expands it only at the start of a word, not after --flag= or in a config); "
        f"give the full path, such as {home}/data/b-*")


def test_a_tilde_elsewhere_in_a_path_or_in_another_key_is_kept():
    config = config_lib.load_config(bert_config.BertPretrainingConfig, [],
                                    "data.train_files=/data/~x/a-*,optimizer.name=lamb")
    assert config.data.train_files == "/data/~x/a-*"


@pytest.mark.parametrize("program, flag", [
    ("recipes.bert.pretrain", f"--config_file={TINY_BERT}"),
    ("recipes.bert.prepare_data", "--input_path=/nonexistent"),
    ("recipes.resnet.convert", "--digits"),
])
def test_a_model_or_output_dir_flag_with_a_tilde_is_refused_before_anything_is_written(
        tmp_path, program, flag):
    directory = "--model_dir" if program == "recipes.bert.pretrain" else "--output_dir"
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    env["HOME"] = str(tmp_path / "home")
    result = subprocess.run(
        [sys.executable, "-m", program, flag, f"{directory}=~/run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: {directory}=~/run: '~' is not expanded here (a shell expands it only at the "
        f"start of a word, not after --flag= or in a config); give the full path, such as "
        f"{tmp_path}/home/run"]
    # (Keras makes $HOME/.keras as it is imported)
    assert not os.path.exists(tmp_path / "~") and not os.path.exists(tmp_path / "home" / "run")
