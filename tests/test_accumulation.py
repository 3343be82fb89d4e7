"""Gradient accumulation: exactness against one big batch and against NumPy gradients,
once-per-update step counting, clipping after accumulation, float32 sums, errors.

"Exact" compares the weights and the optimizer's whole state (m, v, momentum, step
counters): LAMB's trust ratio hides a constant factor on the gradient from the weights
(a mean divided by k - 1 instead of k), not from its first moment. Every equivalence test
also has an optimizer whose step follows the gradient's scale (SGD, LARS).
"""
import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from flavours import assert_same_state, optimizer_state
from lamb_tf import keras3_optimizers, schedules
from lamb_tf.accumulation import (
    GRADIENT_NORM_LOG,
    GradientAccumulationModel,
    accumulate_gradients,
    plan_batch,
    split_into_micro_batches,
)
from lamb_tf.tf_keras_optimizers import LAMB, LARS

BATCH, STEPS, FEATURES, OUTPUTS = 16, 3, 3, 2
RNG = np.random.default_rng(0)
X = RNG.normal(size=(BATCH * STEPS, FEATURES)).astype(np.float32)
Y = RNG.normal(size=(BATCH * STEPS, OUTPUTS)).astype(np.float32)
HIDDEN_KERNEL = RNG.normal(size=(FEATURES, 4)).astype(np.float32)
HIDDEN_BIAS = RNG.normal(size=(4,)).astype(np.float32) * 0.1
OUTPUT_KERNEL = RNG.normal(size=(4, OUTPUTS)).astype(np.float32)
OUTPUT_BIAS = np.zeros((OUTPUTS,), np.float32)


def tiny_model():
    """Dense-tanh-Dense with an L2 regularizer (a regularization loss to accumulate)."""
    model = tf_keras.Sequential(
        [
            tf_keras.layers.Dense(
                4,
                activation="tanh",
                kernel_regularizer=tf_keras.regularizers.L2(0.01),
                input_shape=(FEATURES,),
            ),
            tf_keras.layers.Dense(OUTPUTS),
        ]
    )
    model.set_weights([HIDDEN_KERNEL, HIDDEN_BIAS, OUTPUT_KERNEL, OUTPUT_BIAS])
    return model


def schedule():
    return schedules.TfKerasWarmupPolynomialDecay(0.05, 10, warmup_steps=2)


OPTIMIZERS = {
    "sgd": lambda: tf_keras.optimizers.SGD(schedule(), momentum=0.9),
    "lamb": lambda: LAMB(schedule(), weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]),
    "lars": lambda: LARS(schedule(), weight_decay_rate=0.01, eeta=0.1),
}


def train(
    make_optimizer, accumulation_steps=None, strategy=None, jit_compile=False, sample_weight=None
):
    """STEPS optimizer steps of batch BATCH; returns (weights, history loss, optimizer)."""
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = tiny_model()
        if accumulation_steps:
            model = GradientAccumulationModel(model, accumulation_steps)
        model.compile(make_optimizer(), loss="mse", jit_compile=jit_compile)
    examples = (X, Y) if sample_weight is None else (X, Y, sample_weight)
    dataset = tf.data.Dataset.from_tensor_slices(examples).batch(BATCH, drop_remainder=True)
    history = model.fit(dataset, epochs=1, verbose=0)
    return [w.numpy() for w in model.weights], history.history["loss"][0], model.optimizer


def assert_same_training(actual, expected):
    for a, e in zip(actual[0], expected[0]):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
    assert actual[1] == pytest.approx(expected[1], rel=1e-5)  # loss metric over the batch
    assert actual[2].iterations.numpy() == expected[2].iterations.numpy() == STEPS
    # m, v, momentum, applied_updates: a gradient off by a constant factor shows here
    assert_same_state(optimizer_state(actual[2]), optimizer_state(expected[2]), rtol=1e-5)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_k_micro_batches_equal_one_batch(optimizer):
    one_batch = train(OPTIMIZERS[optimizer])
    accumulated = train(OPTIMIZERS[optimizer], accumulation_steps=4)
    assert_same_training(accumulated, one_batch)
    # The schedule ran once per applied update: the last update used lr(STEPS - 1).
    expected_lr = 0.05 * (1 - (STEPS - 1) / 10)  # past the 2-step warmup, BERT-style decay
    assert float(accumulated[2].learning_rate) == pytest.approx(expected_lr, rel=1e-6)


