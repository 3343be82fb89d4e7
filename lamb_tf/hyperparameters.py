"""LAMB's and LARS' own arguments: signature, checks and `get_config`, once for both flavours.

`LambArguments` and `LarsArguments` are mixins placed before a flavour's shared base
(`_LayerwiseOptimizer` in `lamb_tf.tf_keras_optimizers` / `lamb_tf.keras3_optimizers`):
they check their arguments, hand the shared ones on, store theirs after the base class is
initialised, and add them to `get_config`. The flavour class keeps only its base-class glue
(slots and `update_step`).
"""
import tensorflow as tf

from lamb_tf import arguments


def read_now(value):
    """A hyperparameter's value for this step, as TF Addons' and Model Garden's `_get_hyper`
    give it: a variable read, a zero-argument callable called (each a float tensor); a number
    as it is (a Python float: a constant of the traced update; a λ of 0 drops λx from every
    variable's update at build time, `LayerwiseMixin._decide`, which a variable's or a
    callable's λ, 0 now and maybe not later, does not).

    What is read so (`arguments.read_at_every_step`): LAMB's `beta_1`, `beta_2`, both
    optimizers' `weight_decay_rate`, LARS' `momentum` and `eeta`. Called in `update_step`,
    so inside a traced step a variable is read and a callable called at every run of the
    step; a Python value that a callable reads is read once, when the step is traced."""
    if arguments.read_at_every_step(value):
        tensor = tf.convert_to_tensor(value if hasattr(value, "assign") else value())
        return tensor if tensor.dtype.is_floating else tf.cast(tensor, tf.float32)
    return value


def serialized(value):
    """A hyperparameter for `get_config`: a variable or a callable as its value now (as the
    peers' `_serialize_hyperparameter`), so `from_config` rebuilds the optimizer with that
    number; a tuple as a list (JSON), else as it is."""
    if arguments.read_at_every_step(value):
        return float(read_now(value).numpy())
    return list(value) if isinstance(value, tuple) else value


class _OwnArguments:
    """Hands the shared arguments to the flavour's base, then stores and reports its own."""

    # {argument this optimizer adds to the shared ones: its check in lamb_tf.arguments}; the
    # same check runs when one is set later (`LayerwiseMixin.__setattr__`)
    _OWN_ARGUMENTS = {}

    def _checked(self, **values):
        """The own arguments `values`, each through its check (before any variable exists)."""
        return {name: self._OWN_ARGUMENTS[name](name, value) for name, value in values.items()}

    def _initialise(self, own, name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                    exclude_from_layer_adaptation, keras_kwargs):
        super().__init__(name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                         exclude_from_layer_adaptation, keras_kwargs)
        self._set_checked(own)

    def _now(self, *names):
        """The hyperparameters `names` for this step's update, each through `read_now`."""
        return tuple(read_now(getattr(self, name)) for name in names)

    def get_config(self):
        config = super().get_config()
        for argument in self._OWN_ARGUMENTS:
            config[argument] = serialized(getattr(self, argument))
        return config


