"""`train.async_checkpoint`: checkpoints written on TensorFlow's background thread hold
exactly what a synchronous save of the same step holds, every one is on disk when `train`
returns, and a run that diverges names a checkpoint that is complete.

The command-line run killed mid-chunk with asynchronous checkpoints is in
tests/test_resume_after_kill.py.
"""

import copy
import time

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from lamb_tf.tf_keras_optimizers import LAMB  # the recipes are tf_keras models
from recipes.common import training
from step_weights import WeightsAfterEachStep

BATCH = 8
STEPS = 6
CHECKPOINT_EVERY = 2


def _make_dataset(poison_step=None):
    """Endless batches; the inputs of optimizer step `poison_step` (1-based) are NaN."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4 * BATCH, 5)).astype("float32")
    y = rng.normal(size=(4 * BATCH, 1)).astype("float32")

    def make(first_step, end_step=None):
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)
        dataset = dataset.skip(first_step).enumerate(start=first_step + 1)
        return dataset.map(lambda step, xy: (
            tf.where(step == poison_step, np.float32(np.nan), xy[0]), xy[1]))

    return make


@pytest.fixture(autouse=True)
def _checkpointed_random_generators():
    """`set_up_randomness` switches tf_keras to tf.random.Generator RNGs (process-wide); the
    other test modules in this process keep the default."""
    yield
    tf_keras.backend.experimental.disable_tf_random_generator()


def _model(strategy):
    """Dense layers, dropout (its generator state is checkpointed), batch norm (moving
    statistics: variables read across replicas under a MirroredStrategy) and LAMB."""
    training.set_up_randomness(0)
    with strategy.scope():
        model = tf_keras.Sequential([
            tf_keras.layers.Dense(16, activation="relu"),
            tf_keras.layers.BatchNormalization(),
            tf_keras.layers.Dropout(0.2),
            tf_keras.layers.Dense(1),
        ])
        model.build((None, 5))
        model.compile(optimizer=LAMB(0.01, weight_decay_rate=0.01), loss="mse")
        training.build_optimizer_state(model)
    return model


def _train(model, model_dir, asynchronous, make=None, callbacks=()):
    return training.train(model, make or _make_dataset(), model_dir=model_dir,
                          total_steps=STEPS, checkpoint_every=CHECKPOINT_EVERY,
                          global_batch_size=BATCH, verbose=0, callbacks=list(callbacks),
                          async_checkpoint=asynchronous)


def _values(path):
    reader = tf.train.load_checkpoint(path)
    # save_counter: TensorFlow's asynchronous writer saves a counter of its own (0); the
    # recipes number checkpoints by step and never read it
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if not key.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


@pytest.fixture
def save_options(monkeypatch):
    """The CheckpointOptions of every save the managers make, in order."""
    seen = []
    original = tf.train.CheckpointManager.save

    def save(self, checkpoint_number=None, check_interval=True, options=None):
        seen.append(options)
        return original(self, checkpoint_number, check_interval, options)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", save)
    return seen


@pytest.fixture
def slow_writes(monkeypatch):
    """Each checkpoint write takes a second longer: a write callback (run once the files are
    written, before the manager's own, which records the checkpoint) sleeps."""
    original = tf.train.CheckpointManager.save

    def save(self, checkpoint_number=None, check_interval=True, options=None):
        options = copy.copy(options or tf.train.CheckpointOptions())
        options.experimental_write_callbacks = [lambda path: time.sleep(1.0)]
        return original(self, checkpoint_number, check_interval, options)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", save)


@pytest.mark.parametrize("replicas", [1, 2])
def test_asynchronous_checkpoints_hold_what_synchronous_ones_hold(
        tmp_path, save_options, two_cpu_strategy, replicas):
    strategy = two_cpu_strategy if replicas == 2 else tf.distribute.get_strategy()
    weights = WeightsAfterEachStep()
    _train(_model(strategy), str(tmp_path / "sync"), asynchronous=False)
    synchronous = len(save_options)
    _train(_model(strategy), str(tmp_path / "async"), asynchronous=True, callbacks=[weights])
    # the asynchronous run asked TensorFlow for asynchronous writes, the other did not
    assert [bool(o and o.experimental_enable_async_checkpoint) for o in save_options] == (
        [False] * synchronous + [True] * (len(save_options) - synchronous))
    assert synchronous == STEPS // CHECKPOINT_EVERY
    # every checkpoint is on disk, indexed, when `train` returns ...
    for step in range(CHECKPOINT_EVERY, STEPS + 1, CHECKPOINT_EVERY):
        written = _values(str(tmp_path / "async" / "checkpoints" / f"ckpt-{step}"))
        expected = _values(str(tmp_path / "sync" / "checkpoints" / f"ckpt-{step}"))
        # ... and holds what the synchronous save of that step holds (weights, slots,
        # trust ratios, step, dropout generator, batch-norm statistics), though training
        # went on while it was written
        assert written.keys() == expected.keys()
        assert any(key.startswith("random_generators/") for key in written)
        for key, value in expected.items():
            np.testing.assert_array_equal(written[key], value, err_msg=f"ckpt-{step} {key}")
    assert training.latest_checkpoint(str(tmp_path / "async")).endswith(f"ckpt-{STEPS}")
    weights.assert_restores_step(str(tmp_path / "async" / "checkpoints" / "ckpt-2"),
                                 _model(strategy), step=2)


def test_a_diverged_run_names_its_last_asynchronous_checkpoint_once_written(tmp_path,
                                                                           slow_writes):
    model = _model(tf.distribute.get_strategy())
    with pytest.raises(training.TrainingDiverged) as raised:
        _train(model, str(tmp_path), asynchronous=True, make=_make_dataset(poison_step=5))
    message = str(raised.value)
    assert "stopped without saving" in message, message
    latest = training.latest_checkpoint(str(tmp_path))
    assert latest.endswith("ckpt-4") and f"the last good checkpoint is {latest};" in message
    assert int(tf.train.load_checkpoint(latest).get_tensor(
        "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")) == 4