@pytest.mark.parametrize("optimizer", ["lamb", "lars"])
def test_one_micro_batch_trains_like_the_unwrapped_model(optimizer):
    # k = 1 takes the loop-free path: the micro-batch's gradient, applied as it is
    assert_same_training(train(OPTIMIZERS[optimizer], accumulation_steps=1),
                         train(OPTIMIZERS[optimizer]))


@pytest.mark.slow  # several fits, two replicas or XLA
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_two_replicas_with_accumulation_equal_one_device(optimizer, two_cpu_strategy):
    one_device = train(OPTIMIZERS[optimizer])
    two_replicas = train(OPTIMIZERS[optimizer], accumulation_steps=2, strategy=two_cpu_strategy)
    assert_same_training(two_replicas, one_device)


@pytest.mark.slow  # several fits, two replicas or XLA
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_jit_compiled_accumulation_equals_one_batch(optimizer):
    one_batch = train(OPTIMIZERS[optimizer])
    compiled = train(OPTIMIZERS[optimizer], accumulation_steps=4, jit_compile=True)
    assert_same_training(compiled, one_batch)


def test_per_example_sample_weights_stay_exact():
    """Keras' mean reduction divides weighted losses by the example count: a mean over
    examples, so accumulation stays exact with per-example weights."""
    weights = RNG.uniform(0.0, 2.0, size=(BATCH * STEPS,)).astype(np.float32)
    one_batch = train(OPTIMIZERS["sgd"], sample_weight=weights)
    accumulated = train(OPTIMIZERS["sgd"], accumulation_steps=4, sample_weight=weights)
    assert_same_training(accumulated, one_batch)


LEGACY_OPTIMIZERS = {  # OptimizerV2: Model Garden's optimizer factory's default
    "sgd-clipped": lambda: tf_keras.optimizers.legacy.SGD(
        schedule(), momentum=0.9, global_clipnorm=0.5),
    "adam-loss-scaled": lambda: tf_keras.mixed_precision.LossScaleOptimizer(
        tf_keras.optimizers.legacy.Adam(0.05)),
}


@pytest.mark.parametrize("optimizer", LEGACY_OPTIMIZERS)
def test_legacy_optimizers_accumulate_like_one_batch(optimizer):
    """tf_keras' legacy optimizers (OptimizerV2) have no public `aggregate_gradients`: the
    wrapper's step ended in an AttributeError's traceback inside `fit`."""
    (one_weights, one_loss, one), (k_weights, k_loss, accumulated) = (
        train(LEGACY_OPTIMIZERS[optimizer], accumulation_steps) for accumulation_steps in (None, 4))
    for a, e in zip(k_weights, one_weights):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
    assert k_loss == pytest.approx(one_loss, rel=1e-5)
    assert accumulated.iterations.numpy() == one.iterations.numpy() == STEPS
    slots = [np.asarray(w) for w in accumulated.get_weights()]  # the step, then m/v/momentum
    assert len(slots) > 1 and any(np.any(w != 0) for w in slots[1:])
    for a, e in zip(slots, one.get_weights()):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-7)


@pytest.mark.slow  # two replicas
def test_a_legacy_optimizer_on_two_replicas_equals_one_device(two_cpu_strategy):
    # the all-reduce is the legacy optimizer's own, once (its apply_gradients is told not to;
    # unclipped SGD, whose step follows the gradient's scale: a second all-reduce shows)
    def make_optimizer():
        return tf_keras.optimizers.legacy.SGD(schedule(), momentum=0.9)

    one_device = train(make_optimizer)
    two_replicas = train(make_optimizer, accumulation_steps=2, strategy=two_cpu_strategy)
    for a, e in zip(two_replicas[0] + two_replicas[2].get_weights(),
                    one_device[0] + one_device[2].get_weights()):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_loss_scale_optimizer_scales_and_unscales_once():
    def make_optimizer():
        return tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))

    assert_same_training(train(make_optimizer, accumulation_steps=4), train(make_optimizer))


def numpy_linear_mse_gradient(kernel, bias, x, y):
    """d/d(kernel, bias) of mean((x @ kernel + bias - y)^2) over examples and outputs."""
    x, y = np.float64(x), np.float64(y)
    residual = x @ kernel + bias - y
    scale = 2.0 / residual.size
    return scale * x.T @ residual, scale * residual.sum(axis=0)


