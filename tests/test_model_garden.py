"""`lamb_tf.model_garden.register()` makes Model Garden experiments train with our optimizers.

Real Model Garden experiment configs (`bert/pretraining`, `resnet_imagenet`) shrunk to tiny
sizes build their task, model and optimizer through Model Garden's own code
(`Task.create_optimizer` -> `OptimizerFactory`); the first update of chosen variables is
checked against the float64 NumPy reference in `tests/numpy_reference.py`, which shows that
every config field, the exclusion lists included, reached our optimizer.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from official.core import exp_factory
from official.core import task_factory
from official.modeling.optimization import lamb as model_garden_lamb
from official.modeling.optimization import lars as model_garden_lars
from official.modeling.optimization import optimizer_factory
from official.modeling.optimization.configs import optimization_config
from official.nlp.configs import pretraining_experiments  # noqa: F401  (bert/pretraining)
from official.vision.configs import image_classification  # noqa: F401  (resnet_imagenet)

import numpy_reference
from conftest import REPO_ROOT
from lamb_tf import model_garden
from lamb_tf import tf_keras_optimizers

TINY_BERT = {
    "encoder": {"bert": {"vocab_size": 50, "hidden_size": 16, "num_layers": 1,
                         "num_attention_heads": 2, "intermediate_size": 32,
                         "max_position_embeddings": 32, "dropout_rate": 0.0,
                         "attention_dropout_rate": 0.0}},
    "cls_heads": [{"inner_dim": 16, "num_classes": 2, "name": "next_sentence",
                   "dropout_rate": 0.0}],
}
SEQ_LENGTH, PREDICTIONS, BATCH, VOCAB = 16, 4, 4, 50
CONSTANT_LR = {"type": "constant", "constant": {"learning_rate": 0.01}}


@pytest.fixture
def registered():
    model_garden.register()
    yield
    model_garden.unregister()


def _bert_batch():
    rng = np.random.default_rng(0)
    ints = lambda low, high, shape: tf.constant(rng.integers(low, high, shape), tf.int32)
    return {
        "input_word_ids": ints(0, VOCAB, (BATCH, SEQ_LENGTH)),
        "input_mask": tf.ones((BATCH, SEQ_LENGTH), tf.int32),
        "input_type_ids": tf.zeros((BATCH, SEQ_LENGTH), tf.int32),
        "masked_lm_positions": ints(1, SEQ_LENGTH, (BATCH, PREDICTIONS)),
        "masked_lm_ids": ints(0, VOCAB, (BATCH, PREDICTIONS)),
        "masked_lm_weights": tf.ones((BATCH, PREDICTIONS)),
        "next_sentence_labels": ints(0, 2, (BATCH, 1)),
    }


def _build(experiment, override):
    """Task, model and optimizer exactly as Model Garden's trainer builds them."""
    params = exp_factory.get_exp_config(experiment)
    params.override(override, is_strict=True)
    task = task_factory.get_task(params.task)
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    return task, model, optimizer


def _gradients(task, model, batch, labels, **loss_kwargs):
    """The gradient Model Garden's train_step applies (one replica, so no loss scaling)."""
    with tf.GradientTape() as tape:
        outputs = model(batch, training=True)
        loss = task.build_losses(labels=labels, model_outputs=outputs, aux_losses=model.losses,
                                 **loss_kwargs)
    return dict(zip([v.name for v in model.trainable_variables],
                    tape.gradient(loss, model.trainable_variables)))


def test_import_alone_changes_nothing_and_unregister_restores():
    assert optimizer_factory.LEGACY_OPTIMIZERS_CLS["lamb"] is model_garden_lamb.LAMB
    assert not model_garden.is_registered()
    model_garden.register()
    model_garden.register()  # idempotent
    try:
        assert model_garden.is_registered()
    finally:
        model_garden.unregister()
    assert optimizer_factory.LEGACY_OPTIMIZERS_CLS["lamb"] is model_garden_lamb.LAMB
    assert optimizer_factory.NEW_OPTIMIZERS_CLS["lars"] is model_garden_lars.LARS


@pytest.mark.parametrize("use_legacy_optimizer", [True, False])
def test_factory_builds_ours_on_both_paths_with_every_field(registered, use_legacy_optimizer):
    lars_fields = {"name": "my_lars", "momentum": 0.8, "eeta": 0.002, "weight_decay_rate": 1e-4,
                   "nesterov": True, "classic_momentum": False,
                   "exclude_from_weight_decay": ["batch_norm", "bias"],
                   "exclude_from_layer_adaptation": ["bias"], "global_clipnorm": 1.5}
    config = optimization_config.OptimizationConfig(
        {"optimizer": {"type": "lars", "lars": lars_fields}, "learning_rate": CONSTANT_LR})
    factory = optimizer_factory.OptimizerFactory(config)
    optimizer = factory.build_optimizer(factory.build_learning_rate(),
                                        use_legacy_optimizer=use_legacy_optimizer)
    assert type(optimizer) is tf_keras_optimizers.LARS
    built = optimizer.get_config()
    assert {key: built[key] for key in lars_fields} == lars_fields


