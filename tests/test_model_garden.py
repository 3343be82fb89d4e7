"""`lamb_tf.model_garden.register()` makes Model Garden experiments train with our optimizers.

Real Model Garden experiment configs (`bert/pretraining`, `resnet_imagenet`) shrunk to tiny
sizes build their task, model and optimizer through Model Garden's own code
(`Task.create_optimizer` -> `OptimizerFactory`); the first update of chosen variables is
checked against the float64 NumPy reference in `tests/numpy_reference.py`, which shows that
every config field, the exclusion lists included, reached our optimizer.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
import yaml
from official.core import exp_factory
from official.core import task_factory
from official.modeling.optimization import lamb as model_garden_lamb
from official.modeling.optimization import lars as model_garden_lars
from official.modeling.optimization import optimizer_factory
from official.modeling.optimization.configs import optimization_config
from official.nlp.configs import pretraining_experiments  # noqa: F401  (bert/pretraining)
from official.vision.configs import image_classification  # noqa: F401  (resnet_imagenet)

import numpy_reference
import reliability_cli
from conftest import REPO_ROOT
from lamb_tf import model_garden
from lamb_tf import model_garden_launcher
from lamb_tf import tf_keras_optimizers

TINY_BERT = {
    "encoder": {"bert": {"vocab_size": 50, "hidden_size": 16, "num_layers": 1,
                         "num_attention_heads": 2, "intermediate_size": 32,
                         "max_position_embeddings": 32, "dropout_rate": 0.0,
                         "attention_dropout_rate": 0.0}},
    "cls_heads": [{"inner_dim": 16, "num_classes": 2, "name": "next_sentence",
                   "dropout_rate": 0.0}],
}
SEQ_LENGTH, PREDICTIONS, BATCH, VOCAB = 16, 4, 4, 50
CONSTANT_LR = {"type": "constant", "constant": {"learning_rate": 0.01}}


@pytest.fixture
def registered():
    model_garden.register()
    yield
    model_garden.unregister()


def _bert_batch():
    rng = np.random.default_rng(0)
    ints = lambda low, high, shape: tf.constant(rng.integers(low, high, shape), tf.int32)
    return {
        "input_word_ids": ints(0, VOCAB, (BATCH, SEQ_LENGTH)),
        "input_mask": tf.ones((BATCH, SEQ_LENGTH), tf.int32),
        "input_type_ids": tf.zeros((BATCH, SEQ_LENGTH), tf.int32),
        "masked_lm_positions": ints(1, SEQ_LENGTH, (BATCH, PREDICTIONS)),
        "masked_lm_ids": ints(0, VOCAB, (BATCH, PREDICTIONS)),
        "masked_lm_weights": tf.ones((BATCH, PREDICTIONS)),
        "next_sentence_labels": ints(0, 2, (BATCH, 1)),
    }


def _build(experiment, override):
    """Task, model and optimizer exactly as Model Garden's trainer builds them."""
    params = exp_factory.get_exp_config(experiment)
    params.override(override, is_strict=True)
    task = task_factory.get_task(params.task)
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    return task, model, optimizer


def _gradients(task, model, batch, labels, **loss_kwargs):
    """The gradient Model Garden's train_step applies (one replica, so no loss scaling)."""
    with tf.GradientTape() as tape:
        outputs = model(batch, training=True)
        loss = task.build_losses(labels=labels, model_outputs=outputs, aux_losses=model.losses,
                                 **loss_kwargs)
    return dict(zip([v.name for v in model.trainable_variables],
                    tape.gradient(loss, model.trainable_variables)))


def test_import_alone_changes_nothing_and_unregister_restores():
    assert optimizer_factory.LEGACY_OPTIMIZERS_CLS["lamb"] is model_garden_lamb.LAMB
    assert not model_garden.is_registered()
    model_garden.register()
    model_garden.register()  # idempotent
    try:
        assert model_garden.is_registered()
    finally:
        model_garden.unregister()
    assert optimizer_factory.LEGACY_OPTIMIZERS_CLS["lamb"] is model_garden_lamb.LAMB
    assert optimizer_factory.NEW_OPTIMIZERS_CLS["lars"] is model_garden_lars.LARS


@pytest.mark.parametrize("use_legacy_optimizer", [True, False])
def test_factory_builds_ours_on_both_paths_with_every_field(registered, use_legacy_optimizer):
    lars_fields = {"name": "my_lars", "momentum": 0.8, "eeta": 0.002, "weight_decay_rate": 1e-4,
                   "nesterov": True, "classic_momentum": False,
                   "exclude_from_weight_decay": ["batch_norm", "bias"],
                   "exclude_from_layer_adaptation": ["bias"], "global_clipnorm": 1.5}
    config = optimization_config.OptimizationConfig(
        {"optimizer": {"type": "lars", "lars": lars_fields}, "learning_rate": CONSTANT_LR})
    factory = optimizer_factory.OptimizerFactory(config)
    optimizer = factory.build_optimizer(factory.build_learning_rate(),
                                        use_legacy_optimizer=use_legacy_optimizer)
    assert type(optimizer) is tf_keras_optimizers.LARS
    built = optimizer.get_config()
    assert {key: built[key] for key in lars_fields} == lars_fields


