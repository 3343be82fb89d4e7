"""The files the project writes and reads back (a run's config.yaml, a BERT preparation's
metadata.json, a conversion's dataset_info.json), damaged or replaced by hand: one line
naming the file, never a traceback (`recipes.common.storage.read_mapping`)."""

import os
import types

import pytest

from recipes.bert import data as bert_data
from recipes.bert import ecosystem_export
from recipes.common import storage
from recipes.common.errors import UserError
from recipes.resnet import convert

CASES = [  # (file name, content, the problem the line gives)
    ("config.yaml", "model: [unclosed\n",
     "is not valid YAML (expected ',' or ']', but got '<stream end>' at line 2, column 1)"),
    ("config.yaml", "- a list\n", "holds a list, not a mapping"),
    ("config.yaml", "", "holds a NoneType, not a mapping"),
    ("metadata.json", '{"vocab_file": ', "is not valid JSON (line 1: Expecting value)"),
    ("metadata.json", "\xff\xfe", "is not UTF-8 text (byte 0)"),
    ("metadata.json", "[1, 2]", "holds a list, not a mapping"),
]


@pytest.mark.parametrize("name, content, problem", CASES)
def test_a_damaged_file_is_one_line_naming_it(tmp_path, name, content, problem):
    path = tmp_path / name
    path.write_text(content, encoding="latin-1")
    with pytest.raises(UserError) as caught:
        storage.read_mapping(str(path), advice="write it again")
    assert str(caught.value).startswith(f"{path} {problem}"), str(caught.value)
    assert str(caught.value).endswith("; write it again") and "\n" not in str(caught.value)


def test_a_directory_or_a_missing_key_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "info.json").mkdir()
    with pytest.raises(UserError, match=rf"^{tmp_path}/info.json cannot be read \("):
        storage.read_mapping(str(tmp_path / "info.json"))
    (tmp_path / "metadata.json").write_text('{"seq_length": 128}')
    with pytest.raises(UserError, match=r"metadata.json lacks 'vocab_file'$"):
        storage.read_mapping(str(tmp_path / "metadata.json"), ("seq_length", "vocab_file"))
    assert storage.read_mapping(str(tmp_path / "metadata.json"), ("seq_length",)) == {
        "seq_length": 128}


PRETRAINING_CONFIG = """model: {hidden_size: 16, num_layers: 1, num_attention_heads: 2,
  intermediate_size: 32, max_sequence_length: 32, type_vocab_size: 2, dropout_rate: 0.1,
  attention_dropout_rate: 0.1, initializer_range: 0.02}
data: {seq_length: 32}
"""


def test_ecosystem_export_names_a_damaged_config_or_metadata_of_the_run(tmp_path):
    (tmp_path / "config.yaml").write_text("model: [unclosed\n")
    with pytest.raises(UserError, match=r"config.yaml is not valid YAML .*; give the "
                                        r"--model_dir of a pretraining run"):
        ecosystem_export.read_pretraining_run(str(tmp_path))
    (tmp_path / "config.yaml").write_text(PRETRAINING_CONFIG)
    (tmp_path / "data").mkdir()
    for content, problem in (("{", "is not valid JSON"), ("{}", "lacks 'vocab_file'")):
        (tmp_path / "data" / "metadata.json").write_text(content)
        with pytest.raises(UserError, match=rf"data/metadata.json {problem}"):
            ecosystem_export.read_pretraining_run(str(tmp_path))


def test_a_damaged_dataset_info_of_a_conversion_is_one_line(tmp_path):
    (tmp_path / convert.INFO_FILE).write_text('{"class_names": ["a"]')
    with pytest.raises(UserError, match=rf"{convert.INFO_FILE} is not valid JSON .*; .*convert "
                                        "the data again into a new directory$"):
        convert.read_info(str(tmp_path))


def test_a_damaged_metadata_beside_configured_bert_files_is_one_line(tmp_path):
    (tmp_path / "metadata.json").write_text("not json")
    config = types.SimpleNamespace(seq_length=128, max_predictions_per_seq=20)
    files = {"train_files": [os.path.join(tmp_path, "train-00000-of-00001.tfrecord")]}
    with pytest.raises(UserError, match=r"metadata.json is not valid JSON .*; it is the last "
                                        "file a preparation writes"):
        bert_data.check_against_preparation(config, files, pieces=[])