def test_legacy_only_arguments_are_refused_with_one_clear_error(registered):
    config = optimization_config.OptimizationConfig(
        {"optimizer": {"type": "lamb"}, "learning_rate": CONSTANT_LR})
    factory = optimizer_factory.OptimizerFactory(config)
    with pytest.raises(ValueError, match="gradient_transformers is only supported by legacy"):
        factory.build_optimizer(factory.build_learning_rate(),
                                gradient_transformers=[lambda grads_and_vars: grads_and_vars])


@pytest.mark.slow  # trains a Model Garden experiment
def test_bert_pretraining_experiment_trains_with_our_lamb(registered):
    lamb_fields = {"weight_decay_rate": 0.01, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-5,
                   "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"],
                   "exclude_from_layer_adaptation": ["bias"]}
    tf_keras.utils.set_random_seed(0)
    task, model, optimizer = _build("bert/pretraining", {
        "task": {"model": TINY_BERT},
        "trainer": {"optimizer_config": {
            "optimizer": {"type": "lamb", "lamb": lamb_fields},
            "learning_rate": CONSTANT_LR, "warmup": {"type": None}}}})
    assert type(optimizer) is tf_keras_optimizers.LAMB
    batch = _bert_batch()
    metrics = task.build_metrics()
    gradients = _gradients(task, model, batch, labels=batch, metrics=metrics)
    initial = {v.name: v.numpy() for v in model.trainable_variables}
    train_step = tf.function(lambda inputs: task.train_step(inputs, model, optimizer, metrics))

    losses = [float(train_step(batch)["loss"])]
    after_first = {v.name: v.numpy() for v in model.trainable_variables}
    losses += [float(train_step(batch)["loss"]) for _ in range(2)]

    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    # every variable the loss depends on moved (the encoder's own pooler is unused here)
    trained = [v for v in model.trainable_variables if gradients[v.name] is not None]
    assert len(trained) > 20
    assert all(not np.array_equal(initial[v.name], v.numpy()) for v in trained)
    # (path, decayed, adapted) from the config's exclusion lists, on Model Garden's names
    cases = [("transformer/layer_0/self_attention/attention_output/bias", False, False),
             ("transformer/layer_0/self_attention_layer_norm/gamma", False, True),
             ("transformer/layer_0/intermediate/kernel", True, True)]
    for path, decay, adapt in cases:
        rows = [row for row in optimizer.exclusion_table() if row.path == path]
        assert [(row.decayed, row.adapted) for row in rows] == [(decay, adapt)], path
        name = path + ":0"
        expected, _, _ = numpy_reference.lamb_step(
            initial[name], gradients[name].numpy(), 0.0, 0.0, 1, 0.01, lamb_fields["beta_1"],
            lamb_fields["beta_2"], lamb_fields["epsilon"], lamb_fields["weight_decay_rate"],
            adapt=adapt, decay=decay)
        np.testing.assert_allclose(after_first[name] - initial[name], expected - initial[name],
                                   rtol=1e-4, atol=1e-7, err_msg=path)


@pytest.mark.slow  # trains a Model Garden experiment
def test_resnet_imagenet_experiment_trains_with_our_lars(registered):
    lars_fields = {"weight_decay_rate": 1e-3, "momentum": 0.8, "eeta": 0.002,
                   "exclude_from_weight_decay": ["batch_norm", "bias"]}
    tf_keras.utils.set_random_seed(0)
    task, model, optimizer = _build("resnet_imagenet", {
        "task": {"model": {"num_classes": 5, "input_size": [32, 32, 3],
                           "backbone": {"resnet": {"model_id": 10, "depth_multiplier": 0.25}}},
                 "losses": {"l2_weight_decay": 0.0}},
        "trainer": {"optimizer_config": {
            "optimizer": {"type": "lars", "lars": lars_fields},
            "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}},
            "warmup": {"type": None}}}})
    assert type(optimizer) is tf_keras_optimizers.LARS
    rng = np.random.default_rng(0)
    images = tf.constant(rng.normal(size=(4, 32, 32, 3)), tf.float32)
    labels = tf.constant([0, 1, 2, 3], tf.int32)
    # the task one-hot encodes the labels in train_step (losses.one_hot defaults to True)
    gradients = _gradients(task, model, images, tf.one_hot(labels, 5))
    before = {v.name: v.numpy() for v in model.trainable_variables}

    loss = task.train_step((images, labels), model, optimizer, None)["loss"]

    after = {v.name: v.numpy() for v in model.trainable_variables}
    assert np.isfinite(float(loss))
    # exclude_from_layer_adaptation=None takes the weight-decay list (Model Garden convention)
    # Keras numbers layer names per process (batch_normalization_7/...), so take the first
    # variable of each kind in the model rather than a fixed name
    cases = [(r"batch_normalization(_\d+)?/gamma:0$", False, False),
             (r"conv2d(_\d+)?/kernel:0$", True, True)]
    for pattern, decay, adapt in cases:
        name = next(v.name for v in model.trainable_variables if re.search(pattern, v.name))
        path = name
        expected, _ = numpy_reference.lars_step(
            before[name], gradients[name].numpy(), np.zeros_like(before[name]), 0.1,
            lars_fields["momentum"], lars_fields["weight_decay_rate"], lars_fields["eeta"],
            adapt=adapt, decay=decay)
        actual = after[name]
        assert not np.array_equal(actual, before[name]), path
        np.testing.assert_allclose(actual - before[name], expected - before[name],
                                   rtol=1e-4, atol=1e-8, err_msg=path)


