"""The gradient noise scale of McCandlish et al., "An Empirical Model of Large-Batch Training"
(arXiv 1812.06162), measured from the gradients accumulation already computes.

With `n` examples per gradient, the expected squared norm of a mini-batch gradient is

    E |G_n|^2 = |G|^2 + tr(Sigma) / n

(G the true gradient, Sigma the per-example gradient covariance). Two batch sizes give two
equations, and appendix A's unbiased estimators:

    |G|^2     ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)

Under gradient accumulation, B_small is the micro-batch (each replica's per-pass batch;
|G_small|^2 is the mean squared norm of all micro-batch gradients of the step) and B_big is
the global batch (|G_big|^2 is the squared norm of the all-reduced mean gradient). The
simple noise scale B_simple = tr(Sigma) / |G|^2 is the batch size beyond which a larger
batch buys little per example; both estimators are noisy, so, as the paper recommends
(appendix A.1), each is smoothed by an exponential moving average and the ratio is taken of
the averages. (Both averages start at 0 and share the decay, so their bias corrections
cancel in the ratio.)
"""
import math

import tensorflow as tf

from lamb_tf import arguments

# `fit` logs (progress bar, TensorBoard): the EMA-smoothed simple noise scale, in examples.
NOISE_SCALE_LOG = "gradient_noise_scale"


def is_measured(estimate):
    """Whether a logged estimate (a float) is a noise scale: not while it is negative (or 0,
    or not finite), which it is while |G|^2 or tr(Sigma) is still below its noise."""
    return math.isfinite(estimate) and estimate > 0


def unbiased_estimates(small_squared_norm, big_squared_norm, small_batch, big_batch):
    """`(|G|^2, tr(Sigma))` estimated from one step (arXiv 1812.06162, eqs. A.2 and A.3).

    Args:
      small_squared_norm: mean over the small-batch gradients of their squared norms.
      big_squared_norm: squared norm of the big-batch (mean) gradient.
      small_batch, big_batch: examples per small and big gradient (`big_batch > small_batch`;
        numbers or integer tensors).
    """
    static = all(isinstance(size, (int, float)) for size in (small_batch, big_batch))
    if static and not big_batch > small_batch:
        raise ValueError(
            f"the noise scale needs two batch sizes: got big_batch={big_batch}, "
            f"small_batch={small_batch} (one replica and one micro-batch per step)"
        )
    small_squared_norm = tf.cast(small_squared_norm, tf.float32)
    big_squared_norm = tf.cast(big_squared_norm, tf.float32)
    small_batch = tf.cast(small_batch, tf.float32)
    big_batch = tf.cast(big_batch, tf.float32)
    gradient_squared = (big_batch * big_squared_norm - small_batch * small_squared_norm) / (
        big_batch - small_batch
    )
    trace = (small_squared_norm - big_squared_norm) / (1.0 / small_batch - 1.0 / big_batch)
    return gradient_squared, trace


class GradientNoiseScale(tf.Module):
    """Exponential moving averages of the two estimators and their ratio, B_simple.

    Create it in the strategy scope (its variables are the same on every replica; update it
    in replica context with values that are, e.g. after the all-reduce), then once per
    optimizer step:

        noise_scale.update(small_squared_norm, big_squared_norm, micro_batch, global_batch)

    `update` returns the current B_simple. A step with a non-finite input (a float16 step
    the loss scale skips) leaves the averages unchanged. Checkpoint it with the model to
    resume the averages.
    """

    def __init__(self, decay=0.95, name="gradient_noise_scale"):
        super().__init__(name=name)
        self.decay = arguments.beta("decay", decay)  # a decay rate in [0, 1), as β₁ and β₂

        def average(variable_name):
            return tf.Variable(
                0.0,
                trainable=False,
                name=variable_name,
                synchronization=tf.VariableSynchronization.ON_WRITE,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

        with self.name_scope:
            self.gradient_squared = average("gradient_squared_average")
            self.trace = average("trace_average")

    def update(self, small_squared_norm, big_squared_norm, small_batch, big_batch):
        """Folds one step's estimates into the averages; returns B_simple (float32)."""
        gradient_squared, trace = unbiased_estimates(
            small_squared_norm, big_squared_norm, small_batch, big_batch
        )
        finite = tf.math.is_finite(gradient_squared) & tf.math.is_finite(trace)
        keep = tf.where(finite, self.decay, 1.0)
        self.gradient_squared.assign(
            keep * self.gradient_squared + (1.0 - keep) * tf.where(finite, gradient_squared, 0.0)
        )
        self.trace.assign(keep * self.trace + (1.0 - keep) * tf.where(finite, trace, 0.0))
        return self.value()

    def value(self):
        """B_simple = EMA(tr(Sigma)) / EMA(|G|^2); NaN before the first update."""
        return tf.math.divide(
            tf.convert_to_tensor(self.trace), tf.convert_to_tensor(self.gradient_squared)
        )
