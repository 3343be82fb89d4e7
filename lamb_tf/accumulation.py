"""Batch arithmetic and exact gradient accumulation: one optimizer step, k micro-batches.

    global batch = num_replicas x micro-batch (per replica) x accumulation steps k

`accumulate_gradients` is the core, a plain function usable from any custom training loop
(either Keras flavour): it runs a `tf.while_loop` over the k micro-batches of a batch,
computes each micro-batch's loss and the gradients of that loss divided by k, and sums them
in float32: their mean. (Differentiating loss / k, not dividing the sum, keeps a scaled
float16 backward pass at the size of the whole batch's, so it overflows no sooner.)
Only one micro-batch's activations are alive at a time (the loop body), so
peak memory does not grow with k.

`GradientAccumulationModel` wraps a tf_keras model for `compile` + `fit` (how the recipes
train). Its `train_step` calls `accumulate_gradients` on the per-replica batch and then
calls `optimizer.apply_gradients` once with the mean gradient, so per optimizer step:
  * gradients cross replicas once (the all-reduce inside `apply_gradients`);
  * `global_clipnorm` clips the accumulated, all-reduced gradient (tf_keras clips after
    aggregating, inside `apply_gradients`);
  * `optimizer.iterations`, LAMB's bias correction and the learning-rate schedule advance
    once. (Keras 3's `gradient_accumulation_steps` feeds the schedule micro-steps, which
    runs it k times too fast; the Keras 3 counterpart of this wrapper is
    `lamb_tf.keras3_accumulation.GradientAccumulationModel`.)

Exactness: the applied gradient is the gradient of the mean loss over the whole batch when
the loss is a mean over examples and all micro-batches have the same size (both hold
here: the split is exact). A loss normalised by the sum of its weights within each
micro-batch (e.g. masked-LM loss divided by the number of masked tokens in the micro-batch)
becomes the mean of the micro-batches' normalised losses instead.
"""
import dataclasses
import inspect
import math

import tensorflow as tf
import tf_keras

from lamb_tf import arguments
from lamb_tf import noise_scale as noise_scale_lib


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """How a global batch is split: `global = num_replicas x micro_batch x steps`."""

    global_batch_size: int
    num_replicas: int
    per_replica_batch_size: int  # examples each replica sees per optimizer step
    micro_batch_size: int  # examples per replica per forward/backward pass
    accumulation_steps: int  # k: micro-batches per optimizer step


# the shared check (lamb_tf/arguments.py), under the name `accumulate_gradients` calls
_check_positive_int = arguments.positive_int


