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
