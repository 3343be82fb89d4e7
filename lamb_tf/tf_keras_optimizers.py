"""LAMB and LARS as `tf_keras.optimizers.Optimizer` subclasses (the flavour of Model Garden).

Thin adapters: build the slots, run `lamb_tf.update_rules` per variable through
`lamb_tf.compiled_updates` (one XLA kernel per variable, assigned in place). The base
class all-reduces gradients across replicas (`aggregate_gradients`), then clips
(`clipnorm`/`global_clipnorm`, so clipping sees the all-reduced gradient), then calls
`update_step` per variable. The bias-correction step is `t = applied_updates + 1`, counted in
our own variable: tf_keras' `LossScaleOptimizer` also advances `iterations` on the steps it
skips (non-finite gradients), which never reach LAMB.
"""
import re

import tensorflow as tf
import tf_keras

from lamb_tf import arguments
from lamb_tf import compiled_updates
from lamb_tf import exclusions
from lamb_tf import layerwise
from lamb_tf import update_rules

_SCHEDULE = tf_keras.optimizers.schedules.LearningRateSchedule


def variable_path(variable):
    """A tf_keras variable's full path: its name without the `:0` suffix."""
    return re.sub(r":\d+$", "", variable.name)


def _plain(value):
    """A serialized learning rate as JSON-friendly Python: a float, or the schedule's dict."""
    return value if isinstance(value, dict) else float(value)


class _LayerwiseOptimizer(layerwise.LayerwiseMixin, tf_keras.optimizers.Optimizer):
    """What LAMB and LARS share as tf_keras optimizers: arguments, build, config."""

    def __init__(self, name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                 exclude_from_layer_adaptation, keras_kwargs):
        keras_kwargs = arguments.refuse_keras_weight_decay(name, dict(keras_kwargs))
        learning_rate = arguments.learning_rate(learning_rate, _SCHEDULE)
        self.weight_decay_rate = arguments.non_negative("weight_decay_rate", weight_decay_rate)
        # validate the patterns before the base class creates any variable
        self._exclusions = exclusions.Exclusions(exclude_from_weight_decay,
                                                 exclude_from_layer_adaptation)
        super().__init__(name=name, weight_decay=None, **keras_kwargs)
        self._learning_rate = self._build_learning_rate(learning_rate)

    def build(self, var_list):
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self._built = True
        self._applied_updates = self.add_variable(shape=[], dtype=tf.int64, name="applied_updates")
        self._trust_ratio_variables = [
            self.add_variable_from_reference(v, "trust_ratio", shape=[]) for v in var_list]
        self._build_slots(var_list)
        self._decide([(variable_path(v), tuple(v.shape)) for v in var_list])

    def _build_slots(self, var_list):
        raise NotImplementedError

    @property
    def applied_updates(self):
        """Updates applied so far (skipped loss-scale steps excluded); LAMB's `t` is this + 1."""
        return self._applied_updates

    def _distributed_apply_gradients_fn(self, distribution, grads_and_vars, **kwargs):
        iteration = super()._distributed_apply_gradients_fn(distribution, grads_and_vars, **kwargs)
        # counted once per applied update, after every variable's update_step has read it
        self._applied_updates.assign_add(1)
        return iteration

    def _index(self, variable):
        return self._index_dict[self._var_key(variable)]

    def get_config(self):
        config = super().get_config()
        # the base's decoupled weight decay is refused; ours is weight_decay_rate
        config.pop("weight_decay", None)
        config["learning_rate"] = _plain(self._serialize_hyperparameter(self._learning_rate))
        config.update(self._layerwise_config())
        return config


