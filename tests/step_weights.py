"""A tf_keras callback that keeps a copy of the model's weights after every optimizer step,
so a test can compare a restored checkpoint with the weights of the step it was saved at."""
import numpy as np
import tensorflow as tf
import tf_keras

from recipes.common import training


class WeightsAfterEachStep(tf_keras.callbacks.Callback):
    """`after[step]`: the weights after optimizer step `step` (1-based, as `iterations`)."""

    def __init__(self):
        super().__init__()
        self.after = {}

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        self.after[step] = [w.copy() for w in self.model.get_weights()]

    def assert_restores_step(self, checkpoint_path, fresh_model, step):
        """Restoring `checkpoint_path` into `fresh_model` (compiled, same architecture)
        matches every object and gives exactly the step counter and the weights captured
        after `step`, which differ from those of the step before (so the check can fail)."""
        training.build_optimizer_state(fresh_model)
        tf.train.Checkpoint(model=fresh_model, optimizer=fresh_model.optimizer).restore(
            checkpoint_path).assert_existing_objects_matched()
        assert int(fresh_model.optimizer.iterations.numpy()) == step
        for restored, captured in zip(fresh_model.get_weights(), self.after[step]):
            np.testing.assert_array_equal(restored, captured)
        assert any(not np.array_equal(a, b) for a, b in zip(self.after[step], self.after[step - 1]))
