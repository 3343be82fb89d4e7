"""A recipe's `Task` subclass that leaves out what its mode needs is refused in one line before
any work, not with a NotImplementedError after the training."""

import types

import pytest

from recipes.common import driver, task
from recipes.common.errors import UserError


class _TrainsButDoesNotExport(task.Task):
    def build_model(self):
        raise AssertionError("not called by the checks")

    def compile_arguments(self):
        raise AssertionError("not called by the checks")

    def train_replica_dataset(self, input_context, plan, seed, steps_to_skip):
        raise AssertionError("not called by the checks")


def _config(export_enabled):
    return types.SimpleNamespace(export=types.SimpleNamespace(enabled=export_enabled))


@pytest.mark.parametrize("mode, missing", [
    ("train", "export"),
    ("train_and_eval", "evaluate, export"),
    ("eval", "evaluate"),
    ("export", "export"),
])
def test_a_method_the_mode_calls_and_the_task_lacks_is_named(mode, missing):
    with pytest.raises(UserError) as error:
        driver.check_task_methods(_TrainsButDoesNotExport(_config(True)), mode)
    assert str(error.value).startswith(
        f"_TrainsButDoesNotExport does not implement {missing}, which --mode={mode} calls")


def test_training_without_export_passes_when_the_export_is_off():
    driver.check_task_methods(_TrainsButDoesNotExport(_config(False)), "train")
    with pytest.raises(UserError, match="export.enabled=false"):
        driver.check_task_methods(_TrainsButDoesNotExport(_config(True)), "train")


def test_a_task_without_a_config_schema_is_named():
    options = types.SimpleNamespace(config_files=(), params_override="")
    with pytest.raises(UserError, match="_TrainsButDoesNotExport.config_class is not set"):
        driver.load_task(_TrainsButDoesNotExport, options)


@pytest.mark.parametrize("module, class_name", [
    ("recipes.bert.pretrain", "BertPretraining"),
    ("recipes.resnet.train", "ResNetClassification"),
    ("recipes.bert.finetune", "BertFinetuneTask"),
])
def test_the_recipes_implement_what_every_mode_calls(module, class_name):
    import importlib

    task_class = getattr(importlib.import_module(module), class_name)
    recipe = task_class(task_class.config_class())
    for mode in ("train", "eval", "train_and_eval", "export"):
        driver.check_task_methods(recipe, mode)
