"""Non-finite values never reach a checkpoint silently.

float32: a NaN gradient behind a finite loss (the loss check cannot see it) is caught by the
finite-variables check before the save, naming the step; the last good checkpoint stays.
float16 (LossScaleOptimizer): a NaN batch is skipped, counted and logged; training goes on.
(A NaN loss through the BERT command line: tests/test_resume_after_kill.py.)
"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from recipes.common import training

BATCH = 4


def _dataset_maker(poison_step, poison_value):
    """Endless batches; every input of optimizer step `poison_step` (1-based) is replaced
    by `poison_value`."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8 * BATCH, 3)).astype("float32") + 2.0
    y = rng.normal(size=(8 * BATCH, 1)).astype("float32")

    def make(first_step):
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)
        dataset = dataset.skip(first_step).enumerate(start=first_step + 1)
        return dataset.map(
            lambda step, xy: (tf.where(step == poison_step, np.float32(poison_value), xy[0]), xy[1])
        )

    return make


def _train(model, model_dir, make, steps=6):
    return training.train(model, make, model_dir=model_dir, total_steps=steps,
                          checkpoint_every=2, global_batch_size=BATCH, verbose=0)


def test_nan_gradient_behind_a_finite_loss_is_not_saved(tmp_path):
    tf_keras.utils.set_random_seed(0)
    # |x w| as sqrt((x w)^2): finite output, but at x = 0 the gradient is inf * 0 = NaN.
    model = tf_keras.Sequential([
        tf_keras.layers.Dense(1, use_bias=False),
        tf_keras.layers.Lambda(lambda z: tf.sqrt(tf.square(z))),
    ])
    model.build((None, 3))
    model.compile(optimizer=tf_keras.optimizers.SGD(0.01), loss="mse")
    # Step 4, the last of the second chunk: its own loss is finite (computed before the update).
    make = _dataset_maker(poison_step=4, poison_value=0.0)
    with pytest.raises(training.TrainingDiverged, match="is not finite after step 4;"):
        _train(model, str(tmp_path), make)
    assert training.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")
    restored = tf_keras.Sequential([tf_keras.layers.Dense(1, use_bias=False),
                                    tf_keras.layers.Lambda(lambda z: z)])
    restored.build((None, 3))
    tf.train.Checkpoint(model=restored).restore(
        training.latest_checkpoint(str(tmp_path))).expect_partial()
    assert np.isfinite(restored.get_weights()[0]).all()


class _WeightsAfterEachStep(tf_keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.after = {}

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        self.after[step] = [w.copy() for w in self.model.get_weights()]


# 2^15: tf_keras' default initial loss scale (the skip halves it); 1: the floor (it stays).
@pytest.mark.parametrize("initial_scale", [2.0**15, 1.0])
def test_float16_loss_scaling_skips_and_counts_a_nan_batch(tmp_path, capsys, initial_scale):
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.Dense(4, activation="tanh"),
                                 tf_keras.layers.Dense(1)])
    model.build((None, 3))
    optimizer = tf_keras.mixed_precision.LossScaleOptimizer(
        tf_keras.optimizers.Adam(0.01), initial_scale=initial_scale)
    model.compile(optimizer=optimizer, loss="mse")
    weights = _WeightsAfterEachStep()
    make = _dataset_maker(poison_step=3, poison_value=np.nan)
    training.train(model, make, model_dir=str(tmp_path), total_steps=6, checkpoint_every=2,
                   global_batch_size=BATCH, verbose=0, callbacks=[weights])
    out = capsys.readouterr().out
    assert "float16: non-finite gradients, step 3 skipped" in out
    assert "float16: 1 step(s) were skipped" in out
    # The skipped step changed no weight; the others did; everything saved is finite.
    for before, after in zip(weights.after[2], weights.after[3]):
        np.testing.assert_array_equal(before, after)
    assert any(not np.array_equal(a, b) for a, b in zip(weights.after[3], weights.after[4]))
    assert training.latest_checkpoint(str(tmp_path)).endswith("ckpt-6")
    assert all(np.isfinite(w).all() for w in model.get_weights())
