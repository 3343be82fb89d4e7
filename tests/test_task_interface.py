"""A recipe's `Task` subclass that leaves out what its mode needs is refused in one line before
any work, not with a NotImplementedError after the training; so are a schema without a shared
section, a model that is not a tf_keras one, training elements that are not the plan's
batches, and an evaluation that is not a dict."""

import dataclasses
import re
import types

import pytest

from recipes.common import driver, schema, task
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


# A recipe author's mistakes the driver names in one line (a recipe audit met each as a
# traceback: an AttributeError mid-run, an IndexError in the accumulation, an AttributeError
# after the evaluation).


@dataclasses.dataclass
class _WithoutExport:
    train: schema.TrainConfig = dataclasses.field(default_factory=schema.TrainConfig)
    optimizer: schema.OptimizerConfig = dataclasses.field(default_factory=schema.OptimizerConfig)
    eval: schema.EvalConfig = dataclasses.field(default_factory=schema.EvalConfig)
    runtime: schema.RuntimeConfig = dataclasses.field(default_factory=schema.RuntimeConfig)


def test_a_schema_without_a_shared_section_is_named():
    class Recipe(_TrainsButDoesNotExport):
        config_class = _WithoutExport

    options = types.SimpleNamespace(config_files=(), params_override="", model_dir=None)
    with pytest.raises(UserError, match=r"^_WithoutExport has no section export: "
                                        r"schema.ExportConfig; every recipe's schema holds"):
        driver.load_task(Recipe, options)


@pytest.mark.parametrize("batching, wrong", [
    (lambda dataset: dataset, "[]"),  # not batched
    (lambda dataset: dataset.batch(3, drop_remainder=True), "[3]"),  # another size
    (lambda dataset: dataset.batch(4, drop_remainder=True), None),
    (lambda dataset: dataset.batch(4), None),  # (a last partial batch: shape None)
])
def test_training_elements_that_are_not_batches_of_the_plan_are_named(batching, wrong):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    class Recipe(_TrainsButDoesNotExport):
        def train_replica_dataset(self, input_context, plan, seed, steps_to_skip):
            return batching(tf.data.Dataset.range(100).repeat())

    recipe = Recipe(types.SimpleNamespace(train=types.SimpleNamespace(checkpoint_every=2,
                                                                       seed=0)))
    plan = types.SimpleNamespace(per_replica_batch_size=4)
    make = lambda: task.train_dataset(recipe, tf.distribute.get_strategy(), plan, 0, 4)
    if wrong is None:
        make()
        return
    with pytest.raises(UserError, match=re.escape(
            f"Recipe.train_replica_dataset gives elements of shape {wrong}, not batches of "
            "plan.per_replica_batch_size=4: end it with .batch(")):
        make()


def test_an_evaluation_that_is_not_a_dict_is_named():
    recipe = _TrainsButDoesNotExport(None)
    assert driver.metric_values(recipe, {"loss": 1}) == {"loss": 1.0}
    with pytest.raises(UserError, match=r"^_TrainsButDoesNotExport.evaluate returned a list, "
                                        r"not a dict of metric name -> value"):
        driver.metric_values(recipe, [0.5, 0.9])


def test_a_model_of_keras_3_is_named_not_a_type_error_traceback():
    """`build_model` returning a Keras 3 model (`import keras` where tf_keras was meant) ended
    in a TypeError's traceback from the accumulation wrapper."""
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    class Recipe(_TrainsButDoesNotExport):
        def build_model(self):
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])

    with pytest.raises(UserError, match=re.escape(
            "Recipe.build_model returned a keras.src.models.sequential.Sequential, not a "
            "tf_keras model, which the driver trains: build it with tf_keras")):
        driver.compile_model(Recipe(None), tf.distribute.get_strategy(), None)
