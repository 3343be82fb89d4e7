"""Exact gradient accumulation through `compile` + `fit` for Keras 3 (TensorFlow backend).

The Keras 3 counterpart of `lamb_tf.accumulation.GradientAccumulationModel`, over the same
`lamb_tf.accumulation.accumulate_gradients` loop: `fit`'s batch is the global batch, each
replica's share is split into k micro-batches inside one `tf.while_loop`, the gradients are
summed in float32, and `optimizer.apply_gradients` runs once with their mean. So per global
batch there is one optimizer update, one cross-replica all-reduce (inside
`apply_gradients`), one clipping of the all-reduced gradient (lamb_tf's optimizers; Keras'
own clip per replica) and one step of the learning-rate schedule and of `iterations`.

Keras 3's own `Optimizer(gradient_accumulation_steps=k)` also updates once per k calls,
but `fit` still calls the optimizer per micro-batch: the schedule is evaluated at the
micro-batch counter (it runs k times too fast), and every micro-batch is a separate
`fit` step with its own all-reduce. docs/large_batch.md has the two side by side.
"""
import keras
import tensorflow as tf

from lamb_tf import accumulation
from lamb_tf import arguments


def _non_finite_on_every_replica(gradients):
    """`gradients`, made NaN on every replica when any replica's are not finite.

    Keras 3's LossScaleOptimizer decides whether to skip a step from one replica's gradients,
    before the all-reduce: a non-finite gradient on another replica would be applied (the
    weights become NaN). With every replica's non-finite, the step is skipped on all.
    """
    context = tf.distribute.get_replica_context()
    present = [g for g in gradients if g is not None]
    if context is None or context.num_replicas_in_sync == 1 or not present:
        return gradients
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in present])
    # the number of replicas with a non-finite gradient (ReduceOp has no MIN)
    non_finite = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                    1.0 - tf.cast(finite, tf.float32))
    poison = tf.where(non_finite > 0, float("nan"), 0.0)
    return [None if g is None else g + tf.cast(poison, g.dtype) for g in gradients]


@keras.saving.register_keras_serializable(package="lamb_tf")
class GradientAccumulationModel(keras.Model):
    """A Keras 3 model that takes one optimizer step per k micro-batches.

    `GradientAccumulationModel(model, accumulation_steps)` trains `model`'s weights (they are
    this model's weights) with `compile` + `fit`. The compiled loss (with the model's added
    losses) and the compiled metrics are computed per micro-batch; the gradient is averaged
    in float32 and applied once. Under a `LossScaleOptimizer` every micro-batch loss is
    scaled and the optimizer unscales the mean gradient once (a non-finite micro-batch skips
    the whole step, on every replica: see `_non_finite_on_every_replica`). Do not also set
    the optimizer's `gradient_accumulation_steps`.

    Batch statistics (BatchNorm) are per micro-batch and per replica, as in the tf_keras
    wrapper.
    """

    def __init__(self, model, accumulation_steps, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(model, keras.Model):
            raise TypeError(f"model must be a keras.Model (Keras 3), got {type(model).__name__}; "
                            "for a tf_keras model use lamb_tf.accumulation.GradientAccumulationModel")
        self.inner_model = model
        self.accumulation_steps = arguments.positive_int("accumulation_steps", accumulation_steps)

    def call(self, inputs, training=None):
        return self.inner_model(inputs, training=training)

    def fit(self, *args, **kwargs):
        accumulation.check_fit_arrays(super().fit, self.accumulation_steps,
                                      self.distribute_strategy.num_replicas_in_sync, args, kwargs)
        return super().fit(*args, **kwargs)

    def train_step(self, data):
        optimizer = self.optimizer
        if getattr(optimizer, "gradient_accumulation_steps", None):
            raise ValueError(
                f"the optimizer has gradient_accumulation_steps={optimizer.gradient_accumulation_steps}"
                f" and GradientAccumulationModel already accumulates {self.accumulation_steps} "
                "micro-batches: leave the optimizer's unset.")
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        replicas = tf.distribute.get_strategy().num_replicas_in_sync

        def micro_batch_loss(micro_batch):
            micro_x, micro_y, micro_sample_weight = micro_batch
            y_pred = self(micro_x, training=True)
            # divided by the replicas, so that the all-reduced sum is the global mean
            loss = self.compute_loss(micro_x, micro_y, y_pred, micro_sample_weight, training=True)
            examples = tf.shape(tf.nest.flatten(micro_x)[0])[0]
            for metric in self.metrics:  # Keras' documented custom train_step pattern
                if metric.name == "loss":
                    metric.update_state(loss * replicas, sample_weight=examples)
            # only updates here; the results are read once, after the loop
            self.compute_metrics(micro_x, micro_y, y_pred, sample_weight=micro_sample_weight)
            return optimizer.scale_loss(loss)

        variables = self.trainable_variables
        gradients, _ = accumulation.accumulate_gradients(
            micro_batch_loss, variables, (x, y, sample_weight), self.accumulation_steps)
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            gradients = _non_finite_on_every_replica(gradients)
        optimizer.apply_gradients([(g, v) for g, v in zip(gradients, variables) if g is not None])
        return self.get_metrics_result()

    def get_config(self):
        return {"model": keras.saving.serialize_keras_object(self.inner_model),
                "accumulation_steps": self.accumulation_steps}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        model = keras.saving.deserialize_keras_object(config["model"], custom_objects=custom_objects)
        return cls(model, config["accumulation_steps"])
