"""Non-finite values never reach a checkpoint silently.

float32: a NaN gradient behind a finite loss (the loss check cannot see it) is caught by the
finite-variables check before the save, naming the step; the last good checkpoint stays.
float16 (a mixed_float16 model, LossScaleOptimizer): a NaN batch is skipped, counted and
logged; training goes on. The restored checkpoint is compared with the weights captured at
the step it was saved at.
(A NaN loss through the BERT command line: tests/test_resume_after_kill.py.)
"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tensorboard_events
from recipes.common import training
from recipes.common.callbacks import first_non_finite
from step_weights import WeightsAfterEachStep

BATCH = 4


def _dataset_maker(poison_step, poison_value):
    """Endless batches; every input of optimizer step `poison_step` (1-based) is replaced
    by `poison_value`."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8 * BATCH, 3)).astype("float32") + 2.0
    y = rng.normal(size=(8 * BATCH, 1)).astype("float32")

    def make(first_step, end_step=None):  # endless
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)
        dataset = dataset.skip(first_step).enumerate(start=first_step + 1)
        return dataset.map(
            lambda step, xy: (tf.where(step == poison_step, np.float32(poison_value), xy[0]), xy[1])
        )

    return make


def _train(model, model_dir, make, steps=6, callbacks=()):
    return training.train(model, make, model_dir=model_dir, total_steps=steps,
                          checkpoint_every=2, global_batch_size=BATCH, verbose=0,
                          callbacks=list(callbacks))


def _absolute_value_model():
    # |x w| as sqrt((x w)^2): finite output, but at x = 0 the gradient is inf * 0 = NaN.
    model = tf_keras.Sequential([
        tf_keras.layers.Dense(1, use_bias=False),
        tf_keras.layers.Lambda(lambda z: tf.sqrt(tf.square(z))),
    ])
    model.build((None, 3))
    model.compile(optimizer=tf_keras.optimizers.SGD(0.01, momentum=0.9), loss="mse")
    return model


def test_nan_gradient_behind_a_finite_loss_is_not_saved(tmp_path):
    tf_keras.utils.set_random_seed(0)
    model = _absolute_value_model()
    weights = WeightsAfterEachStep()
    # Step 4, the last of the second chunk: its own loss is finite (computed before the update).
    make = _dataset_maker(poison_step=4, poison_value=0.0)
    with pytest.raises(training.TrainingDiverged, match="is not finite after step 4;"):
        _train(model, str(tmp_path), make, callbacks=[weights])
    assert not np.isfinite(weights.after[4][0]).all()  # the poisoned step did reach the weights
    latest = training.latest_checkpoint(str(tmp_path))
    assert latest.endswith("ckpt-2")
    # the last good step's weights and step counter, not merely something finite
    weights.assert_restores_step(latest, _absolute_value_model(), step=2)


# 2^10: the skip halves it (tf_keras' default 2^15 overflows float16 on this data's first
# steps, so the run would skip more than the NaN batch); 1: the floor (it stays).
@pytest.mark.parametrize("initial_scale", [2.0**10, 1.0])
def test_float16_loss_scaling_skips_and_counts_a_nan_batch(tmp_path, capsys, initial_scale):
    tf_keras.utils.set_random_seed(0)
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = tf_keras.Sequential([tf_keras.layers.Dense(4, activation="tanh"),
                                     tf_keras.layers.Dense(1)])
        model.build((None, 3))
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    # float16 forward and backward passes, float32 variables
    assert [layer.compute_dtype for layer in model.layers] == ["float16", "float16"]
    assert model(np.ones((1, 3), "float32")).dtype == tf.float16
    assert all(w.dtype == tf.float32 for w in model.weights)
    optimizer = tf_keras.mixed_precision.LossScaleOptimizer(
        tf_keras.optimizers.Adam(0.01), initial_scale=initial_scale)
    model.compile(optimizer=optimizer, loss="mse")
    weights = WeightsAfterEachStep()
    make = _dataset_maker(poison_step=3, poison_value=np.nan)
    _train(model, str(tmp_path), make, callbacks=[weights])
    out = capsys.readouterr().out
    assert "float16: non-finite gradients, step 3 skipped" in out
    assert "float16: 1 step(s) were skipped" in out
    # and reaches TensorBoard at its step, though Keras' TensorBoard writes only every 2
    skipped = [(step, value) for step, tag, value
               in tensorboard_events.scalars(tmp_path / "train_scalars") if tag == "skipped_steps"]
    assert skipped == [(3, 1.0)], skipped
    # The skipped step changed no weight; the others did; everything saved is finite.
    for before, after in zip(weights.after[2], weights.after[3]):
        np.testing.assert_array_equal(before, after)
    assert any(not np.array_equal(a, b) for a, b in zip(weights.after[3], weights.after[4]))
    assert training.latest_checkpoint(str(tmp_path)).endswith("ckpt-6")
    assert all(np.isfinite(w).all() for w in model.get_weights())