def _divisors(n):
    """All divisors of the positive integer `n`, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def micro_batch_choices(batch_size, micro_batch_size):
    """The micro-batches nearest `micro_batch_size` that split `batch_size` (a replica's
    batch) evenly: its divisors at or next below and above, ascending."""
    divisors = _divisors(batch_size)
    below = [d for d in divisors if d <= micro_batch_size][-1:]
    above = [d for d in divisors if d >= micro_batch_size][:1]
    return sorted(set(below + above))


def _nearest_valid_choices(global_batch_size, micro_batch_size, num_replicas):
    """Human-readable nearest valid global batches and micro-batches."""
    unit = num_replicas * micro_batch_size
    lower = global_batch_size // unit * unit
    globals_ = [g for g in (lower, lower + unit) if g > 0]
    hints = [f"global_batch_size {' or '.join(map(str, globals_))}"]
    if global_batch_size % num_replicas == 0:
        per_replica = global_batch_size // num_replicas
        micros = micro_batch_choices(per_replica, micro_batch_size)
        hints.append(
            f"micro_batch_size {' or '.join(map(str, micros))} "
            f"(divisors of the per-replica batch {per_replica})"
        )
    return hints


def plan_batch(global_batch_size, micro_batch_size, num_replicas=1):
    """Split `global_batch_size` into replicas x micro-batches x accumulation steps.

    Args:
      global_batch_size: examples per optimizer step, over all replicas.
      micro_batch_size: examples per replica per forward/backward pass (what fits in
        one device's memory).
      num_replicas: replicas in sync (`strategy.num_replicas_in_sync`).

    Returns:
      A `BatchPlan`.

    Raises:
      ValueError: naming the three numbers and the nearest valid choices, when
        `global_batch_size` is not a multiple of `num_replicas * micro_batch_size`.
    """
    arguments.positive_int("global_batch_size", global_batch_size)
    arguments.positive_int("micro_batch_size", micro_batch_size)
    arguments.positive_int("num_replicas", num_replicas)
    if global_batch_size % (num_replicas * micro_batch_size):
        raise ValueError(
            f"global_batch_size={global_batch_size} is not divisible by num_replicas="
            f"{num_replicas} x micro_batch_size={micro_batch_size} "
            f"(= {num_replicas * micro_batch_size}); nearest valid choices: "
            + "; ".join(_nearest_valid_choices(global_batch_size, micro_batch_size, num_replicas))
        )
    per_replica = global_batch_size // num_replicas
    return BatchPlan(
        global_batch_size=global_batch_size,
        num_replicas=num_replicas,
        per_replica_batch_size=per_replica,
        micro_batch_size=micro_batch_size,
        accumulation_steps=per_replica // micro_batch_size,
    )


def split_into_micro_batches(batch, accumulation_steps):
    """Reshape every tensor of the nest `batch` from `[B, ...]` to `[k, B/k, ...]`.

    `None` entries (e.g. absent sample weights) stay `None`. The shapes stay static when
    `B` is static, as XLA/TPU needs; a static `B` not divisible by `k` is a `ValueError`.
    """

    def split(tensor):
        if tensor is None:
            return None
        if isinstance(tensor, (tf.RaggedTensor, tf.SparseTensor)):
            raise TypeError(
                f"gradient accumulation needs dense batch tensors, got {type(tensor).__name__}; "
                "pad the input pipeline's features to fixed shapes"
            )
        tensor = tf.convert_to_tensor(tensor)
        batch_size = tensor.shape[0]
        if batch_size is not None and batch_size % accumulation_steps:
            raise ValueError(
                f"the per-replica batch of {batch_size} examples is not divisible by "
                f"accumulation_steps={accumulation_steps}; see lamb_tf.accumulation.plan_batch"
            )
        checks = []
        if batch_size is None:  # known only when the step runs: fit's last, partial batch
            checks.append(tf.debugging.Assert(
                tf.equal(tf.shape(tensor)[0] % accumulation_steps, 0),
                ["gradient accumulation: a batch of", tf.shape(tensor)[0], "examples does not "
                 f"split into accumulation_steps={accumulation_steps} micro-batches; this is "
                 "usually an epoch's last, partial batch: batch the dataset with "
                 "drop_remainder=True, or give fit a number of examples its batch_size "
                 "divides"]))
        with tf.control_dependencies(checks):
            micro_batches = tf.reshape(
                tensor, tf.concat([[accumulation_steps, -1], tf.shape(tensor)[1:]], axis=0)
            )
        micro_size = None if batch_size is None else batch_size // accumulation_steps
        micro_batches.set_shape([accumulation_steps, micro_size] + tensor.shape[1:].as_list())
        return micro_batches

    return tf.nest.map_structure(split, batch)


def check_fit_arrays(fit, accumulation_steps, num_replicas, args, kwargs):
    """A ValueError before `fit(*args, **kwargs)` trains when its arrays leave a batch (the
    full one, or an epoch's last, partial one) that does not split into `num_replicas` x
    `accumulation_steps` micro-batches; with `validation_split`, of the examples Keras
    keeps for training (the first floor(n x (1 - split)), as both Keras flavours cut them).
    With `steps_per_epoch`, as both flavours run it: one pass over the arrays after another
    across the epochs, the partial batch last in each (met only if the run gets that far),
    and without `batch_size` batches of ceil(n / steps_per_epoch). Datasets and generators
    are left to the check each step makes (`split_into_micro_batches`)."""
    bound = inspect.signature(fit).bind(*args, **kwargs).arguments
    leaves = tf.nest.flatten(bound.get("x"))
    if (not leaves or not all(hasattr(leaf, "shape") and len(leaf.shape) for leaf in leaves)
            or leaves[0].shape[0] is None):
        return
    examples, divisor = int(leaves[0].shape[0]), accumulation_steps * num_replicas
    split = bound.get("validation_split") or 0
    holds = f"x holds {examples} examples"
    if split:
        examples = int(math.floor(examples * (1.0 - split)))
        holds += f", validation_split={split} leaves {examples} to train"
    steps_per_epoch = bound.get("steps_per_epoch")
    # Keras' default batch: 32, or with steps_per_epoch what covers x in that many steps
    batch_size = bound.get("batch_size") or (
        math.ceil(examples / steps_per_epoch) if steps_per_epoch else 32)
    full, last = min(batch_size, examples), examples % batch_size if examples > batch_size else 0
    if steps_per_epoch:
        steps = (bound.get("epochs", 1) - bound.get("initial_epoch", 0)) * steps_per_epoch
        if steps <= examples // batch_size:  # the run ends before the partial batch
            last = 0
        else:
            holds += (f" and steps_per_epoch={steps_per_epoch} runs {steps} steps, the passes "
                      f"over x one after another")
    whole = (f"give x[:{examples - last}] (whole batches only)" if not split else
             f"give x of whole batches and validation_data=(x_val, y_val) instead of "
             f"validation_split")
    fix = {"each": f"give a batch_size that {divisor} divides",
           "the only": f"give x a number of examples that {divisor} divides",
           "the last, partial": f"{whole}, or a tf.data.Dataset batched with "
                                "drop_remainder=True"}
    for which, size in (("each" if full == batch_size else "the only", full),
                        ("the last, partial", last)):
        if size % divisor:
            raise ValueError(
                f"fit: {holds}, so with batch_size={batch_size} {which} "
                f"batch has {size}, which does not split into {num_replicas} replica(s) x "
                f"accumulation_steps={accumulation_steps} micro-batches: {fix[which]}")


def accumulate_gradients(
    loss_fn, variables, batch, accumulation_steps, *, return_micro_batch_norm=False
):
    """Mean gradient and loss over `accumulation_steps` micro-batches of `batch`.

    Args:
      loss_fn: `loss_fn(micro_batch) -> scalar loss`, called inside the loop with the
        same nest structure as `batch` and `B/k` examples. It may have side effects
        (metric updates) that should happen once per micro-batch.
      variables: the variables to differentiate (e.g. `model.trainable_variables`).
      batch: a nest of dense tensors with leading dimension `B` (one replica's batch).
      accumulation_steps: k, a positive integer dividing `B`.
      return_micro_batch_norm: also return the mean, over the k micro-batches and over
        the replicas, of each micro-batch gradient's squared global norm: the small-batch
        term of the gradient noise scale (`lamb_tf.noise_scale`). It costs one squared
        norm per micro-batch and one scalar all-reduce per call.

    Returns:
      `(gradients, loss)`: a list aligned with `variables` holding the mean of the k
      micro-batch gradients (summed gradients of each micro-batch's loss / k), in each
      variable's dtype (`None` where the loss does not depend on the variable), and the mean
      micro-batch loss (float32). The sums are
      kept in float32 whatever the compute dtype. Sparse gradients (embedding lookups)
      are accumulated densely. With `return_micro_batch_norm`, a third value: that
      mean squared norm (float32, of the gradients of `loss_fn` as returned, e.g. of a
      scaled loss).

    Call `optimizer.apply_gradients` once with the result: under a `tf.distribute`
    strategy that is where the all-reduce happens, once per optimizer step.
    """
    _check_positive_int("accumulation_steps", accumulation_steps)
    variables = list(variables)
    if accumulation_steps == 1:  # one micro-batch: its gradient is the mean; no loop, no sums
        loss, gradients, squared_norm = _micro_batch_gradients(
            loss_fn, variables, batch, return_micro_batch_norm, 1)
        return _mean(gradients, variables, 1, loss, squared_norm, return_micro_batch_norm)
    micro_batches = split_into_micro_batches(batch, accumulation_steps)
    gradient_is_none = [False] * len(variables)  # filled in while the loop body is traced
    # The running sums are added in one XLA kernel, out of Grappler's reach: its arithmetic
    # optimizer would otherwise fold `sum + (a + b)` (a variable used twice, a loss of two
    # terms) into one AddN with the loop-carried sum as an input, which its memory optimizer
    # may turn into a TemporaryVariable that a second optimizer step inside the same
    # `tf.function` (Keras' steps_per_execution > 1) creates again: AlreadyExistsError.
    add_in_one_kernel = tf.function(_add_sums, jit_compile=True)

    def micro_step(i, loss_sum, gradient_sums, squared_norm_sum):
        micro_batch = tf.nest.map_structure(
            lambda t: None if t is None else t[i], micro_batches
        )  # the i-th micro-batch: B/k examples
        loss, gradients, squared_norm = _micro_batch_gradients(
            loss_fn, variables, micro_batch, return_micro_batch_norm, accumulation_steps)
        for index, gradient in enumerate(gradients):
            gradient_is_none[index] = gradient is None
        present = [gradient for gradient in gradients if gradient is not None]
        if return_micro_batch_norm:
            squared_norm_sum += squared_norm
        kept_sums = [s for s, none in zip(gradient_sums, gradient_is_none) if not none]
        loss_sum, kept_sums = add_in_one_kernel(loss_sum, tf.cast(loss, tf.float32),
                                                kept_sums, present)  # f32 sums
        kept_sums = iter(kept_sums)
        new_sums = [s if none else next(kept_sums)
                    for s, none in zip(gradient_sums, gradient_is_none)]
        return i + 1, loss_sum, new_sums, squared_norm_sum

    zeros = [tf.zeros(variable.shape, tf.float32) for variable in variables]
    _, loss_sum, gradient_sums, squared_norm_sum = tf.while_loop(
        lambda i, *_: i < accumulation_steps,
        micro_step,
        (tf.constant(0), tf.constant(0.0), zeros, tf.constant(0.0)),
        parallel_iterations=1,  # one micro-batch in flight: memory does not grow with k
        maximum_iterations=accumulation_steps,
    )
    gradient_sums = [None if none else s for none, s in zip(gradient_is_none, gradient_sums)]
    return _mean(gradient_sums, variables, accumulation_steps, loss_sum, squared_norm_sum,
                 return_micro_batch_norm)


def _micro_batch_gradients(loss_fn, variables, micro_batch, return_norm, accumulation_steps):
    """`(loss, [float32 gradient of loss / k or None], squared global norm of the gradient of
    loss, or 0)` of one micro-batch (k = `accumulation_steps`).

    The tape differentiates loss / k, so the k gradients add up to their mean: every tensor
    of the backward pass has the size it has for the whole batch's mean loss (a loss of
    `loss_fn`'s scaled by a LossScaleOptimizer reaches float16's limit no sooner than the
    whole batch's does), where differentiating the loss and dividing the sum by k would make
    them k times larger.
    """
    with tf.GradientTape() as tape:
        loss = loss_fn(micro_batch)  # mean loss over the micro-batch
        share = loss / accumulation_steps if accumulation_steps > 1 else loss
    gradients = [None if g is None else tf.cast(tf.convert_to_tensor(g), tf.float32)
                 for g in tape.gradient(share, variables)]  # this micro-batch's activations
    present = [g for g in gradients if g is not None]
    squared_norm = tf.constant(0.0)
    if return_norm and present:  # one op per gradient: sum(g^2) / 2, of loss_fn's gradient
        squared_norm = 2.0 * tf.add_n([tf.nn.l2_loss(g) for g in present])
        squared_norm *= float(accumulation_steps) ** 2
    return tf.cast(loss, tf.float32), gradients, squared_norm


def _mean(gradient_sums, variables, accumulation_steps, loss_sum, squared_norm_sum,
          return_micro_batch_norm):
    """`accumulate_gradients`' results from the float32 sums over the micro-batches (the
    gradients' sums are their mean already: each micro-batch's is of loss / k)."""
    mean_gradients = [None if mean is None else tf.cast(mean, variable.dtype)
                      for mean, variable in zip(gradient_sums, variables)]
    if not return_micro_batch_norm:
        return mean_gradients, loss_sum / accumulation_steps
    replica_context = tf.distribute.get_replica_context()
    if replica_context is None:
        raise RuntimeError(
            "accumulate_gradients(return_micro_batch_norm=True) needs a replica context: "
            "call it inside strategy.run"
        )
    micro_batch_norm = replica_context.all_reduce(
        tf.distribute.ReduceOp.MEAN, squared_norm_sum / accumulation_steps
    )  # the mean over every micro-batch of the step, one scalar across replicas
    return mean_gradients, loss_sum / accumulation_steps, micro_batch_norm


def _add_sums(loss_sum, loss, gradient_sums, gradients):
    """`(loss_sum + loss, [s + g, ...])`: element-wise float32 additions, nothing else."""
    return loss_sum + loss, [s + g for s, g in zip(gradient_sums, gradients)]


# `fit` logs (progress bar, TensorBoard batch scalars): the global norm of the applied gradient,
# after accumulation and the all-reduce, before clipping.
GRADIENT_NORM_LOG = "global_gradient_norm"


@tf_keras.saving.register_keras_serializable(package="lamb_tf")
class GradientAccumulationModel(tf_keras.Model):
    """A tf_keras model that takes one optimizer step per k micro-batches.

    `GradientAccumulationModel(model, accumulation_steps)` trains `model`'s weights (they
    are this model's weights) with `compile` + `fit` as usual; `fit`'s batch is the global
    batch, each replica's share is split into `accumulation_steps` micro-batches. Compiled
    loss (with regularization losses) and compiled metrics are computed per micro-batch;
    the gradient is averaged in float32 and applied once. With a `LossScaleOptimizer`
    (float16) every micro-batch loss is scaled and the mean gradient unscaled once, so a
    non-finite micro-batch makes the whole step skipped. Checkpoint it with
    `tf.train.Checkpoint(model=wrapper, optimizer=...)`; the inner model's variables live
    under `inner_model`.

    Batch statistics (BatchNorm) are per micro-batch and per replica: the normalisation
    uses the micro-batch's statistics and the moving averages are updated k times per
    optimizer step.

    When a step has more than one micro-batch (k x replicas > 1), `fit` also logs
    `gradient_noise_scale`: McCandlish et al.'s simple noise scale B_simple (in examples),
    from the micro-batch and global-batch gradients, averaged with decay
    `noise_scale_decay` (`lamb_tf.noise_scale`; the averages are checkpointed with the
    model). `noise_scale_decay=None` turns the measurement off.
    """

    def __init__(self, model, accumulation_steps, noise_scale_decay=0.95, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(model, tf_keras.Model):
            raise TypeError(f"model must be a tf_keras.Model, got {type(model).__module__}."
                            f"{type(model).__name__}; for a Keras 3 model use "
                            "lamb_tf.keras3_accumulation.GradientAccumulationModel")
        arguments.positive_int("accumulation_steps", accumulation_steps)
        self.inner_model = model
        self.accumulation_steps = accumulation_steps
        self.noise_scale_decay = noise_scale_decay
        noise_scale = None
        if noise_scale_decay is not None:
            # In checkpoints (a resumed run continues the averages) but not in `weights`,
            # which stay the inner model's: set without Keras' tracking, tracked by name.
            noise_scale = noise_scale_lib.GradientNoiseScale(
                arguments.beta("noise_scale_decay", noise_scale_decay))
            self._track_trackable(noise_scale, name="gradient_noise_scale")
        object.__setattr__(self, "noise_scale", noise_scale)
        # `fit` reduces train_step outputs over replicas by SUM ("auto" off TPU); metric results
        # arrive already reduced, and the gradient norm is the same on every replica (it is
        # taken after the all-reduce), so the first replica's value is the right one.
        self.distribute_reduction_method = "first"

    def call(self, inputs, training=None):
        return self.inner_model(inputs, training=training)

    def fit(self, *args, **kwargs):
        check_fit_arrays(super().fit, self.accumulation_steps,
                         self.distribute_strategy.num_replicas_in_sync, args, kwargs)
        return super().fit(*args, **kwargs)

    def train_step(self, data):
        x, y, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
        optimizer = self.optimizer
        loss_scaled = isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)

        def micro_batch_loss(micro_batch):
            micro_x, micro_y, micro_sample_weight = micro_batch
            y_pred = self(micro_x, training=True)
            loss = self.compute_loss(micro_x, micro_y, y_pred, micro_sample_weight)
            # Only update the metrics here: reading their results (what `compute_metrics`
            # also does) is a cross-replica merge, which cannot run inside the loop.
            self.compiled_metrics.update_state(micro_y, y_pred, micro_sample_weight)
            return optimizer.get_scaled_loss(loss) if loss_scaled else loss

        variables = self.trainable_variables
        num_replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        measure_noise = (
            self.noise_scale is not None and self.accumulation_steps * num_replicas > 1
        )
        gradients, _, *micro_batch_norm = accumulate_gradients(
            micro_batch_loss,
            variables,
            (x, y, sample_weight),
            self.accumulation_steps,
            return_micro_batch_norm=measure_noise,
        )
        # compute_loss divides by the replicas (the all-reduce below is a SUM), and a
        # LossScaleOptimizer multiplies by the loss scale: undo both in the squared norm
        norm_scale = float(num_replicas) ** 2
        if loss_scaled:
            gradients = optimizer.get_unscaled_gradients(gradients)
            norm_scale /= tf.square(optimizer.loss_scale)
        micro_batch_norm = [norm * norm_scale for norm in micro_batch_norm]
        grads_and_vars = [(g, v) for g, v in zip(gradients, variables) if g is not None]
        # the all-reduce, once per optimizer step (the optimizer's own, done here so that the
        # global norm of the applied gradient can be reported)
        inner_optimizer = optimizer.inner_optimizer if loss_scaled else optimizer
        legacy = isinstance(inner_optimizer, tf_keras.optimizers.legacy.Optimizer)
        if legacy:  # OptimizerV2 (Model Garden's default) names it privately, with its hooks
            grads_and_vars = inner_optimizer._aggregate_gradients(grads_and_vars)
        else:
            grads_and_vars = inner_optimizer.aggregate_gradients(grads_and_vars)
        gradient_norm = tf.linalg.global_norm([g for g, _ in grads_and_vars])  # before clipping
        # global clipping (on the all-reduced gradient), one update
        optimizer.apply_gradients(grads_and_vars, **(
            {"experimental_aggregate_gradients": False} if legacy
            else {"skip_gradients_aggregation": True}))
        logs = self.get_metrics_result()
        logs[GRADIENT_NORM_LOG] = gradient_norm
        if measure_noise:
            per_replica_batch = tf.shape(tf.nest.flatten(x)[0])[0]
            logs[noise_scale_lib.NOISE_SCALE_LOG] = self.noise_scale.update(
                micro_batch_norm[0],
                tf.square(gradient_norm),
                small_batch=per_replica_batch // self.accumulation_steps,
                big_batch=per_replica_batch * num_replicas,
            )
        return logs

    def get_config(self):
        return {
            "model": tf_keras.saving.serialize_keras_object(self.inner_model),
            "accumulation_steps": self.accumulation_steps,
            "noise_scale_decay": self.noise_scale_decay,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        model = tf_keras.saving.deserialize_keras_object(
            config["model"], custom_objects=custom_objects
        )
        return cls(
            model, config["accumulation_steps"], config.get("noise_scale_decay", 0.95)
        )
