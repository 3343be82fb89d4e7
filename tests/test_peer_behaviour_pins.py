"""Pins of other libraries' behaviour, not tests of lamb_tf.

Each test here checks what Keras itself does, because that behaviour is the reason for a
design choice in lamb_tf; if a future Keras changes, the test says so and the choice can
be revisited. Test names start with what they pin (`test_keras3_...`). The matching tests
of lamb_tf's own behaviour live with the feature (named in each docstring).
"""
import numpy as np
import tensorflow as tf

import numpy_reference as ref
import replica_training
from flavours import FLAVOURS, value

# One LAMB step on w, g with η, λ, ε: the vector of tests/test_keras_lamb_difference.py.
W = np.array([1.0, 2.0, 3.0, 4.0])
G = np.array([1.0, 6.0, 7.0, 2.0])
ETA, LAMBDA, EPSILON = 0.5, 0.1, 1e-6


def _one_step(keras3, optimizer):
    variable = keras3.variable("dense/kernel", W)
    optimizer.apply_gradients([(tf.constant(G, tf.float32), variable)])
    return value(variable)


def test_keras3_lamb_decays_outside_the_trust_ratio():
    """Why lamb_tf refuses Keras' `weight_decay=`: with λ > 0, `keras.optimizers.Lamb` decays
    the weights in the base class (w' = w(1 - ηλ)), then takes the ratio ‖w'‖/‖r‖ without
    λw in the direction or the norm, which is not Algorithm 2 of the paper.
    (lamb_tf's side: tests/test_keras_lamb_difference.py.)"""
    keras3 = FLAVOURS["keras3"]()
    theirs = _one_step(keras3, keras3.keras.optimizers.Lamb(ETA, weight_decay=LAMBDA, epsilon=EPSILON))
    # the closed form of decoupled decay followed by a ratio on the decayed weights
    r = G / (np.abs(G) + EPSILON)  # m̂/(√v̂ + ε) at t = 1
    w_decayed = W * (1 - ETA * LAMBDA)
    closed_form = w_decayed - ETA * np.linalg.norm(w_decayed) / np.linalg.norm(r) * r
    assert ref.relative_error(theirs, closed_form) < 1e-5
    paper, _, _ = ref.lamb_step(W, G, 0 * W, 0 * W, 1, ETA, 0.9, 0.999, EPSILON, LAMBDA)
    assert ref.relative_error(theirs, paper) > 1e-2


def test_keras3_lamb_equals_the_paper_without_weight_decay():
    """The two agree when λ = 0 and nothing is excluded, so the difference above is the
    decay's placement and nothing else."""
    keras3 = FLAVOURS["keras3"]()
    paper, _, _ = ref.lamb_step(W, G, 0 * W, 0 * W, 1, ETA, 0.9, 0.999, EPSILON, 0.0)
    theirs = _one_step(keras3, keras3.keras.optimizers.Lamb(ETA, epsilon=EPSILON))
    assert ref.relative_error(theirs, paper) < 1e-5


def test_keras3_sgd_clips_each_replica_before_the_all_reduce(two_cpu_strategy):
    """Why keras3_optimizers defers clipping: Keras 3's own SGD clips each replica's gradient
    before the all-reduce, so with global_clipnorm two replicas depart from one device.
    (lamb_tf's side: test_distribution_and_xla.py::test_two_replicas_equal_one_device.)"""
    keras3 = FLAVOURS["keras3"]()

    def make(flavour):
        return flavour.keras.optimizers.SGD(0.1, global_clipnorm=0.5)

    (one_kernel, _), _ = replica_training.train(keras3, make, tf.distribute.get_strategy())
    (two_kernel, _), _ = replica_training.train(keras3, make, two_cpu_strategy)
    assert ref.relative_error(two_kernel, one_kernel) > 1e-3


def test_keras3_adamw_exclusion_matches_the_leaf_name_only():
    """Why lamb_tf matches exclusion patterns on full paths: Keras 3's own exclusion matches
    `variable.name`, the leaf ("gamma"), so a pattern naming the layer silently excludes
    nothing. (lamb_tf's side: test_exclusions.py::test_patterns_naming_a_layer_match_the_full_path.)"""
    keras3 = FLAVOURS["keras3"]()
    gamma = keras3.variable("block/layer_norm/gamma", np.ones(4))
    assert gamma.path == "block/layer_norm/gamma" and gamma.name == "gamma"
    adamw = keras3.keras.optimizers.AdamW(weight_decay=0.1)
    adamw.exclude_from_weight_decay(var_names=["block/layer_norm"])
    assert adamw._use_weight_decay(gamma)
    adamw.exclude_from_weight_decay(var_names=["gamma"])
    assert not adamw._use_weight_decay(gamma)  # the pin can fail: a leaf name does exclude


