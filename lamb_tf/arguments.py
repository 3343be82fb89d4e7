"""One vocabulary of argument checks for the whole library.

Each check returns the value in the form the caller stores, or raises one `ValueError` /
`TypeError` that names the argument, the bad value and what would be valid. The optimizers
(both Keras flavours), the schedules, the scaling rules and the batch planner all use
these, so the same mistake reads the same everywhere.
"""
import difflib
import inspect
import math
import numbers

import numpy as np

# Keywords of the legacy (pre-2.11) Keras optimizers that the flavours' new base classes
# do not take; the optimizers name the replacement instead of Keras' generic error.
LEGACY_KEYWORDS = {
    "decay": "put the decay in a learning-rate schedule (e.g. InverseTimeDecay)",
    "gradient_transformers": "drop the config that adds it (e.g. Model Garden's "
                             "task.differential_privacy_config)",
    "gradient_aggregator": "drop it: the all-reduce is the optimizer's own",
}


def _scalar_as_number(value):
    """A 0-d NumPy array or eager scalar tensor as its Python number (tf_keras and Model
    Garden's optimizers take them for their hyperparameters); any other value unchanged."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a 0-d NumPy array
        return value.item()
    if hasattr(value, "numpy") and not hasattr(value, "assign"):  # not a variable
        try:
            array = value.numpy()
        except Exception:  # a symbolic tensor: no value yet
            return value
        if getattr(array, "ndim", None) == 0:
            return array.item()
    return value


def _real_number(name, value):
    """`value` as a float, or TypeError naming `name` (bools are not numbers here)."""
    value = _scalar_as_number(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__}).")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    return value


def non_negative(name, value):
    """A finite float >= 0 (learning rate, weight decay)."""
    value = _real_number(name, value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}.")
    return value


def positive(name, value):
    """A finite float > 0 (epsilon, eeta)."""
    value = _real_number(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}.")
    return value


def clip_threshold(name, value):
    """A finite float >= 0 (`clipnorm`, `clipvalue`, `global_clipnorm`): 0 clips nothing, as
    in both Keras flavours' base classes (configs write 0 for "off")."""
    value = _real_number(name, value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0 (0: no clipping), got {value!r}.")
    return value


def beta(name, value):
    """A moment decay rate in [0, 1)."""
    value = _real_number(name, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}.")
    return value


def read_at_every_step(value):
    """Whether `value` is a hyperparameter read at every step, as TF Addons' and Model
    Garden's `_set_hyper` keep one: a variable (`tf.Variable`, `keras.Variable`: anything
    with `assign`) or a zero-argument callable. Anything else is a number (or a bad value)."""
    return hasattr(value, "assign") or callable(value)


def _number_or_read_at_every_step(check, name, value):
    """`check(name, value)` for a number; a scalar float variable (its value now through
    `check`) or a zero-argument callable (not called here) returned as it is."""
    if hasattr(value, "assign"):  # a tf.Variable or keras.Variable
        import tensorflow as tf
        if len(value.shape) != 0 or not tf.as_dtype(value.dtype).is_floating:
            raise TypeError(f"{name} must be a real number or a scalar float variable, got "
                            f"{value!r}.")
        if hasattr(value, "numpy"):  # (eager: its value now)
            check(name, float(value.numpy()))
        return value
    if callable(value):
        if hasattr(value, "get_config"):  # a LearningRateSchedule: it takes the step
            raise TypeError(
                f"{name} is a {type(value).__name__}, which takes the step: give a number, a "
                "tf.Variable or a zero-argument callable (lambda: schedule(optimizer.iterations)).")
        return value
    return check(name, value)


def beta_read_at_every_step(name, value):
    """A moment decay rate in [0, 1) (`beta`), or, as TF Addons' and Model Garden's LAMB take
    it, a scalar variable (read at every step; its value now must be in [0, 1)) or a
    zero-argument callable (called at every step), returned as it is."""
    return _number_or_read_at_every_step(beta, name, value)


def non_negative_read_at_every_step(name, value):
    """λ >= 0 (`non_negative`), or a scalar variable (its value now >= 0) or a zero-argument
    callable, returned as it is (`weight_decay_rate`, as Model Garden's LAMB takes it)."""
    return _number_or_read_at_every_step(non_negative, name, value)


def unit_interval_read_at_every_step(name, value):
    """μ in [0, 1] (`unit_interval`), or a scalar variable (its value now in [0, 1]) or a
    zero-argument callable, returned as it is (LARS' `momentum`)."""
    return _number_or_read_at_every_step(unit_interval, name, value)


def positive_read_at_every_step(name, value):
    """A number > 0 (`positive`), or a scalar variable (its value now > 0) or a zero-argument
    callable, returned as it is (LARS' `eeta`)."""
    return _number_or_read_at_every_step(positive, name, value)


# Keras' default epsilon, which TF Addons' and Model Garden's LAMB name for `epsilon=None`
# (`epsilon or tf.backend_config.epsilon()`; TensorFlow 2.20 has no `tf.backend_config`, so
# Model Garden 2.20's raises an AttributeError there)
PEER_DEFAULT_EPSILON = 1e-7


def epsilon(name, value):
    """ε > 0 (`positive`); None is `PEER_DEFAULT_EPSILON`. 0 is refused, not read as 1e-7 as
    the peers' `epsilon or ...` means to: a user who writes 0 means no ε."""
    if value is None:
        return PEER_DEFAULT_EPSILON
    value = _real_number(name, value)
    if value == 0:
        raise ValueError(
            f"{name} must be > 0, got {value!r}: with ε = 0 a weight whose gradient has always "
            "been 0 steps by 0/0 = NaN (TF Addons' and Model Garden's LAMB write `epsilon or` "
            f"Keras' 1e-7 for 0); give {name}=1e-7 (or None) for their behaviour.")
    return positive(name, value)


def unit_interval(name, value):
    """A finite float in [0, 1] (momentum: Keras' SGD refuses the same values)."""
    value = _real_number(name, value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}.")
    return value


def boolean(name, value):
    """A real bool (not a truthy string such as "False"); NumPy's bool (a comparison of
    arrays, say), which Keras takes, as the Python bool."""
    if isinstance(value, np.bool_):  # (np.bool in NumPy 2, np.bool_ in 1.x: both names)
        return bool(value)
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__}).")
    return value


