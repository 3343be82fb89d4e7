"""Bad arguments fail at construction with a ValueError/TypeError naming argument and value;
Keras' decoupled `weight_decay` is refused with a pointer to `weight_decay_rate`, the legacy
optimizers' `decay`/`gradient_transformers`/`gradient_aggregator` with their replacement;
the same keywords with a value that asks for nothing, as peers' saved configs hold them, are
accepted.
"""
import math
import re

import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS

SHARED_BAD = [
    # (keyword arguments, error type, text the message must contain)
    (dict(learning_rate=-0.1), ValueError, "learning_rate must be >= 0, got -0.1"),
    (dict(learning_rate=math.nan), ValueError, "learning_rate must be finite, got nan"),
    (dict(learning_rate=math.inf), ValueError, "learning_rate must be finite, got inf"),
    (dict(learning_rate="0.1"), TypeError, "learning_rate must be a real number, got '0.1'"),
    (dict(weight_decay_rate=-1e-4), ValueError, "weight_decay_rate must be >= 0, got -0.0001"),
    (dict(exclude_from_weight_decay="bias"), TypeError,
     "exclude_from_weight_decay must be a list of regex patterns, got the string 'bias'"),
    (dict(exclude_from_layer_adaptation="LayerNorm"), TypeError,
     "exclude_from_layer_adaptation must be a list of regex patterns, got the string 'LayerNorm'"),
    (dict(exclude_from_weight_decay=["bias", "layer_norm("]), ValueError,
     "exclude_from_weight_decay holds an invalid regular expression 'layer_norm('"),
    (dict(exclude_from_layer_adaptation=[3]), TypeError, "exclude_from_layer_adaptation must hold strings, got 3"),
    (dict(weight_decay=0.01), ValueError, "Use weight_decay_rate=0.01 instead"),
    # the advice must be one that works: weight_decay_rate=False is refused (a bool)
    (dict(weight_decay=False), ValueError,
     "Use weight_decay_rate (a number; 0.0 for none) instead."),
    # the legacy optimizers' keywords, each with its replacement
    (dict(decay=0.5), ValueError, "decay is only supported by legacy Keras optimizers"),
    (dict(decay=0.5), ValueError, "put the decay in a learning-rate schedule (e.g. InverseTimeDecay)"),
    (dict(gradient_transformers=[lambda gv: gv]), ValueError,
     "gradient_transformers is only supported by legacy"),
    (dict(gradient_aggregator=lambda gv: gv), ValueError,
     "gradient_aggregator is only supported by legacy"),
    # the legacy `lr` (Model Garden's LAMB reads it; tf_keras' base would silently drop it)
    (dict(lr=0.1), ValueError, "got lr=0.1: `lr` is the legacy Keras optimizers' name"),
    (dict(lr=0.1), ValueError, "Use learning_rate=0.1 instead"),
    (dict(learning_rate=[0.1]), TypeError, "learning_rate must be a real number, got [0.1]"),
    # a bool is a Python int, and a flag set in the wrong place: not taken as 1.0 or 0.0
    (dict(learning_rate=True), TypeError, "learning_rate must be a real number, got True (bool)"),
    (dict(weight_decay_rate=False), TypeError,
     "weight_decay_rate must be a real number, got False (bool)"),
    (dict(mesh=object()), ValueError, "DTensor meshes are not supported"),
    # the base classes' keywords they take unchecked (a negative clip zeroes every gradient)
    (dict(clipnorm=-1.0), ValueError, "clipnorm must be >= 0 (0: no clipping), got -1.0"),
    (dict(clipnorm="1"), TypeError, "clipnorm must be a real number, got '1'"),
    (dict(clipvalue=-0.5), ValueError, "clipvalue must be >= 0 (0: no clipping), got -0.5"),
    (dict(global_clipnorm=-5), ValueError,
     "global_clipnorm must be >= 0 (0: no clipping), got -5"),
    (dict(use_ema="yes"), TypeError, "use_ema must be True or False, got 'yes'"),
]
LAMB_BAD = SHARED_BAD + [
    (dict(beta_1=1.0), ValueError, "beta_1 must be in [0, 1), got 1.0"),
    (dict(beta_1=-0.1), ValueError, "beta_1 must be in [0, 1), got -0.1"),
    (dict(beta_2=1.5), ValueError, "beta_2 must be in [0, 1), got 1.5"),
    (dict(epsilon=0.0), ValueError, "epsilon must be > 0, got 0.0"),
    (dict(epsilon=-1e-6), ValueError, "epsilon must be > 0, got -1e-06"),
    (dict(epsilon=True), TypeError, "epsilon must be a real number, got True (bool)"),
    (dict(beta_1=True), TypeError, "beta_1 must be a real number, got True (bool)"),
    (dict(phi_bounds=(2.0, 1.0)), ValueError, "phi_bounds must have gamma_l <= gamma_u, got (2.0, 1.0)"),
    (dict(phi_bounds=1.0), TypeError, "phi_bounds must be None or a pair (gamma_l, gamma_u), got 1.0"),
    (dict(phi_bounds=(0.0, math.nan)), ValueError, "phi_bounds[1] (gamma_u) must be finite, got nan"),
    (dict(phi_bounds=(math.inf, math.inf)), ValueError,
     "phi_bounds[0] (gamma_l) must be finite, got inf"),
    (dict(phi_bounds=(0.0, -math.inf)), ValueError, "phi_bounds[1] (gamma_u) must be finite"),
    (dict(bias_correction="False"), TypeError, "bias_correction must be True or False, got 'False'"),
]
LARS_BAD = SHARED_BAD + [
    (dict(momentum=-0.9), ValueError, "momentum must be in [0, 1], got -0.9"),
    (dict(momentum=1.5), ValueError, "momentum must be in [0, 1], got 1.5"),  # Keras' SGD too
    (dict(eeta=0.0), ValueError, "eeta must be > 0, got 0.0"),
    (dict(eeta=True), TypeError, "eeta must be a real number, got True (bool)"),
    (dict(momentum=False), TypeError, "momentum must be a real number, got False (bool)"),
    (dict(nesterov=1), TypeError, "nesterov must be True or False, got 1"),
]


