"""lamb_tf: LAMB and LARS (arXiv 1904.00962) as Keras optimizers, for both Keras flavours.

`lamb_tf.LAMB` and `lamb_tf.LARS` are the classes of whichever Keras `tf.keras` is in this
process: tf_keras when `TF_USE_LEGACY_KERAS=1` was set before TensorFlow was imported
(Model Garden models need that), Keras 3 otherwise. Both flavours can also be imported
explicitly: `lamb_tf.tf_keras_optimizers.LAMB`, `lamb_tf.keras3_optimizers.LAMB`.
Importing `lamb_tf` imports nothing else; the choice is made on first access to a name.
"""
import importlib

__all__ = ["LAMB", "LARS"]


def _active_flavour_module():
    """The optimizer module of the Keras that `tf.keras` resolves to in this process."""
    import tensorflow as tf

    # tf.keras is tf_keras under TF_USE_LEGACY_KERAS=1, Keras 3 otherwise (TF 2.16+)
    legacy = tf.keras.optimizers.Optimizer.__module__.startswith("tf_keras")
    return importlib.import_module(
        "lamb_tf.tf_keras_optimizers" if legacy else "lamb_tf.keras3_optimizers")


def __getattr__(name):
    """Resolve `LAMB`/`LARS` lazily, so `import lamb_tf` has no side effects (PEP 562)."""
    if name in __all__:
        return getattr(_active_flavour_module(), name)
    raise AttributeError(f"module 'lamb_tf' has no attribute {name!r}")
