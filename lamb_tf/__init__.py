"""lamb_tf: LAMB and LARS (arXiv 1904.00962) as Keras optimizers, for both Keras flavours.

`lamb_tf.LAMB` and `lamb_tf.LARS` are the classes of whichever Keras `tf.keras` is in this
process: tf_keras when `TF_USE_LEGACY_KERAS=1` was set before `tf.keras` was first used
(Model Garden models need that), Keras 3 otherwise. Both flavours can also be imported
explicitly: `lamb_tf.tf_keras_optimizers.LAMB`, `lamb_tf.keras3_optimizers.LAMB`.

Registration rule: a Keras class is registered with its flavour's serialization when the
module that defines it is imported, under the package name `lamb_tf` (`lamb_tf>LAMB`,
which cannot collide with Keras' own `Lamb`). `import lamb_tf` imports every such module
(the lines below), so in a process that has imported `lamb_tf`, `serialize`/`deserialize`/
`get` and `load_model` find LAMB, LARS, the schedules and the accumulation models without
`custom_objects`, in both flavours. It does not resolve `tf.keras`: the flavour behind
`lamb_tf.LAMB` is chosen on first access to that name.
"""
import importlib
import os
import signal
import sys


def _stopped_while_starting(signum, frame):
    """Ctrl-C or SIGTERM while `python -m lamb_tf.model_garden` imports TensorFlow: one line,
    and the process ends at once with 130 or 143 (nothing is written yet; an exception would
    unwind the import into a traceback). The launcher puts its own handlers in place before
    its checks."""
    del frame
    how = "interrupted (Ctrl-C)" if signum == signal.SIGINT else "SIGTERM"
    print(f"stopped: {how} while starting, before anything was written", file=sys.stderr,
          flush=True)
    os._exit(130 if signum == signal.SIGINT else 143)


# `python -m lamb_tf.model_garden` imports this package, and TensorFlow with it, before the
# launcher's code runs: there TensorFlow's C++ start-up lines (CUDA probing, oneDNN, CPU
# features) stay off the console unless the user sets TF_CPP_MIN_LOG_LEVEL, and Ctrl-C and
# SIGTERM are one line (as in the recipes' programs, recipes/common/startup.py). Any other
# import of lamb_tf sets nothing.
if sys.argv[:1] == ["-m"] and {"lamb_tf.model_garden", "-mlamb_tf.model_garden"} & set(
        getattr(sys, "orig_argv", [])):  # (argv[0] is "-m" while `python -m` finds the module)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for _signum, _default in ((signal.SIGINT, signal.default_int_handler),
                              (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(_signum) is _default:  # (not if ignored)
            signal.signal(_signum, _stopped_while_starting)

from lamb_tf import accumulation  # noqa: E402,F401  (registers tf_keras' GradientAccumulationModel)
from lamb_tf import keras3_accumulation  # noqa: E402,F401  (registers Keras 3's)
from lamb_tf import keras3_optimizers  # noqa: E402,F401  (registers Keras 3's LAMB/LARS)
from lamb_tf import scaling  # noqa: E402,F401  (registers nothing: lamb_tf.scaling.* as documented)
from lamb_tf import schedules  # noqa: E402,F401  (registers the schedules of both flavours)
from lamb_tf import tf_keras_optimizers  # noqa: E402,F401  (registers tf_keras' LAMB/LARS)

__all__ = ["LAMB", "LARS"]


def _active_flavour_module():
    """The optimizer module of the Keras that `tf.keras` resolves to in this process."""
    import tensorflow as tf

    # tf.keras is tf_keras under TF_USE_LEGACY_KERAS=1, Keras 3 otherwise (TF 2.16+)
    legacy = tf.keras.optimizers.Optimizer.__module__.startswith("tf_keras")
    return importlib.import_module(
        "lamb_tf.tf_keras_optimizers" if legacy else "lamb_tf.keras3_optimizers")


def __getattr__(name):
    """Resolve `LAMB`/`LARS` on first access, by the active `tf.keras` (PEP 562)."""
    if name in __all__:
        return getattr(_active_flavour_module(), name)
    raise AttributeError(f"module 'lamb_tf' has no attribute {name!r}")