def test_accumulated_gradient_is_the_gradient_of_the_batch_mean_loss():
    kernel = tf.Variable(OUTPUT_KERNEL[:OUTPUTS])  # a 2x2 linear model
    bias = tf.Variable([0.3, -0.2])
    x, y = X[:BATCH, :OUTPUTS], Y[:BATCH]

    @tf.function
    def gradients():
        def loss_fn(micro_batch):
            return tf.reduce_mean((micro_batch["x"] @ kernel + bias - micro_batch["y"]) ** 2)

        return accumulate_gradients(loss_fn, [kernel, bias], {"x": x, "y": y, "w": None}, 4)

    (kernel_gradient, bias_gradient), loss = gradients()
    expected_kernel, expected_bias = numpy_linear_mse_gradient(
        kernel.numpy(), bias.numpy(), x, y
    )
    np.testing.assert_allclose(kernel_gradient, expected_kernel, rtol=1e-5)
    np.testing.assert_allclose(bias_gradient, expected_bias, rtol=1e-5)
    expected_loss = np.mean((np.float64(x) @ kernel.numpy() + bias.numpy() - y) ** 2)
    assert float(loss) == pytest.approx(expected_loss, rel=1e-5)


@pytest.mark.parametrize("use_strategy", [False, True])
def test_global_clipnorm_acts_on_the_accumulated_gradient(use_strategy, request):
    """Clipping k micro-batches equals clipping the whole batch, not each micro-batch."""
    strategy = request.getfixturevalue("two_cpu_strategy") if use_strategy else None
    kernel0, bias0 = OUTPUT_KERNEL[:OUTPUTS].astype(np.float64), np.zeros(OUTPUTS)
    x, y = X[:BATCH, :OUTPUTS], Y[:BATCH]
    learning_rate, clip = 0.1, 0.05

    def clipped(gradients):
        norm = np.sqrt(sum(np.sum(g**2) for g in gradients))
        return [g * clip / max(norm, clip) for g in gradients]

    whole = clipped(numpy_linear_mse_gradient(kernel0, bias0, x, y))
    expected = [p - learning_rate * g for p, g in zip((kernel0, bias0), whole)]
    per_micro = [
        clipped(numpy_linear_mse_gradient(kernel0, bias0, x[i : i + 4], y[i : i + 4]))
        for i in range(0, BATCH, 4)
    ]
    per_micro_mean = [np.mean([g[j] for g in per_micro], axis=0) for j in range(2)]
    clipped_per_micro = [p - learning_rate * g for p, g in zip((kernel0, bias0), per_micro_mean)]

    with (strategy or tf.distribute.get_strategy()).scope():
        linear = tf_keras.Sequential([tf_keras.layers.Dense(OUTPUTS, input_shape=(OUTPUTS,))])
        linear.set_weights([kernel0.astype(np.float32), bias0.astype(np.float32)])
        model = GradientAccumulationModel(linear, 2 if use_strategy else 4)
        model.compile(tf_keras.optimizers.SGD(learning_rate, global_clipnorm=clip), loss="mse")
    batch_logs = []
    log_batches = tf_keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: batch_logs.append(dict(logs))
    )
    model.fit(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), verbose=0, callbacks=[log_batches]
    )
    actual = [w.numpy() for w in linear.weights]
    for a, e, wrong in zip(actual, expected, clipped_per_micro):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-7)
        assert np.max(np.abs(a - wrong)) > 1e-4  # the per-micro-batch clip is measurably off
    # the logged norm is the whole batch's gradient norm (accumulated, all-reduced, unclipped)
    whole_norm = np.sqrt(
        sum(np.sum(g**2) for g in numpy_linear_mse_gradient(kernel0, bias0, x, y))
    )
    assert batch_logs[0][GRADIENT_NORM_LOG] == pytest.approx(whole_norm, rel=1e-5)


def test_sums_are_float32_even_for_bfloat16_gradients():
    """16 micro-batches with gradients 256, 1, 1, ...: a bfloat16 sum stays at 256 (its
    8-bit mantissa drops each +1); the float32 sum is 271, mean 16.9375 -> bf16 16.875."""
    weight = tf.Variable(tf.constant([1.0], tf.bfloat16))
    slopes = tf.constant([[256.0]] + [[1.0]] * 15, tf.bfloat16)

    @tf.function
    def gradients():
        return accumulate_gradients(lambda s: tf.reduce_sum(weight * s), [weight], slopes, 16)

    (gradient,), _ = gradients()
    assert gradient.dtype == tf.bfloat16
    assert float(gradient[0]) == float(tf.cast(271.0 / 16, tf.bfloat16))  # not 16.0