TINY_EXPERIMENT = os.path.join("configs", "model_garden", "bert_tiny_lamb.yaml")


def _launch(*flags):
    command = [sys.executable, "-m", "lamb_tf.model_garden", "nlp", "--experiment=bert/pretraining",
               *flags]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=180, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


@pytest.mark.slow  # a real command-line run of Model Garden's driver
def test_launcher_runs_the_shipped_tiny_experiment_with_our_lamb(tmp_path):
    model_dir = tmp_path / "model"
    result = _launch("--mode=train", f"--model_dir={model_dir}", f"--config_file={TINY_EXPERIMENT}")

    assert result.returncode == 0, result.stderr[-3000:]
    # our optimizer's build-time exclusion report, which Model Garden's LAMB does not have
    assert "LAMB: exclude_from_weight_decay pattern 'bias' matches" in result.stderr
    first, last = (str(model_dir / f"ckpt-{step}") for step in (1, 2))
    (kernel,) = [name for name, _ in tf.train.list_variables(last)
                 if name.endswith("_intermediate_dense/kernel/.ATTRIBUTES/VARIABLE_VALUE")]
    before, after = (tf.train.load_variable(path, kernel) for path in (first, last))
    assert np.all(np.isfinite(after)) and not np.array_equal(before, after)


@pytest.mark.slow  # a real command-line run of Model Garden's driver
def test_launcher_names_the_missing_field_in_one_line_before_any_work(tmp_path):
    # the example that used to crash after 226 lines inside Model Garden's create_trainer
    model_dir = tmp_path / "model"
    result = _launch("--mode=train", f"--model_dir={model_dir}",
                     "--params_override=trainer.optimizer_config.optimizer.type=lamb")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "lamb_tf.model_garden: trainer.optimizer_config.learning_rate.polynomial.decay_steps is "
        "not set, and Model Garden's trainer crashes without it: set it in --config_file or "
        "--params_override (e.g. configs/model_garden/bert_tiny_lamb.yaml)")
    assert "Traceback" not in result.stderr
    assert not model_dir.exists()


@pytest.mark.parametrize("override,field", [
    ({"trainer": {"optimizer_config": {"learning_rate": {"polynomial": {"decay_steps": 10}}}}},
     "trainer.optimizer_config.warmup.polynomial.warmup_steps"),
    ({"trainer": {"optimizer_config": {"learning_rate": {"polynomial": {"decay_steps": 10}},
                                       "warmup": {"polynomial": {"warmup_steps": 2}}}}},
     "task.train_data.input_path"),
    ({"trainer": {"optimizer_config": {"learning_rate": {"polynomial": {"decay_steps": 10}},
                                       "warmup": {"polynomial": {"warmup_steps": 2}}}},
      "task": {"train_data": {"input_path": "dummy"}}}, None),
])
def test_missing_field_is_the_first_one_model_garden_needs(override, field):
    params = exp_factory.get_exp_config("bert/pretraining")
    params.override(override, is_strict=True)
    assert model_garden.missing_field(params, "train") == field


def test_launcher_without_driver_prints_usage_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["model_garden.py", "--mode=train"])
    with pytest.raises(SystemExit) as exit_info:
        model_garden.main()
    assert exit_info.value.code == 2
    assert "usage: python -m lamb_tf.model_garden {nlp|vision}" in capsys.readouterr().err


def test_launcher_help_prints_usage_and_where_the_trainers_flags_are(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["model_garden.py", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        model_garden.main()
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("usage: python -m lamb_tf.model_garden {nlp|vision}")
    assert "python -m lamb_tf.model_garden nlp --helpfull" in printed


@pytest.mark.slow  # imports Model Garden's NLP trainer in a fresh process
def test_launcher_passes_helpfull_to_the_trainer_and_exits_0():
    result = subprocess.run(
        [sys.executable, "-m", "lamb_tf.model_garden", "nlp", "--helpfull"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": REPO_ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--experiment" in result.stdout and "--params_override" in result.stdout