def test_legacy_only_arguments_are_refused_with_one_clear_error(registered):
    config = optimization_config.OptimizationConfig(
        {"optimizer": {"type": "lamb"}, "learning_rate": CONSTANT_LR})
    factory = optimizer_factory.OptimizerFactory(config)
    with pytest.raises(ValueError, match="gradient_transformers is only supported by legacy"):
        factory.build_optimizer(factory.build_learning_rate(),
                                gradient_transformers=[lambda grads_and_vars: grads_and_vars])


@pytest.mark.slow  # trains a Model Garden experiment
def test_bert_pretraining_experiment_trains_with_our_lamb(registered):
    lamb_fields = {"weight_decay_rate": 0.01, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-5,
                   "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"],
                   "exclude_from_layer_adaptation": ["bias"]}
    tf_keras.utils.set_random_seed(0)
    task, model, optimizer = _build("bert/pretraining", {
        "task": {"model": TINY_BERT},
        "trainer": {"optimizer_config": {
            "optimizer": {"type": "lamb", "lamb": lamb_fields},
            "learning_rate": CONSTANT_LR, "warmup": {"type": None}}}})
    assert type(optimizer) is tf_keras_optimizers.LAMB
    batch = _bert_batch()
    metrics = task.build_metrics()
    gradients = _gradients(task, model, batch, labels=batch, metrics=metrics)
    initial = {v.name: v.numpy() for v in model.trainable_variables}
    train_step = tf.function(lambda inputs: task.train_step(inputs, model, optimizer, metrics))

    losses = [float(train_step(batch)["loss"])]
    after_first = {v.name: v.numpy() for v in model.trainable_variables}
    losses += [float(train_step(batch)["loss"]) for _ in range(2)]

    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    # every variable the loss depends on moved (the encoder's own pooler is unused here)
    trained = [v for v in model.trainable_variables if gradients[v.name] is not None]
    assert len(trained) > 20
    assert all(not np.array_equal(initial[v.name], v.numpy()) for v in trained)
    # (path, decayed, adapted) from the config's exclusion lists, on Model Garden's names
    cases = [("transformer/layer_0/self_attention/attention_output/bias", False, False),
             ("transformer/layer_0/self_attention_layer_norm/gamma", False, True),
             ("transformer/layer_0/intermediate/kernel", True, True)]
    for path, decay, adapt in cases:
        rows = [row for row in optimizer.exclusion_table() if row.path == path]
        assert [(row.decayed, row.adapted) for row in rows] == [(decay, adapt)], path
        name = path + ":0"
        expected, _, _ = numpy_reference.lamb_step(
            initial[name], gradients[name].numpy(), 0.0, 0.0, 1, 0.01, lamb_fields["beta_1"],
            lamb_fields["beta_2"], lamb_fields["epsilon"], lamb_fields["weight_decay_rate"],
            adapt=adapt, decay=decay)
        np.testing.assert_allclose(after_first[name] - initial[name], expected - initial[name],
                                   rtol=1e-4, atol=1e-7, err_msg=path)


@pytest.mark.slow  # trains a Model Garden experiment
def test_resnet_imagenet_experiment_trains_with_our_lars(registered):
    lars_fields = {"weight_decay_rate": 1e-3, "momentum": 0.8, "eeta": 0.002,
                   "exclude_from_weight_decay": ["batch_norm", "bias"]}
    tf_keras.utils.set_random_seed(0)
    task, model, optimizer = _build("resnet_imagenet", {
        "task": {"model": {"num_classes": 5, "input_size": [32, 32, 3],
                           "backbone": {"resnet": {"model_id": 10, "depth_multiplier": 0.25}}},
                 "losses": {"l2_weight_decay": 0.0}},
        "trainer": {"optimizer_config": {
            "optimizer": {"type": "lars", "lars": lars_fields},
            "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}},
            "warmup": {"type": None}}}})
    assert type(optimizer) is tf_keras_optimizers.LARS
    rng = np.random.default_rng(0)
    images = tf.constant(rng.normal(size=(4, 32, 32, 3)), tf.float32)
    labels = tf.constant([0, 1, 2, 3], tf.int32)
    # the task one-hot encodes the labels in train_step (losses.one_hot defaults to True)
    gradients = _gradients(task, model, images, tf.one_hot(labels, 5))
    before = {v.name: v.numpy() for v in model.trainable_variables}

    loss = task.train_step((images, labels), model, optimizer, None)["loss"]

    after = {v.name: v.numpy() for v in model.trainable_variables}
    assert np.isfinite(float(loss))
    # exclude_from_layer_adaptation=None takes the weight-decay list (Model Garden convention)
    # Keras numbers layer names per process (batch_normalization_7/...), so take the first
    # variable of each kind in the model rather than a fixed name
    cases = [(r"batch_normalization(_\d+)?/gamma:0$", False, False),
             (r"conv2d(_\d+)?/kernel:0$", True, True)]
    for pattern, decay, adapt in cases:
        name = next(v.name for v in model.trainable_variables if re.search(pattern, v.name))
        path = name
        expected, _ = numpy_reference.lars_step(
            before[name], gradients[name].numpy(), np.zeros_like(before[name]), 0.1,
            lars_fields["momentum"], lars_fields["weight_decay_rate"], lars_fields["eeta"],
            adapt=adapt, decay=decay)
        actual = after[name]
        assert not np.array_equal(actual, before[name]), path
        np.testing.assert_allclose(actual - before[name], expected - before[name],
                                   rtol=1e-4, atol=1e-8, err_msg=path)


