"""LAMB and LARS as `keras.optimizers.Optimizer` subclasses (Keras 3, TensorFlow backend).

Base-class glue only, like `lamb_tf.tf_keras_optimizers`. One fix to the base class:
Keras 3's TensorFlow backend clips gradients (`clipnorm`, `clipvalue`, `global_clipnorm`)
in each replica *before* the cross-replica all-reduce, so under a distribution strategy the
global norm is that of one replica's gradient. These classes clip after the all-reduce
instead, as tf_keras does: the clipped gradient is the same as on one device with the same
global batch. With one replica the two orders agree, and the base's `_clip_gradients`
clips as Keras' own optimizers do.

Importing this module registers `LAMB` and `LARS` with Keras 3's serialization as
`lamb_tf>LAMB` / `lamb_tf>LARS` (`import lamb_tf` does), so `keras.optimizers.get`,
`deserialize`, `load_model` and `pickle` find them without `custom_objects`.
"""
import keras
import tensorflow as tf

from lamb_tf import arguments
from lamb_tf import compiled_updates
from lamb_tf import exclusions
from lamb_tf import hyperparameters
from lamb_tf import layerwise


def variable_path(variable):
    """A Keras variable's `path`; a plain tf.Variable has none: its name without `:0`."""
    path = getattr(variable, "path", None)
    return path if path is not None else layerwise.name_without_suffix(variable)


def _tf_variable(variable):
    """The tf.Variable behind a Keras variable (the base class passes either to update_step),
    for `lamb_tf.compiled_updates` to assign in place."""
    return variable.value if isinstance(variable, keras.Variable) else variable


class _LayerwiseOptimizer(layerwise.LayerwiseMixin, keras.optimizers.Optimizer):
    """What LAMB and LARS share as Keras 3 optimizers: base init, build, clipping."""

    _SCHEDULE_CLASS = keras.optimizers.schedules.LearningRateSchedule
    _VARIABLE_CLASSES = (tf.Variable, keras.Variable)
    _variable_path = staticmethod(variable_path)
    _BASE_KEYWORDS = arguments.keyword_names(keras.optimizers.Optimizer)
    _UNKNOWN_KEYWORD_ERROR = ValueError  # as Keras 3's base class

    def __init__(self, name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
                 exclude_from_layer_adaptation, keras_kwargs):
        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(f"lamb_tf's {name} needs Keras' TensorFlow backend, "
                               f"not {keras.backend.backend()!r}: set KERAS_BACKEND=tensorflow.")
        learning_rate, keras_kwargs, checked = self._check_layerwise_arguments(
            name, learning_rate, weight_decay_rate, exclude_from_weight_decay,
            exclude_from_layer_adaptation, keras_kwargs)
        variable = learning_rate if isinstance(learning_rate, self._VARIABLE_CLASSES) else None
        # not an attribute Keras tracks: the user's variable is not in `variables`...
        object.__setattr__(self, "_learning_rate_variable", variable)
        if variable is not None:
            # The base keeps a learning-rate variable of its own, as for a number, so that the
            # optimizer's variables are those of the optimizer `from_config` rebuilds and a
            # saved one loads into it; every step copies the user's variable into it.
            learning_rate = float(tf.convert_to_tensor(variable).numpy())
        super().__init__(learning_rate=learning_rate, name=name, weight_decay=None, **keras_kwargs)
        if variable is not None:
            # ...but a checkpoint holds it, as tf_keras' does: restoring a run puts the
            # saved rate (after ReduceLROnPlateau, say) back into the user's variable
            self._track_trackable(variable, name="learning_rate_variable")
        self._set_checked(checked)

    def _var_list_pattern(self, variable):
        # a Keras variable's path, the models' names in front of its layer optional: the
        # pattern has to match after a `.keras` reload too, which leaves them out
        keras_path = getattr(variable, "path", None) is not None
        return exclusions.path_pattern(self._variable_path(variable),
                                       optional_leading_parts=keras_path)

    def _get_current_learning_rate(self):
        if self._learning_rate_variable is None:
            return super()._get_current_learning_rate()
        # the user's variable, read at every step (the base's variable is only its copy)
        self._learning_rate.assign(tf.cast(self._learning_rate_variable, self._learning_rate.dtype))
        return self._learning_rate

    def save_own_variables(self, store):
        if self._learning_rate_variable is not None:
            self._get_current_learning_rate()  # a `.keras` file holds the rate as it is now
        super().save_own_variables(store)

    @property
    def learning_rate(self):
        if self._learning_rate_variable is not None:
            # that variable, so that `learning_rate.assign(x)` sets the rate (an assignment
            # to the base's copy would be undone by the next step's copy)
            return self._learning_rate_variable
        return self._get_current_learning_rate()

    @learning_rate.setter
    def learning_rate(self, value):
        # with the user's variable: a number is assigned to it (what Keras' learning-rate
        # callbacks do), a schedule or a callable replaces it as in the base class
        value = arguments.learning_rate(value, self._SCHEDULE_CLASS, self._VARIABLE_CLASSES)
        if self._learning_rate_variable is not None:
            if callable(value):
                object.__setattr__(self, "_learning_rate_variable", None)
            else:
                self._learning_rate_variable.assign(value)
        keras.optimizers.Optimizer.learning_rate.fset(self, value)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        paths = [self._variable_path(v) for v in var_list]
        self._trust_ratio_variables = [
            self.add_variable(shape=(), dtype=v.dtype, name=f"{path.replace('/', '_')}_trust_ratio")
            for v, path in zip(var_list, paths)]
        self._build_slots(var_list)
        unnamed = [path for v, path in zip(var_list, paths) if getattr(v, "path", None) is None]
        if unnamed:
            exclusions.logger.info(
                "%s: %d variables are plain tf.Variables without a Keras path; their exclusion "
                "patterns are searched in the variable name instead (e.g. %r).",
                self.name, len(unnamed), unnamed[0])
        self._decide(list(zip(paths, [tuple(v.shape) for v in var_list])), var_list)

    def _build_slots(self, var_list):
        raise NotImplementedError

    @property
    def applied_updates(self):
        """Updates applied so far: Keras 3 advances `iterations` only on applied updates
        (its LossScaleOptimizer does not on skipped steps; with `gradient_accumulation_steps`
        it is `_iterations // steps`, the number of real updates). LAMB's `t` is this + 1."""
        return self.iterations

    @staticmethod
    def _all_reduce_follows():
        """Whether gradients are still per replica (a replica context of 2+ replicas)."""
        context = tf.distribute.get_replica_context()
        return context is not None and context.num_replicas_in_sync > 1

    def apply(self, grads, trainable_variables=None):
        # sparse gradients made dense before the base class clips them (`_dense_gradients`)
        if trainable_variables is not None:  # (an iterator is read once)
            trainable_variables = list(trainable_variables)
        variables = trainable_variables
        if variables is None and self.built:
            variables = self._trainable_variables  # the base pairs `grads` with these
        if variables is not None:
            grads = self._dense_gradients(grads, variables)
        return super().apply(grads, trainable_variables)

    def _clip_gradients(self, grads):
        # per replica, the base would clip before the all-reduce: defer to
        # `_all_reduce_sum_gradients`; with one replica the two orders are the same
        if self._all_reduce_follows():
            return grads
        return super()._clip_gradients(grads)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # all-reduce first (TF backend), then clip the summed gradient with the base's rule
        deferred = self._all_reduce_follows()
        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
        if not deferred:
            return grads_and_vars
        grads = super()._clip_gradients([g for g, _ in grads_and_vars])
        return list(zip(grads, [v for _, v in grads_and_vars]))

    def _prepare(self, gradient, variable):
        """(index, dense gradient in the variable's dtype), as the built-in optimizers cast."""
        return (self._get_variable_index(variable),
                layerwise.dense_gradient_for(gradient, variable, self._variable_path))

    def get_config(self):
        config = super().get_config()
        if self._learning_rate_variable is not None:
            config["learning_rate"] = float(self._learning_rate_variable.numpy())
        return config


