"""Under MirroredStrategy (2 logical CPUs) LAMB/LARS equal one device at the same global
batch, including `global_clipnorm`, which must clip the all-reduced gradient; inside
`tf.function(jit_compile=True)` they equal the NumPy reference.
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS, value

STEPS = 3


def _data():
    rng = np.random.default_rng(5)
    features = rng.normal(size=(8, 3)).astype(np.float32)
    targets = rng.normal(size=(8, 2)).astype(np.float32)
    # the second replica's half has much larger targets: per-replica gradient norms differ
    targets[4:] *= 20.0
    return features, targets


def _initial():
    rng = np.random.default_rng(6)
    return {"dense/kernel": rng.normal(size=(3, 2)), "dense/bias": rng.normal(size=(2,))}


def _loss_sum(kernel, bias, features, targets):
    """Sum of per-example squared errors; callers divide by the global batch size."""
    prediction = tf.matmul(features, kernel) + bias
    return tf.reduce_sum(tf.square(prediction - targets))


def _train(flavour, make_optimizer, strategy):
    features, targets = _data()
    global_batch = len(features)
    with strategy.scope():
        kernel = flavour.variable("dense/kernel", _initial()["dense/kernel"])
        bias = flavour.variable("dense/bias", _initial()["dense/bias"])
        optimizer = make_optimizer(flavour)
        # Keras 3 optimizers must be built before a tf.function creates their variables
        optimizer.build([kernel, bias])
    per_replica = len(features) // strategy.num_replicas_in_sync

    def replica_step():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        start = replica * per_replica
        x = tf.constant(features)[start:start + per_replica]
        y = tf.constant(targets)[start:start + per_replica]
        with tf.GradientTape() as tape:
            loss = _loss_sum(kernel, bias, x, y) / global_batch
        grads = tape.gradient(loss, [kernel, bias])
        optimizer.apply_gradients(zip(grads, [kernel, bias]))

    step = tf.function(lambda: strategy.run(replica_step))
    for _ in range(STEPS):
        step()
    return value(kernel), value(bias)


OPTIMIZERS = {
    "lamb": lambda f: f.module.LAMB(0.1, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]),
    "lamb_global_clipnorm": lambda f: f.module.LAMB(0.1, weight_decay_rate=0.01, global_clipnorm=0.5),
    "lars_global_clipnorm": lambda f: f.module.LARS(1.0, weight_decay_rate=0.01, global_clipnorm=0.5),
}


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", OPTIMIZERS)
def test_two_replicas_equal_one_device(flavour_name, optimizer_name, two_cpu_strategy):
    flavour = FLAVOURS[flavour_name]()
    make = OPTIMIZERS[optimizer_name]
    one = _train(flavour, make, tf.distribute.get_strategy())
    two = _train(flavour, make, two_cpu_strategy)
    for a, b in zip(one, two):
        assert ref.relative_error(b, a) < 1e-5


def test_keras3_base_class_clips_per_replica(two_cpu_strategy):
    """Why keras3_optimizers defers clipping: Keras 3's own SGD clips each replica's gradient
    before the all-reduce, so with global_clipnorm it departs from one device."""
    flavour = FLAVOURS["keras3"]()

    def make(f):
        return f.keras.optimizers.SGD(0.1, global_clipnorm=0.5)

    one = _train(flavour, make, tf.distribute.get_strategy())
    two = _train(flavour, make, two_cpu_strategy)
    assert ref.relative_error(two[0], one[0]) > 1e-3


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_global_clipnorm_clips_the_summed_gradient(flavour_name):
    """One device: LARS with global_clipnorm equals the reference fed the clipped gradient."""
    flavour = FLAVOURS[flavour_name]()
    features, targets = _data()
    kernel = flavour.variable("dense/kernel", _initial()["dense/kernel"])
    bias = flavour.variable("dense/bias", _initial()["dense/bias"])
    optimizer = flavour.module.LARS(1.0, momentum=0.0, eeta=1.0, global_clipnorm=0.5)
    with tf.GradientTape() as tape:
        loss = _loss_sum(kernel, bias, features, targets) / len(features)
    grads = [np.asarray(g, np.float64) for g in tape.gradient(loss, [kernel, bias])]
    optimizer.apply_gradients(zip([tf.constant(g, tf.float32) for g in grads], [kernel, bias]))
    global_norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
    assert global_norm > 0.5
    for variable, x0, g in zip([kernel, bias], _initial().values(), grads):
        want, _ = ref.lars_step(x0, g * 0.5 / global_norm, np.zeros_like(x0), 1.0, 0.0, 0.0, 1.0)
        assert ref.relative_error(value(variable), want) < 1e-5


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["lamb", "lars"])
def test_inside_xla_function_matches_reference(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    x0 = np.random.default_rng(7).normal(size=(5, 7))
    grads = np.random.default_rng(8).normal(size=(STEPS, 5, 7))
    variable = flavour.variable("dense/kernel", x0)
    if optimizer_name == "lamb":
        optimizer = flavour.module.LAMB(0.05, weight_decay_rate=0.01)
    else:
        optimizer = flavour.module.LARS(1.0, weight_decay_rate=0.01)
    optimizer.build([variable])

    @tf.function(jit_compile=True)
    def step(g):
        optimizer.apply_gradients([(g, variable)])

    for g in grads:
        step(tf.constant(g, tf.float32))
    x, m, v = x0, np.zeros_like(x0), np.zeros_like(x0)
    for t, g in enumerate(grads, start=1):
        if optimizer_name == "lamb":
            x, m, v = ref.lamb_step(x, g, m, v, t, 0.05, 0.9, 0.999, 1e-6, 0.01)
        else:
            x, m = ref.lars_step(x, g, m, 1.0, 0.9, 0.01, 0.001)
    assert ref.relative_error(value(variable), x) < 1e-5
