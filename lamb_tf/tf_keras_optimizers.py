"""LAMB and LARS as `tf_keras.optimizers.Optimizer` subclasses (the flavour of Model Garden).

Base-class glue only: the arguments and `get_config` are `lamb_tf.hyperparameters` and
`lamb_tf.layerwise`, the maths `lamb_tf.update_rules`,
run per variable through `lamb_tf.compiled_updates` (one XLA kernel per variable,
assigned in place). The base class all-reduces
gradients across replicas (`aggregate_gradients`), then clips (`clipnorm`/`global_clipnorm`,
so clipping sees the all-reduced gradient), then calls `update_step` per variable. The
bias-correction step is `t = applied_updates + 1`, counted in our own variable: tf_keras'
`LossScaleOptimizer` also advances `iterations` on the steps it skips (non-finite
gradients), which never reach LAMB.

Importing this module registers `LAMB` and `LARS` with tf_keras' serialization as
`lamb_tf>LAMB` / `lamb_tf>LARS` (`import lamb_tf` does), so `tf_keras.optimizers.get`,
`deserialize` and `load_model` find them without `custom_objects`.
"""
import tensorflow as tf
import tf_keras

from lamb_tf import arguments
from lamb_tf import compiled_updates
from lamb_tf import hyperparameters
from lamb_tf import layerwise
from lamb_tf import schedules


class _LayerwiseOptimizer(layerwise.LayerwiseMixin, tf_keras.optimizers.Optimizer):
    """What LAMB and LARS share as tf_keras optimizers: base init, build, learning rate."""

    _SCHEDULE_CLASS = tf_keras.optimizers.schedules.LearningRateSchedule
    _VARIABLE_CLASSES = (tf.Variable,)
    _variable_path = staticmethod(layerwise.name_without_suffix)
    # (`is_legacy_optimizer`: of its configs, which the base class drops)
    _BASE_KEYWORDS = arguments.keyword_names(tf_keras.optimizers.Optimizer) + (
        "is_legacy_optimizer",)
    _KERAS3_ONLY_KEYWORDS = {
        "gradient_accumulation_steps": "accumulate with lamb_tf.accumulation."
                                       "GradientAccumulationModel (docs/large_batch.md)",
        "loss_scale_factor": "scale the loss with tf_keras.mixed_precision.LossScaleOptimizer",
    }

    def __init__(self, name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                 exclude_from_layer_adaptation, keras_kwargs):
        learning_rate, keras_kwargs, checked = self._check_layerwise_arguments(
            name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
            exclude_from_layer_adaptation, keras_kwargs)
        super().__init__(name=name, weight_decay=None, **keras_kwargs)
        # the caller's jit_compile: the base keeps True only where a GPU is, and False stops
        # our per-variable XLA kernels too (`compiled_updates`)
        self._jit_compile_argument = bool(keras_kwargs.get("jit_compile", True))
        self._set_checked(checked)
        self._learning_rate = self._build_learning_rate(learning_rate)

    def _build_learning_rate(self, learning_rate):
        # a variable or a callable is kept and read at every step (the base would copy its
        # value once); numbers and schedules as the base does
        if isinstance(learning_rate, tf.Variable) or (
                callable(learning_rate) and not isinstance(learning_rate, self._SCHEDULE_CLASS)):
            return learning_rate
        return super()._build_learning_rate(learning_rate)

    @property
    def learning_rate(self):
        rate = tf_keras.optimizers.Optimizer.learning_rate.fget(self)
        if self._is_plain_callable(rate):
            # a zero-argument callable, evaluated at every step; a tensor, as the base's
            # variable reads, for what reads it with `backend.get_value`
            return tf.convert_to_tensor(rate())
        return rate

    @learning_rate.setter
    def learning_rate(self, value):
        if self._is_plain_callable(getattr(self, "_learning_rate", None)):
            raise TypeError(
                f"{self.name}'s learning rate is a callable, called at every step, so it cannot "
                f"be set to {value!r}: change what the callable returns, or build the optimizer "
                "with a number or a tf.Variable (what Keras' learning-rate callbacks set)")
        value = arguments.learning_rate(value, self._SCHEDULE_CLASS, self._VARIABLE_CLASSES)
        tf_keras.optimizers.Optimizer.learning_rate.fset(self, value)

    def _is_plain_callable(self, rate):
        return callable(rate) and not isinstance(rate, (tf.Variable, self._SCHEDULE_CLASS))

    # Model Garden's `ExponentialMovingAverage` (its optimizer factory's `ema` config) reads
    # and sets the wrapped optimizer's rate through the legacy optimizers' accessors.
    def _get_hyper(self, name):
        if name != "learning_rate":
            raise AttributeError(f"{self.name} has no legacy hyperparameter {name!r}")
        return self.learning_rate

    def _set_hyper(self, name, value):
        if name != "learning_rate":
            raise AttributeError(f"{self.name} has no legacy hyperparameter {name!r}")
        self.learning_rate = value

    def get_config(self):
        config = super().get_config()
        # as tf_keras' own optimizers: a float32 number, the schedule's dict, or the
        # callable's current value
        config["learning_rate"] = self._serialize_hyperparameter(self._learning_rate)
        config["jit_compile"] = self._jit_compile_argument  # not False for want of a GPU
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        # tf_keras' `.h5` loader looks a schedule up by its bare class name, not the name it
        # is registered under (`lamb_tf>...`): ours are offered by that name
        custom_objects = {**schedules.TF_KERAS_CUSTOM_OBJECTS, **(custom_objects or {})}
        return super().from_config(config, custom_objects=custom_objects)

    def build(self, var_list):
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self._built = True
        self._applied_updates = self.add_variable(shape=[], dtype=tf.int64, name="applied_updates")
        self._trust_ratio_variables = [
            self.add_variable_from_reference(v, "trust_ratio", shape=[]) for v in var_list]
        self._build_slots(var_list)
        self._decide([(self._variable_path(v), tuple(v.shape)) for v in var_list], var_list)

    def _build_slots(self, var_list):
        raise NotImplementedError

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        # sparse gradients made dense before the base class clips them (`_dense_gradients`)
        grads_and_vars = list(grads_and_vars)
        if grads_and_vars:
            grads, variables = zip(*grads_and_vars)
            grads_and_vars = list(zip(self._dense_gradients(grads, variables), variables))
        return super().apply_gradients(grads_and_vars, *args, **kwargs)

    def _update_step(self, gradient, variable):
        # the base's KeyError points to a legacy `tf.keras.optimizers.legacy.<name>`, which
        # lamb_tf does not have; the slots cannot grow: a checkpoint names them by position
        if (getattr(variable, "_unique_id", None) is not None
                and self._var_key(variable) not in self._index_dict):
            raise KeyError(
                f"{self.name} was built for the {len(self._index_dict)} variables of its first "
                f"update and cannot update {self._variable_path(variable)}, which was not among "
                "them (a layer made trainable or added since?): its slots are saved by their "
                "place in one list and cannot grow. Build it with every variable it will "
                "train before its first step (optimizer.build(model.trainable_variables) "
                "while every layer is trainable), or compile with a new optimizer.")
        return super()._update_step(gradient, variable)

    @property
    def applied_updates(self):
        """Updates applied so far (skipped loss-scale steps excluded); LAMB's `t` is this + 1."""
        if not hasattr(self, "_applied_updates"):  # not built yet: nothing applied
            return tf.constant(0, tf.int64)
        return self._applied_updates

    def _distributed_apply_gradients_fn(self, distribution, grads_and_vars, **kwargs):
        iteration = super()._distributed_apply_gradients_fn(distribution, grads_and_vars, **kwargs)
        # counted once per applied update, after every variable's update_step has read it
        self._applied_updates.assign_add(1)
        return iteration

    def _prepare(self, gradient, variable):
        """(index, dense gradient in the variable's dtype), as the built-in optimizers cast."""
        return (self._index_dict[self._var_key(variable)],
                layerwise.dense_gradient_for(gradient, variable, self._variable_path))


