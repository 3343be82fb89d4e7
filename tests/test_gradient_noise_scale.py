"""The gradient noise scale (lamb_tf.noise_scale) measured during accumulation, against NumPy.

Linear regression y = x.w* + eps with x ~ N(0, I_n) and eps ~ N(0, sigma^2), loss
0.5 (x.w - y)^2, at a fixed w: the per-example gradient is g = x (x.d - eps) with d = w - w*,
so, exactly,

    G = E g = d,    E|g|^2 = (n + 2)|d|^2 + n sigma^2,    tr(Sigma) = (n + 1)|d|^2 + n sigma^2.

The reference estimators below are written from arXiv 1812.06162 appendix A in float64.
"""
import re

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from lamb_tf import accumulation
from lamb_tf import noise_scale

FEATURES = 4
SIGMA = 1.0
TRUE_WEIGHTS = np.zeros(FEATURES)
START_WEIGHTS = np.array([1.0, -0.5, 0.25, 0.5])  # d = w - w* = START_WEIGHTS


def exact_gradient_squared_and_trace():
    d = START_WEIGHTS - TRUE_WEIGHTS
    return d @ d, (FEATURES + 1) * (d @ d) + FEATURES * SIGMA**2


def regression_batch(rng, size):
    x = rng.normal(size=(size, FEATURES))
    y = x @ TRUE_WEIGHTS + SIGMA * rng.normal(size=size)
    return x.astype(np.float32), y.astype(np.float32)


def reference_estimates(small_squared_norm, big_squared_norm, small_batch, big_batch):
    """Appendix A, eqs. A.2 and A.3, float64."""
    gradient_squared = (big_batch * big_squared_norm - small_batch * small_squared_norm) / (
        big_batch - small_batch
    )
    trace = (small_squared_norm - big_squared_norm) / (1 / small_batch - 1 / big_batch)
    return gradient_squared, trace


