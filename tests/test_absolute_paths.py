"""Every recipe's run keeps its local paths absolute (the schemas' `path_field`s, made
absolute by `driver.load_task`), so that it is evaluated, exported, resumed or used as an
init_checkpoint from any working directory; a run whose config.yaml an older version
saved with relative paths still goes on from the directory it started in."""
import dataclasses
import json
import os
import re
import types
import typing

import pytest
import tensorflow as tf
import yaml

from recipes.bert import finetune, finetune_config
from recipes.bert import pretrain
from recipes.common import checkpoints, driver, schema, task
from recipes.common import config as config_lib
from recipes.common.errors import UserError
from recipes.resnet import train as resnet_train

SHARED = "train.init_checkpoint=runs/first,export.dir=exports/a"
# (the task class, a relative --params_override, {key: what config.yaml keeps, from cwd})
RECIPES = {
    "bert": (pretrain.BertPretraining,
             json.dumps({"data": {  # (a mapping: a value holds commas)
                 "train_files": "data/train-*", "eval_files": "data/a-*,,gs://b/c-*",
                 "vocab_file": "./v/../vocab.txt", "data_dir": "prepared", "corpus": "stdlib"},
                 "train": {"init_checkpoint": "runs/first"}, "export": {"dir": "exports/a"}}),
             {"data.train_files": "{cwd}/data/train-*",
              "data.eval_files": "{cwd}/data/a-*,,gs://b/c-*",  # each glob; remote as given
              "data.vocab_file": "{cwd}/vocab.txt", "data.data_dir": "{cwd}/prepared",
              "data.corpus": "stdlib",  # the embedded corpus: a name, not a path
              "train.init_checkpoint": "{cwd}/runs/first", "export.dir": "{cwd}/exports/a"}),
    "resnet": (resnet_train.ResNetClassification,
               "data.train_file_pattern=records/train-*,data.eval_file_pattern=gs://b/val-*,"
               + SHARED,
               {"data.train_file_pattern": "{cwd}/records/train-*",
                "data.eval_file_pattern": "gs://b/val-*",
                "train.init_checkpoint": "{cwd}/runs/first", "export.dir": "{cwd}/exports/a"}),
}


def _options(params_override, model_dir=None, config_files=()):
    return types.SimpleNamespace(config_files=tuple(config_files), model_dir=model_dir,
                                 params_override=params_override)


def _with_checkpoint(model_dir):
    tf.train.Checkpoint(step=tf.Variable(1)).save(
        os.path.join(model_dir, checkpoints.CHECKPOINT_SUBDIR, "ckpt"))


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_the_saved_config_holds_absolute_paths(recipe, tmp_path, monkeypatch):
    """config.yaml kept `data.train_file_pattern: records/train-*` as given: --mode=eval
    from another directory globbed there ('matches no file'), and --mode=export wrote
    export.dir into the directory it was started in."""
    task_class, override, expected = RECIPES[recipe]
    monkeypatch.chdir(tmp_path)
    loaded = driver.load_task(task_class, _options(override), "train")
    config_lib.save_config(loaded.config, str(tmp_path / "run"))  # what training saves
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    for key, value in expected.items():
        section, name = key.split(".")
        assert saved[section][name] == value.format(cwd=tmp_path), key
        loaded_value = getattr(*config_lib.section_and_name(loaded.config, key))
        assert loaded_value == value.format(cwd=tmp_path), key


def test_finetuning_declares_its_paths_in_its_schema():
    """Its own make_paths_absolute is now the driver's, through the schema's path fields."""
    keys = config_lib.path_keys(finetune_config.BertFinetuneConfig)
    assert set(keys) == {"encoder.pretraining_dir", "data.train_file", "data.eval_file",
                         "train.init_checkpoint", "export.dir"}
    config = config_lib.load_config(finetune_config.BertFinetuneConfig, (),
                                    "encoder.pretraining_dir=runs/bert,data.train_file=t.tsv")
    config_lib.make_paths_absolute(config)
    assert config.encoder.pretraining_dir == os.path.abspath("runs/bert")
    assert config.data.train_file == os.path.abspath("t.tsv") and config.data.eval_file == ""


# A recipe's own schema: its path key declared with `path_field`, its data fixed on resume.
@dataclasses.dataclass
class _Data:
    train_file: str = config_lib.path_field("")
    name: str = ""


