"""lamb_tf.update_rules on its own: the layer norm, the trust ratio's zero-norm guard and φ
bounds, LAMB's layer-wise step size, and the trust ratios the optimizers report after a step.
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS
from lamb_tf import update_rules


@pytest.mark.parametrize("x_norm,u_norm,kwargs,expected", [
    (3.0, 2.0, {}, 1.5),
    (0.0, 2.0, {}, 1.0),
    (3.0, 0.0, {}, 1.0),
    (0.0, 0.0, {}, 1.0),
    (3.0, 2.0, dict(coefficient=0.001), 0.0015),
    (30.0, 2.0, dict(phi_bounds=(0.5, 10.0)), 5.0),
    (0.1, 2.0, dict(phi_bounds=(0.5, 10.0)), 0.25),
    (0.0, 2.0, dict(phi_bounds=(0.5, 10.0)), 0.25),  # φ(0) = γ_l: a zero layer is not special
    (0.0, 0.0, dict(phi_bounds=(0.5, 10.0)), 1.0),
    (0.0, 2.0, dict(phi_bounds=(0.0, 10.0)), 1.0),  # φ(0) = γ_l = 0: the zero-norm guard
    (3e6, 2.0, dict(phi_bounds=(0.5, float("inf"))), 1.5e6),  # γ_u = inf: no upper bound
    (0.1, 2.0, dict(phi_bounds=(0.5, float("inf"))), 0.25),
])
def test_trust_ratio(x_norm, u_norm, kwargs, expected):
    got = update_rules.trust_ratio(tf.constant(x_norm), tf.constant(u_norm), **kwargs)
    assert float(got) == pytest.approx(expected, rel=1e-6)
    reference = ref.trust_ratio(np.full(1, x_norm), np.full(1, u_norm), **kwargs)
    assert float(got) == pytest.approx(reference, rel=1e-6)


@pytest.mark.parametrize("shape", [(), (5,), (30, 7), (4, 3, 6), (2, 0), (0, 3)])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_l2_norm_is_the_float64_norm_of_the_whole_layer(shape, jit_compile):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    got = tf.function(update_rules.l2_norm, jit_compile=jit_compile)(tf.constant(x))
    assert got.shape == ()
    assert float(got) == pytest.approx(np.sqrt(np.sum(x.astype(np.float64) ** 2)), rel=1e-6)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_a_16_bit_layer_norm_does_not_overflow(dtype):
    """‖x‖ = √(1000 · 10²) ≈ 316 fits float16, but Σx² = 1e5 does not: summed in float32."""
    x = np.full([1000], 10.0)
    got = update_rules.l2_norm(tf.constant(x, dtype))
    assert got.dtype == tf.float32
    assert float(got) == pytest.approx(np.sqrt(np.sum(x ** 2)), rel=1e-2)  # 16-bit rounding
    g = np.full([1000], 0.5)
    zeros = tf.zeros([1000], dtype)
    x_next, _, _, _ = update_rules.lamb_step(tf.constant(x, dtype), tf.constant(g, dtype), zeros,
                                             zeros, 1, 1e-3, 0.9, 0.999, 1e-6, 0.0)
    expected, _, _ = ref.lamb_step(x, g, np.zeros(1000), np.zeros(1000), 1, 1e-3, 0.9, 0.999,
                                   1e-6, 0.0)
    np.testing.assert_allclose(tf.cast(x_next, tf.float64).numpy(), expected, rtol=1e-2)


@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_float16_layer_whose_norm_is_beyond_float16_still_steps(flavour_name, optimizer_name):
    """300×300 float16 weights of 250: ‖x‖ = 75,000, beyond float16's 65,504. The norms and
    the ratio are float32; cast back to float16 the ratio was 0 or inf (weights of -inf)."""
    flavour = FLAVOURS[flavour_name]()
    x, g = np.full([300, 300], 250.0), np.ones([300, 300])
    variable = tf.Variable(tf.constant(x, tf.float16), name="w")
    eta = 1e-3 if optimizer_name == "LAMB" else 1.0  # LARS: η·eeta·‖x‖ = 1e-3·75,000
    optimizer = getattr(flavour.module, optimizer_name)(eta)
    optimizer.apply_gradients([(tf.constant(g, tf.float16), variable)])
    if optimizer_name == "LAMB":
        expected, _, _ = ref.lamb_step(x, g, 0 * x, 0 * x, 1, eta, 0.9, 0.999, 1e-6, 0.0)
    else:
        expected, _ = ref.lars_step(x, g, 0 * x, eta, 0.9, 0.0, 0.001)
    assert float(np.max(np.abs(expected - x))) > 0.1  # a step float16 can see at 250
    np.testing.assert_allclose(variable.numpy().astype(np.float64), expected, rtol=1e-3)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_a_16_bit_update_whose_norm_is_beyond_float16_keeps_its_ratio(dtype):
    """Weights of norm ~300, a gradient with entries whose v underflows float16: ‖u‖ ≈ 2e5 is
    beyond float16, the ratio ‖x‖/‖u‖ ≈ 1.6e-3 is not; it was cast to 0 (the layer stopped
    moving). In bfloat16 (float32's range) nothing underflows: the same step norm."""
    rng = np.random.default_rng(7)
    x, g = rng.normal(size=[300, 300]), 0.1 * rng.normal(size=[300, 300])
    g[:, :50] = 1e-4  # (1 - β2)·g² = 1e-11: v is 0 in float16, r = m̂/ε is large
    x16, g16 = tf.constant(x, dtype), tf.constant(g, dtype)
    zeros = tf.zeros_like(x16)
    x_next, _, _, ratio = update_rules.lamb_step(x16, g16, zeros, zeros, 1, 1e-2, 0.9, 0.999,
                                                 1e-6, 0.0)
    x_in = x16.numpy().astype(np.float64)
    if dtype == tf.float16:  # the case at hand: ‖u‖ = ‖x‖/ratio is beyond float16
        assert 0 < float(ratio) < np.linalg.norm(x_in) / 65504
    # whatever ‖u‖, a LAMB step has the norm η·‖x‖ (Algorithm 2, φ the identity)
    step = x_next.numpy().astype(np.float64) - x_in
    assert np.isfinite(step).all()
    assert np.linalg.norm(step) == pytest.approx(1e-2 * np.linalg.norm(x_in), rel=0.05)


def test_trust_ratio_gradient_is_finite_at_zero_norm():
    """No inf/nan is formed even in the branch that is not taken (XLA- and tape-safe)."""
    u_norm = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        ratio = update_rules.trust_ratio(tf.constant(1.0), u_norm)
    assert np.isfinite(tape.gradient(ratio, u_norm).numpy())


@pytest.mark.parametrize("gradient_scale", [1e-3, 1.0, 1e3])
def test_lamb_step_norm_is_lr_times_weight_norm_whatever_the_gradient_scale(gradient_scale):
    rng = np.random.default_rng(4)
    x = tf.constant(rng.normal(size=(5, 7)), tf.float32)
    g = tf.constant(gradient_scale * rng.normal(size=(5, 7)), tf.float32)
    zeros = tf.zeros_like(x)
    x_next, _, _, ratio = update_rules.lamb_step(x, g, zeros, zeros, 1, 0.01, 0.9, 0.999, 1e-6, 0.01)
    assert float(tf.norm(x_next - x)) == pytest.approx(0.01 * float(tf.norm(x)), rel=1e-5)
    bounded, _, _, _ = update_rules.lamb_step(x, g, zeros, zeros, 1, 0.01, 0.9, 0.999, 1e-6, 0.01,
                                              phi_bounds=(0.0, 1.0))
    assert float(tf.norm(bounded - x)) == pytest.approx(0.01 * 1.0, rel=1e-5)


def test_lamb_step_from_zero_weights_with_phi_bounds_has_norm_lr_times_gamma_l():
    """The issue's case: x = 0, φ(0) = γ_l = 0.01, so the step's norm is η·γ_l, not η·‖u‖."""
    x = tf.zeros([4], tf.float64)
    g = tf.constant([1.0, -2.0, 3.0, 0.5], tf.float64)
    x_next, _, _, ratio = update_rules.lamb_step(
        x, g, tf.zeros_like(x), tf.zeros_like(x), tf.constant(1), 1.0, 0.9, 0.999, 1e-6, 0.0,
        phi_bounds=(0.01, 10.0))
    expected, _, _, expected_ratio = ref.lamb_step(
        np.zeros(4), g.numpy(), np.zeros(4), np.zeros(4), 1, 1.0, 0.9, 0.999, 1e-6, 0.0,
        phi_bounds=(0.01, 10.0), return_trust_ratio=True)
    assert float(ratio) == pytest.approx(expected_ratio, rel=1e-9)
    assert float(ratio) == pytest.approx(0.01 / 2.0, rel=1e-5)  # u ≈ sign(g) at t = 1: ‖u‖ ≈ 2
    np.testing.assert_allclose(x_next.numpy(), expected, rtol=1e-9)
    assert float(tf.norm(x_next)) == pytest.approx(0.01, rel=1e-6)


@pytest.mark.parametrize("size", [4, 65536])  # plain ops, and the per-variable XLA kernel
@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_optimizers_step_a_zero_layer_by_gamma_l(flavour_name, size):
    """Through LAMB's classes (`compiled_updates`): a zero layer's ratio is γ_l/‖u‖."""
    flavour = FLAVOURS[flavour_name]()
    g = np.random.default_rng(5).normal(size=size)
    variable = flavour.variable("dense/kernel", np.zeros(size))
    optimizer = flavour.module.LAMB(0.1, phi_bounds=(0.01, 10.0))
    flavour.apply(optimizer, [g], [variable])
    expected, _, _, ratio = ref.lamb_step(np.zeros(size), g.astype(np.float32), np.zeros(size),
                                          np.zeros(size), 1, 0.1, 0.9, 0.999, 1e-6, 0.0,
                                          phi_bounds=(0.01, 10.0), return_trust_ratio=True)
    assert optimizer.trust_ratios()["dense/kernel"] == pytest.approx(ratio, rel=1e-5)
    np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("size", [4, 65536])  # plain ops, and the per-variable XLA kernel
@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_phi_bounds_without_upper_bound_clip_only_below(flavour_name, size):
    """`phi_bounds=(γ_l, inf)`: φ(z) = max(z, γ_l); a large layer keeps its norm, a small
    one and a zero one take γ_l, as the reference; get_config keeps the inf."""
    flavour = FLAVOURS[flavour_name]()
    rng = np.random.default_rng(6)
    g = rng.normal(size=size)
    starts = {"big/kernel": rng.normal(size=size) * 100.0, "small/kernel": np.full(size, 1e-4),
              "zero/kernel": np.zeros(size)}
    variables = [flavour.variable(path, x) for path, x in starts.items()]
    bounds = (0.5, float("inf"))
    optimizer = flavour.module.LAMB(0.1, phi_bounds=bounds)
    assert optimizer.get_config()["phi_bounds"] == [0.5, float("inf")]
    flavour.apply(optimizer, [g] * 3, variables)
    for (path, x0), variable in zip(starts.items(), variables):
        x0 = x0.astype(np.float32).astype(np.float64)
        expected, _, _, ratio = ref.lamb_step(x0, g.astype(np.float32), np.zeros(size),
                                              np.zeros(size), 1, 0.1, 0.9, 0.999, 1e-6, 0.0,
                                              phi_bounds=bounds, return_trust_ratio=True)
        # (float32 norms of 65,536 elements: 1e-5 off without bounds too)
        assert optimizer.trust_ratios()[path] == pytest.approx(ratio, rel=3e-5), path
        ref.assert_update_close(variable.numpy(), expected, x0, steps=1)


def test_dense_gradient_sums_repeated_rows():
    slices = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), tf.constant([1, 0, 1]),
                              dense_shape=tf.constant([3, 2]))
    np.testing.assert_array_equal(update_rules.dense_gradient(slices, (3, 2)).numpy(),
                                  [[3.0, 4.0], [6.0, 8.0], [0.0, 0.0]])


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_optimizers_report_last_trust_ratios(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    rng = np.random.default_rng(5)
    x0 = {"dense/kernel": rng.normal(size=(3, 4)), "dense/bias": np.zeros(4), "norm/gamma": np.ones(4)}
    grads = [{p: rng.normal(size=v.shape) for p, v in x0.items()} for _ in range(2)]
    for optimizer_name in ("LAMB", "LARS"):
        variables = {p: flavour.variable(p, v) for p, v in x0.items()}
        optimizer = getattr(flavour.module, optimizer_name)(
            0.1, weight_decay_rate=0.01, exclude_from_weight_decay=["norm"])
        for step in grads:
            flavour.apply(optimizer, [step[p] for p in variables], list(variables.values()))
        ratios = optimizer.trust_ratios()
        assert len(ratios) == 3
        # the report is a scalar per variable: its cost is one scalar assignment per step
        assert all(tuple(v.shape) == () for v in optimizer._trust_ratio_variables)
        x, state = dict(x0), {p: [np.zeros_like(v), np.zeros_like(v)] for p, v in x0.items()}
        expected = {}
        for t, step in enumerate(grads, start=1):
            for p in x0:
                decay = adapt = p != "norm/gamma"
                if optimizer_name == "LAMB":
                    x[p], state[p][0], state[p][1], expected[p] = ref.lamb_step(
                        x[p], step[p], *state[p], t, 0.1, 0.9, 0.999, 1e-6, 0.01,
                        decay=decay, adapt=adapt, return_trust_ratio=True)
                else:
                    x[p], state[p][0], expected[p] = ref.lars_step(
                        x[p], step[p], state[p][0], 0.1, 0.9, 0.01, 0.001,
                        decay=decay, adapt=adapt, return_trust_ratio=True)
        for path, got in ratios.items():
            (p,) = [q for q in x0 if path.endswith(q)]
            assert got == pytest.approx(expected[p], rel=1e-5), (optimizer_name, p)
        # excluded from adaptation: exactly 1; the others are real ratios
        assert expected["norm/gamma"] == 1.0 and expected["dense/kernel"] != 1.0


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_trust_ratios_of_variables_of_several_dtypes_keep_their_paths(flavour_name):
    """The report reads the ratios back one stack per dtype: each still lands on its path."""
    flavour = FLAVOURS[flavour_name]()
    rng = np.random.default_rng(6)
    x0 = {"a/kernel": rng.normal(size=(3, 4)), "b/kernel": rng.normal(size=(4,)),
          "c/kernel": rng.normal(size=(2, 2)), "d/kernel": rng.normal(size=(5,))}
    dtypes = {"a/kernel": np.float32, "b/kernel": np.float64, "c/kernel": np.float32,
              "d/kernel": np.float64}
    variables = [tf.Variable(np.asarray(v, dtypes[p]), name=p) for p, v in x0.items()]
    grads = {p: rng.normal(size=v.shape) for p, v in x0.items()}
    optimizer = flavour.module.LAMB(0.1, weight_decay_rate=0.01)
    optimizer.apply_gradients(
        (tf.constant(grads[p], dtypes[p]), variable) for p, variable in zip(x0, variables))
    ratios = optimizer.trust_ratios()
    assert len(ratios) == 4
    for path, got in ratios.items():
        (p,) = [q for q in x0 if path.endswith(q)]
        zeros = np.zeros_like(x0[p])
        *_, expected = ref.lamb_step(x0[p], grads[p], zeros, zeros, 1, 0.1, 0.9, 0.999, 1e-6,
                                     0.01, return_trust_ratio=True)
        assert got == pytest.approx(expected, rel=1e-5), p
    assert len(set(ratios.values())) == 4