def finite_at_least(name, value, minimum, strict=False):
    """A finite real number >= minimum (> minimum when strict), returned unchanged."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        relation = ">" if strict else ">="
        raise ValueError(f"{name} must be finite and {relation} {minimum}, got {value!r}")
    return value


def integer_at_least(name, value, minimum):
    """An integer >= minimum (steps, counts), returned unchanged."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return value


def positive_int(name, value):
    """An integer > 0 (batch sizes, accumulation steps), returned unchanged."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def phi_bounds(name, value):
    """None, or `(gamma_l, gamma_u)` with 0 <= gamma_l <= gamma_u, as a tuple of floats;
    gamma_l finite, gamma_u finite or +inf (no upper bound: φ(z) = max(z, γ_l))."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise TypeError(f"{name} must be None or a pair (gamma_l, gamma_u), got {value!r}.")
    gamma_l = non_negative(f"{name}[0] (gamma_l)", value[0])
    upper = _scalar_as_number(value[1])
    gamma_u = (math.inf if isinstance(upper, numbers.Real) and not isinstance(upper, bool)
               and upper == math.inf else non_negative(f"{name}[1] (gamma_u)", upper))
    if gamma_l > gamma_u:
        raise ValueError(f"{name} must have gamma_l <= gamma_u, got {value!r}.")
    return (gamma_l, gamma_u)


def learning_rate(value, schedule_class, variable_classes):
    """Every form the Keras base classes take, checked where it can be judged now.

    Returns `value` unchanged when it is a `schedule_class` (the optimizer flavour's
    LearningRateSchedule), one of `variable_classes` (read at every step) or a zero-argument
    callable (called at every step); a float for a number or a constant tensor, which must
    be finite and >= 0. A schedule of the other Keras flavour is a TypeError.
    """
    import tensorflow as tf

    if isinstance(value, (schedule_class, *variable_classes)):
        return value
    if hasattr(value, "assign"):  # tf_keras' own optimizers would copy it once, silently
        raise TypeError(
            f"learning_rate is a {type(value).__module__}.{type(value).__name__}, a variable "
            "this Keras flavour's optimizers do not read at every step: give a tf.Variable "
            "(either flavour) or a number.")
    if hasattr(value, "get_config") and callable(value):
        raise TypeError(
            f"learning_rate is a {type(value).__module__}.{type(value).__name__}, which is not a "
            f"{schedule_class.__module__}.{schedule_class.__name__}: use a schedule of the same "
            "Keras flavour as the optimizer (tf_keras or Keras 3)."
        )
    if callable(value):
        return value
    if tf.is_tensor(value):
        if not hasattr(value, "numpy"):  # symbolic: cannot be judged now
            return value
        if value.shape.rank != 0 or not value.dtype.is_floating and not value.dtype.is_integer:
            raise TypeError(f"learning_rate must be a scalar number, got the tensor {value!r}.")
    return non_negative("learning_rate", value)


