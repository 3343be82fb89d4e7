"""A tf_keras callback that keeps a copy of the model's weights after every optimizer step,
so a test can compare a restored checkpoint with the weights of the step it was saved at."""
import tf_keras


class WeightsAfterEachStep(tf_keras.callbacks.Callback):
    """`after[step]`: the weights after optimizer step `step` (1-based, as `iterations`)."""

    def __init__(self):
        super().__init__()
        self.after = {}

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        self.after[step] = [w.copy() for w in self.model.get_weights()]
