"""Test helpers: the same small operations in both Keras flavours (tf_keras, Keras 3).

Each flavour object creates variables with a given path, applies gradients and reads
values, so one test body runs against `lamb_tf.tf_keras_optimizers` and
`lamb_tf.keras3_optimizers` alike.
"""
import importlib

import numpy as np
import tensorflow as tf


class TfKerasFlavour:
    name = "tf_keras"
    module_name = "lamb_tf.tf_keras_optimizers"

    def __init__(self):
        import tf_keras
        self.keras = tf_keras
        self.module = importlib.import_module(self.module_name)

    def variable(self, path, value):
        return tf.Variable(np.asarray(value, np.float32), name=path)

    def apply(self, optimizer, grads, variables):
        optimizer.apply_gradients(zip([tf.constant(g, tf.float32) for g in grads], variables))

    def polynomial_decay(self, initial, steps, end):
        return self.keras.optimizers.schedules.PolynomialDecay(initial, steps, end)


class Keras3Flavour:
    name = "keras3"
    module_name = "lamb_tf.keras3_optimizers"

    def __init__(self):
        import keras
        self.keras = keras
        self.module = importlib.import_module(self.module_name)

    def variable(self, path, value):
        *scopes, leaf = path.split("/")
        if scopes:
            with self.keras.name_scope(scopes[0]):
                return self.variable("/".join(scopes[1:] + [leaf]), value)
        return self.keras.Variable(np.asarray(value, np.float32), name=leaf)

    def apply(self, optimizer, grads, variables):
        optimizer.apply_gradients(zip([tf.constant(g, tf.float32) for g in grads], variables))

    def polynomial_decay(self, initial, steps, end):
        return self.keras.optimizers.schedules.PolynomialDecay(initial, steps, end)


FLAVOURS = {"tf_keras": TfKerasFlavour, "keras3": Keras3Flavour}


def value(variable):
    return np.asarray(variable.numpy(), np.float64)


def optimizer_state(optimizer):
    """Every variable of `optimizer` in creation order (step counters, learning rate, slots
    m/v/momentum, trust ratios) as NumPy arrays, for comparing two runs' whole state."""
    return [np.asarray(v.numpy()) for v in optimizer.variables]


def assert_same_state(actual, expected, rtol):
    """Two `optimizer_state` lists agree: integers exactly, floats to `rtol` relative to the
    largest magnitude of each expected variable (exactly where that variable is all zero).
    Fails if the state is all zero, so the comparison cannot pass vacuously."""
    assert len(actual) == len(expected)
    for index, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape and a.dtype == e.dtype, index
        if np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(a, e, err_msg=f"optimizer variable {index}")
        else:
            scale = np.max(np.abs(e)) if e.size else 0.0
            error = np.max(np.abs(a.astype(np.float64) - e)) if e.size else 0.0
            assert error <= rtol * scale, f"optimizer variable {index}: {error} > {rtol} * {scale}"
    assert any(np.any(e != 0) for e in expected if np.issubdtype(e.dtype, np.floating))