@tf_keras.saving.register_keras_serializable(package="lamb_tf")
class LAMB(hyperparameters.LambArguments, _LayerwiseOptimizer):
    __doc__ = hyperparameters.LambArguments.__doc__.replace(
        "\n", "\n\n    tf_keras flavour (`tf_keras.optimizers.Optimizer`).\n", 1)

    def _build_slots(self, var_list):
        self._m = [self.add_variable_from_reference(v, "m") for v in var_list]
        self._v = [self.add_variable_from_reference(v, "v") for v in var_list]
        self._compiled_update = compiled_updates.LambUpdate(compiled=self._jit_compile_argument)

    def update_step(self, gradient, variable):
        i, gradient = self._prepare(gradient, variable)
        decay, adapt = self._decisions[i]
        # a variable read, a callable called, a number as it is (`hyperparameters.read_now`)
        beta_1, beta_2, weight_decay_rate = self._now("beta_1", "beta_2", "weight_decay_rate")
        self._compiled_update(
            variable, gradient, self._m[i], self._v[i], self._trust_ratio_variables[i],
            self._applied_updates + 1, self.learning_rate,
            beta_1, beta_2, self.epsilon, weight_decay_rate,
            decay, adapt, self.bias_correction, self.phi_bounds)


@tf_keras.saving.register_keras_serializable(package="lamb_tf")
class LARS(hyperparameters.LarsArguments, _LayerwiseOptimizer):
    __doc__ = hyperparameters.LarsArguments.__doc__.replace(
        "\n", "\n\n    tf_keras flavour (`tf_keras.optimizers.Optimizer`).\n", 1)

    def _build_slots(self, var_list):
        self._velocities = [self.add_variable_from_reference(v, "momentum") for v in var_list]
        self._compiled_update = compiled_updates.LarsUpdate(compiled=self._jit_compile_argument)

    def update_step(self, gradient, variable):
        i, gradient = self._prepare(gradient, variable)
        decay, adapt = self._decisions[i]
        momentum, weight_decay_rate, eeta = self._now("momentum", "weight_decay_rate", "eeta")
        self._compiled_update(
            variable, gradient, self._velocities[i], self._trust_ratio_variables[i],
            self.learning_rate, momentum, weight_decay_rate,
            eeta, self.nesterov, self.classic_momentum, decay, adapt)