class _SGDRecordingGradientDtypes(tf_keras.optimizers.SGD):
    """SGD that records the dtypes of the gradients `apply_gradients` receives."""

    gradient_dtypes = None

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        self.gradient_dtypes = {tf.as_dtype(g.dtype) for g, _ in grads_and_vars}
        return super().apply_gradients(grads_and_vars, *args, **kwargs)


def test_mixed_bfloat16_policy_trains_with_float32_gradients():
    def make_optimizer():
        return _SGDRecordingGradientDtypes(schedule(), momentum=0.9)

    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        one_batch = train(make_optimizer)
        accumulated = train(make_optimizer, accumulation_steps=4)
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    assert accumulated[2].gradient_dtypes == {tf.float32}  # what reaches the optimizer
    initial = [HIDDEN_KERNEL, HIDDEN_BIAS, OUTPUT_KERNEL, OUTPUT_BIAS]
    for a, e, x0 in zip(accumulated[0], one_batch[0], initial):
        assert a.dtype == np.float32
        # bfloat16 forward passes differ with the batch split: measured up to 3.6e-4, on
        # updates of 0.056 to 0.10 (a mean over k - 1 would be off by a third of those)
        assert np.max(np.abs(e - x0)) > 0.05
        np.testing.assert_allclose(a, e, rtol=0, atol=1e-3)
    assert int(accumulated[2].iterations) == STEPS


def test_checkpoint_restores_wrapper_weights_and_optimizer(tmp_path):
    model = GradientAccumulationModel(tiny_model(), 4)
    model.compile(OPTIMIZERS["lamb"](), loss="mse")
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(BATCH, drop_remainder=True)
    model.fit(dataset.take(1), verbose=0)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    saved = [w.numpy() for w in model.weights] + [v.numpy() for v in model.optimizer.variables()]
    model.fit(dataset.skip(1), verbose=0)
    assert int(model.optimizer.iterations) == STEPS
    checkpoint.restore(path).assert_existing_objects_matched()
    restored = [w.numpy() for w in model.weights] + [v.numpy() for v in model.optimizer.variables()]
    for r, s in zip(restored, saved):
        np.testing.assert_array_equal(r, s)
    assert int(model.optimizer.iterations) == 1
    # The bare model's weights are the wrapper's weights.
    for inner, outer in zip(model.inner_model.weights, model.weights):
        assert inner is outer


def test_config_round_trip_and_call():
    model = GradientAccumulationModel(tiny_model(), 4)
    rebuilt = GradientAccumulationModel.from_config(model.get_config())
    assert rebuilt.accumulation_steps == 4
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_allclose(rebuilt(X[:4]).numpy(), model.inner_model(X[:4]).numpy())


KERAS3_OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "lamb": lambda: keras3_optimizers.LAMB(0.05, weight_decay_rate=0.01),
}


@pytest.mark.parametrize("optimizer_name", KERAS3_OPTIMIZERS)
def test_keras3_custom_loop_equals_one_batch(optimizer_name):
    """Keras 3 custom loop (docs/large_batch.md): accumulate_gradients over k = 4 micro-batches
    then apply_gradients equals one tape over the whole batch, weights and optimizer state."""

    def make():
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(OUTPUTS)])
        model.set_weights([OUTPUT_KERNEL[:FEATURES, :OUTPUTS] * 0 + 0.5, OUTPUT_BIAS])
        optimizer = KERAS3_OPTIMIZERS[optimizer_name]()
        # Keras 3 optimizers must be built before a tf.function creates their variables
        optimizer.build(model.trainable_variables)
        return model, optimizer

    def mean_loss(model, batch):
        return keras.ops.mean(keras.losses.mean_squared_error(batch[1], model(batch[0])))

    results = []
    for k in (None, 4):  # None: one tape over the whole batch, no accumulation code
        model, optimizer = make()

        @tf.function
        def step(batch):
            variables = model.trainable_variables  # noqa: B023
            if k is None:  # noqa: B023
                with tf.GradientTape() as tape:
                    loss = mean_loss(model, batch)  # noqa: B023
                gradients = tape.gradient(loss, variables)
            else:
                gradients, _ = accumulate_gradients(
                    lambda micro_batch: mean_loss(model, micro_batch), variables, batch, k  # noqa: B023
                )
            optimizer.apply_gradients(zip(gradients, variables))  # noqa: B023

        for i in range(STEPS):
            step((X[i * BATCH : (i + 1) * BATCH], Y[i * BATCH : (i + 1) * BATCH]))
        assert int(optimizer.iterations) == STEPS
        results.append(([w.numpy() for w in model.weights], optimizer_state(optimizer)))
    (one_batch, one_batch_state), (accumulated, accumulated_state) = results
    for a, e in zip(accumulated, one_batch):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
    assert_same_state(accumulated_state, one_batch_state, rtol=1e-5)


