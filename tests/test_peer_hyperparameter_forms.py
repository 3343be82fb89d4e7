"""TF Addons' and Model Garden's LAMB mean `epsilon=None` as the Keras backend's 1e-7 (Model
Garden 2.20's raises for it: TensorFlow 2.20 has no `tf.backend_config`) and take betas
and a weight decay rate given as a tf.Variable or a zero-argument callable, read at every
step (`_set_hyper` / `_get_hyper`); lamb_tf's LAMB takes them too, and its LARS its λ,
momentum and eeta so, in both flavours, plain and compiled kernels. A value changed between
two steps changes the next step as the float64 reference with that value (a λ of 0 at build
and 0 again later included; variables excluded from weight decay never get λx);
`get_config` holds a variable's or callable's value then, as the peers' does.
"""
import re

import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS

X0, G = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.5, -1.0, 2.0, 0.25])
# betas exactly representable in float32, so a float32 variable holds the reference's value
BETAS_1, BETAS_2 = (0.875, 0.5), (0.75, 0.625)  # step 1's, step 2's


def _expected(betas_1=BETAS_1, betas_2=BETAS_2, epsilon=1e-6, rate=0.1):
    x, m, v = X0, np.zeros(4), np.zeros(4)
    for t, (beta_1, beta_2) in enumerate(zip(betas_1, betas_2), start=1):
        x, m, v = ref.lamb_step(x, G, m, v, t, rate, beta_1, beta_2, epsilon, 0.0)
    return x


@pytest.fixture(params=[False, True], ids=["plain", "compiled"])
def compiled(request, monkeypatch):
    """Every variable through the XLA kernel (`compiled`), or none."""
    from lamb_tf import compiled_updates
    monkeypatch.setattr(compiled_updates, "SMALLEST_COMPILED", 1 if request.param else 10**9)
    return request.param


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_variable_and_callable_betas_are_read_at_every_step(flavour_name, in_function, compiled):
    flavour = FLAVOURS[flavour_name]()
    beta_1 = tf.Variable(BETAS_1[0])
    # what the callable reads: a variable (a traced step reads a Python value once)
    beta_2_source = tf.Variable(BETAS_2[0])
    optimizer = flavour.module.LAMB(0.1, beta_1=beta_1, beta_2=lambda: beta_2_source * 1.0)
    variable = flavour.variable("layer/kernel", X0)

    def step():
        flavour.apply(optimizer, [G], [variable])
    step = tf.function(step) if in_function else step
    step()
    beta_1.assign(BETAS_1[1])
    beta_2_source.assign(BETAS_2[1])
    step()
    ref.assert_update_close(variable.numpy(), _expected(), X0, steps=2)
    # as the peers' `_serialize_hyperparameter`: the values now, a number to rebuild from
    config = optimizer.get_config()
    assert (config["beta_1"], config["beta_2"]) == (BETAS_1[1], BETAS_2[1])
    rebuilt = flavour.module.LAMB.from_config(config)
    assert (rebuilt.beta_1, rebuilt.beta_2) == (BETAS_1[1], BETAS_2[1])


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name,argument", [
    ("LAMB", "beta_1"), ("LAMB", "weight_decay_rate"), ("LARS", "momentum"),
    ("LARS", "weight_decay_rate")])
def test_a_variable_hyperparameter_is_no_optimizer_variable_but_is_checkpointed(
        flavour_name, optimizer_name, argument, tmp_path):
    """Keras 3 would count a keras.Variable attribute among the optimizer's variables (a
    `.keras` file's list would then differ from that of the optimizer from_config builds);
    a checkpoint holds it, as the peers' `_set_hyper` tracks it, and restores it."""
    flavour = FLAVOURS[flavour_name]()
    hyperparameter = (flavour.keras.Variable(0.875) if flavour_name == "keras3"
                      else tf.Variable(0.875))
    optimizer_class = getattr(flavour.module, optimizer_name)
    optimizer = optimizer_class(0.1, **{argument: hyperparameter})
    variable = flavour.variable("layer/kernel", X0)
    flavour.apply(optimizer, [G], [variable])
    optimizer_variables = (optimizer.variables() if callable(optimizer.variables)
                           else optimizer.variables)
    assert not any(v is hyperparameter for v in optimizer_variables)
    assert len(optimizer_variables) == len(
        _variables_of(flavour, optimizer_class(0.1, **{argument: 0.875})))
    path = tf.train.Checkpoint(optimizer=optimizer).save(str(tmp_path / "ckpt"))
    hyperparameter.assign(0.5)
    tf.train.Checkpoint(optimizer=optimizer).read(path).expect_partial()
    assert float(hyperparameter.numpy()) == 0.875


