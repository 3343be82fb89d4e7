"""What a ResNet run checks of its data before any work: a glob that matches a directory,
two conversions whose class ids mean other classes, and the embedded digits' split kept by
a resumed run (its held-out digits must stay out of training)."""
import json

import pytest
import tensorflow as tf

from recipes.common import checkpoints
from recipes.common import config as config_lib
from recipes.common import driver
from recipes.common.errors import UserError
from recipes.resnet import convert
from recipes.resnet import data as data_lib
from recipes.resnet import input as input_lib
from recipes.resnet.config import ResNetConfig
from recipes.resnet.train import ResNetClassification


def test_a_glob_matching_a_directory_is_named(tmp_path):
    # the directory was read as a file: FailedPreconditionError's traceback, exit 1
    (tmp_path / "records").mkdir()
    with pytest.raises(UserError) as error:
        input_lib.list_files(str(tmp_path / "records"), "data.train_file_pattern")
    assert str(error.value) == (
        f"data.train_file_pattern='{tmp_path / 'records'}' matches the directory "
        f"{tmp_path / 'records'}; give a glob of its TFRecord files, such as "
        f"{tmp_path / 'records'}/train-*")


def _conversion(directory, split, class_names):
    """A directory as the converter leaves it, as far as the listing reads it."""
    directory.mkdir()
    (directory / f"{split}-00000-of-00001").write_bytes(b"")
    (directory / convert.INFO_FILE).write_text(json.dumps(
        {"class_names": class_names, "label_offset": convert.LABEL_OFFSET}))
    return str(directory / f"{split}-*")


def _data(train_pattern, eval_pattern):
    return config_lib.load_config(ResNetConfig, (), (
        f"data.embedded_digits=false,data.train_file_pattern={train_pattern},"
        f"data.eval_file_pattern={eval_pattern},data.num_classes=3")).data


@pytest.mark.parametrize("mode", ["train_and_eval", "eval"])
def test_conversions_of_other_class_folders_are_refused(tmp_path, mode):
    """Each conversion numbers its own sorted class folders: a held-out set of cat and dog
    scored a model trained on bird, cat and dog with cat as id 0 (id 1 in training), with
    no word. An evaluation alone compares with the training's conversion too."""
    train = _conversion(tmp_path / "records", "train", ["bird", "cat", "dog"])
    held_out = _conversion(tmp_path / "valrec", "validation", ["cat", "dog"])
    with pytest.raises(UserError) as error:
        data_lib.list_data_files(_data(train, held_out), mode)
    assert str(error.value) == (
        f"the records in {tmp_path / 'records'} and {tmp_path / 'valrec'} come from "
        "conversions of other class folders: class id 0 is 'bird' in one, 'cat' in the other "
        f"(their {convert.INFO_FILE}); convert both splits in one conversion "
        "(--validation_fraction) or from folders of the same classes")
    same = _conversion(tmp_path / "same", "validation", ["bird", "cat", "dog"])
    listed = data_lib.list_data_files(_data(train, same), mode)
    assert [len(listed["train"]), len(listed["eval"])] == [int(mode != "eval"), 1]


@pytest.mark.parametrize("key, value", [("data.seed", 1),
                                        ("data.digits_validation_fraction", 0.3)])
def test_a_resumed_run_keeps_the_digits_split(tmp_path, key, value):
    """The advice of the digits' "other settings" line (delete them) resumed the run on a
    new split, evaluating it on digits it had trained on."""
    _check_a_resumed_run_keeps(tmp_path, "data.embedded_digits=true", key, value)


def test_a_resumed_run_keeps_its_label_offset(tmp_path):
    """A changed data.label_offset (files without a dataset_info.json to compare with)
    shifted every class id by one, in training further and in the evaluation."""
    _check_a_resumed_run_keeps(tmp_path, "data.train_file_pattern=/data/train-*",
                               "data.label_offset", 0)


def _check_a_resumed_run_keeps(model_dir, overrides, key, value):
    config_lib.save_config(config_lib.load_config(ResNetConfig, (), overrides), str(model_dir))
    tf.train.Checkpoint(step=tf.Variable(1)).save(
        str(model_dir / checkpoints.CHECKPOINT_SUBDIR / "ckpt"))
    changed = ResNetClassification(config_lib.load_config(
        ResNetConfig, (), f"{overrides},{key}={value}"))
    with pytest.raises(UserError, match=(
            rf"^{key} was .* in the run in {model_dir}, now {value}: a run keeps {key} from")):
        driver.compare_with_saved_config(changed, str(model_dir), "train")


def test_digits_of_other_settings_name_the_setting_and_the_safe_fix(tmp_path):
    settings = dict(validation_fraction=0.2, num_shards=1, jpeg_quality=95, seed=0)
    (tmp_path / convert.INFO_FILE).write_text(json.dumps({"digits_settings": settings}))
    with pytest.raises(UserError) as error:
        data_lib.prepare_digits(str(tmp_path), **{**settings, "seed": 1})
    assert str(error.value) == (
        f"{tmp_path} holds digits converted with other settings (seed 0 (now 1)); use a new "
        "--model_dir (deleting them would evaluate the run on digits it trained on)")
