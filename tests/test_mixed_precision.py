"""Mixed precision: `mixed_bfloat16` trains with float32 variables and slots; a
LossScaleOptimizer around LAMB (float16) is exact on finite steps, skips non-finite ones
without advancing LAMB's step `t`, and `mixed_float16` + compile + fit works.
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS, value


def _mixed_precision(flavour):
    return flavour.keras.mixed_precision


@pytest.fixture
def policy_reset():
    yield
    for make in FLAVOURS.values():
        _mixed_precision(make()).set_global_policy("float32")


def _fit_one_epoch(flavour, optimizer, batch_size=8):
    """One epoch of 16 examples: 16 / batch_size steps."""
    k = flavour.keras
    model = k.Sequential([k.Input((3,)), k.layers.Dense(4), k.layers.Dense(1)])
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(0)
    before = [np.array(w) for w in model.get_weights()]
    history = model.fit(rng.normal(size=(16, 3)).astype("float32"),
                        rng.normal(size=(16, 1)).astype("float32"), batch_size=batch_size, epochs=1,
                        verbose=0)
    return model, before, history


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_mixed_bfloat16_trains_with_float32_state(flavour_name, policy_reset):
    flavour = FLAVOURS[flavour_name]()
    _mixed_precision(flavour).set_global_policy("mixed_bfloat16")
    optimizer = flavour.module.LAMB(0.01, weight_decay_rate=0.01)
    model, before, history = _fit_one_epoch(flavour, optimizer)
    assert np.isfinite(history.history["loss"][-1])
    assert all(tf.as_dtype(v.dtype) == tf.float32 for v in model.trainable_variables)
    slot_dtypes = [tf.as_dtype(v.dtype) for v in optimizer.variables]
    assert all(d == tf.float32 for d in slot_dtypes if d.is_floating) and tf.float32 in slot_dtypes
    assert all(not np.allclose(a, b) for a, b in zip(before, model.get_weights()))
    ratios = optimizer.trust_ratios()
    assert len(ratios) == 4 and all(np.isfinite(r) and r > 0 for r in ratios.values())


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_mixed_float16_compile_wraps_lamb_in_loss_scale_optimizer(flavour_name, policy_reset):
    flavour = FLAVOURS[flavour_name]()
    _mixed_precision(flavour).set_global_policy("mixed_float16")
    optimizer = flavour.module.LAMB(0.01)
    # 8 steps: dynamic loss scaling skips each step whose scaled gradients overflow float16
    # and halves its scale (from 2^15); with 2 steps this test failed for 1 of 40 seeds of
    # Keras 3's initializers (checked 2026-12-04), with 8 steps for none
    model, before, history = _fit_one_epoch(flavour, optimizer, batch_size=2)
    assert model.optimizer.__class__.__name__.startswith("LossScaleOptimizer")
    assert model.optimizer.inner_optimizer is optimizer
    assert np.isfinite(history.history["loss"][-1])
    assert int(optimizer.iterations.numpy()) >= 1
    assert any(not np.allclose(a, b) for a, b in zip(before, model.get_weights()))


def _apply_through_loss_scale(flavour, loss_scale_optimizer, gradient, variable):
    """Feed one gradient the way each flavour's LossScaleOptimizer expects it."""
    if flavour.name == "tf_keras":
        # tf_keras: apply_gradients takes unscaled gradients (after get_unscaled_gradients)
        loss_scale_optimizer.apply_gradients([(tf.constant(gradient, tf.float32), variable)])
    else:
        # Keras 3: apply_gradients takes scaled gradients and divides by the loss scale
        scale = float(loss_scale_optimizer.dynamic_scale.numpy())
        loss_scale_optimizer.apply_gradients([(tf.constant(gradient * scale, tf.float32), variable)])


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_loss_scale_optimizer_skips_nonfinite_step_without_advancing_t(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    x0 = np.random.default_rng(1).normal(size=(5, 7))
    grads = np.random.default_rng(2).normal(size=(3, 5, 7))
    variable = flavour.variable("dense/kernel", x0)
    lamb = flavour.module.LAMB(0.05, weight_decay_rate=0.01)
    if flavour.name == "tf_keras":
        wrapper = flavour.keras.mixed_precision.LossScaleOptimizer(lamb)
    else:
        wrapper = flavour.keras.optimizers.LossScaleOptimizer(lamb)
    assert int(lamb.applied_updates.numpy()) == 0  # before build too: nothing applied yet
    wrapper.build([variable])
    _apply_through_loss_scale(flavour, wrapper, grads[0], variable)
    after_first = value(variable)
    bad = grads[1].copy()
    bad[0, 0] = np.inf
    _apply_through_loss_scale(flavour, wrapper, bad, variable)
    np.testing.assert_array_equal(value(variable), after_first)
    assert int(lamb.applied_updates.numpy()) == 1
    _apply_through_loss_scale(flavour, wrapper, grads[2], variable)
    # reference: the skipped step does not exist; the third gradient is LAMB's step t=2
    x, m, v = ref.lamb_step(x0, grads[0], 0 * x0, 0 * x0, 1, 0.05, 0.9, 0.999, 1e-6, 0.01)
    x, m, v = ref.lamb_step(x, grads[2], m, v, 2, 0.05, 0.9, 0.999, 1e-6, 0.01)
    assert ref.relative_error(value(variable), x) < 1e-5