def _variables_of(flavour, optimizer):
    optimizer.build([flavour.variable("layer/kernel", X0)])
    return optimizer.variables() if callable(optimizer.variables) else optimizer.variables


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_epsilon_none_is_the_peers_1e_7(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    optimizer = flavour.module.LAMB(0.1, beta_1=0.875, beta_2=0.75, epsilon=None)
    assert optimizer.get_config()["epsilon"] == 1e-7  # as the peers write `self.epsilon`
    variable = flavour.variable("layer/kernel", X0)
    flavour.apply(optimizer, [G], [variable])
    ref.assert_update_close(variable.numpy(), _expected((0.875,), (0.75,), epsilon=1e-7), X0,
                            steps=1)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("kwargs,error,text", [
    (dict(epsilon=0), ValueError, "give epsilon=1e-7 (or None) for their behaviour"),
    (dict(beta_1=tf.Variable(1.5)), ValueError, "beta_1 must be in [0, 1), got 1.5"),
    (dict(beta_2=tf.Variable([0.9, 0.9])), TypeError,
     "beta_2 must be a real number or a scalar float variable"),
    (dict(beta_1=tf.Variable(1)), TypeError,
     "beta_1 must be a real number or a scalar float variable"),
    (dict(weight_decay_rate=tf.Variable(-0.125)), ValueError,
     "weight_decay_rate must be >= 0, got -0.125"),
    (dict(weight_decay_rate=tf.Variable([0.1, 0.1])), TypeError,
     "weight_decay_rate must be a real number or a scalar float variable"),
], ids=["epsilon_0", "variable_out_of_range", "variable_not_scalar", "variable_int",
        "weight_decay_variable_negative", "weight_decay_variable_not_scalar"])
def test_what_the_peers_would_take_wrongly_is_refused(flavour_name, kwargs, error, text):
    with pytest.raises(error, match=re.escape(text)):
        FLAVOURS[flavour_name]().module.LAMB(**kwargs)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("kwargs,error,text", [
    (dict(momentum=tf.Variable(1.5)), ValueError, "momentum must be in [0, 1], got 1.5"),
    (dict(eeta=tf.Variable(0.0)), ValueError, "eeta must be > 0, got 0.0"),
    (dict(weight_decay_rate=tf.Variable(float("nan"))), ValueError,
     "weight_decay_rate must be finite, got nan"),
    (dict(momentum=tf.Variable(0)), TypeError,
     "momentum must be a real number or a scalar float variable"),
], ids=["momentum_out_of_range", "eeta_0", "weight_decay_nan", "momentum_int"])
def test_a_lars_variable_is_checked_as_its_number_would_be(flavour_name, kwargs, error, text):
    """A variable's value at construction goes through the number's check (later values and
    a callable's results are not checked, as for the betas)."""
    with pytest.raises(error, match=re.escape(text)):
        FLAVOURS[flavour_name]().module.LARS(**kwargs)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_schedule_as_beta_is_refused_naming_the_callable_to_give(flavour_name):
    """The peers would call it without the step it takes, at the first update."""
    flavour = FLAVOURS[flavour_name]()
    with pytest.raises(TypeError, match="beta_1 is a PolynomialDecay, which takes the step"):
        flavour.module.LAMB(beta_1=flavour.polynomial_decay(0.9, 10, 0.5))
    schedule = flavour.polynomial_decay(0.01, 10, 0.0)
    with pytest.raises(TypeError, match="weight_decay_rate is a PolynomialDecay, which takes"):
        flavour.module.LAMB(weight_decay_rate=schedule)
    with pytest.raises(TypeError, match="momentum is a PolynomialDecay, which takes the step"):
        flavour.module.LARS(momentum=schedule)


# ---- weight_decay_rate (LAMB, LARS) and LARS' momentum and eeta read at every step ---------

BIAS0, BIAS_G = np.array([0.5, -0.25]), np.array([0.25, 1.0])
# λ per step: 0 when the optimizer is built (no decision may drop λx for it), then not, then
# 0 again (a tensor λ of 0); exactly representable in float32, as the rest
DECAY_RATES = (0.0, 0.5, 0.0)
MOMENTA, EETAS = (0.5, 0.75, 0.25), (0.125, 0.25, 0.125)
EXCLUSIONS = dict(exclude_from_weight_decay=["bias"], exclude_from_layer_adaptation=[])


def _read_at_every_step(form, source):
    """`source` (a tf.Variable) as the optimizer is given it: itself, or a zero-argument
    callable that reads it (a traced step reads a Python value once)."""
    return source if form == "variable" else (lambda: source * 1.0)


def _steps(flavour, optimizer, mode, values, sources):
    """One update of a kernel and an excluded bias per step (`mode`: "eager", "tf_function"
    or "jit_compile", a step compiled whole by XLA), `sources` assigned `values`' step-th
    entries before it."""
    kernel, bias = flavour.variable("layer/kernel", X0), flavour.variable("layer/bias", BIAS0)

    def step():
        flavour.apply(optimizer, [G, BIAS_G], [kernel, bias])
    if mode != "eager":
        step = tf.function(step, jit_compile=mode == "jit_compile")
    for step_values in zip(*values):
        for source, value in zip(sources, step_values):
            source.assign(value)
        step()
    return kernel, bias


@pytest.mark.parametrize("form", ["variable", "callable"])
@pytest.mark.parametrize("mode", ["eager", "tf_function"])
@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_lamb_weight_decay_rate_is_read_at_every_step(flavour_name, mode, form, compiled):
    _check_lamb_weight_decay_rate(flavour_name, mode, form)


@pytest.mark.parametrize("form", ["variable", "callable"])
@pytest.mark.parametrize("mode", ["eager", "tf_function"])
@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_lars_decay_momentum_and_eeta_are_read_at_every_step(flavour_name, mode, form, compiled):
    _check_lars_decay_momentum_and_eeta(flavour_name, mode, form)


@pytest.mark.slow
@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name,form", [("LAMB", "variable"), ("LARS", "callable")])
def test_values_read_at_every_step_in_a_step_compiled_by_xla(optimizer_name, form, flavour_name):
    """`jit_compile=True` (Keras 3's `fit` on an accelerator, a TPU step): the whole step one
    XLA program, each variable's update inlined in it (one form per optimizer: an XLA
    compilation takes seconds)."""
    check = (_check_lamb_weight_decay_rate if optimizer_name == "LAMB"
             else _check_lars_decay_momentum_and_eeta)
    check(flavour_name, "jit_compile", form)


def _check_lamb_weight_decay_rate(flavour_name, mode, form):
    flavour = FLAVOURS[flavour_name]()
    rate = tf.Variable(DECAY_RATES[0])
    optimizer = flavour.module.LAMB(0.1, weight_decay_rate=_read_at_every_step(form, rate),
                                    **EXCLUSIONS)
    kernel, bias = _steps(flavour, optimizer, mode, [DECAY_RATES], [rate])
    x, m, v = X0, np.zeros(4), np.zeros(4)
    b, m_b, v_b = BIAS0, np.zeros(2), np.zeros(2)
    for t, decay_rate in enumerate(DECAY_RATES, start=1):
        x, m, v = ref.lamb_step(x, G, m, v, t, 0.1, 0.9, 0.999, 1e-6, decay_rate)
        b, m_b, v_b = ref.lamb_step(b, BIAS_G, m_b, v_b, t, 0.1, 0.9, 0.999, 1e-6, 0.5,
                                    decay=False)
    ref.assert_update_close(kernel.numpy(), x, X0, steps=3)
    ref.assert_update_close(bias.numpy(), b, BIAS0, steps=3)
    # a λ that is 0 at build decays the kernel all the same; the bias is excluded
    assert [row.decayed for row in optimizer.exclusion_table()] == [True, False]
    _assert_config_holds_the_value_now(flavour.module.LAMB, optimizer, rate, "weight_decay_rate")


def _check_lars_decay_momentum_and_eeta(flavour_name, mode, form):
    """Nesterov: μ enters the classic step twice."""
    flavour = FLAVOURS[flavour_name]()
    sources = [tf.Variable(values[0]) for values in (DECAY_RATES, MOMENTA, EETAS)]
    rate, momentum, eeta = (_read_at_every_step(form, source) for source in sources)
    optimizer = flavour.module.LARS(1.0, momentum=momentum, weight_decay_rate=rate, eeta=eeta,
                                    nesterov=True, **EXCLUSIONS)
    kernel, bias = _steps(flavour, optimizer, mode, [DECAY_RATES, MOMENTA, EETAS], sources)
    x, velocity, b, velocity_b = X0, np.zeros(4), BIAS0, np.zeros(2)
    for decay_rate, mu, trust in zip(DECAY_RATES, MOMENTA, EETAS):
        x, velocity = ref.lars_step(x, G, velocity, 1.0, mu, decay_rate, trust, nesterov=True)
        b, velocity_b = ref.lars_step(b, BIAS_G, velocity_b, 1.0, mu, 0.5, trust,
                                      nesterov=True, decay=False)
    ref.assert_update_close(kernel.numpy(), x, X0, steps=3)
    ref.assert_update_close(bias.numpy(), b, BIAS0, steps=3)
    assert [row.decayed for row in optimizer.exclusion_table()] == [True, False]
    for name, source in zip(("weight_decay_rate", "momentum", "eeta"), sources):
        _assert_config_holds_the_value_now(flavour.module.LARS, optimizer, source, name)


def _assert_config_holds_the_value_now(optimizer_class, optimizer, source, name):
    """As the peers' `_serialize_hyperparameter`: the value now, a number to rebuild from."""
    source.assign(0.375)
    config = optimizer.get_config()
    assert config[name] == 0.375
    assert getattr(optimizer_class.from_config(config), name) == 0.375


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
def test_a_variable_weight_decay_rate_set_later_is_read_at_every_step(
        flavour_name, optimizer_name):
    """`optimizer.weight_decay_rate = variable` before the build: checked as the constructor
    checks it, then read at every step; after the build another object is refused, as a
    number is (the variable's value still changes the steps)."""
    flavour = FLAVOURS[flavour_name]()
    optimizer = getattr(flavour.module, optimizer_name)(1.0, **EXCLUSIONS)
    with pytest.raises(ValueError, match=re.escape("weight_decay_rate must be >= 0, got -0.5")):
        optimizer.weight_decay_rate = tf.Variable(-0.5)
    rate = tf.Variable(0.0)
    optimizer.weight_decay_rate = rate
    decay_rates = (0.5, 0.0)
    kernel, _ = _steps(flavour, optimizer, "eager", [decay_rates], [rate])
    x, m, v = X0, np.zeros(4), np.zeros(4)  # (LARS: m its velocity)
    for t, decay_rate in enumerate(decay_rates, start=1):
        if optimizer_name == "LAMB":
            x, m, v = ref.lamb_step(x, G, m, v, t, 1.0, 0.9, 0.999, 1e-6, decay_rate)
        else:
            x, m = ref.lars_step(x, G, m, 1.0, 0.9, decay_rate, 0.001)
    ref.assert_update_close(kernel.numpy(), x, X0, steps=2)
    with pytest.raises(AttributeError, match="weight_decay_rate cannot change once"):
        optimizer.weight_decay_rate = tf.Variable(0.25)
    rate.assign(0.25)
    assert optimizer.get_config()["weight_decay_rate"] == 0.25