def _cases(optimizer_name, table):
    return [pytest.param(optimizer_name, kwargs, error, text, id=f"{optimizer_name}-{text[:40]}")
            for kwargs, error, text in table]


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name,kwargs,error,text", _cases("LAMB", LAMB_BAD) + _cases("LARS", LARS_BAD))
def test_bad_argument_raises_naming_argument_and_value(flavour_name, optimizer_name, kwargs, error, text):
    optimizer_class = getattr(FLAVOURS[flavour_name]().module, optimizer_name)
    with pytest.raises(error, match=re.escape(text)):
        optimizer_class(**kwargs)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_schedule_of_the_other_flavour_is_refused(flavour_name):
    other = FLAVOURS["keras3" if flavour_name == "tf_keras" else "tf_keras"]()
    schedule = other.polynomial_decay(0.1, 10, 0.0)
    with pytest.raises(TypeError, match="use a schedule of the same Keras flavour"):
        FLAVOURS[flavour_name]().module.LAMB(learning_rate=schedule)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_valid_edge_values_are_accepted(flavour_name):
    module = FLAVOURS[flavour_name]().module
    optimizer = module.LAMB(learning_rate=0, beta_1=0.0, weight_decay_rate=0, phi_bounds=(0.0, 10.0),
                            weight_decay=None, exclude_from_weight_decay=("bias",))
    assert optimizer.get_config()["exclude_from_weight_decay"] == ["bias"]
    # gamma_l == gamma_u: a trust ratio fixed at that value (each layer's step lr * u / ||u||)
    assert list(module.LAMB(phi_bounds=(1.0, 1.0)).get_config()["phi_bounds"]) == [1.0, 1.0]
    assert module.LARS(learning_rate=1, momentum=0.0).momentum == 0.0
    assert module.LARS(learning_rate=1, momentum=1.0).momentum == 1.0


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_scalar_tensors_and_arrays_are_taken_as_numbers(flavour_name):
    """Model Garden's LAMB and tf_keras' optimizers take them for their hyperparameters."""
    module = FLAVOURS[flavour_name]().module
    config = module.LAMB(learning_rate=np.array(0.002), beta_1=tf.constant(0.8),
                         epsilon=np.float32(1e-5), weight_decay_rate=tf.constant(0.01)).get_config()
    assert float(config["learning_rate"]) == pytest.approx(0.002)
    assert (config["beta_1"], config["epsilon"]) == (pytest.approx(0.8), pytest.approx(1e-5))
    assert config["weight_decay_rate"] == pytest.approx(0.01)
    with pytest.raises(TypeError, match="beta_1 must be a real number"):
        module.LAMB(beta_1=tf.constant([0.9, 0.9]))
    # NumPy's bools as Keras takes them (was: "use_ema must be True or False, got np.True_")
    config = module.LAMB(use_ema=np.bool_(True), bias_correction=np.bool_(False)).get_config()
    assert (config["use_ema"], config["bias_correction"]) == (True, False)
    assert type(config["bias_correction"]) is bool


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
def test_the_legacy_lr_keyword_never_leaves_the_default_rate_in_force(flavour_name, optimizer_name):
    """Model Garden's LAMB(lr=0.1) trains at 0.1; tf_keras' base class drops `lr` with a log
    line, so without the check a swapped-in optimizer would train at its default rate.
    `lr=None` asks for nothing and is accepted, the rate staying learning_rate's."""
    optimizer_class = getattr(FLAVOURS[flavour_name]().module, optimizer_name)
    with pytest.raises(ValueError, match=re.escape("Use learning_rate=0.1 instead")):
        optimizer_class(lr=0.1)
    with pytest.raises(ValueError, match=re.escape("Use learning_rate=0 instead")):
        optimizer_class(lr=0)  # a rate of 0 is a rate: not dropped as "nothing"
    config = optimizer_class(learning_rate=0.25, lr=None).get_config()
    assert float(config["learning_rate"]) == 0.25


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_base_class_keywords_that_are_set_are_checked_and_still_reach_the_base(flavour_name):
    """The base classes took a negative clipnorm (every gradient clipped to nothing) and a
    truthy string as use_ema; a valid value is the base class's, as before."""
    module = FLAVOURS[flavour_name]().module
    config = module.LAMB(clipnorm=2, use_ema=True, ema_momentum=0.5).get_config()
    assert (config["clipnorm"], config["use_ema"], config["ema_momentum"]) == (2.0, True, 0.5)
    assert module.LARS(global_clipnorm=np.float32(1.5)).get_config()["global_clipnorm"] == 1.5
    assert module.LAMB(clipnorm=None).get_config()["clipnorm"] is None