def test_split_rejects_indivisible_static_batch_and_ragged_tensors():
    with pytest.raises(ValueError, match="batch of 10 examples .* accumulation_steps=4"):
        split_into_micro_batches(tf.zeros([10, 3]), 4)
    with pytest.raises(TypeError, match="dense batch tensors, got RaggedTensor"):
        split_into_micro_batches(tf.ragged.constant([[1], [2, 3]]), 2)


def test_plan_batch_reaches_64k_and_32k_on_8_replicas():
    phase_1 = plan_batch(65536, 64, 8)
    assert (phase_1.per_replica_batch_size, phase_1.accumulation_steps) == (8192, 128)
    phase_2 = plan_batch(32768, 8, 8)
    assert (phase_2.per_replica_batch_size, phase_2.accumulation_steps) == (4096, 512)
    assert plan_batch(16, 16, 1).accumulation_steps == 1


def test_plan_batch_error_names_the_numbers_and_nearest_choices():
    # 8 replicas x 48 = 384: 1000 lies between 768 and 1152; per replica 125 = 5^3, whose
    # divisors nearest 48 are 25 and 125.
    message = (
        r"global_batch_size=1000 is not divisible by num_replicas=8 x micro_batch_size=48 "
        r"\(= 384\); nearest valid choices: global_batch_size 768 or 1152; "
        r"micro_batch_size 25 or 125 \(divisors of the per-replica batch 125\)"
    )
    with pytest.raises(ValueError, match=message):
        plan_batch(1000, 48, 8)
    # Not divisible by the replicas: only global batches can be suggested; below 1 unit
    # only the next multiple is.
    with pytest.raises(ValueError, match=r"nearest valid choices: global_batch_size 24$"):
        plan_batch(20, 3, 8)


@pytest.mark.parametrize(
    "args,error,fragment",
    [
        ((0, 8, 8), ValueError, "global_batch_size"),
        ((1024, -1, 8), ValueError, "micro_batch_size"),
        ((1024, 8, 0), ValueError, "num_replicas"),
        ((1024.0, 8, 8), TypeError, "global_batch_size"),
        ((1024, 8, True), TypeError, "num_replicas"),
    ],
)
def test_plan_batch_bad_arguments(args, error, fragment):
    with pytest.raises(error, match=fragment):
        plan_batch(*args)


def test_embedding_gradients_accumulate_exactly():
    """Embedding lookups give IndexedSlices gradients; they are summed densely."""
    ids = RNG.integers(0, 10, size=(BATCH, 2)).astype(np.int32)
    table = RNG.normal(size=(10, 3)).astype(np.float32)

    def run(accumulation_steps):
        embedder = tf_keras.Sequential(
            [tf_keras.layers.Embedding(10, 3, input_length=2), tf_keras.layers.Flatten()]
        )
        embedder.build((None, 2))
        embedder.set_weights([table])
        model = embedder
        if accumulation_steps:
            model = GradientAccumulationModel(embedder, accumulation_steps)
        model.compile(tf_keras.optimizers.SGD(0.5), loss="mse")
        model.fit(ids, np.ones((BATCH, 6), np.float32), batch_size=BATCH, verbose=0)
        return embedder.weights[0].numpy()

    accumulated = run(4)
    np.testing.assert_allclose(accumulated, run(None), rtol=1e-6, atol=1e-7)
    assert np.max(np.abs(accumulated - table)) > 1e-3  # rows really moved