def reference_step_norms(x, y, weights, micro_batch, scale=0.5):
    """float64: mean squared norm of the micro-batch gradients, squared norm of the batch
    gradient, for the loss scale * mean((x.w - y)^2) (0.5: the custom loop, 1: Keras MSE)."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    per_example = 2 * scale * x * (x @ weights - y)[:, None]
    micro = per_example.reshape(-1, micro_batch, FEATURES).mean(axis=1)
    return np.mean(np.sum(micro**2, axis=1)), np.sum(per_example.mean(axis=0) ** 2)


def custom_loop_step(strategy, weights, accumulation_steps):
    """One step of a custom loop: per-replica accumulation, then the mean across replicas."""

    def replica_step(x, y):
        def loss_fn(micro_batch):
            micro_x, micro_y = micro_batch
            prediction = tf.linalg.matvec(micro_x, weights)
            return 0.5 * tf.reduce_mean(tf.square(prediction - micro_y))

        gradients, _, micro_norm = accumulation.accumulate_gradients(
            loss_fn, [weights], (x, y), accumulation_steps, return_micro_batch_norm=True
        )
        gradients = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.MEAN, gradients
        )
        return micro_norm, tf.reduce_sum(tf.square(gradients[0]))

    @tf.function
    def step(dataset_batch):
        micro_norm, big_norm = strategy.run(replica_step, args=dataset_batch)
        first = strategy.experimental_local_results
        return first(micro_norm)[0], first(big_norm)[0]

    return step


def distributed_batches(strategy, x, y, global_batch):
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True)
    return iter(strategy.experimental_distribute_dataset(dataset))


STRATEGIES = {
    "one_device": (lambda request: tf.distribute.get_strategy(), 8),  # k=8 micro-batches
    "two_replicas": (lambda request: request.getfixturevalue("two_cpu_strategy"), 4),  # 2 x 4
}


@pytest.fixture(params=sorted(STRATEGIES))
def strategy_and_steps(request):
    make, accumulation_steps = STRATEGIES[request.param]
    return make(request), accumulation_steps


def custom_loop(strategy, accumulation_steps, micro_batch, steps, seed):
    """(global batch, x, y, the step function, its distributed batches) at START_WEIGHTS."""
    global_batch = micro_batch * accumulation_steps * strategy.num_replicas_in_sync
    x, y = regression_batch(np.random.default_rng(seed), global_batch * steps)
    with strategy.scope():
        weights = tf.Variable(START_WEIGHTS.astype(np.float32))
    step = custom_loop_step(strategy, weights, accumulation_steps)
    return global_batch, x, y, step, distributed_batches(strategy, x, y, global_batch)


def test_step_norms_match_numpy_float64(strategy_and_steps):
    strategy, accumulation_steps = strategy_and_steps
    micro_batch, steps = 8, 3
    global_batch, x, y, step, batches = custom_loop(
        strategy, accumulation_steps, micro_batch, steps, seed=1
    )
    for index in range(steps):
        micro_norm, big_norm = step(next(batches))
        rows = slice(index * global_batch, (index + 1) * global_batch)
        want_micro, want_big = reference_step_norms(x[rows], y[rows], START_WEIGHTS, micro_batch)
        np.testing.assert_allclose(float(micro_norm), want_micro, rtol=1e-5)
        np.testing.assert_allclose(float(big_norm), want_big, rtol=1e-5)


def test_estimators_recover_exact_gradient_norm_and_trace(strategy_and_steps):
    """Averaged over 400 steps, the unbiased estimators land on the exact |G|^2 and
    tr(Sigma) (standard error about 2% each here), and the EMA ratio near B_simple."""
    strategy, accumulation_steps = strategy_and_steps
    micro_batch, steps = 8, 400
    global_batch, _, _, step, batches = custom_loop(
        strategy, accumulation_steps, micro_batch, steps, seed=2
    )
    with strategy.scope():
        averages = noise_scale.GradientNoiseScale(decay=0.99)
    estimates = []
    for _ in range(steps):
        micro_norm, big_norm = step(next(batches))
        estimates.append(
            noise_scale.unbiased_estimates(micro_norm, big_norm, micro_batch, global_batch)
        )
        averages.update(micro_norm, big_norm, micro_batch, global_batch)
    gradient_squared, trace = np.mean(np.array(estimates, dtype=np.float64), axis=0)
    want_gradient_squared, want_trace = exact_gradient_squared_and_trace()
    np.testing.assert_allclose(gradient_squared, want_gradient_squared, rtol=0.1)
    np.testing.assert_allclose(trace, want_trace, rtol=0.1)
    np.testing.assert_allclose(
        float(averages.value()), want_trace / want_gradient_squared, rtol=0.3
    )


def reference_ema_noise_scale(batches, weights, micro_batch, decay):
    """float64 EMA of both estimators over the batches; B_simple after each step."""
    gradient_average = trace_average = 0.0
    values = []
    for x, y in batches:
        small, big = reference_step_norms(x, y, weights, micro_batch, scale=1.0)
        gradient_squared, trace = reference_estimates(small, big, micro_batch, len(x))
        gradient_average = decay * gradient_average + (1 - decay) * gradient_squared
        trace_average = decay * trace_average + (1 - decay) * trace
        values.append(trace_average / gradient_average)
    return values


def fit_noise_scale_logs(strategy, accumulation_steps, x, y, global_batch, decay, **compile_kw):
    with strategy.scope():
        inner = tf_keras.Sequential(
            [tf_keras.layers.Dense(1, use_bias=False, input_shape=(FEATURES,))]
        )
        inner.layers[0].kernel.assign(START_WEIGHTS.reshape(FEATURES, 1).astype(np.float32))
        model = accumulation.GradientAccumulationModel(
            inner, accumulation_steps, noise_scale_decay=decay
        )
        model.compile(optimizer=tf_keras.optimizers.SGD(0.0), loss="mse", **compile_kw)
    logged = []
    model.fit(
        x,
        y[:, None],
        batch_size=global_batch,
        shuffle=False,
        verbose=0,
        callbacks=[
            tf_keras.callbacks.LambdaCallback(
                on_batch_end=lambda _, logs=None: logged.append(logs)
            )
        ],
    )
    return [logs.get(noise_scale.NOISE_SCALE_LOG) for logs in logged]


@pytest.mark.slow  # fit runs, two replicas
def test_fit_logs_the_averaged_noise_scale(strategy_and_steps):
    """GradientAccumulationModel's `gradient_noise_scale` log is the EMA ratio of the
    estimators, step by step (Keras MSE, learning rate 0 so that w stays put)."""
    strategy, accumulation_steps = strategy_and_steps
    micro_batch, steps, decay = 8, 5, 0.5
    global_batch = micro_batch * accumulation_steps * strategy.num_replicas_in_sync
    x, y = regression_batch(np.random.default_rng(3), global_batch * steps)
    logged = fit_noise_scale_logs(strategy, accumulation_steps, x, y, global_batch, decay)
    batches = [
        (x[i : i + global_batch], y[i : i + global_batch])
        for i in range(0, len(x), global_batch)
    ]
    want = reference_ema_noise_scale(batches, START_WEIGHTS, micro_batch, decay)
    np.testing.assert_allclose(np.array(logged, dtype=np.float64), want, rtol=1e-4)


def test_no_noise_scale_with_one_micro_batch_on_one_replica():
    x, y = regression_batch(np.random.default_rng(4), 32)
    logged = fit_noise_scale_logs(tf.distribute.get_strategy(), 1, x, y, 16, decay=0.9)
    assert logged == [None, None]


def test_non_finite_step_leaves_the_averages_unchanged():
    averages = noise_scale.GradientNoiseScale(decay=0.5)
    first = float(averages.update(4.0, 1.0, 8, 64))
    assert float(averages.update(float("inf"), 1.0, 8, 64)) == first
    assert float(averages.update(float("nan"), float("nan"), 8, 64)) == first


def test_a_step_whose_trace_estimate_alone_overflows_leaves_the_averages_unchanged():
    """|G_small|^2 = 3e38 (finite in float32), |G_big|^2 = 0, batches 1 and 2:
    |G|^2 ~ (2·0 − 1·3e38)/(2 − 1) = −3e38 is finite, but tr(Sigma) ~ 3e38/(1 − 1/2) = 6e38
    overflows float32 (largest 3.4e38). The step is skipped as a whole, not half folded in."""
    averages = noise_scale.GradientNoiseScale(decay=0.5)
    first = float(averages.update(4.0, 1.0, 8, 64))
    assert float(averages.update(3e38, 0.0, 1, 2)) == first
    assert np.isfinite(float(averages.trace)) and np.isfinite(float(averages.gradient_squared))


def test_a_decay_of_0_is_accepted_and_keeps_only_the_last_steps_estimates():
    """decay=0 is in [0, 1): no smoothing. Batches 8 and 64 (1/8 − 1/64 = 7/64):
    step 1, |G_8|^2 = 4, |G_64|^2 = 1: |G|^2 ~ (64 − 32)/56 = 4/7, tr ~ 3/(7/64) = 192/7,
    B_simple = 48; step 2, |G_8|^2 = 2: |G|^2 ~ (64 − 16)/56 = 6/7, tr ~ 64/7, B = 32/3."""
    averages = noise_scale.GradientNoiseScale(decay=0.0)
    assert float(averages.update(4.0, 1.0, 8, 64)) == pytest.approx(48.0, rel=1e-6)
    assert float(averages.update(2.0, 1.0, 8, 64)) == pytest.approx(32 / 3, rel=1e-6)


@pytest.mark.parametrize("decay", [1.0, -0.1, 1.5])
def test_a_decay_outside_0_to_1_is_refused(decay):
    """1 would keep both averages at 0 (a noise scale of NaN at every step)."""
    with pytest.raises(ValueError, match=re.escape(f"decay must be in [0, 1), got {decay!r}")):
        noise_scale.GradientNoiseScale(decay=decay)


@pytest.mark.parametrize("decay", ["0.9", None, True])
def test_a_decay_that_is_not_a_number_is_a_type_error_naming_it(decay):
    """A string once failed inside the range check: "'<=' not supported between ..."."""
    with pytest.raises(TypeError, match=re.escape(f"decay must be a real number, got {decay!r}")):
        noise_scale.GradientNoiseScale(decay=decay)


def test_the_accumulation_models_bad_decay_is_named_by_its_argument():
    # it said "decay must be in [0, 1)", the noise-scale object's argument, not the caller's
    inner = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    with pytest.raises(ValueError, match=re.escape("noise_scale_decay must be in [0, 1), got 1.0")):
        accumulation.GradientAccumulationModel(inner, 2, noise_scale_decay=1.0)


def test_one_batch_size_is_a_clear_error():
    with pytest.raises(ValueError, match="two batch sizes"):
        noise_scale.unbiased_estimates(1.0, 1.0, 64, 64)


def test_accumulation_model_checkpoints_the_averages_outside_its_weights(tmp_path):
    inner = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(FEATURES,))])
    model = accumulation.GradientAccumulationModel(inner, 2)
    assert [w.name for w in model.weights] == [w.name for w in inner.weights]
    checkpointed = tf.train.Checkpoint(model=model)
    path = checkpointed.write(str(tmp_path / "ckpt"))
    names = [name for name, _ in tf.train.list_variables(path)]
    assert any(name.startswith("model/gradient_noise_scale/") for name in names), names


def test_the_recipes_console_says_a_negative_estimate_is_not_a_noise_scale():
    from recipes.common import driver

    assert (driver.describe_noise_scale(2048, 1270.4)
            == "batch 2,048; measured noise scale ≈ 1,270 examples")
    # a small scale keeps three figures (a fine-tuning run of batch 4 read "≈ 0 examples")
    assert [driver.describe_noise_scale(4, scale).split("≈ ")[1] for scale in (
        0.4213, 12.34, 99.4, 99.6)] == ["0.421 examples", "12.3 examples", "99.4 examples",
                                        "100 examples"]
    for estimate, shown in [(-275.0, "-275"), (float("nan"), "nan")]:
        line = driver.describe_noise_scale(4, estimate)
        assert line.startswith(f"batch 4; noise scale not measurable yet (estimate {shown}: ")
        assert "≈" not in line
