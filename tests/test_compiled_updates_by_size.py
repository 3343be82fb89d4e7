"""`lamb_tf.compiled_updates` runs a variable's update as its XLA kernel from
`smallest_compiled` elements on, and as plain TensorFlow ops below (the kernel call's fixed
cost is more than a small variable's whole update); both give the reference update
(tests/test_matches_numpy_reference.py runs every case both ways)."""
import tensorflow as tf

from lamb_tf import compiled_updates

HYPER = dict(t=1, eta=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay_rate=0.01,
             decay=True, adapt=True, bias_correction=True, phi_bounds=None)


def _lamb_state(elements):
    return ([tf.Variable(tf.fill([elements], 0.5)) for _ in range(3)], tf.Variable(0.0))


def test_only_variables_from_the_threshold_on_use_the_xla_kernel():
    update = compiled_updates.LambUpdate(smallest_compiled=16)
    (x, m, v), ratio = _lamb_state(15)
    update(x, tf.ones([15]), m, v, ratio, **HYPER)
    assert update.tracing_count() == 0
    (x, m, v), ratio = _lamb_state(16)
    update(x, tf.ones([16]), m, v, ratio, **HYPER)
    assert update.tracing_count() == 1


def test_lars_small_variable_runs_as_plain_ops_and_still_moves():
    update = compiled_updates.LarsUpdate(smallest_compiled=16)
    x, velocity, ratio = tf.Variable(tf.fill([4], 0.5)), tf.Variable(tf.zeros([4])), tf.Variable(0.0)
    update(x, tf.ones([4]), velocity, ratio, eta=0.1, momentum=0.9, weight_decay_rate=0.0,
           eeta=1.0, nesterov=False, classic_momentum=True, decay=False, adapt=True)
    assert update.tracing_count() == 0
    # classic momentum: ratio = eeta ||x|| / ||g|| = 1 / 2; x <- x - eta * ratio * g
    assert abs(float(ratio.numpy()) - 0.5) < 1e-7
    assert abs(float(x.numpy()[0]) - (0.5 - 0.1 * 0.5)) < 1e-7


def test_default_threshold_is_read_when_the_update_is_made(monkeypatch):
    monkeypatch.setattr(compiled_updates, "SMALLEST_COMPILED", 0)
    assert compiled_updates.LambUpdate()._smallest_compiled == 0


def test_an_eager_loop_over_many_shapes_logs_no_retracing_warning():
    """One compiled function per shape: TensorFlow's retracing warning (raised after 5
    traces of one function) would tell the user their own loop is wrong."""
    import logging
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    tf.get_logger().addHandler(handler)
    try:
        update = compiled_updates.LambUpdate(smallest_compiled=16)
        for elements in range(16, 23):  # 7 shapes
            (x, m, v), ratio = _lamb_state(elements)
            update(x, tf.ones([elements]), m, v, ratio, **HYPER)
            update(x, tf.ones([elements]), m, v, ratio, **HYPER)
    finally:
        tf.get_logger().removeHandler(handler)
    assert update.tracing_count() == 7
    assert not [r for r in records if "retracing" in r.getMessage()], records


def test_tf_keras_jit_compile_false_makes_no_xla_kernel():
    """tf_keras' `jit_compile=False` means no XLA for the optimizer (its base class keeps the
    argument only where a GPU is): no per-variable kernel either, and a config that says so."""
    import tf_keras

    from lamb_tf import tf_keras_optimizers

    for optimizer_class in (tf_keras_optimizers.LAMB, tf_keras_optimizers.LARS):
        counts = {}
        for jit_compile in (True, False):
            variable = tf.Variable(tf.fill([compiled_updates.SMALLEST_COMPILED], 0.5))
            optimizer = optimizer_class(1e-3, jit_compile=jit_compile)
            optimizer.apply_gradients([(tf.ones_like(variable), variable)])
            counts[jit_compile] = optimizer._compiled_update.tracing_count()
            config = optimizer.get_config()
            assert config["jit_compile"] is jit_compile
            again = tf_keras.optimizers.deserialize(tf_keras.optimizers.serialize(optimizer))
            assert again._jit_compile_argument is jit_compile
        assert counts == {True: 1, False: 0}, optimizer_class


def test_tf_keras_jit_compile_is_a_bool():
    """`bool("false")` is True: a string would have kept the kernels it asks to turn off."""
    import pytest

    from lamb_tf import tf_keras_optimizers

    with pytest.raises(TypeError, match="jit_compile must be True or False, got 'false'"):
        tf_keras_optimizers.LAMB(1e-3, jit_compile="false")
