"""Checkpointed training resumes exactly; divergence and export never corrupt outputs."""

import os
import threading
import weakref

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tensorboard_events
from lamb_tf import accumulation
from recipes.common import checkpoints, training
from recipes.common.errors import UserError
from step_weights import WeightsAfterEachStep

BATCH = 8


@pytest.fixture(autouse=True)
def _checkpointed_random_generators():
    """set_up_randomness switches tf_keras to tf.random.Generator RNGs (process-wide); the
    other test modules in this process keep the default."""
    yield
    tf_keras.backend.experimental.disable_tf_random_generator()


def _model():
    training.set_up_randomness(0)
    # Dropout: the resume test also checks that the dropout stream continues exactly.
    model = tf_keras.Sequential(
        [
            tf_keras.layers.Dense(4, activation="tanh"),
            tf_keras.layers.Dropout(0.3),
            tf_keras.layers.Dense(1),
        ]
    )
    model.build((None, 3))
    model.compile(optimizer=tf_keras.optimizers.Adam(0.05), loss="mse")
    return model


def _dataset_maker(poison_step=None):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 3)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")

    def make(skip_steps, end_step=None):  # endless: fit takes end_step - skip_steps
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)
        if poison_step is not None:
            dataset = dataset.enumerate().map(
                lambda i, xy: (tf.where(i == poison_step, np.nan, xy[0]), xy[1])
            )
        return dataset.skip(skip_steps)

    return make


def _train(model, model_dir, steps, make=None):
    return training.train(
        model,
        make or _dataset_maker(),
        model_dir=model_dir,
        total_steps=steps,
        checkpoint_every=2,
        global_batch_size=BATCH,
        verbose=0,
    )


def test_resume_continues_exactly_where_the_checkpoint_stopped(tmp_path):
    straight = _model()
    _train(straight, str(tmp_path / "straight"), steps=6)

    interrupted_dir = str(tmp_path / "interrupted")
    _train(_model(), interrupted_dir, steps=4)
    resumed = _model()
    _train(resumed, interrupted_dir, steps=6)

    assert int(resumed.optimizer.iterations.numpy()) == 6
    for a, b in zip(straight.get_weights(), resumed.get_weights()):
        np.testing.assert_array_equal(a, b)
    # The dropout generator's state is in the checkpoint and ended where the straight run's did.
    (straight_generator,) = training.random_generators(straight)
    (resumed_generator,) = training.random_generators(resumed)
    np.testing.assert_array_equal(straight_generator.state.numpy(), resumed_generator.state.numpy())
    assert training.latest_checkpoint(interrupted_dir).endswith("ckpt-6")