@pytest.mark.parametrize("keyword", ["clipnorm", "clipvalue", "global_clipnorm"])
@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_clipping_threshold_of_0_clips_nothing_as_in_keras(flavour_name, keyword):
    """Both Keras flavours' base classes take 0 as "no clipping" (configs write it): the
    update is the reference's unclipped one, and the config keeps the 0."""
    flavour = FLAVOURS[flavour_name]()
    x0, g = np.array([1.0, -2.0, 3.0]), np.array([30.0, -40.0, 50.0])
    variable = flavour.variable("dense/kernel", x0)
    optimizer = flavour.module.LAMB(0.1, weight_decay_rate=0.0, **{keyword: 0})
    flavour.apply(optimizer, [g], [variable])
    expected, _, _ = ref.lamb_step(x0, g, 0 * x0, 0 * x0, 1, 0.1, 0.9, 0.999, 1e-6, 0.0)
    np.testing.assert_allclose(np.asarray(variable.numpy(), np.float64), expected, rtol=1e-6)
    assert optimizer.get_config()[keyword] == 0


def test_keras3_only_base_keywords_are_checked_too():
    module = FLAVOURS["keras3"]().module
    with pytest.raises(ValueError, match=re.escape("loss_scale_factor must be > 0, got -1.0")):
        module.LAMB(loss_scale_factor=-1)
    with pytest.raises(TypeError, match="gradient_accumulation_steps must be an integer, got '2'"):
        module.LAMB(gradient_accumulation_steps="2")
    config = module.LAMB(loss_scale_factor=128, gradient_accumulation_steps=2).get_config()
    assert (config["loss_scale_factor"], config["gradient_accumulation_steps"]) == (128.0, 2)


