"""A recipe's `Task` subclass that leaves out what its mode needs is refused in one line before
any work, not with a NotImplementedError after the training; so are a schema without a shared
section, a model that is not a tf_keras one, training elements that are not the plan's
batches, and an evaluation that is not a dict."""

import dataclasses
import sys
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


def test_a_subclassed_shared_section_of_a_schema_with_text_annotations_is_taken(
        tmp_path, monkeypatch):
    """`from __future__ import annotations` makes every annotation text: a section typed
    `MyTrain(schema.TrainConfig)` was refused as "has no section train"."""
    import importlib.util

    (tmp_path / "text_schema.py").write_text(
        "from __future__ import annotations\n"
        "import dataclasses\n"
        "from recipes.common import schema\n\n\n"
        "@dataclasses.dataclass\n"
        "class MyTrain(schema.TrainConfig):\n"
        "    extra: int = 3\n\n\n"
        "@dataclasses.dataclass\n"
        "class Config:\n"
        "    train: MyTrain = dataclasses.field(default_factory=MyTrain)\n"
        "    optimizer: schema.OptimizerConfig = dataclasses.field(\n"
        "        default_factory=schema.OptimizerConfig)\n"
        "    eval: schema.EvalConfig = dataclasses.field(default_factory=schema.EvalConfig)\n"
        "    runtime: schema.RuntimeConfig = dataclasses.field(\n"
        "        default_factory=schema.RuntimeConfig)\n"
        "    export: schema.ExportConfig = dataclasses.field(\n"
        "        default_factory=schema.ExportConfig)\n")
    spec = importlib.util.spec_from_file_location("text_schema", tmp_path / "text_schema.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "text_schema", module)  # (dataclasses looks it up)
    spec.loader.exec_module(module)
    assert isinstance(dataclasses.fields(module.Config)[0].type, str)  # the case at hand

    class Recipe(_TrainsButDoesNotExport):
        config_class = module.Config

    driver._check_shared_sections(Recipe)  # no UserError
    with pytest.raises(UserError, match="has no section export"):
        driver._check_shared_sections(type("R", (Recipe,), {"config_class": _WithoutExport}))


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


def test_a_training_dataset_known_to_end_is_named():
    """Without .repeat() a run trained part of its steps and exited 0."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    class Recipe(_TrainsButDoesNotExport):
        def train_replica_dataset(self, input_context, plan, seed, steps_to_skip):
            return tf.data.Dataset.range(100).batch(4, drop_remainder=True)

    recipe = Recipe(types.SimpleNamespace(train=types.SimpleNamespace(checkpoint_every=2,
                                                                       seed=0)))
    plan = types.SimpleNamespace(per_replica_batch_size=4)
    with pytest.raises(UserError, match=re.escape(
            "Recipe.train_replica_dataset gives 25 batches, then ends: training reads it "
            "endlessly")):
        task.train_dataset(recipe, tf.distribute.get_strategy(), plan, 0, 4)


def test_training_data_that_ends_unannounced_is_one_line_and_so_is_the_rerun(tmp_path):
    """A filter hides the end from tf.data's cardinality: 10 batches for 16 steps. Keras
    stopped the fit with a line in tensorflow.log (exit status 0); the rerun, from the
    checkpoint of step 10, met an empty dataset: a ValueError's traceback."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tf_keras  # pylint: disable=import-outside-toplevel

    from recipes.common import training  # pylint: disable=import-outside-toplevel

    def make(first_step, end_step):
        del end_step
        return (tf.data.Dataset.range(40).filter(lambda i: True).skip(4 * first_step)
                .map(lambda i: (tf.ones([3]), tf.ones([1]))).batch(4, drop_remainder=True))

    for _ in range(2):  # the run, then the same command again
        model = tf_keras.Sequential([tf_keras.layers.Dense(1)])
        model.build((None, 3))
        model.compile(optimizer=tf_keras.optimizers.SGD(0.01), loss="mse")
        with pytest.raises(UserError, match=re.escape(
                "the training data ended before step 16 (at step ")):
            training.train(model, make, model_dir=str(tmp_path), total_steps=16,
                           checkpoint_every=8, global_batch_size=4, verbose=0)


def test_a_callback_that_stops_training_is_not_taken_for_data_that_ended(tmp_path):
    """EarlyStopping, TerminateOnNaN and the like set `stop_training`; running out of data
    does not."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tf_keras  # pylint: disable=import-outside-toplevel

    from recipes.common import training  # pylint: disable=import-outside-toplevel

    def make(first_step, end_step):
        del first_step, end_step
        return (tf.data.Dataset.range(40).repeat()
                .map(lambda i: (tf.ones([3]), tf.ones([1]))).batch(4, drop_remainder=True))

    stop_at_3 = tf_keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: (
        setattr(model, "stop_training", True) if batch == 2 else None))
    model = tf_keras.Sequential([tf_keras.layers.Dense(1)])
    model.build((None, 3))
    model.compile(optimizer=tf_keras.optimizers.SGD(0.01), loss="mse")
    training.train(model, make, model_dir=str(tmp_path), total_steps=16, checkpoint_every=8,
                   global_batch_size=4, verbose=0, callbacks=[stop_at_3])
    assert int(model.optimizer.iterations.numpy()) == 3