class LAMB(_LayerwiseOptimizer):
    """LAMB (Algorithm 2 of arXiv 1904.00962) for tf_keras; see `lamb_tf.update_rules`.

    Per variable: `u = m̂/(√v̂ + ε) + λx`, `x ← x − η · φ(‖x‖)/‖u‖ · u`, trust ratio 1 when a
    norm is 0, `t` = applied updates + 1. Same signature as Model Garden's / TF Addons' LAMB.

    Args:
      learning_rate: float >= 0 or a `tf_keras.optimizers.schedules.LearningRateSchedule`.
      beta_1, beta_2: moment decay rates in [0, 1).
      epsilon: ε > 0, added outside the square root.
      weight_decay_rate: λ >= 0, added to the update direction inside the trust ratio.
      exclude_from_weight_decay: regexes searched in each variable's full path
        (`layer/sublayer/kernel`); matching variables get no λx.
      exclude_from_layer_adaptation: regexes; matching variables get trust ratio 1. **None
        means: the same list as `exclude_from_weight_decay`** (Model Garden / TF Addons
        convention); pass `[]` to adapt every variable.
      name: optimizer name.
      phi_bounds: None (φ the identity) or `(gamma_l, gamma_u)`: φ(z) = min(max(z, γ_l), γ_u).
      bias_correction: False drops the `1/(1 − β^t)` factors (paper appendix; the authors'
        ResNet-50 code).
      **keras_kwargs: the base class' `clipnorm`, `clipvalue`, `global_clipnorm`, `use_ema`,
        `ema_momentum`, `ema_overwrite_frequency`, `jit_compile`. Keras' `weight_decay` is
        refused: use `weight_decay_rate`.
    """

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 weight_decay_rate=0.0, exclude_from_weight_decay=None,
                 exclude_from_layer_adaptation=None, name="LAMB", phi_bounds=None,
                 bias_correction=True, **keras_kwargs):
        self.beta_1 = arguments.beta("beta_1", beta_1)
        self.beta_2 = arguments.beta("beta_2", beta_2)
        self.epsilon = arguments.positive("epsilon", epsilon)
        self.phi_bounds = arguments.phi_bounds(phi_bounds)
        self.bias_correction = arguments.boolean("bias_correction", bias_correction)
        super().__init__(name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                         exclude_from_layer_adaptation, keras_kwargs)

    def _build_slots(self, var_list):
        self._m = [self.add_variable_from_reference(v, "m") for v in var_list]
        self._v = [self.add_variable_from_reference(v, "v") for v in var_list]
        self._compiled_update = compiled_updates.LambUpdate()

    def update_step(self, gradient, variable):
        i = self._index(variable)
        decay, adapt = self._decisions[i]
        self._compiled_update(
            variable, update_rules.dense_gradient(gradient, variable.shape),
            self._m[i], self._v[i], self._trust_ratio_variables[i],
            self._applied_updates + 1, self.learning_rate,
            self.beta_1, self.beta_2, self.epsilon, self.weight_decay_rate,
            decay, adapt, self.bias_correction, self.phi_bounds)

    def get_config(self):
        config = super().get_config()
        config.update({
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "phi_bounds": None if self.phi_bounds is None else list(self.phi_bounds),
            "bias_correction": self.bias_correction,
        })
        return config


class LARS(_LayerwiseOptimizer):
    """LARS with Model Garden's numerics for tf_keras; see `lamb_tf.update_rules.lars_step`.

    Same signature and defaults as `official.modeling.optimization.lars.LARS`; unlike it,
    sparse gradients work and `get_config` keeps the exclusions.

    Args:
      learning_rate: float >= 0 or a `tf_keras.optimizers.schedules.LearningRateSchedule`.
      momentum: μ >= 0.
      weight_decay_rate: λ >= 0, added to the gradient (L2 decay inside the trust ratio).
      eeta: trust coefficient > 0: ratio = eeta · ‖x‖ / ‖g + λx‖.
      nesterov: Nesterov momentum.
      classic_momentum: True: lr inside the momentum buffer, ratio from the gradient;
        False: lr after the momentum, ratio from the momentum update.
      exclude_from_weight_decay, exclude_from_layer_adaptation: as for `LAMB`; **None for the
        second means the same list as the first**.
      name: optimizer name.
      **keras_kwargs: as for `LAMB`; Keras' `weight_decay` is refused.
    """

    def __init__(self, learning_rate=0.01, momentum=0.9, weight_decay_rate=0.0, eeta=0.001,
                 nesterov=False, classic_momentum=True, exclude_from_weight_decay=None,
                 exclude_from_layer_adaptation=None, name="LARS", **keras_kwargs):
        self.momentum = arguments.non_negative("momentum", momentum)
        self.eeta = arguments.positive("eeta", eeta)
        self.nesterov = arguments.boolean("nesterov", nesterov)
        self.classic_momentum = arguments.boolean("classic_momentum", classic_momentum)
        super().__init__(name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                         exclude_from_layer_adaptation, keras_kwargs)

    def _build_slots(self, var_list):
        self._velocities = [self.add_variable_from_reference(v, "momentum") for v in var_list]
        self._compiled_update = compiled_updates.LarsUpdate()

    def update_step(self, gradient, variable):
        i = self._index(variable)
        decay, adapt = self._decisions[i]
        self._compiled_update(
            variable, update_rules.dense_gradient(gradient, variable.shape),
            self._velocities[i], self._trust_ratio_variables[i],
            self.learning_rate, self.momentum, self.weight_decay_rate,
            self.eeta, self.nesterov, self.classic_momentum, decay, adapt)

    def get_config(self):
        config = super().get_config()
        config.update({
            "momentum": self.momentum,
            "eeta": self.eeta,
            "nesterov": self.nesterov,
            "classic_momentum": self.classic_momentum,
        })
        return config