def test_the_finite_check_names_the_first_nan_or_inf_variable_and_skips_integers():
    step = tf.Variable(7, dtype=tf.int64, name="step")  # not floating: never reported
    finite = tf.Variable([1.0, -2.0], name="finite")
    half = tf.Variable(np.array([np.inf], "float16"), name="half_inf")
    nan = tf.Variable([[0.0, np.nan]], name="has_nan")
    assert first_non_finite([]) is None
    assert first_non_finite([step, finite]) is None
    assert first_non_finite([step, finite, nan, half]) == nan.name
    assert first_non_finite([half, nan]) == half.name
    assert first_non_finite([finite, half]) == half.name
    # An Inf and a -Inf sum to NaN; finite values whose sum overflows are still finite.
    plus, minus = tf.Variable([np.inf], name="plus_inf"), tf.Variable([-np.inf], name="minus")
    assert first_non_finite([finite, minus, plus]) == minus.name
    huge = tf.Variable([3e38, 3e38], name="huge")
    assert first_non_finite([finite, huge, huge]) is None
    assert first_non_finite([huge, tf.Variable(np.array([6e4, 6e4], "float16"))]) is None


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), float("-inf")])
def test_a_held_out_loss_that_is_not_finite_stops_the_run(tmp_path, monkeypatch, loss):
    """An infinite held-out loss was taken as a result: results.json and the export were
    written for a model that had diverged."""
    import contextlib
    import types

    from recipes.common import driver

    monkeypatch.setattr(training, "input_iterator_deleted_in_background",
                        lambda model, function: contextlib.nullcontext())
    run = object.__new__(driver._Run)  # pylint: disable=protected-access
    run.model_dir = str(tmp_path)
    run.model = types.SimpleNamespace(
        optimizer=types.SimpleNamespace(iterations=tf.Variable(3, dtype=tf.int64)))
    run.task = types.SimpleNamespace(
        evaluate=lambda model, strategy: {"loss": loss, "accuracy": 0.5},
        describe_evaluation=lambda results: f"loss {results['loss']}")
    run.strategy = None
    with pytest.raises(training.TrainingDiverged) as raised:
        run.evaluate("after training")
    assert str(raised.value) == f"eval loss is {loss}; the model diverged"
    run.task.evaluate = lambda model, strategy: {"loss": 1.5, "accuracy": 0.5}
    assert run.evaluate("after training") == {"loss": 1.5, "accuracy": 0.5}


def test_a_stopped_runs_save_skips_weights_that_are_not_finite(tmp_path):
    """A SIGTERM right after the weights became NaN saved them as the newest checkpoint,
    which the rerun resumed from."""
    from recipes.common import preemption

    model = _absolute_value_model()
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=3)
    preemption.save_unless_saved(model, manager, 2)
    assert manager.latest_checkpoint == str(tmp_path / "ckpt-2")
    model.layers[0].kernel.assign([[np.nan], [1.0], [1.0]])
    preemption.save_unless_saved(model, manager, 3)
    assert manager.latest_checkpoint == str(tmp_path / "ckpt-2")  # not ckpt-3
    model.layers[0].kernel.assign([[1.0], [1.0], [1.0]])
    preemption.save_unless_saved(model, manager, 3)
    assert manager.latest_checkpoint == str(tmp_path / "ckpt-3")
    saves = []
    manager.save = lambda checkpoint_number: saves.append(checkpoint_number)
    preemption.save_unless_saved(model, manager, 3)  # saved already: not again
    assert saves == []