TINY_EXPERIMENT = os.path.join("configs", "model_garden", "bert_tiny_lamb.yaml")


def _launch(*flags):
    command = [sys.executable, "-m", "lamb_tf.model_garden", "nlp", "--experiment=bert/pretraining",
               *flags]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=180, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


@pytest.mark.slow  # a real command-line run of Model Garden's driver
def test_launcher_runs_the_shipped_tiny_experiment_with_our_lamb(tmp_path):
    model_dir = tmp_path / "model"
    result = _launch("--mode=train", f"--model_dir={model_dir}", f"--config_file={TINY_EXPERIMENT}")

    assert result.returncode == 0, result.stderr[-3000:]
    # our optimizer's build-time exclusion report, which Model Garden's LAMB does not have
    assert "LAMB: exclude_from_weight_decay pattern 'bias' matches" in result.stderr
    first, last = (str(model_dir / f"ckpt-{step}") for step in (1, 2))
    (kernel,) = [name for name, _ in tf.train.list_variables(last)
                 if name.endswith("_intermediate_dense/kernel/.ATTRIBUTES/VARIABLE_VALUE")]
    before, after = (tf.train.load_variable(path, kernel) for path in (first, last))
    assert np.all(np.isfinite(after)) and not np.array_equal(before, after)


@pytest.mark.parametrize("signum, how, status", [
    (signal.SIGINT, "interrupted (Ctrl-C)", 130), (signal.SIGTERM, "SIGTERM", 143)])