def test_model_garden_polynomial_warmup_ramps_to_the_decayed_rate_from_step_one():
    """What docs/large_batch.md says of Model Garden's `PolynomialWarmUp` around a
    `PolynomialDecay`: it ramps to the decayed rate at W (not to the peak) and reads step 0
    as step 1; after the warmup it agrees with lamb_tf's `WarmupPolynomialDecay`."""
    import tf_keras
    from official.modeling.optimization import lr_schedule

    from lamb_tf.schedules import TfKerasWarmupPolynomialDecay

    peak, warmup, total = 1e-3, 10, 100
    decay = tf_keras.optimizers.schedules.PolynomialDecay(peak, total, 0.0)
    theirs = lr_schedule.PolynomialWarmUp(decay, warmup)
    ours = TfKerasWarmupPolynomialDecay(peak, total_steps=total, warmup_steps=warmup)
    rate = lambda schedule, step: float(schedule(tf.constant(step)))
    assert np.isclose(rate(theirs, 0), peak * (1 - warmup / total) / warmup)  # 9e-5
    assert rate(ours, 0) == 0.0
    assert np.isclose(rate(theirs, warmup - 1), peak * (1 - warmup / total) * 0.9)
    assert np.isclose(rate(ours, warmup - 1), peak * 0.9)
    for step in (warmup, 50, total):
        assert np.isclose(rate(theirs, step), rate(ours, step), rtol=1e-6, atol=1e-12), step


def test_model_garden_lamb_counts_the_steps_tf_keras_loss_scale_optimizer_skips():
    """Why docs/optimizers.md's differences hold a row on skipped steps: tf_keras'
    `LossScaleOptimizer` advances `iterations` on a step it skips (non-finite gradients), and
    Model Garden's LAMB takes t = iterations + 1, so its update after a skip is the
    reference's at t = 2, not t = 1. (lamb_tf's side, t counting applied updates:
    test_mixed_precision.py::test_loss_scale_optimizer_skips_nonfinite_step_without_advancing_t.)"""
    import tf_keras
    from official.modeling.optimization import lamb

    theirs = lamb.LAMB(ETA, weight_decay_rate=LAMBDA, epsilon=EPSILON)
    variable = tf.Variable(W, dtype=tf.float32)
    wrapper = tf_keras.mixed_precision.LossScaleOptimizer(theirs)
    for gradient in (np.full(4, np.inf), G):  # (no scaling: the scale matters not here)
        wrapper.apply_gradients([(tf.constant(gradient, tf.float32), variable)])
    assert int(theirs.iterations.numpy()) == 2
    at = {t: ref.lamb_step(W, G, 0 * W, 0 * W, t, ETA, 0.9, 0.999, EPSILON, LAMBDA)[0]
          for t in (1, 2)}
    assert ref.relative_error(value(variable), at[2]) < 1e-5
    assert ref.relative_error(value(variable), at[1]) > 1e-3


def test_keras3_lamb_does_not_count_the_steps_keras3_loss_scale_optimizer_skips():
    """Keras 3's `LossScaleOptimizer` does not call the inner optimizer on a skipped step, so
    its `iterations` (Keras' `Lamb` takes t = iterations + 1) stays: after a skip the
    training is the one without the bad batch, as lamb_tf's in both flavours."""
    keras3 = FLAVOURS["keras3"]()
    theirs = keras3.keras.optimizers.Lamb(ETA, epsilon=EPSILON)
    wrapper = keras3.keras.optimizers.LossScaleOptimizer(theirs)
    variable = keras3.variable("dense/kernel", W)
    wrapper.build([variable])
    for gradient in (np.full(4, np.inf), G):
        scale = float(wrapper.dynamic_scale.numpy())
        wrapper.apply([tf.constant(gradient * scale, tf.float32)], [variable])
    assert int(theirs.iterations.numpy()) == 1
    unwrapped = _one_step(keras3, keras3.keras.optimizers.Lamb(ETA, epsilon=EPSILON))
    np.testing.assert_allclose(value(variable), unwrapped, rtol=1e-6)
