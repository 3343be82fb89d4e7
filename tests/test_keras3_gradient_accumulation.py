"""Keras 3 `GradientAccumulationModel`: k micro-batches give exactly one batch's update.

Same global batch, trained once as a plain Keras 3 model and once through the wrapper with
k micro-batches: the weights, every optimizer variable (LAMB's m and v, LARS' and SGD's
momentum, the trust ratios, the step counter) and the logged loss agree, on one device and
on a 2-replica `MirroredStrategy` (the two logical CPUs of conftest.py). SGD reacts
linearly to the gradient's scale, so a wrong mean (sum instead of mean, one replica's
gradient) would show there even where LAMB's trust ratio would hide it.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from lamb_tf import keras3_accumulation
from lamb_tf import keras3_optimizers
from lamb_tf import schedules

BATCH, STEPS, FEATURES, OUTPUTS = 16, 3, 3, 2
RNG = np.random.default_rng(0)
X = RNG.normal(size=(BATCH * STEPS, FEATURES)).astype(np.float32)
Y = RNG.normal(size=(BATCH * STEPS, OUTPUTS)).astype(np.float32)
WEIGHTS = [RNG.normal(size=(FEATURES, 4)), RNG.normal(size=(4,)) * 0.1,
           RNG.normal(size=(4, OUTPUTS)), np.zeros((OUTPUTS,))]


def _schedule():
    return schedules.Keras3WarmupPolynomialDecay(0.05, 10, warmup_steps=2)


OPTIMIZERS = {
    "lamb": lambda: keras3_optimizers.LAMB(_schedule(), weight_decay_rate=0.01,
                                           exclude_from_weight_decay=["bias"]),
    "lars": lambda: keras3_optimizers.LARS(_schedule(), weight_decay_rate=0.01, eeta=0.1),
    "sgd": lambda: keras.optimizers.SGD(_schedule(), momentum=0.9),
}


def _model():
    model = keras.Sequential([
        keras.Input((FEATURES,)),
        keras.layers.Dense(4, activation="tanh", kernel_regularizer=keras.regularizers.L2(0.01)),
        keras.layers.Dense(OUTPUTS)])
    model.set_weights([w.astype(np.float32) for w in WEIGHTS])
    return model


def _train(make_optimizer, accumulation_steps=None, strategy=None):
    """STEPS updates of batch BATCH: (weights, optimizer variables in order, losses)."""
    with (strategy or tf.distribute.get_strategy()).scope():
        model = _model()
        trained = model if accumulation_steps is None else (
            keras3_accumulation.GradientAccumulationModel(model, accumulation_steps))
        optimizer = make_optimizer()
        trained.compile(optimizer=optimizer, loss="mse")
    history = trained.fit(X, Y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    state = [(v.name, np.asarray(v.numpy(), np.float64)) for v in optimizer.variables]
    return model.get_weights(), state, history.history["loss"]


def _assert_same_training(expected, actual):
    (weights, state, loss), (weights_k, state_k, loss_k) = expected, actual
    assert ref.relative_error(weights_k[0], WEIGHTS[0]) > 1e-3  # it did train
    for w, w_k in zip(weights, weights_k):
        assert ref.relative_error(w_k, w) < 1e-5
    assert len(state) == len(state_k)
    assert state[0] == state_k[0] == ("iteration", STEPS)  # one update per global batch
    for (name, value), (name_k, value_k) in zip(state, state_k):
        # m, v, momentum, trust ratios: the same slot of the same layer in both runs
        assert name.split("_")[-1] == name_k.split("_")[-1]
        assert ref.relative_error(value_k, value) < 1e-5, name
    assert loss_k == pytest.approx(loss, rel=1e-5)


@pytest.mark.slow  # several fit runs
@pytest.mark.parametrize("optimizer_name", list(OPTIMIZERS))
def test_k_micro_batches_equal_one_batch_on_one_device(optimizer_name):
    make = OPTIMIZERS[optimizer_name]
    _assert_same_training(_train(make), _train(make, accumulation_steps=4))


@pytest.mark.slow  # several fit runs
@pytest.mark.parametrize("optimizer_name", list(OPTIMIZERS))
def test_k_micro_batches_on_two_replicas_equal_one_batch_on_one_device(optimizer_name, two_cpu_strategy):
    make = OPTIMIZERS[optimizer_name]
    # 2 replicas x 2 micro-batches x 4 examples = the same global batch of 16
    _assert_same_training(_train(make), _train(make, accumulation_steps=2, strategy=two_cpu_strategy))


def test_optimizer_accumulation_on_top_is_refused():
    model = keras3_accumulation.GradientAccumulationModel(_model(), 2)
    model.compile(optimizer=keras3_optimizers.LAMB(0.01, gradient_accumulation_steps=2), loss="mse")
    with pytest.raises(ValueError, match="leave the optimizer's unset"):
        model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0)


def test_tf_keras_model_is_refused_with_the_other_wrapper_named():
    import tf_keras

    with pytest.raises(TypeError, match="lamb_tf.accumulation.GradientAccumulationModel"):
        keras3_accumulation.GradientAccumulationModel(tf_keras.Sequential(), 2)


def test_keras3_model_is_refused_by_the_tf_keras_wrapper_with_this_one_named():
    """It said only `got Sequential`, which both flavours' models are called."""
    from lamb_tf import accumulation

    with pytest.raises(TypeError, match=r"got keras\.src\.models\.sequential\.Sequential; for a "
                                        r"Keras 3 model use lamb_tf\.keras3_accumulation\."):
        accumulation.GradientAccumulationModel(keras.Sequential(), 2)


