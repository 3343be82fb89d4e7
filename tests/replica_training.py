"""A tiny linear regression trained for a few steps on one device or on the two logical
CPUs of `conftest.two_cpu_strategy`, the same global batch either way; returns the weights
and the optimizer's whole state, so tests can compare the two."""
import numpy as np
import tensorflow as tf

from flavours import optimizer_state, value

STEPS = 3


def data():
    rng = np.random.default_rng(5)
    features = rng.normal(size=(8, 3)).astype(np.float32)
    targets = rng.normal(size=(8, 2)).astype(np.float32)
    # the second replica's half has much larger targets: per-replica gradient norms differ
    targets[4:] *= 20.0
    return features, targets


def initial():
    rng = np.random.default_rng(6)
    return {"dense/kernel": rng.normal(size=(3, 2)), "dense/bias": rng.normal(size=(2,))}


def loss_sum(kernel, bias, features, targets):
    """Sum of per-example squared errors; callers divide by the global batch size."""
    prediction = tf.matmul(features, kernel) + bias
    return tf.reduce_sum(tf.square(prediction - targets))


def train(flavour, make_optimizer, strategy):
    """STEPS updates on the 8 examples, split over the strategy's replicas.

    Returns `([kernel, bias], optimizer_state(optimizer))` as NumPy arrays."""
    features, targets = data()
    global_batch = len(features)
    with strategy.scope():
        kernel = flavour.variable("dense/kernel", initial()["dense/kernel"])
        bias = flavour.variable("dense/bias", initial()["dense/bias"])
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
            loss = loss_sum(kernel, bias, x, y) / global_batch
        grads = tape.gradient(loss, [kernel, bias])
        optimizer.apply_gradients(zip(grads, [kernel, bias]))

    step = tf.function(lambda: strategy.run(replica_step))
    for _ in range(STEPS):
        step()
    return [value(kernel), value(bias)], optimizer_state(optimizer)
