"""A gradient whose dtype differs from its variable's (a float64 variable, a float32
gradient: Keras' own constraint test) is cast to the variable's dtype, as both flavours'
built-in optimizers do, and the update is the float64 reference update.
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS

X0, G = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 6.0, 7.0, 2.0])


def _float64_variable(flavour_name):
    if flavour_name == "keras3":
        import keras

        return keras.Variable(X0, dtype="float64", name="kernel")
    return tf.Variable(X0, dtype=tf.float64, name="kernel")


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
def test_float32_gradient_on_float64_variable(flavour_name, optimizer_name):
    optimizer = getattr(FLAVOURS[flavour_name]().module, optimizer_name)(0.5, weight_decay_rate=0.1)
    variable = _float64_variable(flavour_name)
    optimizer.apply_gradients([(tf.constant(G, tf.float32), variable)])
    assert variable.dtype in (tf.float64, "float64")
    if optimizer_name == "LAMB":
        expected, _, _ = ref.lamb_step(X0, G, 0, 0, 1, 0.5, 0.9, 0.999, 1e-6, 0.1)
    else:
        expected, _ = ref.lars_step(X0, G, 0, 0.5, 0.9, 0.1, 0.001)
    assert ref.relative_error(variable.numpy(), expected) < 1e-6