def test_one_dataset_and_one_fit_run_through_the_chunks_with_a_checkpoint_each(tmp_path):
    calls, make = [], _dataset_maker()
    saved = []

    class Saved(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            saved.append(os.path.basename(training.latest_checkpoint(str(tmp_path))))

    training.train(_model(), lambda start, end: calls.append((start, end)) or make(start, end),
                   model_dir=str(tmp_path), total_steps=6, checkpoint_every=2,
                   global_batch_size=BATCH, verbose=0, callbacks=[Saved()])
    assert calls == [(0, 6)]
    assert saved == ["ckpt-2", "ckpt-4", "ckpt-6"]


def test_keras_step_scalars_reach_tensorboard_every_log_interval(tmp_path):
    """Keras' batch-level scalars (`batch_loss`) at the steps of every `every` (here
    checkpoint_every = 2), whatever step a fit starts at."""
    model_dir = str(tmp_path)
    _train(_model(), model_dir, steps=2)
    _train(_model(), model_dir, steps=6)  # a resumed run: its own fit from step 2
    steps = sorted(event.step
                   for event in tensorboard_events.events(os.path.join(model_dir, "train"))
                   for value in event.summary.value if value.tag == "batch_loss")
    assert steps == [2, 4, 6]


def test_training_scalars_hold_the_learning_rate_and_the_optimizers_trust_ratios(tmp_path):
    """`train_scalars`: every `log_every` steps the learning rate of that step's update,
    examples/s and each variable's trust ratio as the optimizer reports it."""
    from lamb_tf import tf_keras_optimizers

    model = _model()
    schedule = tf_keras.optimizers.schedules.PolynomialDecay(0.1, 10, 0.0)
    model.compile(optimizer=tf_keras_optimizers.LAMB(schedule), loss="mse")
    reported = {}

    class TrustRatios(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            reported[step] = self.model.optimizer.trust_ratios()

    training.train(model, _dataset_maker(), model_dir=str(tmp_path), total_steps=6,
                   checkpoint_every=2, log_every=2, global_batch_size=BATCH, verbose=0,
                   callbacks=[TrustRatios()])
    written = {}
    for step, tag, value in tensorboard_events.scalars(tmp_path / "train_scalars"):
        written.setdefault(step, {})[tag] = value
    assert sorted(written) == [2, 4, 6]  # the multiples of log_every
    for step, scalars in written.items():
        # the rate of the step's own update: the schedule at the step count before it
        assert scalars.pop("learning_rate") == pytest.approx(0.1 * (1 - (step - 1) / 10),
                                                             rel=1e-6)
        assert 0 < scalars.pop("examples_per_second") < float("inf")
        assert scalars.pop("global_gradient_norm", None) is None  # not a GradientAccumulationModel
        assert scalars == pytest.approx(
            {f"trust_ratio/{path}": ratio for path, ratio in reported[step].items()}, rel=1e-6)
        assert len(scalars) == 4 and all(ratio > 0 for ratio in scalars.values())


@pytest.mark.parametrize("log_every, first_run_steps", [(2, 2), (2, 3), (1, 2), (4, 4)])
def test_training_scalars_fall_on_the_steps_of_keras_batch_scalars(tmp_path, monkeypatch,
                                                                   log_every, first_run_steps):
    """`train_scalars` are written at the steps Keras' TensorBoard callback writes its batch
    scalars (the multiples of log_every), whatever step a run resumes at (a SIGTERM-saved
    odd step included) and across the loop's `fit` calls: at a chunk's last step, not the
    next chunk's first. examples/s is left out only where the run has seen no step before
    it (its first step)."""
    monkeypatch.setattr(training, "CHUNKS_PER_FIT", 2)  # the second run: more than one fit
    model_dir = str(tmp_path)
    first_run = dict(total_steps=first_run_steps, checkpoint_every=first_run_steps)
    for run in (first_run, dict(total_steps=8, checkpoint_every=2)):
        training.train(_model(), _dataset_maker(), model_dir=model_dir, log_every=log_every,
                       global_batch_size=BATCH, verbose=0, **run)
    keras_steps = sorted(event.step
                         for event in tensorboard_events.events(os.path.join(model_dir, "train"))
                         for value in event.summary.value if value.tag == "batch_loss")
    written = {}
    for step, tag, _ in tensorboard_events.scalars(tmp_path / "train_scalars"):
        written.setdefault(step, set()).add(tag)
    assert keras_steps == list(range(log_every, 9, log_every))
    assert sorted(written) == keras_steps
    first_steps = {1, first_run_steps + 1}  # the first step each of the two runs saw
    assert {step for step, tags in written.items() if "examples_per_second" not in tags} == (
        first_steps & set(keras_steps))
    assert all("learning_rate" in tags for tags in written.values())


def test_the_train_graph_reaches_tensorboard_once_per_run_not_once_per_fit(tmp_path, monkeypatch):
    """Keras' TensorBoard callback writes the model and its train graph at the start of every
    `fit`; the loop runs a `fit` per CHUNKS_PER_FIT chunks and writes them once."""
    monkeypatch.setattr(training, "CHUNKS_PER_FIT", 1)
    fits = []
    make = _dataset_maker()
    training.train(_model(), lambda start, end: fits.append(start) or make(start, end),
                   model_dir=str(tmp_path), total_steps=6, checkpoint_every=2,
                   global_batch_size=BATCH, verbose=0)
    assert fits == [0, 2, 4]  # three fits
    graphs, model_summaries = 0, 0
    for event in tensorboard_events.events(tmp_path / "train"):
        graphs += bool(event.graph_def)
        model_summaries += any(value.tag == "keras" for value in event.summary.value)
    assert (graphs, model_summaries) == (1, 1)


def _record_iterator_deletions(monkeypatch, events):
    """Appends ("deleted", on the main thread?) to `events` as each dataset iterator goes."""
    original_iter = tf.data.Dataset.__iter__

    def iter_and_watch(dataset):
        iterator = original_iter(dataset)
        weakref.finalize(iterator, lambda: events.append(
            ("deleted", threading.current_thread() is threading.main_thread())))
        return iterator

    monkeypatch.setattr(tf.data.Dataset, "__iter__", iter_and_watch)


def _join_new_threads(threads_before):
    for thread in set(threading.enumerate()) - threads_before:
        thread.join(timeout=120)


def test_each_fits_input_iterator_is_deleted_after_the_fit_on_a_thread_of_its_own(
        tmp_path, monkeypatch):
    """A fit's iterator is deleted off the main thread (a tf.data deletion can wait for its
    autotuning thread: benchmarks/input_teardown.py), after that fit's last step; Keras' own
    train function is left in place."""
    monkeypatch.setattr(training, "CHUNKS_PER_FIT", 1)
    events = []

    class Steps(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            events.append(("step", int(self.model.optimizer.iterations.numpy())))

    _record_iterator_deletions(monkeypatch, events)
    model = _model()
    threads_before = set(threading.enumerate())
    training.train(model, _dataset_maker(), model_dir=str(tmp_path), total_steps=4,
                   checkpoint_every=2, global_batch_size=BATCH, verbose=0, callbacks=[Steps()])
    _join_new_threads(threads_before)
    assert [value for what, value in events if what == "step"] == [1, 2, 3, 4]
    deletions = [index for index, (what, _) in enumerate(events) if what == "deleted"]
    assert len(deletions) == 2 and deletions[0] > events.index(("step", 2)), events
    assert not any(events[index][1] for index in deletions), "deleted on the main thread"
    assert isinstance(model.train_function, tf.types.experimental.GenericFunction)


def test_an_evaluations_input_iterator_is_deleted_after_it_on_a_thread_of_its_own(
        monkeypatch):
    """The driver's evaluation (`input_iterator_deleted_in_background(model,
    "test_function")` around `task.evaluate`): the iterator is deleted off the main thread,
    after `evaluate` returned its results; Keras' own test function is put back."""
    events = []
    _record_iterator_deletions(monkeypatch, events)
    model = _model()
    threads_before = set(threading.enumerate())
    with training.input_iterator_deleted_in_background(model, "test_function"):
        loss = model.evaluate(_dataset_maker()(0).take(3), verbose=0)
        events.append(("evaluated", np.isfinite(loss)))
    _join_new_threads(threads_before)
    # (Keras makes a first iterator of a finite dataset and drops it unread for a new one)
    evaluated = events.index(("evaluated", True))
    assert events[evaluated:] == [("evaluated", True), ("deleted", False)], events
    assert isinstance(model.test_function, tf.types.experimental.GenericFunction)


def test_fits_finish_a_stopped_chunk_alone_then_take_up_to_chunks_per_fit():
    every, per_fit = 4, training.CHUNKS_PER_FIT
    total = (2 * per_fit + 1) * every
    assert list(training._fits(0, total, every)) == [
        (0, per_fit * every), (per_fit * every, 2 * per_fit * every),
        (2 * per_fit * every, total)]
    assert list(training._fits(5, 3 * every, every)) == [(5, 8), (8, 12)]
    assert list(training._fits(12, 3 * every, every)) == []


@pytest.mark.slow  # two trainings
def test_resume_without_the_dropout_state_would_differ(tmp_path):
    """The check above can fail: restoring everything but the generator gives other weights."""
    straight = _model()
    _train(straight, str(tmp_path / "straight"), steps=4)
    partial_dir = str(tmp_path / "partial")
    _train(_model(), partial_dir, steps=2)
    resumed = _model()
    training.build_optimizer_state(resumed)
    tf.train.Checkpoint(model=resumed, optimizer=resumed.optimizer).restore(
        training.latest_checkpoint(partial_dir)
    ).expect_partial()
    resumed.fit(_dataset_maker()(2), epochs=1, steps_per_epoch=2, verbose=0)
    assert any(
        not np.array_equal(a, b) for a, b in zip(straight.get_weights(), resumed.get_weights())
    )


def test_steps_must_be_a_multiple_of_the_checkpoint_interval(tmp_path):
    with pytest.raises(UserError, match="train.steps=5 is not a multiple"):
        _train(_model(), str(tmp_path), steps=5)


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    model_dir = str(tmp_path)
    weights = WeightsAfterEachStep()
    with pytest.raises(training.TrainingDiverged, match="loss became nan"):
        training.train(_model(), _dataset_maker(poison_step=3), model_dir=model_dir,
                       total_steps=6, checkpoint_every=2, global_batch_size=BATCH, verbose=0,
                       callbacks=[weights])
    good = training.latest_checkpoint(model_dir)
    assert good.endswith("ckpt-2")
    # exactly the weights of the last good step (step 2), not merely finite ones
    weights.assert_restores_step(good, _model(), step=2)


@pytest.mark.parametrize("widths, words", [
    ([5, 1], "Received incompatible tensor with shape"),
    ([4, 1, 1], "of this model's variables are not in it"),
], ids=["another-shape", "more-layers"])
def test_checkpoint_of_another_model_is_one_line(tmp_path, widths, words):
    """A resume (a run without the config.yaml that names its model.* keys) from a
    checkpoint that lacks some of the model's variables left them freshly initialised."""
    _train(_model(), str(tmp_path), steps=2)
    other = tf_keras.Sequential([tf_keras.layers.Dense(width) for width in widths])
    other.build((None, 3))
    other.compile(optimizer=tf_keras.optimizers.Adam(0.05), loss="mse")
    with pytest.raises(UserError, match=f"does not fit this model \\(.*{words}"):
        _train(other, str(tmp_path), steps=4)


def _accumulating(widths):
    network = tf_keras.Sequential([tf_keras.layers.Dense(width) for width in widths])
    network.build((None, 3))
    return accumulation.GradientAccumulationModel(network, 1)


@pytest.mark.parametrize("widths, words", [
    ([5, 1], r"\(Received incompatible tensor with shape \(.*\) when attempting to restore "
             r"variable with shape"),
    ([4, 1, 1], r"\(2 of this model's variables are not in it, such as "),
], ids=["another-shape", "more-layers"])
def test_an_init_checkpoint_of_another_model_is_one_line(tmp_path, widths, words):
    """`train.init_checkpoint` (phase 2 from phase 1's weights) of another model."""
    path = tf.train.Checkpoint(model=_accumulating([4, 1])).save(str(tmp_path / "ckpt"))
    with pytest.raises(UserError, match=rf"train.init_checkpoint {path} does not fit this model "
                                        rf"{words}.*\); what the task says the runs need$"):
        checkpoints.restore_weights_only(_accumulating(widths), path,
                                         "what the task says the runs need")


def test_fine_tuning_says_what_its_init_checkpoint_is_and_is_not():
    # the pretrained encoder comes from encoder.pretraining_dir: a pretraining checkpoint as
    # train.init_checkpoint was told both runs need "the same model.* shape", keys fine-tuning
    # has none of
    from recipes.bert import finetune
    from recipes.common import task

    assert "model.*" in task.Task.init_checkpoint_fits
    assert "encoder.pretraining_dir" in finetune.BertFinetuneTask.init_checkpoint_fits
    assert "model.*" not in finetune.BertFinetuneTask.init_checkpoint_fits


def test_export_is_complete_or_absent(tmp_path, monkeypatch):
    module = tf.Module()
    module.v = tf.Variable(1.0)
    module.f = tf.function(lambda x: x * module.v, input_signature=[tf.TensorSpec([], tf.float32)])
    export_dir = str(tmp_path / "export")
    training.export_saved_model(export_dir, module)
    assert float(tf.saved_model.load(export_dir).f(2.0)) == 2.0

    def crash_mid_save(obj, path, **unused):
        os.makedirs(path)
        with open(os.path.join(path, "saved_model.pb"), "w") as f:
            f.write("half")
        raise RuntimeError("killed during export")

    module.v.assign(3.0)
    monkeypatch.setattr(tf.saved_model, "save", crash_mid_save)
    with pytest.raises(RuntimeError):
        training.export_saved_model(export_dir, module)
    monkeypatch.undo()
    # The previous, complete export is still what loads.
    assert float(tf.saved_model.load(export_dir).f(2.0)) == 2.0
    training.export_saved_model(export_dir, module)
    assert float(tf.saved_model.load(export_dir).f(2.0)) == 6.0
    assert os.listdir(tmp_path) == ["export"]  # No temporary or moved-aside copies remain.


def test_training_file_deleted_mid_run_is_one_line_naming_the_checkpoint(tmp_path):
    path = str(tmp_path / "train.tfrecord")
    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(path) as writer:
        for row in rng.normal(size=(16, 4)).astype("float32"):
            writer.write(tf.io.serialize_tensor(row).numpy())

    def make(skip_steps, end_step=None):  # `repeat` opens the file again each pass
        dataset = tf.data.TFRecordDataset([path]).map(
            lambda record: tf.ensure_shape(tf.io.parse_tensor(record, tf.float32), [4]))
        return dataset.map(lambda row: (row[:3], row[3:])).repeat().batch(BATCH).skip(skip_steps)

    class DeleteAfterFirstChunk(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if os.path.exists(path):
                os.remove(path)

    model_dir = str(tmp_path / "run")
    with pytest.raises(UserError) as error:  # a pass over the file is 2 steps: reopened later
        training.train(_model(), make, model_dir=model_dir, total_steps=12,
                       checkpoint_every=2, global_batch_size=BATCH, verbose=0,
                       callbacks=[DeleteAfterFirstChunk()], data_files=path)
    message = str(error.value)
    assert "\n" not in message and path in message
    last = training.latest_checkpoint(model_dir)
    assert last.endswith(("ckpt-2", "ckpt-4")), last  # the next passes need the file
    assert "resume from the last checkpoint" in message and last in message


def _results_writer(tmp_path, steps):
    """`write(mode, train_logs, eval_results)`: results.json as a `driver._Run` whose
    optimizer is at step `steps` (a tf.Variable) writes it, read back."""
    import json
    import types

    from recipes.common import driver

    run = object.__new__(driver._Run)  # pylint: disable=protected-access
    run.model_dir, run.start = str(tmp_path), 0.0
    run.plan = accumulation.plan_batch(8, 4, 1)
    run.model = types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=steps))

    def write(mode, train_logs, eval_results):
        run.options = types.SimpleNamespace(mode=mode)
        run.write_results(train_logs, eval_results)
        with open(tmp_path / "results.json", encoding="utf-8") as f:
            return json.load(f)

    return write


def test_an_evaluation_records_the_step_of_the_checkpoint_it_evaluated(tmp_path):
    """A run trained to 120, continued and stopped at 145 (ckpt-140 its newest): its
    --mode=eval scores ckpt-140, and results.json said only `"steps": 120`."""
    steps = tf.Variable(120, dtype=tf.int64)
    write = _results_writer(tmp_path, steps)
    trained = write("train_and_eval", {"loss": 2.0}, {"accuracy": 0.5})
    assert (trained["steps"], trained["eval_step"]) == (120, 120)
    steps.assign(140)  # the continued training's newest checkpoint, restored
    evaluated = write("eval", {}, {"accuracy": 0.75})
    assert (evaluated["steps"], evaluated["train"], evaluated["eval"]) == (
        120, {"loss": 2.0}, {"accuracy": 0.75})  # the finished training's record kept
    assert evaluated["eval_step"] == 140


def test_results_json_is_the_newest_trainings_and_an_evaluation_only_adds_its_eval(tmp_path):
    """A run trained further kept the first training's record (its steps, mode and losses)
    beside an eval_mode_wall_time_seconds, as if it had only been evaluated."""
    steps = tf.Variable(2, dtype=tf.int64)
    write = _results_writer(tmp_path, steps)

    trained = write("train", {"loss": 2.0}, {})
    assert (trained["mode"], trained["steps"], trained["train"]) == ("train", 2, {"loss": 2.0})
    assert trained["accumulation_steps"] == 2 and trained["global_batch_size"] == 8
    assert "eval_step" not in trained  # (no held-out figures)
    evaluated = write("eval", {}, {"accuracy": 0.5})
    assert {**evaluated, "eval": {}} == {**trained, "eval_step": 2, "eval_mode_wall_time_seconds":
                                         evaluated["eval_mode_wall_time_seconds"]}
    steps.assign(4)
    further = write("train_and_eval", {"loss": 1.0}, {"accuracy": 0.75})
    assert (further["mode"], further["steps"], further["train"], further["eval"]) == (
        "train_and_eval", 4, {"loss": 1.0}, {"accuracy": 0.75})
    assert "eval_mode_wall_time_seconds" not in further and further["eval_step"] == 4
