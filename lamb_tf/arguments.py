"""Construction-time checks of the optimizers' hyperparameters, shared by both Keras flavours.

Each check returns the value in the form the optimizer stores, or raises one `ValueError`
/ `TypeError` that names the argument, the bad value and what would be valid.
"""
import math
import numbers


def _real_number(name, value):
    """`value` as a float, or TypeError naming `name` (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__}).")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    return value


def non_negative(name, value):
    """A finite float >= 0 (learning rate, weight decay, momentum)."""
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


def beta(name, value):
    """A moment decay rate in [0, 1)."""
    value = _real_number(name, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}.")
    return value


def boolean(name, value):
    """A real bool (not a truthy string such as "False")."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__}).")
    return value


def phi_bounds(value):
    """None, or `(gamma_l, gamma_u)` with 0 <= gamma_l <= gamma_u, as a tuple of floats."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise TypeError(f"phi_bounds must be None or a pair (gamma_l, gamma_u), got {value!r}.")
    gamma_l = non_negative("phi_bounds[0] (gamma_l)", value[0])
    gamma_u = non_negative("phi_bounds[1] (gamma_u)", value[1])
    if gamma_l > gamma_u:
        raise ValueError(f"phi_bounds must have gamma_l <= gamma_u, got {value!r}.")
    return (gamma_l, gamma_u)


def learning_rate(value, schedule_class):
    """A float >= 0, or a `schedule_class` (the LearningRateSchedule of the optimizer's flavour)."""
    if isinstance(value, schedule_class):
        return value
    if hasattr(value, "get_config") and callable(value):
        raise TypeError(
            f"learning_rate is a {type(value).__module__}.{type(value).__name__}, which is not a "
            f"{schedule_class.__module__}.{schedule_class.__name__}: use a schedule of the same "
            "Keras flavour as the optimizer (tf_keras or Keras 3)."
        )
    return non_negative("learning_rate", value)


def refuse_keras_weight_decay(optimizer_name, keras_kwargs):
    """Refuse Keras' decoupled `weight_decay`: it decays outside the trust ratio (not LAMB/LARS)."""
    value = keras_kwargs.pop("weight_decay", None)
    if value is not None:
        raise ValueError(
            f"{optimizer_name} got weight_decay={value!r}: Keras' `weight_decay` decays the weights "
            "outside the trust ratio, which is a different algorithm. "
            f"Use weight_decay_rate={value!r} instead."
        )
    return keras_kwargs
