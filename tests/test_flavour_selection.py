"""`lamb_tf.LAMB`/`LARS` are the classes of the active `tf.keras` (fresh processes, since the
choice is fixed when `tf.keras` is first used), `import lamb_tf` does not make that choice
(it registers the classes of both flavours but leaves `tf.keras` unresolved, and makes the
submodules the README names reachable as attributes), and
`model.compile(optimizer=...)` + `fit` works in both flavours, also with `jit_compile=True`.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import numpy_reference as ref
from flavours import FLAVOURS

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROBE = """
import os
import sys
import lamb_tf
# the library needs only tensorflow and tf-keras (the recipes' stack is an extra)
assert not {"official", "tensorflow_text", "yaml"} & set(sys.modules), "recipes' stack imported"
# the submodules the README names as lamb_tf.<module>.<name>
assert callable(lamb_tf.scaling.scaled_learning_rate) and lamb_tf.accumulation.BatchPlan
# set only now: `import lamb_tf` must not have resolved tf.keras
os.environ["TF_USE_LEGACY_KERAS"] = sys.argv[1]
import tensorflow as tf
lamb, lars = lamb_tf.LAMB, lamb_tf.LARS
print(lamb.__module__, lars.__module__, lamb.__name__, lars.__name__)
model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
model.compile(optimizer=lamb_tf.LAMB(0.01), loss="mse")
model.fit(tf.ones((4, 2)), tf.ones((4, 1)), verbose=0)
print("fit ok")
"""


@pytest.mark.slow  # fresh processes
@pytest.mark.parametrize("legacy,module", [("1", "lamb_tf.tf_keras_optimizers"), ("0", "lamb_tf.keras3_optimizers")])
def test_top_level_names_follow_tf_keras(legacy, module):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO_ROOT)
    env.pop("TF_USE_LEGACY_KERAS", None)
    result = subprocess.run([sys.executable, "-c", _PROBE, legacy], env=env, capture_output=True, text=True,
                            timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[0] == f"{module} {module} LAMB LARS"
    assert "fit ok" in result.stdout


def test_explicit_flavours_subclass_their_keras():
    import keras
    import tf_keras

    from lamb_tf import keras3_optimizers, tf_keras_optimizers

    for name in ("LAMB", "LARS"):
        assert issubclass(getattr(tf_keras_optimizers, name), tf_keras.optimizers.Optimizer)
        assert not issubclass(getattr(tf_keras_optimizers, name), tf_keras.optimizers.legacy.Optimizer)
        assert issubclass(getattr(keras3_optimizers, name), keras.optimizers.Optimizer)


def test_a_tf_keras_model_takes_the_tf_keras_class_not_keras_3s():
    """What the README says of mixing flavours, in a Keras 3 process: tf_keras refuses the
    Keras 3 optimizer with its own message; the explicit tf_keras class trains."""
    import tf_keras

    import lamb_tf
    from lamb_tf import keras3_optimizers, tf_keras_optimizers

    assert lamb_tf.LAMB is keras3_optimizers.LAMB  # tf.keras is Keras 3 in the tests
    model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="Could not interpret optimizer identifier"):
        model.compile(optimizer=lamb_tf.LAMB(0.01), loss="mse")
    model.compile(optimizer=tf_keras_optimizers.LAMB(0.01), loss="mse")
    model.fit(np.ones((4, 2), np.float32), np.ones((4, 1), np.float32), verbose=0)
    assert int(model.optimizer.iterations) == 1


def _fit(flavour, optimizer, jit_compile):
    k = flavour.keras
    k.utils.set_random_seed(1)
    model = k.Sequential([k.Input((3,)), k.layers.Dense(4, name="hidden"), k.layers.Dense(1, name="out")])
    model.compile(optimizer=optimizer, loss="mse", jit_compile=jit_compile)
    initial = model.get_weights()
    rng = np.random.default_rng(2)
    model.fit(rng.normal(size=(12, 3)).astype("float32"), rng.normal(size=(12, 1)).astype("float32"),
              batch_size=4, epochs=1, shuffle=False, verbose=0)
    return initial, model.get_weights()


@pytest.mark.slow  # XLA compilations, both flavours
@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
def test_compile_fit_with_and_without_jit_compile_agree(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    make = getattr(flavour.module, optimizer_name)
    lr = 0.05 if optimizer_name == "LAMB" else 2.0
    initial, eager_weights = _fit(flavour, make(lr, weight_decay_rate=0.01), jit_compile=False)
    _, xla_weights = _fit(flavour, make(lr, weight_decay_rate=0.01), jit_compile=True)
    for start, a, b in zip(initial, eager_weights, xla_weights):
        assert ref.relative_error(a, start) > 1e-4
        assert ref.relative_error(b, a) < 1e-5