def refuse_keywords(optimizer_name, keras_kwargs):
    """Refuse the keywords that mean another algorithm or another Keras API, naming the fix.

    Keras' decoupled `weight_decay` decays outside the trust ratio (not LAMB/LARS); the
    legacy optimizers' keywords (`LEGACY_KEYWORDS`) do not exist in the new base classes, and
    their `lr` (Model Garden's LAMB reads it as `learning_rate`; tf_keras' base would drop it).
    A value that asks for nothing (None, 0, an empty list) is dropped instead: peers' saved
    configs hold them (Model Garden's LAMB and LARS write `decay=0.0`).
    """
    value = keras_kwargs.pop("weight_decay", None)
    if not _asks_for_nothing(value):
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        raise ValueError(
            f"{optimizer_name} got weight_decay={value!r}: Keras' `weight_decay` decays the weights "
            "outside the trust ratio, which is a different algorithm; the paper's λ, inside "
            "it (TF Addons' LAMB `weight_decay`), is weight_decay_rate. Use "
            + (f"weight_decay_rate={value!r}" if number else "weight_decay_rate (a number; 0.0 "
               "for none)") + " instead."
        )
    # the legacy optimizers' (and Model Garden's LAMB's) name for the learning rate: tf_keras'
    # base class drops it with only a log line, so the run would train at the default rate
    rate = keras_kwargs.pop("lr", None)
    if rate is not None:
        raise ValueError(
            f"{optimizer_name} got lr={rate!r}: `lr` is the legacy Keras optimizers' name for the "
            f"learning rate, which {optimizer_name} does not read. Use learning_rate={rate!r} "
            "instead.")
    if not _asks_for_nothing(keras_kwargs.pop("mesh", None)):
        raise ValueError(
            f"{optimizer_name} got mesh=...: DTensor meshes are not supported (the update runs "
            "as TensorFlow ops on each variable's own tensor); train under a tf.distribute "
            "strategy instead.")
    for keyword, fix in LEGACY_KEYWORDS.items():
        if not _asks_for_nothing(keras_kwargs.pop(keyword, None)):
            raise ValueError(
                f"{optimizer_name} got {keyword}=...: {keyword} is only supported by legacy Keras "
                f"optimizers (tf.keras.optimizers.legacy), which {optimizer_name} is not; {fix}.")
    return keras_kwargs


def keyword_names(cls):
    """The keywords `cls(...)` takes by name: those of the first `__init__` in its MRO that
    names any (a `*args, **kwargs` pass-through, such as Keras 3's TensorFlow optimizer's,
    is skipped)."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            names = tuple(parameter.name for parameter
                          in inspect.signature(klass.__init__).parameters.values()
                          if parameter.kind in named and parameter.name != "self")
            if names:
                return names
    return ()


# Base-class keywords not listed as what an optimizer takes: refused (`refuse_keywords`), or
# only in tf_keras' saved configs.
_NOT_OFFERED = ("weight_decay", "is_legacy_optimizer")


def refuse_unknown_keywords(optimizer_name, keras_kwargs, own, base, error_class):
    """`error_class` (the base class's own: tf_keras' TypeError, Keras 3's ValueError) for
    the first keyword that neither the optimizer (`own` names) nor its base class (`base`)
    takes, naming the closest one; the base classes' messages name neither."""
    for keyword in keras_kwargs:
        if keyword not in base:
            close = difflib.get_close_matches(keyword, own + base, n=1, cutoff=0.6)
            offered = [name for name in base if name not in own + _NOT_OFFERED]
            hint = (f"did you mean {close[0]}?" if close else
                    f"it takes {', '.join(own)}, and its Keras base class's "
                    f"{', '.join(offered)}")
            raise error_class(f"{optimizer_name} got an unexpected keyword argument "
                              f"{keyword!r}: {hint}")


# The flavours' base-class keywords that their base classes take without a check (a
# negative `clipnorm` clips every gradient to nothing; `use_ema="no"` is truthy): {keyword:
# its check}. None (unset) is left to the base class, as is what it checks itself
# (`ema_momentum`, `ema_overwrite_frequency`, one clipping option at most in Keras 3).
BASE_KEYWORD_CHECKS = {
    "clipnorm": clip_threshold,
    "clipvalue": clip_threshold,
    "global_clipnorm": clip_threshold,
    "loss_scale_factor": positive,
    "use_ema": boolean,
    "jit_compile": boolean,  # (tf_keras; "false" is truthy)
    "gradient_accumulation_steps": lambda name, value: integer_at_least(name, value, 2),
}


def base_keywords(keras_kwargs):
    """`keras_kwargs` with each of `BASE_KEYWORD_CHECKS` that is set through its check."""
    return {keyword: (value if value is None or keyword not in BASE_KEYWORD_CHECKS
                      else BASE_KEYWORD_CHECKS[keyword](keyword, value))
            for keyword, value in keras_kwargs.items()}


def _asks_for_nothing(value):
    if isinstance(value, (list, tuple)):
        return not value
    return value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool)
                             and value == 0)
