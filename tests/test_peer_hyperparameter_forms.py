"""TF Addons' and Model Garden's LAMB take `epsilon=None` (the Keras backend's 1e-7) and betas
given as a tf.Variable or a zero-argument callable, read at every step (`_set_hyper` /
`_get_hyper`); lamb_tf's LAMB takes them too, in both flavours, plain and compiled kernels.
A beta changed between two steps changes the next step as the float64 reference with that
beta; `get_config` holds a variable's or callable's value then, as the peers' does.
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
def test_a_beta_variable_is_no_optimizer_variable_but_is_checkpointed(flavour_name, tmp_path):
    """Keras 3 would count a keras.Variable attribute among the optimizer's variables (a
    `.keras` file's list would then differ from that of the optimizer from_config builds);
    a checkpoint holds it, as the peers' `_set_hyper` tracks it, and restores it."""
    flavour = FLAVOURS[flavour_name]()
    beta_1 = (flavour.keras.Variable(0.875) if flavour_name == "keras3"
              else tf.Variable(0.875))
    optimizer = flavour.module.LAMB(0.1, beta_1=beta_1)
    variable = flavour.variable("layer/kernel", X0)
    flavour.apply(optimizer, [G], [variable])
    optimizer_variables = (optimizer.variables() if callable(optimizer.variables)
                           else optimizer.variables)
    assert not any(v is beta_1 for v in optimizer_variables)
    assert len(optimizer_variables) == len(
        _variables_of(flavour, flavour.module.LAMB(0.1, beta_1=0.875)))
    path = tf.train.Checkpoint(optimizer=optimizer).save(str(tmp_path / "ckpt"))
    beta_1.assign(0.5)
    tf.train.Checkpoint(optimizer=optimizer).read(path).expect_partial()
    assert float(beta_1.numpy()) == 0.875


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
], ids=["epsilon_0", "variable_out_of_range", "variable_not_scalar", "variable_int"])
def test_what_the_peers_would_take_wrongly_is_refused(flavour_name, kwargs, error, text):
    with pytest.raises(error, match=re.escape(text)):
        FLAVOURS[flavour_name]().module.LAMB(**kwargs)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_schedule_as_beta_is_refused_naming_the_callable_to_give(flavour_name):
    """The peers would call it without the step it takes, at the first update."""
    flavour = FLAVOURS[flavour_name]()
    with pytest.raises(TypeError, match="beta_1 is a PolynomialDecay, which takes the step"):
        flavour.module.LAMB(beta_1=flavour.polynomial_decay(0.9, 10, 0.5))