def test_launcher_stopped_while_tensorflow_loads_is_one_line(tmp_path, signum, how, status):
    """Ctrl-C in the launcher's first seconds (`lamb_tf` importing TensorFlow) printed the
    KeyboardInterrupt's traceback through TensorFlow's modules; SIGTERM ended it without a
    word."""
    command = [sys.executable, "-m", "lamb_tf.model_garden", "nlp",
               "--experiment=bert/pretraining", "--mode=train", f"--model_dir={tmp_path}/run",
               f"--config_file={TINY_EXPERIMENT}"]
    returncode, stdout, stderr = reliability_cli.stopped_while_tensorflow_loads(command, signum)
    assert returncode == status, stderr
    assert (stdout, stderr) == (
        "", f"stopped: {how} while starting, before anything was written\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a real command-line run of Model Garden's driver, stopped at step 3
@pytest.mark.parametrize("signum, how, status", [
    (signal.SIGINT, "interrupted (Ctrl-C)", 130), (signal.SIGTERM, "SIGTERM", 143)])
def test_launcher_stopped_while_training_is_one_line(tmp_path, signum, how, status):
    """Ctrl-C during Model Garden's training loop printed the KeyboardInterrupt's traceback
    through Orbit's and TensorFlow's frames; SIGTERM ended it without a word, a checkpoint
    being written left half-written (ckpt-N_temp)."""
    command = [sys.executable, "-m", "lamb_tf.model_garden", "nlp",
               "--experiment=bert/pretraining", "--mode=train", f"--model_dir={tmp_path}",
               f"--config_file={TINY_EXPERIMENT}", "--params_override=trainer.train_steps=5000"]
    process = subprocess.Popen(  # (SIGINT at its default: a background pytest ignores it)
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    timer = threading.Timer(300, process.kill)
    timer.start()
    try:
        printed = []
        for line in process.stdout:
            printed.append(line)
            if line.startswith("train | step:      3 "):
                process.send_signal(signum)
                break
        printed.append(process.communicate()[0])
    finally:
        timer.cancel()
        process.kill()
    output = "".join(printed)
    assert process.returncode == status, output[-3000:]
    assert "Traceback" not in output
    assert (f"stopped: {how}; run the same command again to go on (Model Garden's trainer "
            "resumes from the newest checkpoint in --model_dir)\n") in output
    assert not list(tmp_path.glob("*_temp*"))


def test_a_stop_that_reaches_python_as_a_system_error_is_still_the_launchers_line(
        monkeypatch, capsys):
    """SIGTERM raised while numpy's `__array__` ran (a summary's value converted for Orbit)
    reached Python as a SystemError with it as context: a traceback and exit 1 (seen in CI
    in `test_launcher_stopped_while_training_is_one_line[15-SIGTERM-143]`)."""
    def driver_main(argv):
        try:
            model_garden_launcher._raise_terminated(15, None)  # pylint: disable=protected-access
        except BaseException:  # as CPython reports an exception raised inside C code
            raise SystemError("<built-in method __array__ of numpy.ndarray object> returned "
                              "a result with an exception set")

    monkeypatch.setattr(model_garden_launcher, "check", lambda *args: None)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as exited:
            model_garden_launcher._check_then(driver_main, "nlp")([])  # pylint: disable=protected-access
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert exited.value.code == 143
    assert capsys.readouterr().err.startswith("stopped: SIGTERM; run the same command again")


@pytest.mark.slow  # two real command-line runs of Model Garden's driver
def test_launcher_refuses_another_model_in_a_runs_model_dir_before_it_writes(tmp_path):
    """The trainer wrote the new config over the run's params.yaml, then failed to restore
    the run's checkpoint into the new model shape (ValueError, 456 lines)."""
    model_dir = tmp_path / "model"
    first = _launch("--mode=train", f"--model_dir={model_dir}", f"--config_file={TINY_EXPERIMENT}")
    assert first.returncode == 0, first.stderr[-3000:]
    saved = (model_dir / "params.yaml").read_text()
    hidden_size = yaml.safe_load(saved)["task"]["model"]["encoder"]["bert"]["hidden_size"]
    again = _launch("--mode=train", f"--model_dir={model_dir}", f"--config_file={TINY_EXPERIMENT}",
                    f"--params_override=task.model.encoder.bert.hidden_size={2 * hidden_size}")
    assert again.returncode == 2, again.stderr[-3000:]
    assert again.stderr.strip().splitlines()[-1] == (
        f"error: task.model.encoder.bert.hidden_size was {hidden_size} in the run in {model_dir}, "
        f"now {2 * hidden_size}: its checkpoints hold that model; keep the run's value, or give "
        "another --model_dir")
    assert "Traceback" not in again.stderr
    assert (model_dir / "params.yaml").read_text() == saved


@pytest.mark.slow  # a real command-line run of Model Garden's driver
def test_launcher_names_the_missing_field_in_one_line_before_any_work(tmp_path):
    # the example that used to crash after 226 lines inside Model Garden's create_trainer
    model_dir = tmp_path / "model"
    result = _launch("--mode=train", f"--model_dir={model_dir}",
                     "--params_override=trainer.optimizer_config.optimizer.type=lamb")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: trainer.optimizer_config.learning_rate.polynomial.decay_steps is "
        "not set, and Model Garden's trainer crashes without it: set it in --config_file or "
        "--params_override (e.g. configs/model_garden/bert_tiny_lamb.yaml)")
    assert "Traceback" not in result.stderr
    assert not model_dir.exists()


@pytest.mark.parametrize("override,field", [
    ({"trainer": {"optimizer_config": {"learning_rate": {"polynomial": {"decay_steps": 10}}}}},
     "trainer.optimizer_config.warmup.polynomial.warmup_steps"),
    ({"trainer": {"optimizer_config": {"learning_rate": {"polynomial": {"decay_steps": 10}},
                                       "warmup": {"polynomial": {"warmup_steps": 2}}}}},
     "task.train_data.input_path"),
    ({"trainer": {"optimizer_config": {"learning_rate": {"polynomial": {"decay_steps": 10}},
                                       "warmup": {"polynomial": {"warmup_steps": 2}}}},
      "task": {"train_data": {"input_path": "dummy"}}}, None),
])
def test_missing_field_is_the_first_one_model_garden_needs(override, field):
    params = exp_factory.get_exp_config("bert/pretraining")
    params.override(override, is_strict=True)
    assert model_garden.missing_field(params, "train") == field


_STEPS_SET = {"trainer": {"optimizer_config": {
    "learning_rate": {"polynomial": {"decay_steps": 10}},
    "warmup": {"polynomial": {"warmup_steps": 2}}}},
    "task": {"train_data": {"input_path": "dummy"}}}


@pytest.mark.parametrize("mode, field", [
    ("train", None),
    ("eval", "task.validation_data.input_path"),
    ("train_and_eval", "task.validation_data.input_path"),
    ("continuous_train_and_eval", "task.validation_data.input_path"),
    ("train_and_post_eval", "task.validation_data.input_path"),
    ("train_and_validate", "task.validation_data.input_path"),
])
def test_a_mode_that_evaluates_needs_the_validation_data(mode, field):
    params = exp_factory.get_exp_config("bert/pretraining")
    params.override(_STEPS_SET, is_strict=True)
    assert model_garden.missing_field(params, mode) == field


@pytest.mark.parametrize("mode, field", [
    ("train", "task.train_data.input_path"),
    ("eval", None),
    ("train_and_eval", "task.train_data.input_path"),
    ("continuous_train_and_eval", "task.train_data.input_path"),
    ("train_and_post_eval", "task.train_data.input_path"),
    ("train_and_validate", "task.train_data.input_path"),
])
def test_a_mode_that_trains_needs_the_training_data(mode, field):
    params = exp_factory.get_exp_config("bert/pretraining")
    params.override(_STEPS_SET, is_strict=True)
    params.task.train_data.input_path = ""
    params.task.validation_data.input_path = "dummy"
    assert model_garden.missing_field(params, mode) == field


def test_a_tfds_name_is_data_without_an_input_path():
    """Model Garden reads a TFDS dataset when `tfds_name` is set: no input_path needed."""
    params = exp_factory.get_exp_config("bert/pretraining")
    params.override(_STEPS_SET, is_strict=True)
    params.task.train_data.input_path = ""
    params.task.train_data.tfds_name = "wikipedia"
    assert model_garden.missing_field(params, "train") is None


@pytest.mark.parametrize("input_path, refused", [
    ("dummy", None),  # Model Garden's synthetic data
    ("{d}/a-*,{d}/b-*", None),  # comma-separated globs, as Model Garden's reader takes them
    (["{d}/a-*", "{d}/b-*"], None),  # a list, as its readers take too
    ("{d}/a-*,{d}/c-*", "{d}/c-*"),
])
def test_launcher_checks_every_glob_of_an_input_path(input_path, refused, tmp_path):
    from lamb_tf import model_garden_launcher

    (tmp_path / "a-0").write_text("")
    (tmp_path / "b-0").write_text("")
    form = (lambda text: text.format(d=tmp_path))
    params = exp_factory.get_exp_config("bert/pretraining")
    params.override(_STEPS_SET, is_strict=True)
    params.task.train_data.input_path = (
        form(input_path) if isinstance(input_path, str) else [form(p) for p in input_path])
    if refused is None:
        model_garden_launcher._check_input_paths(params, "train")  # pylint: disable=protected-access
    else:
        with pytest.raises(model_garden_launcher._UsageError,  # pylint: disable=protected-access
                           match=re.escape(f"task.train_data.input_path={form(refused)!r} "
                                           "matches no file")):
            model_garden_launcher._check_input_paths(params, "train")  # pylint: disable=protected-access


def test_is_registered_only_when_every_table_builds_ours():
    model_garden.register()
    try:
        optimizer_factory.NEW_OPTIMIZERS_CLS["lars"] = model_garden_lars.LARS  # one put back
        assert not model_garden.is_registered()
    finally:
        model_garden.unregister()
    assert optimizer_factory.NEW_OPTIMIZERS_CLS["lars"] is model_garden_lars.LARS


def test_launcher_without_driver_prints_usage_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["model_garden.py", "--mode=train"])
    with pytest.raises(SystemExit) as exit_info:
        model_garden_launcher.main()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "error: give the driver first, nlp or vision (got '--mode=train'): usage: python -m "
        "lamb_tf.model_garden {nlp|vision} --experiment=... --mode=train --model_dir=... "
        "[--config_file=...] [--params_override=...]\n")


