"""Drop-in compatibility: with the same arguments, lamb_tf's tf_keras LAMB/LARS follow Model
Garden's `official.modeling.optimization` LAMB/LARS step by step (a second check next to the
NumPy reference, so a misreading of Model Garden's numerics would show up here).
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from lamb_tf import tf_keras_optimizers

CASES = [
    ("LAMB", dict(learning_rate=0.05, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"])),
    ("LAMB", dict(learning_rate=0.05, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"],
                  exclude_from_layer_adaptation=["kernel"])),
    ("LARS", dict(learning_rate=1.0, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"])),
    ("LARS", dict(learning_rate=1.0, weight_decay_rate=0.01, nesterov=True)),
    ("LARS", dict(learning_rate=0.1, weight_decay_rate=0.01, classic_momentum=False, nesterov=True)),
]


@pytest.mark.parametrize("optimizer_name,kwargs", CASES)
def test_same_steps_as_model_garden(optimizer_name, kwargs):
    from official.modeling.optimization import lamb, lars

    model_garden_class = {"LAMB": lamb.LAMB, "LARS": lars.LARS}[optimizer_name]
    ours_class = getattr(tf_keras_optimizers, optimizer_name)
    rng = np.random.default_rng(11)
    initial = {"dense/kernel": rng.normal(size=(4, 3)), "dense/bias": rng.normal(size=(3,))}
    grads = [{p: rng.normal(size=v.shape) for p, v in initial.items()} for _ in range(5)]
    results = []
    for optimizer in (model_garden_class(**kwargs), ours_class(**kwargs)):
        variables = [tf.Variable(v.astype(np.float32), name=p) for p, v in initial.items()]
        for step in grads:
            optimizer.apply_gradients(
                [(tf.constant(step[p], tf.float32), v) for p, v in zip(initial, variables)])
        results.append([v.numpy() for v in variables])
    for theirs, ours in zip(*results):
        assert ref.relative_error(ours, theirs) < 1e-5


@pytest.mark.parametrize("optimizer_name,kwargs", CASES)
def test_model_gardens_saved_config_builds_ours_with_the_same_hyperparameters(
        optimizer_name, kwargs):
    """A model saved with Model Garden's optimizer loads with ours given as its class: its
    config holds the legacy `decay=0.0`, which asks for nothing and is accepted."""
    from official.modeling.optimization import lamb, lars

    model_garden_class = {"LAMB": lamb.LAMB, "LARS": lars.LARS}[optimizer_name]
    config = model_garden_class(**kwargs).get_config()
    assert config["decay"] == 0.0
    ours = getattr(tf_keras_optimizers, optimizer_name).from_config(config)
    for key, value in config.items():
        if key not in ("name", "decay"):
            assert ours.get_config()[key] == pytest.approx(value), key
