"""Under MirroredStrategy (2 logical CPUs) LAMB/LARS equal one device at the same global
batch, weights and optimizer state (m, v, momentum, step counter), including
`global_clipnorm`, which must clip the all-reduced gradient; inside
`tf.function(jit_compile=True)` they equal the NumPy reference, state included.

A trust ratio makes LAMB's step almost blind to a constant factor on the gradient, so the
weights alone cannot show a gradient that is averaged instead of summed over replicas; the
first moment `m` and LARS' "popular" momentum buffer are proportional to it and can.
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
import replica_training
from flavours import FLAVOURS, assert_same_state, value

OPTIMIZERS = {
    "lamb": lambda f: f.module.LAMB(0.1, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]),
    "lamb_global_clipnorm": lambda f: f.module.LAMB(0.1, weight_decay_rate=0.01, global_clipnorm=0.5),
    "lars_global_clipnorm": lambda f: f.module.LARS(1.0, weight_decay_rate=0.01, global_clipnorm=0.5),
    # no clipping, and a momentum buffer that sums raw gradients: reacts to their scale
    "lars_popular_momentum": lambda f: f.module.LARS(1.0, weight_decay_rate=0.01, classic_momentum=False),
}


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", OPTIMIZERS)
def test_two_replicas_equal_one_device(flavour_name, optimizer_name, two_cpu_strategy):
    flavour = FLAVOURS[flavour_name]()
    make = OPTIMIZERS[optimizer_name]
    one_weights, one_state = replica_training.train(flavour, make, tf.distribute.get_strategy())
    two_weights, two_state = replica_training.train(flavour, make, two_cpu_strategy)
    for a, b, x0 in zip(one_weights, two_weights, replica_training.initial().values()):
        # the updates, not only the weights (both runs round x in float32: twice the steps)
        ref.assert_update_close(b, a, x0, steps=2 * replica_training.STEPS)
    assert_same_state(two_state, one_state, rtol=1e-5)  # m, v, momentum, step counters


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_global_clipnorm_clips_the_summed_gradient(flavour_name):
    """One device: LARS with global_clipnorm equals the reference fed the clipped gradient.
    With "popular" momentum and μ = 0 the momentum buffer is the gradient itself, so it shows
    the clip (LARS' step alone would not: the trust ratio divides the gradient's scale out)."""
    flavour = FLAVOURS[flavour_name]()
    features, targets = replica_training.data()
    initial = replica_training.initial()
    kernel = flavour.variable("dense/kernel", initial["dense/kernel"])
    bias = flavour.variable("dense/bias", initial["dense/bias"])
    optimizer = flavour.module.LARS(1.0, momentum=0.0, eeta=1.0, classic_momentum=False,
                                    global_clipnorm=0.5)
    with tf.GradientTape() as tape:
        loss = replica_training.loss_sum(kernel, bias, features, targets) / len(features)
    grads = [np.asarray(g, np.float64) for g in tape.gradient(loss, [kernel, bias])]
    optimizer.apply_gradients(zip([tf.constant(g, tf.float32) for g in grads], [kernel, bias]))
    global_norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
    assert global_norm > 0.5
    for index, (variable, x0, g) in enumerate(zip([kernel, bias], initial.values(), grads)):
        want, velocity = ref.lars_step(x0, g * 0.5 / global_norm, np.zeros_like(x0), 1.0, 0.0, 0.0,
                                       1.0, classic_momentum=False)
        ref.assert_update_close(value(variable), want, x0, steps=1)
        assert ref.relative_error(value(optimizer._velocities[index]), velocity) < 1e-5


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["lamb", "lars"])
def test_inside_xla_function_matches_reference(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    steps = replica_training.STEPS
    x0 = np.random.default_rng(7).normal(size=(5, 7))
    grads = np.random.default_rng(8).normal(size=(steps, 5, 7))
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
    # LARS moves x by ~1e-3 of its norm per step: compare the update, not the weights
    ref.assert_update_close(value(variable), x, x0, steps=steps)
    if optimizer_name == "lamb":
        assert ref.relative_error(value(optimizer._m[0]), m) < 1e-5
        assert ref.relative_error(value(optimizer._v[0]), v) < 1e-5
    else:
        assert ref.relative_error(value(optimizer._velocities[0]), m) < 1e-5
    assert int(optimizer.applied_updates.numpy()) == steps