@keras.saving.register_keras_serializable(package="lamb_tf")
class LAMB(hyperparameters.LambArguments, _LayerwiseOptimizer):
    __doc__ = hyperparameters.LambArguments.__doc__.replace(
        "\n", "\n\n    Keras 3 flavour (`keras.optimizers.Optimizer`, TensorFlow backend).\n", 1)

    def _build_slots(self, var_list):
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])
        self._compiled_update = compiled_updates.LambUpdate()

    def update_step(self, gradient, variable, learning_rate):
        i, gradient = self._prepare(gradient, variable)
        decay, adapt = self._decisions[i]
        # a variable read, a callable called, a number as it is (`hyperparameters.read_now`)
        beta_1, beta_2, weight_decay_rate = self._now("beta_1", "beta_2", "weight_decay_rate")
        self._compiled_update(
            _tf_variable(variable), gradient, _tf_variable(self._m[i]),
            _tf_variable(self._v[i]), _tf_variable(self._trust_ratio_variables[i]),
            self.applied_updates + 1, learning_rate,
            beta_1, beta_2, self.epsilon, weight_decay_rate,
            decay, adapt, self.bias_correction, self.phi_bounds)


@keras.saving.register_keras_serializable(package="lamb_tf")
class LARS(hyperparameters.LarsArguments, _LayerwiseOptimizer):
    __doc__ = hyperparameters.LarsArguments.__doc__.replace(
        "\n", "\n\n    Keras 3 flavour (`keras.optimizers.Optimizer`, TensorFlow backend).\n", 1)

    def _build_slots(self, var_list):
        self._velocities = self.add_optimizer_variables(var_list, "momentum")
        self._compiled_update = compiled_updates.LarsUpdate()

    def update_step(self, gradient, variable, learning_rate):
        i, gradient = self._prepare(gradient, variable)
        decay, adapt = self._decisions[i]
        momentum, weight_decay_rate, eeta = self._now("momentum", "weight_decay_rate", "eeta")
        self._compiled_update(
            _tf_variable(variable), gradient, _tf_variable(self._velocities[i]),
            _tf_variable(self._trust_ratio_variables[i]),
            learning_rate, momentum, weight_decay_rate,
            eeta, self.nesterov, self.classic_momentum, decay, adapt)