@dataclasses.dataclass
class _Config:
    train: schema.TrainConfig = dataclasses.field(default_factory=schema.TrainConfig)
    optimizer: schema.OptimizerConfig = dataclasses.field(default_factory=schema.OptimizerConfig)
    eval: schema.EvalConfig = dataclasses.field(default_factory=schema.EvalConfig)
    runtime: schema.RuntimeConfig = dataclasses.field(default_factory=schema.RuntimeConfig)
    export: schema.ExportConfig = dataclasses.field(default_factory=schema.ExportConfig)
    data: _Data = dataclasses.field(default_factory=_Data)


class _Task(task.Task):
    config_class = _Config
    fixed_on_resume = ("data.",)


def _old_run(run_dir, override):
    """A run as an older version left it: config.yaml with the paths as given, a checkpoint."""
    config_lib.save_config(config_lib.load_config(_Config, (), override), str(run_dir))
    _with_checkpoint(str(run_dir))


def test_a_new_recipe_gets_absolute_paths_by_declaring_path_fields(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loaded = driver.load_task(_Task, _options("data.train_file=t.tsv,data.name=n.tsv"))
    assert loaded.config.data.train_file == str(tmp_path / "t.tsv")
    assert loaded.config.data.name == "n.tsv"  # not declared a path: as given


def test_a_relative_path_given_again_on_resume_is_no_change(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    override = "data.train_file=t.tsv,export.dir=out"
    first = driver.load_task(_Task, _options(override), "train")
    config_lib.save_config(first.config, str(tmp_path / "run"))
    _with_checkpoint(str(tmp_path / "run"))
    again = driver.load_task(_Task, _options(override, str(tmp_path / "run")), "train")
    assert driver.compare_with_saved_config(again, str(tmp_path / "run"), "train") == []
    monkeypatch.chdir(tmp_path / "run")  # from elsewhere, relative: another file, refused
    elsewhere = driver.load_task(_Task, _options(override, str(tmp_path / "run")), "train")
    with pytest.raises(UserError, match="^data.train_file was '.*/t.tsv' in the run in .*, now "
                                        "'.*/run/t.tsv': a run keeps its data.\\* keys"):
        driver.compare_with_saved_config(elsewhere, str(tmp_path / "run"), "train")


@pytest.mark.parametrize("mode", ["train", "eval", "export"])
def test_an_old_run_saved_with_relative_paths_goes_on_from_its_directory(
        mode, tmp_path, monkeypatch):
    """Made absolute now, its relative data.train_file (a key the run keeps) would be a
    change from its config.yaml, refused: it is compared as the place it names."""
    monkeypatch.chdir(tmp_path)
    _old_run(tmp_path / "run", "data.train_file=data/t.tsv,train.init_checkpoint=first")
    for given in ("", "data.train_file=data/t.tsv", f"data.train_file={tmp_path}/data/t.tsv"):
        # its own config.yaml (no --config_file), as given again, or given absolute
        loaded = driver.load_task(_Task, _options(given, "run"), mode)
        assert loaded.config.data.train_file == str(tmp_path / "data" / "t.tsv")
        assert driver.compare_with_saved_config(loaded, "run", mode) == []
        assert driver.saved_config_changes(loaded, "run") == []


def test_an_old_relative_path_refused_from_elsewhere_says_where_to_run(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    _old_run(tmp_path / "run", "data.train_file=data/t.tsv")
    monkeypatch.chdir(tmp_path / "elsewhere")
    loaded = driver.load_task(_Task, _options(f"data.train_file={tmp_path}/data/t.tsv",
                                              str(tmp_path / "run")), "train")
    with pytest.raises(UserError) as error:
        driver.compare_with_saved_config(loaded, str(tmp_path / "run"), "train")
    assert str(error.value).endswith(
        "keep data.train_file='data/t.tsv' or use a new --model_dir ('data/t.tsv' is relative, "
        "saved so by an older version: if the run started in another directory, run from "
        "there)")


def test_a_saved_absolute_path_spelled_unnormalised_is_not_called_relative(tmp_path,
                                                                           monkeypatch):
    _old_run(tmp_path / "run", f"data.train_file={tmp_path}/x/../t.tsv")
    monkeypatch.chdir(tmp_path)
    loaded = driver.load_task(_Task, _options("data.train_file=other.tsv", str(tmp_path / "run")),
                              "train")
    with pytest.raises(UserError) as error:
        driver.compare_with_saved_config(loaded, str(tmp_path / "run"), "train")
    assert str(error.value).endswith("or use a new --model_dir"), str(error.value)


def test_an_old_runs_own_relative_path_read_from_elsewhere_is_said(tmp_path, monkeypatch):
    """Without --config_file, an old run's relative key is read from the current directory
    and nothing refuses it (no key is given): a `config:` line says where it is read; none
    for a key given anew, nor for an absolute one spelled unnormalised."""
    (tmp_path / "elsewhere").mkdir()
    _old_run(tmp_path / "run", f"data.train_file=data/t.tsv,export.dir={tmp_path}/a/../out")
    monkeypatch.chdir(tmp_path / "elsewhere")
    run = str(tmp_path / "run")
    own = _options("", run)
    assert driver.saved_relative_paths(driver.load_task(_Task, own, "eval"), own) == [
        f"config: data.train_file='data/t.tsv' in {run}/config.yaml is relative (saved so by "
        f"an older version): read as '{tmp_path}/elsewhere/data/t.tsv', from the current "
        "directory; run from the directory the run started in if that is another"]
    given = _options(f"data.train_file={tmp_path}/data/t.tsv", run)
    assert driver.saved_relative_paths(driver.load_task(_Task, given, "eval"), given) == []


# What the schemas' path keys were found by before they were declared: their names.
NAMED_AS_A_PATH = re.compile(r"(dir|_file|_files|_pattern|checkpoint|corpus)$")


def _string_keys(schema_cls, prefix=""):
    hints = typing.get_type_hints(schema_cls)
    for field in dataclasses.fields(schema_cls):
        if dataclasses.is_dataclass(hints[field.name]):
            yield from _string_keys(hints[field.name], f"{prefix}{field.name}.")
        elif hints[field.name] is str:
            yield f"{prefix}{field.name}"


@pytest.mark.parametrize("task_class", [pretrain.BertPretraining,
                                        resnet_train.ResNetClassification,
                                        finetune.BertFinetuneTask])
def test_every_key_named_as_a_path_is_declared_a_path_field(task_class):
    """A path key declared a plain `str` loses the absolute path, the `~` refusal and the
    comparison by place on resume, silently."""
    named = {key for key in _string_keys(task_class.config_class) if NAMED_AS_A_PATH.search(key)}
    assert named and named <= set(config_lib.path_keys(task_class.config_class)), (
        named - set(config_lib.path_keys(task_class.config_class)))


@pytest.mark.parametrize("value, names, several, expected", [
    ("a/*.txt", (), False, "{cwd}/a/*.txt"),  # a glob keeps its *
    ("a,b", (), False, "{cwd}/a,b"),  # one path (a comma in its name)
    ("a-*, b-*", (), True, "{cwd}/a-*,{cwd}/b-*"),
    ("gs://b/a,c", (), True, "gs://b/a,{cwd}/c"),
    ("file:///x/y", (), False, "file:///x/y"),
    ("", (), False, ""),
    ("stdlib", ("stdlib",), False, "stdlib"),
    ("/abs/../x", (), False, "/x")])
def test_absolute_path(value, names, several, expected):
    assert config_lib.absolute_path(value, names, several) == expected.format(cwd=os.getcwd())


@dataclasses.dataclass
class _Named:
    source: str = config_lib.path_field("builtin", names=("builtin", "digits"))


@pytest.mark.parametrize("key, value, expected", [
    ("source", "/here/builtn", "builtin"), ("source", "/here/Digits/", "digits"),
    ("source", "/here/DIGITS", "digits"), ("source", "/here/builtin_texts", None),
    ("source", "/here/texts", None), ("source", "", None),
    ("data.corpus", "/here/stdlibb", "stdlib"), ("data.corpus", "/here/Stdlib", "stdlib"),
    ("data.vocab_file", "/here/stdlibb", None)])  # a key without names
def test_a_misspelled_name_of_a_path_key_is_found_from_its_names(key, value, expected):
    """The "did you mean" of a path that matches nothing (data.corpus=stdlibb): the key's
    own `path_field(names=...)`, its value's last component compared case ignored."""
    schema_cls = _Named if key == "source" else pretrain.BertPretraining.config_class
    assert config_lib.misspelled_name(schema_cls, key, value) == expected