class LambArguments(_OwnArguments):
    """LAMB (Algorithm 2 of arXiv 1904.00962); the maths is `lamb_tf.update_rules.lamb_step`.

    Per variable: `u = m̂/(√v̂ + ε) + λx`, `x ← x − η · φ(‖x‖)/‖u‖ · u`, trust ratio 1 when
    φ(‖x‖) or ‖u‖ is 0, `t` = applied updates + 1. Same signature as Model Garden's / TF Addons' LAMB.

    Args:
      learning_rate: a number >= 0, a scalar constant tensor, a variable (read at every
        step), a zero-argument callable (called at every step), or a LearningRateSchedule
        of the optimizer's Keras flavour.
      beta_1, beta_2: moment decay rates in [0, 1): numbers, or (as TF Addons' and Model
        Garden's LAMB take them) scalar variables, read at every step, or zero-argument
        callables, called at every step; `get_config` holds their value then.
      epsilon: ε > 0, added outside the square root; None: 1e-7, the Keras epsilon the
        peers' `epsilon or` names (0 is refused).
      weight_decay_rate: λ >= 0, added to the update direction inside the trust ratio: a
        number, or (as Model Garden's LAMB takes it) a scalar variable, read at every step,
        or a zero-argument callable, called at every step, as the betas; variables
        excluded from weight decay get no λx whatever its value.
      exclude_from_weight_decay: regexes searched in each variable's full path
        (`layer/sublayer/kernel`); matching variables get no λx.
      exclude_from_layer_adaptation: regexes; matching variables get trust ratio 1. **None
        means: the same list as `exclude_from_weight_decay`** (Model Garden / TF Addons
        convention); pass `[]` to adapt every variable.
      name: optimizer name.
      phi_bounds: None (φ the identity) or `(gamma_l, gamma_u)`, γ_l finite, γ_u finite or
        `float("inf")` (no upper bound): φ(z) = min(max(z, γ_l), γ_u), so φ(0) = γ_l (a
        layer of zeros steps by η·γ_l).
      bias_correction: False drops the `1/(1 − β^t)` factors (paper appendix; the authors'
        ResNet-50 code).
      **keras_kwargs: the flavour's base-class keywords (`clipnorm`, `clipvalue`,
        `global_clipnorm`, `use_ema`, ...). Keras' `weight_decay` is refused: use
        `weight_decay_rate`; so are the legacy optimizers' `lr` (use `learning_rate`),
        `decay`, `gradient_transformers` and `gradient_aggregator`.
    """

    _OWN_ARGUMENTS = {"beta_1": arguments.beta_read_at_every_step,
                      "beta_2": arguments.beta_read_at_every_step,
                      "epsilon": arguments.epsilon, "phi_bounds": arguments.phi_bounds,
                      "bias_correction": arguments.boolean}

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 weight_decay_rate=0.0, exclude_from_weight_decay=None,
                 exclude_from_layer_adaptation=None, name="LAMB", phi_bounds=None,
                 bias_correction=True, **keras_kwargs):
        own = self._checked(beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                            phi_bounds=phi_bounds, bias_correction=bias_correction)
        self._initialise(own, name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                         exclude_from_layer_adaptation, keras_kwargs)


class LarsArguments(_OwnArguments):
    """LARS with Model Garden's numerics; the maths is `lamb_tf.update_rules.lars_step`.

    Same signature and defaults as `official.modeling.optimization.lars.LARS`; unlike it,
    sparse gradients work and `get_config` keeps the exclusions.

    Args:
      learning_rate: any form `LambArguments` takes.
      momentum: μ in [0, 1] (as Keras' SGD).
      weight_decay_rate: λ >= 0, added to the gradient (L2 decay inside the trust ratio).
      eeta: trust coefficient > 0: ratio = eeta · ‖x‖ / ‖g + λx‖.
        Each of these three a number, a scalar variable (read at every step; its value at
        construction checked as a number) or a zero-argument callable (called at every
        step), as LAMB's betas and λ; `get_config` holds the value then. (Model Garden's
        LARS keeps them as plain attributes: it takes a variable μ or eeta as it is, but
        not a callable, nor a variable λ in a traced step.)
      nesterov: Nesterov momentum.
      classic_momentum: True: lr inside the momentum buffer, ratio from the gradient;
        False: lr after the momentum, ratio from the momentum update.
      exclude_from_weight_decay, exclude_from_layer_adaptation: as for LAMB; **None for the
        second means the same list as the first**.
      name: optimizer name.
      **keras_kwargs: as for LAMB; the same keywords are refused.
    """

    _OWN_ARGUMENTS = {"momentum": arguments.unit_interval_read_at_every_step,
                      "eeta": arguments.positive_read_at_every_step,
                      "nesterov": arguments.boolean, "classic_momentum": arguments.boolean}

    def __init__(self, learning_rate=0.01, momentum=0.9, weight_decay_rate=0.0, eeta=0.001,
                 nesterov=False, classic_momentum=True, exclude_from_weight_decay=None,
                 exclude_from_layer_adaptation=None, name="LARS", **keras_kwargs):
        own = self._checked(momentum=momentum, eeta=eeta, nesterov=nesterov,
                            classic_momentum=classic_momentum)
        self._initialise(own, name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                         exclude_from_layer_adaptation, keras_kwargs)
