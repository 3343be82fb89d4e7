"""Keras 3 LAMB/LARS accept plain `tf.Variable`s (no Keras `path`): their name stands in for
the path, exclusions match it, and the exclusion report says so.
"""
import logging

import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from lamb_tf import keras3_optimizers

X0, G = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 6.0, 7.0, 2.0])


def test_raw_variables_update_and_match_exclusions_by_name(caplog):
    kernel = tf.Variable(X0.astype(np.float32), name="dense/kernel")
    bias = tf.Variable(X0.astype(np.float32), name="dense/bias")
    optimizer = keras3_optimizers.LAMB(0.5, weight_decay_rate=0.1, exclude_from_weight_decay=["bias"],
                                       exclude_from_layer_adaptation=[])
    with caplog.at_level(logging.INFO, logger="lamb_tf.exclusions"):
        optimizer.apply_gradients([(tf.constant(G, tf.float32), kernel), (tf.constant(G, tf.float32), bias)])
    for variable, decay in ((kernel, True), (bias, False)):
        expected, _, _ = ref.lamb_step(X0, G, 0, 0, 1, 0.5, 0.9, 0.999, 1e-6, 0.1, decay=decay)
        assert ref.relative_error(variable.numpy(), expected) < 1e-5
    assert [(row.path, row.decayed) for row in optimizer.exclusion_table()] == [
        ("dense/kernel", True), ("dense/bias", False)]
    assert "2 variables are plain tf.Variables without a Keras path" in caplog.text
    assert "searched in the variable name instead (e.g. 'dense/kernel')" in caplog.text


@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
def test_raw_variable_builds(optimizer_name):
    variable = tf.Variable(X0.astype(np.float32))
    optimizer = getattr(keras3_optimizers, optimizer_name)(0.5)
    optimizer.apply_gradients([(tf.constant(G, tf.float32), variable)])
    assert not np.allclose(variable.numpy(), X0)
    assert list(optimizer.trust_ratios()) == ["Variable"]