@pytest.mark.parametrize("keyword, value, instead", [
    ("gradient_accumulation_steps", 2, "lamb_tf.accumulation.GradientAccumulationModel"),
    ("gradient_accumulation_steps", 1, "lamb_tf.accumulation.GradientAccumulationModel"),
    ("loss_scale_factor", 128.0, "tf_keras.mixed_precision.LossScaleOptimizer"),
])
def test_a_keras3_only_keyword_given_to_tf_keras_says_so_whatever_its_value(keyword, value,
                                                                             instead):
    """gradient_accumulation_steps=1 was "must be >= 2", and 2 then tf_keras' "kwargs should
    be empty for optimizer_experimental.Optimizer"."""
    module = FLAVOURS["tf_keras"]().module
    for optimizer_class in (module.LAMB, module.LARS):
        with pytest.raises(TypeError, match=re.escape(
                f"got {keyword}=: a keyword of Keras 3's optimizers, which tf_keras' do not "
                f"take; ") + ".*" + re.escape(instead)):
            optimizer_class(**{keyword: value})


def test_a_keras3_variable_rate_in_a_tf_keras_optimizer_is_refused():
    """tf_keras' own optimizers copy such a rate once, silently: it would not be read at every
    step as a tf.Variable is."""
    import keras
    with pytest.raises(TypeError, match="do not read at every step: give a tf.Variable"):
        FLAVOURS["tf_keras"]().module.LAMB(keras.Variable(0.001))


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name,name,value", [
    ("LAMB", "weight_decay_rate", 0.1), ("LAMB", "beta_1", 0.5), ("LARS", "momentum", 0.5)])
def test_a_hyperparameter_set_later_is_checked_and_fixed_once_built(
        flavour_name, optimizer_name, name, value):
    """Before build, a new value is checked as the constructor checks it and used; after
    build it is refused: the per-variable (decay, adapt) decisions and any traced step were
    made with the old one, so it would be reported but not applied."""
    flavour = FLAVOURS[flavour_name]()
    optimizer = getattr(flavour.module, optimizer_name)(0.1)
    with pytest.raises(ValueError, match=f"{name} must be"):
        setattr(optimizer, name, -1.0)
    setattr(optimizer, name, value)
    assert optimizer.get_config()[name] == pytest.approx(value)
    optimizer.build([flavour.variable("layer/kernel", [1.0, 2.0])])
    with pytest.raises(AttributeError, match=f"{name} cannot change once the optimizer is built"):
        setattr(optimizer, name, value / 2)
    assert optimizer.get_config()[name] == pytest.approx(value)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_name_that_is_not_a_string_is_refused_in_both_flavours(flavour_name):
    """tf_keras' base class took name=5 (Keras 3's refuses it)."""
    module = FLAVOURS[flavour_name]().module
    for optimizer_class in (module.LAMB, module.LARS):
        with pytest.raises(TypeError, match="name must be a string, got 5"):
            optimizer_class(name=5)


UNKNOWN_KEYWORD_ERROR = {"tf_keras": TypeError, "keras3": ValueError}  # as each base class


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
def test_a_misspelt_keyword_names_the_argument_meant(flavour_name, optimizer_name):
    """tf_keras' base said `... is not a valid argument, kwargs should be empty for
    optimizer_experimental.Optimizer`, Keras 3's `Argument(s) not recognized`: neither names
    the argument meant (Model Garden's LAMB lists the ones it takes)."""
    optimizer_class = getattr(FLAVOURS[flavour_name]().module, optimizer_name)
    error = UNKNOWN_KEYWORD_ERROR[flavour_name]
    with pytest.raises(error, match=re.escape(
            f"{optimizer_name} got an unexpected keyword argument 'exclude_from_layer_adaption': "
            "did you mean exclude_from_layer_adaptation?")):
        optimizer_class(exclude_from_layer_adaption=["bias"])
    with pytest.raises(error, match=r"'clip_norm': did you mean clipnorm\?$"):
        optimizer_class(clip_norm=1.0)
    with pytest.raises(error) as raised:
        optimizer_class(foo=1)
    message = str(raised.value)
    assert message.startswith(f"{optimizer_name} got an unexpected keyword argument 'foo': it "
                              "takes learning_rate, ")
    assert "exclude_from_layer_adaptation" in message and "global_clipnorm" in message
    assert " weight_decay," not in message  # refused: weight_decay_rate is the paper's λ
