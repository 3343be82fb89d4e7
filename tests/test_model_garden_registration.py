"""After `lamb_tf.model_garden.register()`, Model Garden's factory tables hold lamb_tf's
classes themselves, so Model Garden's own checks hold: the built optimizer is an instance of
the table's class, and its `get_config()` is the default config with the experiment's
learning rate (what Model Garden's `optimizer_factory_test` checks for every optimizer).
"""
import pytest
from official.modeling.optimization import optimizer_factory
from official.modeling.optimization.configs import optimization_config

from lamb_tf import model_garden
from lamb_tf import tf_keras_optimizers


@pytest.fixture
def registered():
    model_garden.register()
    yield
    model_garden.unregister()


@pytest.mark.parametrize("table_name", ["LEGACY_OPTIMIZERS_CLS", "NEW_OPTIMIZERS_CLS"])
def test_tables_hold_our_classes(registered, table_name):
    table = getattr(optimizer_factory, table_name)
    assert table["lamb"] is tf_keras_optimizers.LAMB
    assert table["lars"] is tf_keras_optimizers.LARS


@pytest.mark.parametrize("use_legacy_optimizer", [True, False])
@pytest.mark.parametrize("optimizer_type", ["lamb", "lars"])
def test_factory_optimizer_is_instance_with_default_config_and_given_rate(
        registered, optimizer_type, use_legacy_optimizer):
    table = (optimizer_factory.LEGACY_OPTIMIZERS_CLS if use_legacy_optimizer
             else optimizer_factory.NEW_OPTIMIZERS_CLS)
    config = optimization_config.OptimizationConfig({
        "optimizer": {"type": optimizer_type},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}}})
    factory = optimizer_factory.OptimizerFactory(config)
    optimizer = factory.build_optimizer(factory.build_learning_rate(), postprocessor=lambda o: o,
                                        use_legacy_optimizer=use_legacy_optimizer)
    assert isinstance(optimizer, table[optimizer_type])
    expected = table[optimizer_type]().get_config()
    expected["learning_rate"] = 0.1
    assert optimizer.get_config() == expected


def test_register_is_idempotent_and_unregister_restores_model_garden():
    from official.modeling.optimization import lamb as model_garden_lamb

    model_garden.register()
    model_garden.register()
    assert model_garden.is_registered()
    model_garden.unregister()
    assert not model_garden.is_registered()
    assert optimizer_factory.LEGACY_OPTIMIZERS_CLS["lamb"] is model_garden_lamb.LAMB


@pytest.mark.parametrize("optimizer_type", ["lamb", "lars"])
def test_the_factorys_ema_wrapper_averages_the_weights_and_reads_the_rate(
        registered, optimizer_type):
    """Model Garden's `ema` config wraps the optimizer in its `ExponentialMovingAverage`, whose
    `learning_rate` (Model Garden's trainer reads it at every loop's end) and `lr` setter go
    through the legacy optimizers' `_get_hyper` / `_set_hyper`."""
    import numpy as np
    import tensorflow as tf
    import tf_keras

    config = optimization_config.OptimizationConfig({
        "optimizer": {"type": optimizer_type},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}},
        "ema": {"average_decay": 0.5, "dynamic_decay": False}})
    factory = optimizer_factory.OptimizerFactory(config)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")  # swap_weights needs one
    with strategy.scope():
        optimizer = factory.build_optimizer(factory.build_learning_rate())
        model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(2)])
        optimizer.shadow_copy(model)
    assert isinstance(optimizer._optimizer, optimizer_factory.LEGACY_OPTIMIZERS_CLS[optimizer_type])
    before = [w.numpy() for w in model.trainable_variables]
    gradients = [tf.ones_like(w) for w in model.trainable_variables]
    step = tf.function(lambda: optimizer.apply_gradients(zip(gradients, model.trainable_variables)))
    strategy.run(step)
    after = [w.numpy() for w in model.trainable_variables]
    with strategy.scope():
        optimizer.swap_weights()  # the model now holds the averages
    for b, a, average in zip(before, after, model.trainable_variables):
        assert not np.allclose(a, b)
        # Model Garden's averages start at zero; decay 0.5, one update
        np.testing.assert_allclose(average.numpy(), 0.5 * a, rtol=1e-6)
    assert float(optimizer.learning_rate.numpy()) == pytest.approx(0.1)
    optimizer.lr = 0.05
    assert float(optimizer._optimizer.learning_rate.numpy()) == pytest.approx(0.05)