def test_config_round_trip_keeps_the_accumulation_steps():
    """What a `.keras` file stores (the slow test below saves and loads one), without a fit."""
    model = keras3_accumulation.GradientAccumulationModel(_model(), 4)
    rebuilt = keras3_accumulation.GradientAccumulationModel.from_config(model.get_config())
    assert rebuilt.accumulation_steps == 4
    assert [layer.units for layer in rebuilt.inner_model.layers] == [4, OUTPUTS]


def test_the_logged_loss_on_two_replicas_is_the_global_batch_mean(two_cpu_strategy):
    """Each replica's loss is divided by the replicas (so that the all-reduced gradients sum
    to the global mean); the logged loss is not. One step of a linear model, 2 replicas x 2
    micro-batches x 4 examples, against the float64 mean squared error of the 16 examples
    (the loss of a step is taken before its update)."""
    kernel = np.random.default_rng(5).normal(size=(FEATURES, OUTPUTS))
    bias = np.array([0.5, -0.25])
    with two_cpu_strategy.scope():
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(OUTPUTS)])
        model.set_weights([kernel.astype(np.float32), bias.astype(np.float32)])
        wrapped = keras3_accumulation.GradientAccumulationModel(model, 2)
        wrapped.compile(optimizer=keras3_optimizers.LAMB(0.01), loss="mse")
    history = wrapped.fit(X[:BATCH], Y[:BATCH], batch_size=BATCH, epochs=1, shuffle=False,
                          verbose=0)
    x, y = X[:BATCH].astype(np.float64), Y[:BATCH].astype(np.float64)
    expected = np.mean((x @ kernel + bias - y) ** 2)
    assert history.history["loss"][0] == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow  # several fit runs
def test_saved_wrapper_loads_without_custom_objects(tmp_path):
    model = keras3_accumulation.GradientAccumulationModel(_model(), 4)
    model.compile(optimizer=keras3_optimizers.LAMB(_schedule()), loss="mse")
    model.fit(X, Y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    model.save(tmp_path / "wrapped.keras")
    loaded = keras.models.load_model(tmp_path / "wrapped.keras")
    assert isinstance(loaded, keras3_accumulation.GradientAccumulationModel)
    assert loaded.accumulation_steps == 4
    assert isinstance(loaded.optimizer, keras3_optimizers.LAMB)
    np.testing.assert_allclose(loaded.predict(X[:4], verbose=0), model.predict(X[:4], verbose=0))


@pytest.mark.slow  # several fit runs
def test_loss_scale_optimizer_scales_each_micro_batch_and_unscales_once():
    make = OPTIMIZERS["lamb"]
    scaled = lambda: keras.optimizers.LossScaleOptimizer(make(), initial_scale=2.0**10)  # noqa: E731
    weights, _, loss = _train(make)
    weights_k, _, loss_k = _train(scaled, accumulation_steps=4)
    for w, w_k in zip(weights, weights_k):
        assert ref.relative_error(w_k, w) < 1e-5
    assert loss_k == pytest.approx(loss, rel=1e-5)


@pytest.mark.parametrize("bad_example", [2, 5, 10, 13])  # both replicas, both micro-batches
def test_a_non_finite_micro_batch_on_any_replica_skips_the_step(bad_example,
                                                                two_cpu_strategy):
    """Keras 3's LossScaleOptimizer judges one replica's gradients before the all-reduce;
    the wrapper makes a non-finite gradient non-finite on every replica, so it skips."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x = np.full((16, 4), 0.1, np.float32)
        x[bad_example, 0] = np.inf
        with two_cpu_strategy.scope():
            inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                                      keras.layers.Dense(1, dtype="float32")])
            model = keras3_accumulation.GradientAccumulationModel(inner, 2)
            model.compile(optimizer=keras3_optimizers.LAMB(0.01), loss="mse")
        before = [np.array(w) for w in model.get_weights()]
        model.fit(x, np.zeros((16, 1), np.float32), batch_size=16, shuffle=False, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert int(model.optimizer.iterations.numpy()) == 0
    assert float(model.optimizer.dynamic_scale.numpy()) == 2.0 ** 14  # halved once
    for got, expected in zip(model.get_weights(), before):
        np.testing.assert_array_equal(got, expected)