def test_launcher_help_prints_usage_and_where_the_trainers_flags_are(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["model_garden.py", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        model_garden_launcher.main()
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("usage: python -m lamb_tf.model_garden {nlp|vision}")
    assert "python -m lamb_tf.model_garden nlp --helpfull" in printed


@pytest.mark.slow  # imports Model Garden's NLP trainer in a fresh process
def test_launcher_passes_helpfull_to_the_trainer_and_exits_0():
    result = subprocess.run(
        [sys.executable, "-m", "lamb_tf.model_garden", "nlp", "--helpfull"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": REPO_ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--experiment" in result.stdout and "--params_override" in result.stdout


@pytest.mark.slow  # fresh processes: TensorFlow's start-up, Model Garden's NLP trainer
@pytest.mark.parametrize("args", [["--help"], ["nlp", "--mdoel_dir=/tmp/mg"]],
                         ids=["help", "usage-error"])
def test_launcher_console_has_no_tensorflow_start_up_lines(args):
    """TensorFlow's C++ lines (CUDA probing, oneDNN, CPU features) come when `python -m`
    imports the lamb_tf package: the launcher's console stays free of them unless the
    user's environment sets TF_CPP_MIN_LOG_LEVEL."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-m", "lamb_tf.model_garden", *args],
                            capture_output=True, text=True, timeout=300,
                            env={**env, "PYTHONPATH": REPO_ROOT})
    is_help = args == ["--help"]
    assert result.returncode == (0 if is_help else 2), result.stderr[-2000:]
    for words in ("cpu_feature_guard", "oneDNN", "cuda"):
        assert words not in result.stdout + result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == (0 if is_help else 1), result.stderr


@pytest.mark.slow  # imports Model Garden's NLP trainer in a fresh process
def test_launcher_driver_help_is_its_usage_and_model_gardens_main_flags():
    """`nlp --help`: absl prints the __main__ module's docstring (lamb_tf.model_garden's
    notes on the registration) and that module's flags (none) unless the launcher says
    otherwise."""
    result = subprocess.run(
        [sys.executable, "-m", "lamb_tf.model_garden", "nlp", "--help"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": REPO_ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: python -m lamb_tf.model_garden nlp --experiment="), (
        result.stdout[:500])
    assert "official.nlp.train" in result.stdout and "--helpfull" in result.stdout
    for flag in ("--experiment", "--mode", "--model_dir", "--config_file", "--params_override"):
        assert f"\n  {flag}:" in result.stdout, flag
    assert "Model Garden integration" not in result.stdout  # lamb_tf/model_garden.py's notes


# The launcher's command lines with a user mistake, run by one process that imports
# TensorFlow and Model Garden's NLP trainer once, then forks one child per command line
# that runs `python -m lamb_tf.model_garden <args>` as the command line does (as
# tests/preloaded_cli.py does for the recipes, whose flags would clash with Model Garden's).
_FORKING_RUNNER = r"""
import json, os, runpy, sys, traceback, warnings
import lamb_tf.model_garden_launcher, official.nlp.train  # imports only: nothing of TensorFlow runs
results = []
for args, out, err in json.load(open(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        sys.argv = ["lamb_tf.model_garden", *args]
        warnings.filterwarnings("ignore", message=".*found in sys.modules.*")
        code = 0
        try:
            runpy.run_module("lamb_tf.model_garden", run_name="__main__", alter_sys=True)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    results.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
json.dump(results, open(sys.argv[2], "w"))
"""

# id: (arguments after `nlp`/`vision` ({d}: the inputs directory), key words of the one line)
BAD_LAUNCHES = {
    "missing-config-file": (["nlp", "--config_file={d}/nonexistent.yaml"],
                            ["--config_file={d}/nonexistent.yaml", "does not exist",
                             "check the path"]),
    "config-file-is-a-directory": (["nlp", "--config_file={d}/a_directory.yaml"],
                                   ["a_directory.yaml' is a directory", "give a YAML file"]),
    "config-file-bad-yaml": (["nlp", "--config_file={d}/broken.yaml"],
                             ["broken.yaml' is not valid YAML", "at line 3, column 1",
                              "fix the YAML syntax"]),
    "unknown-key-in-file": (["nlp", "--config_file={d}/unknown_key.yaml"],
                            ["unknown_key.yaml: unknown config key "
                             "'task.train_data.input_pathz'",
                             "did you mean task.train_data.input_path?"]),
    "unknown-override": (["nlp", "--params_override=trainer.train_stepz=3"],
                         ["--params_override: unknown config key 'trainer.train_stepz'",
                          "did you mean trainer.train_steps?"]),
    # Model Garden stores any value and its trainer fails on it after writing model_dir
    "wrong-type-override": (["nlp", "--params_override=trainer.train_steps=abc"],
                            ["--params_override: config key 'trainer.train_steps' of Model "
                             "Garden's bert/pretraining config takes an int, got 'abc'"]),
    "wrong-type-for-a-str-field": (["nlp", "--params_override=runtime.distribution_strategy=1"],
                                   ["--params_override: config key 'runtime.distribution_strategy'"
                                    " of Model Garden's bert/pretraining config takes a str, "
                                    "got 1 (quote it: '1')"]),
    "wrong-type-in-file": (["nlp", "--config_file={d}/wrong_type.yaml"],
                           ["wrong_type.yaml: config key 'task.train_data.global_batch_size' "
                            "of Model Garden's bert/pretraining config takes an int, got [2]"]),
    "wrong-type-in-an-unset-one-of-branch": (
        ["nlp", "--params_override=trainer.optimizer_config.learning_rate.polynomial."
                "initial_learning_rate=x"],
        ["config key 'trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate'"
         " of Model Garden's bert/pretraining config takes a float, got 'x'"]),
    "unknown-experiment": (["nlp", "--experiment=bert/pretrainnig"],
                           ["--experiment=bert/pretrainnig is not a registered Model Garden "
                            "experiment", "did you mean bert/pretraining"]),
    "flag-typo": (["nlp", "--mdoel_dir={d}/model"],
                  ["Unknown command line flag 'mdoel_dir'", "Did you mean: model_dir"]),
    "mode-typo": (["nlp", "--mode=trian"],
                  ["--mode=trian is not a mode of Model Garden's nlp trainer",
                   "use one of train, eval,"]),
    # in absl's --mode enum, but Model Garden raises NotImplementedError for it after
    # building the model and writing model_dir
    "mode-the-driver-does-not-run": (["nlp", "--mode=train_and_validate"],
                                     ["--mode=train_and_validate is not a mode of Model "
                                      "Garden's nlp trainer"]),
    # Model Garden's trainer: a FailedPreconditionError traceback after building the model
    "model-dir-is-a-file": (["nlp", "--model_dir={d}/a_file"],
                            ["--model_dir={d}/a_file: {d}/a_file is a file, not a directory",
                             "give a new directory"]),
    # our LAMB refuses it when the trainer builds the optimizer, after writing model_dir
    "optimizer-argument-ours-refuse": (
        ["nlp", "--params_override=trainer.optimizer_config.optimizer.lamb.beta_1=1.5"],
        ["trainer.optimizer_config.optimizer.lamb: beta_1 must be in [0, 1), got 1.5"]),
    # Model Garden's reader fails on it after writing model_dir
    "input-path-matches-nothing": (
        ["nlp", "--params_override=task.train_data.input_path={d}/none-*"],
        ["task.train_data.input_path='{d}/none-*' matches no file; check the path"]),
    # absl (and Model Garden's driver) would keep the last one silently
    "params-override-given-twice": (
        ["nlp", "--params_override=trainer.train_steps=3",
         "--params_override=trainer.validation_steps=1"],
        ["--params_override is given 2 times and only the last would count; give it once"]),
    "model-dir-under-a-file": (["nlp", "--model_dir={d}/a_file/run"],
                               ["--model_dir={d}/a_file/run: {d}/a_file is a file, not a "
                                "directory"]),
    # Model Garden's trainer: a NotFoundError traceback (root) or PermissionDenied after
    # building the experiment; /proc takes no new directory, whoever runs the test
    "model-dir-cannot-be-created": (["nlp", "--model_dir=/proc/lamb_tf_model_dir/run"],
                                    ["--model_dir=/proc/lamb_tf_model_dir/run: cannot write in "
                                     "/proc (", "give a directory you can write"]),
    # Model Garden's trainer would write its checkpoints, params.yaml and events among the
    # recipe's (a recipe's run directory holds config.yaml; Model Garden's, params.yaml)
    "model-dir-holds-a-recipe-run": (["nlp", "--model_dir={d}/recipe_run"],
                                     ["--model_dir={d}/recipe_run holds a lamb_tf recipe's run "
                                      "(its config.yaml)", "give another --model_dir",
                                      "resume that run with its recipe"]),
}


@pytest.fixture(scope="module")
def bad_launches(tmp_path_factory):
    """{case id: (exit status, stderr, model_dir, inputs directory)}, each case run once."""
    d = tmp_path_factory.mktemp("bad_launches")
    (d / "a_directory.yaml").mkdir()
    (d / "broken.yaml").write_text("task:\n  model: {encoder: [\n")
    (d / "unknown_key.yaml").write_text("task:\n  train_data: {input_pathz: dummy}\n")
    (d / "wrong_type.yaml").write_text("task:\n  train_data: {global_batch_size: [2]}\n")
    (d / "a_file").write_text("not a directory")  # the --model_dir of model-dir-is-a-file
    (d / "recipe_run").mkdir()  # a recipe's run: what recipes/common writes first
    (d / "recipe_run" / "config.yaml").write_text("train: {steps: 2}\n")
    jobs, cases = [], {}
    for case_id, (args, _) in BAD_LAUNCHES.items():
        model_dir = d / f"model_{case_id}"
        args = [arg.format(d=d) for arg in args]
        flags = ["--experiment=bert/pretraining", "--mode=train", f"--model_dir={model_dir}",
                 f"--config_file={TINY_EXPERIMENT}"]
        # a flag given by the case replaces the default one of the same name
        given = {arg.split("=")[0] for arg in args}
        flags = [flag for flag in flags if flag.split("=")[0] not in given]
        if case_id == "flag-typo":
            flags = [flag for flag in flags if not flag.startswith("--model_dir")]
        out, err = d / f"{case_id}.out", d / f"{case_id}.err"
        jobs.append([[args[0], *flags, *args[1:]], str(out), str(err)])
        cases[case_id] = (err, model_dir)
    (d / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([sys.executable, "-c", _FORKING_RUNNER, str(d / "jobs.json"),
                    str(d / "results.json")], cwd=REPO_ROOT, check=True, timeout=300,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    codes = json.loads((d / "results.json").read_text())
    return {case_id: (code, err.read_text(), model_dir, d)
            for (case_id, (err, model_dir)), code in zip(cases.items(), codes)}


@pytest.mark.slow  # command lines of Model Garden's NLP trainer (one import, forked)
@pytest.mark.parametrize("case_id", list(BAD_LAUNCHES))
def test_launcher_bad_input_gives_one_line_exit_2_before_any_work(bad_launches, case_id):
    code, stderr, model_dir, d = bad_launches[case_id]
    lines = stderr.strip().splitlines()
    assert code == 2, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    for words in BAD_LAUNCHES[case_id][1]:
        assert words.format(d=d) in lines[0]
    assert not model_dir.exists()


@pytest.mark.slow  # command lines of Model Garden's NLP trainer (one import, forked)
def test_launcher_leaves_a_recipe_run_as_it_was(bad_launches):
    *_, d = bad_launches["model-dir-holds-a-recipe-run"]
    assert os.listdir(d / "recipe_run") == ["config.yaml"]


def test_a_recipe_refuses_a_model_garden_runs_model_dir_before_any_work(tmp_path):
    """The other way round: a Model Garden run's directory (its params.yaml) is not a
    recipe's to train into (checkpoints and TensorBoard events would mix)."""
    from recipes.common import driver
    from recipes.common.errors import UserError

    (tmp_path / "params.yaml").write_text("task: {}\n")
    for mode in ("train", "eval", "export"):
        with pytest.raises(UserError) as error:
            driver.check_model_dir(str(tmp_path), mode)
        assert str(error.value) == (
            f"--model_dir={tmp_path} holds a Model Garden run (its params.yaml): give another "
            "--model_dir, or go on with that run with python -m lamb_tf.model_garden")
    (tmp_path / "config.yaml").write_text("train: {}\n")  # a recipe's run that has both
    driver.check_model_dir(str(tmp_path), "train")
    assert sorted(os.listdir(tmp_path)) == ["config.yaml", "params.yaml"]


@pytest.mark.parametrize("written", ["tensorflow.log", "exclusions.txt"])
def test_launcher_knows_a_recipe_run_stopped_before_its_first_checkpoint(tmp_path, written):
    """A recipe writes config.yaml with its first checkpoint; a run stopped before it holds
    what the recipe wrote first (it was taken for an empty directory and trained into)."""
    (tmp_path / written).write_text("")
    with pytest.raises(model_garden_launcher._UsageError) as error:
        model_garden_launcher._check_not_a_recipe_run(str(tmp_path))
    assert str(error.value) == (
        f"--model_dir={tmp_path} holds a lamb_tf recipe's run (its {written}): give another "
        "--model_dir, or resume that run with its recipe")
    model_garden_launcher._check_not_a_recipe_run(str(tmp_path / "new"))  # nothing there


def test_launcher_model_dir_check_leaves_nothing_behind(tmp_path):
    """The check that --model_dir can be made makes one directory in its nearest existing
    parent and removes it at once."""
    model_garden_launcher._check_model_dir(str(tmp_path / "new" / "run"))
    model_garden_launcher._check_model_dir(str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_launcher_takes_what_model_garden_s_fields_hold():
    """A whole float for an int field (YAML reads 1e4 as a float), an int for a float field,
    null for an Optional one or a str one, and a string or a list (Model Garden's readers
    take a list of globs for input_path) for a str field pass the launcher's type check; a
    fraction for an int field, a string for a float field, a number for a bool field and a
    number or a bool for a str field do not."""
    from official.core import exp_factory

    from lamb_tf import model_garden_launcher

    params = exp_factory.get_exp_config("bert/pretraining")
    fine = {"trainer": {"train_steps": 1e4, "optimizer_config": {"learning_rate": {
        "polynomial": {"initial_learning_rate": 1}}}},
        "task": {"init_checkpoint": None, "model": {"mlm_activation": "relu"},
                 "train_data": {"cycle_length": None, "is_training": False,
                                "input_path": ["a-*", "b-*"]}},
        "runtime": {"distribution_strategy": "one_device"}}
    assert model_garden_launcher._wrongly_typed(params, fine) is None
    for override, key in [({"trainer": {"train_steps": 2.5}}, "trainer.train_steps"),
                          ({"runtime": {"distribution_strategy": 1}},
                           "runtime.distribution_strategy"),
                          ({"task": {"model": {"mlm_activation": True}}},
                           "task.model.mlm_activation"),
                          ({"task": {"train_data": {"is_training": 1}}},
                           "task.train_data.is_training"),
                          ({"trainer": {"train_steps": True}}, "trainer.train_steps"),
                          ({"trainer": {"optimizer_config": {"learning_rate": {"polynomial": {
                              "initial_learning_rate": "x"}}}}},
                           "trainer.optimizer_config.learning_rate.polynomial."
                           "initial_learning_rate")]:
        assert model_garden_launcher._wrongly_typed(params, override)[0] == key


@pytest.mark.slow  # imports Model Garden's vision trainer in a fresh process
def test_an_experiment_of_the_other_trainer_is_named_as_such(tmp_path):
    """It was "not a registered Model Garden experiment", the vision ones listed. (A fresh
    process: the one of the forked launches above has the NLP experiments registered.)"""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-m", "lamb_tf.model_garden", "vision", "--experiment=bert/pretraining",
         "--mode=train", f"--model_dir={tmp_path / 'run'}"], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        "error: --experiment=bert/pretraining is one of Model Garden's nlp experiments, which "
        "its vision trainer does not register; run python -m lamb_tf.model_garden nlp ..."]
    assert not (tmp_path / "run").exists()
