"""LAMB and LARS as `keras.optimizers.Optimizer` subclasses (Keras 3, TensorFlow backend).

Thin adapters over `lamb_tf.update_rules`, like `lamb_tf.tf_keras_optimizers`. One fix to
the base class: Keras 3's TensorFlow backend clips gradients (`clipnorm`, `clipvalue`,
`global_clipnorm`) in each replica *before* the cross-replica all-reduce, so under a
distribution strategy the global norm is that of one replica's gradient. These classes clip
after the all-reduce instead, as tf_keras does: the clipped gradient is the same as on one
device with the same global batch.
"""
import keras

from lamb_tf import arguments
from lamb_tf import compiled_updates
from lamb_tf import exclusions
from lamb_tf import layerwise
from lamb_tf import update_rules

_SCHEDULE = keras.optimizers.schedules.LearningRateSchedule


def _tf_variable(variable):
    """The tf.Variable behind a Keras variable (the base class passes either to update_step),
    for `lamb_tf.compiled_updates` to assign in place."""
    return variable.value if isinstance(variable, keras.Variable) else variable


class _LayerwiseOptimizer(layerwise.LayerwiseMixin, keras.optimizers.Optimizer):
    """What LAMB and LARS share as Keras 3 optimizers: arguments, build, clipping, config."""

    def __init__(self, name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                 exclude_from_layer_adaptation, keras_kwargs):
        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(f"lamb_tf's {name} needs Keras' TensorFlow backend, "
                               f"not {keras.backend.backend()!r}: set KERAS_BACKEND=tensorflow.")
        keras_kwargs = arguments.refuse_keras_weight_decay(name, dict(keras_kwargs))
        learning_rate = arguments.learning_rate(learning_rate, _SCHEDULE)
        weight_decay_rate = arguments.non_negative("weight_decay_rate", weight_decay_rate)
        # validate the patterns before the base class creates any variable
        rules = exclusions.Exclusions(exclude_from_weight_decay, exclude_from_layer_adaptation)
        super().__init__(learning_rate=learning_rate, name=name, weight_decay=None, **keras_kwargs)
        self.weight_decay_rate = weight_decay_rate
        self._exclusions = rules

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._trust_ratio_variables = [
            self.add_variable(shape=(), dtype=v.dtype, name=f"{v.path.replace('/', '_')}_trust_ratio")
            for v in var_list]
        self._build_slots(var_list)
        self._decide([(v.path, tuple(v.shape)) for v in var_list])

    def _build_slots(self, var_list):
        raise NotImplementedError

    @property
    def applied_updates(self):
        """Updates applied so far: Keras 3 advances `iterations` only on applied updates
        (its LossScaleOptimizer does not on skipped steps; with `gradient_accumulation_steps`
        it is the number of real updates). LAMB's `t` is this + 1."""
        return self.iterations

    def _clip_gradients(self, grads):
        # deferred to `_all_reduce_sum_gradients`: the base would clip each replica's gradient
        return grads

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # all-reduce first (TF backend), then clip the summed gradient with the base's rule
        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
        grads = super()._clip_gradients([g for g, _ in grads_and_vars])
        return list(zip(grads, [v for _, v in grads_and_vars]))

    def get_config(self):
        config = super().get_config()
        # the base's decoupled weight decay is refused; ours is weight_decay_rate
        config.pop("weight_decay", None)
        config.update(self._layerwise_config())
        return config


class LAMB(_LayerwiseOptimizer):
    """LAMB (Algorithm 2 of arXiv 1904.00962) for Keras 3; see `lamb_tf.update_rules`.

    Same arguments and meaning as `lamb_tf.tf_keras_optimizers.LAMB`, with a
    `keras.optimizers.schedules.LearningRateSchedule` for a schedule. **When
    `exclude_from_layer_adaptation` is None it takes the `exclude_from_weight_decay` list**
    (Model Garden / TF Addons convention); `[]` adapts every variable. `**keras_kwargs` are
    the Keras 3 base class' (`clipnorm`, `clipvalue`, `global_clipnorm`, `use_ema`,
    `ema_momentum`, `ema_overwrite_frequency`, `loss_scale_factor`,
    `gradient_accumulation_steps`); Keras' `weight_decay` is refused: use `weight_decay_rate`.
    Unlike `keras.optimizers.Lamb`, λx is inside the trust ratio, exclusions match full
    paths and there is a layer-adaptation exclusion list.
    """

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 weight_decay_rate=0.0, exclude_from_weight_decay=None,
                 exclude_from_layer_adaptation=None, name="LAMB", phi_bounds=None,
                 bias_correction=True, **keras_kwargs):
        hyperparameters = dict(
            beta_1=arguments.beta("beta_1", beta_1),
            beta_2=arguments.beta("beta_2", beta_2),
            epsilon=arguments.positive("epsilon", epsilon),
            phi_bounds=arguments.phi_bounds(phi_bounds),
            bias_correction=arguments.boolean("bias_correction", bias_correction))
        super().__init__(name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                         exclude_from_layer_adaptation, keras_kwargs)
        self.beta_1 = hyperparameters["beta_1"]
        self.beta_2 = hyperparameters["beta_2"]
        self.epsilon = hyperparameters["epsilon"]
        self.phi_bounds = hyperparameters["phi_bounds"]
        self.bias_correction = hyperparameters["bias_correction"]

    def _build_slots(self, var_list):
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])
        self._compiled_update = compiled_updates.LambUpdate()

    def update_step(self, gradient, variable, learning_rate):
        i = self._get_variable_index(variable)
        decay, adapt = self._decisions[i]
        self._compiled_update(
            _tf_variable(variable), update_rules.dense_gradient(gradient, variable.shape),
            _tf_variable(self._m[i]), _tf_variable(self._v[i]),
            _tf_variable(self._trust_ratio_variables[i]),
            self.applied_updates + 1, learning_rate,
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
    """LARS with Model Garden's numerics for Keras 3; see `lamb_tf.update_rules.lars_step`.

    Same arguments and meaning as `lamb_tf.tf_keras_optimizers.LARS` (Model Garden's
    signature); **`exclude_from_layer_adaptation=None` takes the weight-decay list**.
    """

    def __init__(self, learning_rate=0.01, momentum=0.9, weight_decay_rate=0.0, eeta=0.001,
                 nesterov=False, classic_momentum=True, exclude_from_weight_decay=None,
                 exclude_from_layer_adaptation=None, name="LARS", **keras_kwargs):
        hyperparameters = dict(
            momentum=arguments.non_negative("momentum", momentum),
            eeta=arguments.positive("eeta", eeta),
            nesterov=arguments.boolean("nesterov", nesterov),
            classic_momentum=arguments.boolean("classic_momentum", classic_momentum))
        super().__init__(name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                         exclude_from_layer_adaptation, keras_kwargs)
        self.momentum = hyperparameters["momentum"]
        self.eeta = hyperparameters["eeta"]
        self.nesterov = hyperparameters["nesterov"]
        self.classic_momentum = hyperparameters["classic_momentum"]

    def _build_slots(self, var_list):
        self._velocities = self.add_optimizer_variables(var_list, "momentum")
        self._compiled_update = compiled_updates.LarsUpdate()

    def update_step(self, gradient, variable, learning_rate):
        i = self._get_variable_index(variable)
        decay, adapt = self._decisions[i]
        self._compiled_update(
            _tf_variable(variable), update_rules.dense_gradient(gradient, variable.shape),
            _tf_variable(self._velocities[i]), _tf_variable(self._trust_ratio_variables[i]),
            learning_rate, self.momentum, self.weight_decay_rate,
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
