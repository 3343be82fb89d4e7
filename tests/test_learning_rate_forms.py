"""Every learning-rate form the Keras base classes accept works in both flavours: a number,
a tf.Tensor, a variable (read at every step), a zero-argument callable (called at every
step) and a schedule; what can be judged at construction is still refused. `get_config`
holds the learning rate in the same form as the flavour's own optimizers, so it compares
equal to what the user passed where theirs does.
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS

X0, G = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 6.0, 7.0, 2.0])
RATES = [0.5, 0.25]  # the learning rate of step 1 and step 2


def _expected(optimizer_name, rates=RATES):
    """The two updates in float64 with `rates`, from tests/numpy_reference.py."""
    x, m, v, velocity = X0, np.zeros(4), np.zeros(4), np.zeros(4)
    for t, rate in enumerate(rates, start=1):
        if optimizer_name == "LAMB":
            x, m, v = ref.lamb_step(x, G, m, v, t, rate, 0.9, 0.999, 1e-6, 0.0)
        else:
            x, velocity = ref.lars_step(x, G, velocity, rate, 0.9, 0.0, 0.001)
    return x


def _run(flavour, optimizer, before_step_2=lambda: None):
    variable = flavour.variable("layer/kernel", X0)
    flavour.apply(optimizer, [G], [variable])
    before_step_2()
    flavour.apply(optimizer, [G], [variable])
    return variable.numpy()


CASES = [(flavour, name) for flavour in FLAVOURS for name in ("LAMB", "LARS")]


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_variable_is_read_at_every_step(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    rate = tf.Variable(RATES[0])
    optimizer = getattr(flavour.module, optimizer_name)(rate)
    result = _run(flavour, optimizer, before_step_2=lambda: rate.assign(RATES[1]))
    assert ref.relative_error(result, _expected(optimizer_name)) < 1e-5


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_callable_is_called_at_every_step(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    rates = iter(RATES)
    current = [None]

    def rate():
        return current[0]

    optimizer = getattr(flavour.module, optimizer_name)(rate)
    current[0] = next(rates)
    result = _run(flavour, optimizer, before_step_2=lambda: current.__setitem__(0, next(rates)))
    assert ref.relative_error(result, _expected(optimizer_name)) < 1e-5


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_tensor_and_schedule(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    optimizer_class = getattr(flavour.module, optimizer_name)
    # a constant tensor: the same rate at both steps
    constant = _run(flavour, optimizer_class(tf.constant(RATES[0])))
    assert ref.relative_error(constant, _expected(optimizer_name, [RATES[0], RATES[0]])) < 1e-5
    # a schedule evaluated at the step counter: 0.5 then 0.25
    schedule = flavour.keras.optimizers.schedules.PiecewiseConstantDecay([0], RATES)
    assert ref.relative_error(_run(flavour, optimizer_class(schedule)), _expected(optimizer_name)) < 1e-5


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("bad", [tf.constant(-0.1), tf.constant(np.nan)], ids=["negative", "nan"])
def test_constant_tensor_that_is_invalid_is_refused(flavour_name, bad):
    with pytest.raises(ValueError, match="learning_rate must be"):
        FLAVOURS[flavour_name]().module.LAMB(bad)


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
@pytest.mark.parametrize("bad", [-1.0, np.inf, tf.constant(np.nan)], ids=["negative", "inf", "nan"])
def test_an_invalid_rate_set_after_construction_is_refused_as_at_construction(
        flavour_name, optimizer_name, bad):
    """The README: a hyperparameter set later is checked as the constructor checks it. The
    rate was accepted, and the next update moved against the gradient."""
    flavour = FLAVOURS[flavour_name]()
    optimizer = getattr(flavour.module, optimizer_name)(learning_rate=0.5)
    with pytest.raises(ValueError, match="learning_rate must be"):
        optimizer.learning_rate = bad
    optimizer.learning_rate = 0.25  # a valid one still sets the rate
    assert ref.relative_error(_run(flavour, optimizer), _expected(optimizer_name, [0.25] * 2)) < 1e-5


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_config_learning_rate_is_in_the_flavours_own_form(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    ours = getattr(flavour.module, optimizer_name)(learning_rate=1e-4).get_config()["learning_rate"]
    theirs = flavour.keras.optimizers.SGD(learning_rate=1e-4).get_config()["learning_rate"]
    assert type(ours) is type(theirs) and ours == theirs
    if flavour_name == "tf_keras":
        assert ours == 1e-4  # tf_keras keeps a numpy.float32 (TF Addons' get_config test)


def _fit_two_epochs(flavour, optimizer, callbacks=()):
    keras = flavour.keras
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=optimizer, loss="mse")
    x, y = np.ones((8, 4), np.float32), np.zeros((8, 1), np.float32)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=list(callbacks))
    return model


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_a_keras_file_of_a_variable_rate_restores_the_optimizer_state(
        flavour_name, optimizer_name, tmp_path):
    """Keras loads a saved optimizer only into one with as many variables, and otherwise
    skips it with a warning: a variable rate must leave the optimizer the variables of the
    number its config holds."""
    flavour = FLAVOURS[flavour_name]()
    rate = tf.Variable(RATES[0])
    model = _fit_two_epochs(flavour, getattr(flavour.module, optimizer_name)(rate))
    rate.assign(RATES[1])
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = flavour.keras.models.load_model(path)
    loaded.optimizer.build(loaded.trainable_variables)
    assert int(np.asarray(loaded.optimizer.iterations)) == 4
    saved = [np.asarray(v) for v in model.optimizer.variables]
    restored = [np.asarray(v) for v in loaded.optimizer.variables]
    assert len(restored) == len(saved)
    for a, b in zip(saved, restored):
        np.testing.assert_array_equal(a, b)
    assert float(np.asarray(loaded.optimizer.learning_rate)) == RATES[1]


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_learning_rate_callbacks_set_a_variable_rate(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    rate = tf.Variable(1.0)
    set_each_epoch = flavour.keras.callbacks.LearningRateScheduler(lambda epoch, lr: RATES[epoch])
    model = _fit_two_epochs(flavour, getattr(flavour.module, optimizer_name)(rate),
                            [set_each_epoch])
    assert float(rate.numpy()) == RATES[1]
    assert float(np.asarray(model.optimizer.learning_rate)) == RATES[1]


def test_a_callable_rate_reads_as_a_tensor_and_setting_it_says_what_to_do():
    """tf_keras' learning-rate callbacks read the rate with `backend.get_value`; a callable
    called at every step cannot be assigned, and the error says what can."""
    flavour = FLAVOURS["tf_keras"]()
    optimizer = flavour.module.LAMB(lambda: RATES[0])
    assert float(flavour.keras.backend.get_value(optimizer.learning_rate)) == RATES[0]
    with pytest.raises(TypeError, match="callable, called at every step.*tf.Variable"):
        optimizer.learning_rate = RATES[1]


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_a_checkpoint_restores_a_variable_rate_into_the_users_variable(
        flavour_name, optimizer_name, tmp_path):
    """A run resumed from a tf.train.Checkpoint goes on at the rate it had (one that
    ReduceLROnPlateau lowered, say), not at the rate its fresh variable starts with."""
    flavour = FLAVOURS[flavour_name]()
    optimizer_class = getattr(flavour.module, optimizer_name)
    variable = flavour.variable("layer/kernel", X0)
    optimizer = optimizer_class(tf.Variable(RATES[0]))
    flavour.apply(optimizer, [G], [variable])
    optimizer.learning_rate = RATES[1]  # as Keras' learning-rate callbacks set it
    path = tf.train.Checkpoint(optimizer=optimizer, variable=variable).save(str(tmp_path / "c"))

    fresh_rate = tf.Variable(RATES[0])
    restored_variable = flavour.variable("layer/kernel", X0)
    restored = optimizer_class(fresh_rate)
    tf.train.Checkpoint(optimizer=restored, variable=restored_variable).restore(path)
    assert float(fresh_rate.numpy()) == RATES[1]
    flavour.apply(restored, [G], [restored_variable])
    assert ref.relative_error(restored_variable.numpy(), _expected(optimizer_name)) < 1e-5


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_checkpoint_of_a_number_rate_into_a_variable_rate(flavour_name, tmp_path):
    """docs/optimizers.md: tf_keras restores a number rate's checkpoint into a variable rate;
    Keras 3 leaves the variable as it was, and the restore status names it."""
    flavour = FLAVOURS[flavour_name]()
    variable = flavour.variable("layer/kernel", X0)
    optimizer = flavour.module.LAMB(RATES[0])
    flavour.apply(optimizer, [G], [variable])
    optimizer.learning_rate = RATES[1]
    path = tf.train.Checkpoint(optimizer=optimizer, variable=variable).save(str(tmp_path / "c"))
    fresh_rate = tf.Variable(RATES[0])
    status = tf.train.Checkpoint(optimizer=flavour.module.LAMB(fresh_rate),
                                 variable=flavour.variable("layer/kernel", X0)).restore(path)
    if flavour_name == "tf_keras":
        assert float(fresh_rate.numpy()) == RATES[1]
    else:
        assert float(fresh_rate.numpy()) == RATES[0]
        unmatched = r"1 of 1 unmatched objects: \[<tf.Variable .*numpy=0.5>\]"  # fresh_rate
        with pytest.raises(AssertionError, match=unmatched):
            status.assert_existing_objects_matched()


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_the_config_of_a_variable_rate_holds_its_value_now(flavour_name, optimizer_name):
    """Assigned before any step: the config (and so `from_config`, a clone) has the new rate."""
    flavour = FLAVOURS[flavour_name]()
    optimizer_class = getattr(flavour.module, optimizer_name)
    rate = tf.Variable(0.1)
    optimizer = optimizer_class(rate)
    rate.assign(RATES[0])
    config = optimizer.get_config()
    assert float(config["learning_rate"]) == RATES[0]
    rebuilt = optimizer_class.from_config(config)
    result = _run(flavour, rebuilt, before_step_2=lambda: setattr(rebuilt, "learning_rate",
                                                                  RATES[1]))
    assert ref.relative_error(result, _expected(optimizer_name)) < 1e-5


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_a_schedule_set_after_a_variable_rate_replaces_it(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    rate = tf.Variable(RATES[0])
    optimizer = getattr(flavour.module, optimizer_name)(rate)
    schedule = flavour.keras.optimizers.schedules.PiecewiseConstantDecay([0], [1.0, RATES[1]])

    def set_schedule():
        optimizer.learning_rate = schedule

    result = _run(flavour, optimizer, before_step_2=set_schedule)  # step 2: iterations 1
    assert ref.relative_error(result, _expected(optimizer_name)) < 1e-5
    assert float(rate.numpy()) == RATES[0]  # the user's variable is left as it was


@pytest.mark.parametrize("flavour_name,optimizer_name",
                         [case for case in CASES if case[0] == "keras3"])
def test_a_callable_set_after_a_variable_rate_replaces_it(flavour_name, optimizer_name):
    """Keras 3's base takes a zero-argument callable as it takes a schedule: it replaces
    the user's variable (which is left as it was), and is called at every step."""
    flavour = FLAVOURS[flavour_name]()
    rate = tf.Variable(RATES[0])
    optimizer = getattr(flavour.module, optimizer_name)(rate)

    def set_callable():
        optimizer.learning_rate = lambda: RATES[1]

    result = _run(flavour, optimizer, before_step_2=set_callable)
    assert ref.relative_error(result, _expected(optimizer_name)) < 1e-5
    assert float(rate.numpy()) == RATES[0]


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_assigning_to_the_learning_rate_of_a_variable_rate_sets_the_rate(
        flavour_name, optimizer_name):
    """`optimizer.learning_rate.assign(x)`, how a Keras user changes a rate in place: with a
    variable rate Keras 3's optimizer gave its own copy, which the next step overwrote from
    the user's variable, so the assignment was silently undone."""
    flavour = FLAVOURS[flavour_name]()
    optimizer = getattr(flavour.module, optimizer_name)(tf.Variable(RATES[0]))
    result = _run(flavour, optimizer,
                  before_step_2=lambda: optimizer.learning_rate.assign(RATES[1]))
    assert float(optimizer.learning_rate) == RATES[1]
    assert ref.relative_error(result, _expected(optimizer_name)) < 1e-5
