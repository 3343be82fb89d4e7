"""The BERT pretraining program through its real command line (tiny shapes, tiny data).

The data are prepared once per module from a small generated corpus; each training run is
a subprocess of `python -m recipes.bert.pretrain`, as a user runs it.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

import preloaded_cli
import tensorboard_events
import tiny_bert_data

pytestmark = pytest.mark.slow  # real command-line / multi-process runs

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tiny_config(data):
    """No dropout, so that micro-batches see exactly the computation of the whole batch."""
    return tiny_bert_data.config(data, micro_batch_size=16, steps=2, checkpoint_every=2,
                                 dropout_rate=0.0)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """Pretraining TFRecords from 40 generated documents of 6 sentences."""
    return tiny_bert_data.prepare(tmp_path_factory.mktemp("bert_data"))


@pytest.fixture(scope="module")
def config_file(tiny_data, tmp_path_factory):
    path = tmp_path_factory.mktemp("bert_config") / "tiny_test.yaml"
    path.write_text(yaml.safe_dump(_tiny_config(tiny_data)), encoding="utf-8")
    return str(path)


def run_pretrain(*args, timeout=300):
    """Runs the program; returns the CompletedProcess (stdout and stderr as text), through
    tests/preloaded_cli.py (TensorFlow imported once for the test process's runs)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return preloaded_cli.run("recipes.bert.pretrain", args, cwd=REPO_ROOT, env=env,
                             timeout=timeout)


def checkpoint_values(model_dir):
    """{checkpoint key: value} of the newest checkpoint in model_dir (model and optimizer)."""
    path = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    assert path is not None, f"no checkpoint under {model_dir}"
    reader = tf.train.load_checkpoint(path)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if not key.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


@pytest.fixture(scope="module")
def trained_runs(config_file, tmp_path_factory):
    """Two 2-step runs at global batch 16: one micro-batch of 16 (k=1), four of 4 (k=4)."""
    runs = {}
    for k, micro_batch in ((1, 16), (4, 4)):
        model_dir = str(tmp_path_factory.mktemp(f"bert_k{k}"))
        result = run_pretrain(f"--config_file={config_file}", f"--model_dir={model_dir}",
                              "--mode=train",
                              f"--params_override=train.micro_batch_size={micro_batch}")
        assert result.returncode == 0, result.stderr[-3000:]
        runs[k] = (model_dir, result)
    return runs


def test_two_steps_from_config_through_the_cli(trained_runs):
    model_dir, result = trained_runs[1]
    plan = "batch: global 16 = 1 replica(s) × micro-batch 16 × 1 accumulation step(s)"
    assert plan in result.stdout
    values = checkpoint_values(model_dir)
    assert int(values["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == 2
    saved = yaml.safe_load(open(os.path.join(model_dir, "config.yaml"), encoding="utf-8"))
    assert saved["train"]["micro_batch_size"] == 16 and saved["train"]["steps"] == 2
    assert tf.saved_model.contains_saved_model(os.path.join(model_dir, "export"))
    assert "excluded from weight decay" in result.stdout
    outputs = result.stdout.strip().splitlines()[-1]
    assert outputs.startswith(f"outputs in {model_dir}: checkpoints, config.yaml"), outputs
    assert ", export, model_garden, hub, " in outputs  # every export the run wrote is named
    # results.json (the shared driver's summary of a run, read by the batch-size study)
    with open(os.path.join(model_dir, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    assert (results["mode"], results["steps"], results["global_batch_size"]) == ("train", 2, 16)
    assert results["eval"] == {} and results["train"]["global_gradient_norm"] > 0
    tags = summary_tags(model_dir)
    for tag in ("batch_loss", "batch_masked_lm_accuracy", "batch_next_sentence_accuracy",
                "learning_rate", "examples_per_second", "global_gradient_norm"):
        assert tag in tags, sorted(tags)
    trust_ratio_tags = [tag for tag in tags if tag.startswith("trust_ratio/")]
    assert any("transformer/layer_0/self_attention/query/kernel" in tag
               for tag in trust_ratio_tags), trust_ratio_tags


def test_ecosystem_export_cli_writes_both_and_prints_its_own_line_only(trained_runs, tmp_path):
    """`python -m recipes.bert.ecosystem_export` on a run exported before model_garden/ and
    hub/ existed: its one line on stdout, nothing on stderr (TensorFlow's SavedModel INFO and
    WARNING lines were)."""
    model_dir = str(tmp_path / "run")
    shutil.copytree(trained_runs[1][0], model_dir,
                    ignore=shutil.ignore_patterns("model_garden", "hub"))
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-m", "recipes.bert.ecosystem_export",
                           f"--model_dir={model_dir}"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    assert done.stdout == (f"exported Model Garden encoder checkpoint to {model_dir}/model_garden "
                           f"and TF-Hub-style SavedModels to {model_dir}/hub\n")
    assert sorted(os.listdir(os.path.join(model_dir, "hub"))) == ["encoder", "preprocess"]


def test_export_writes_the_model_garden_checkpoint_and_hub_pair_of_the_trained_encoder(
        trained_runs, tiny_data):
    """model_garden/ and hub/ (recipes/bert/ecosystem_export.py, docs/finetune.md) come out of
    the pretraining program's export, holding the encoder weights training reached."""
    import tensorflow_text  # noqa: F401  (ops of the preprocessing SavedModel)
    from official.nlp.configs import encoders
    model_dir, _ = trained_runs[1]
    checkpoint_dir = os.path.join(model_dir, "model_garden")
    assert sorted(os.listdir(checkpoint_dir)) == [
        "checkpoint", "encoder-1.data-00000-of-00001", "encoder-1.index", "encoder.yaml",
        "step.json", "vocab.txt"]
    # the step of the weights, which fine-tuning names (an older export is said to be so)
    assert json.loads(open(os.path.join(checkpoint_dir, "step.json")).read()) == {"step": 2}
    assert sorted(os.listdir(os.path.join(model_dir, "hub"))) == ["encoder", "preprocess"]
    vocab = open(tiny_data.vocab_file, encoding="utf-8").read()
    assert open(os.path.join(checkpoint_dir, "vocab.txt"), encoding="utf-8").read() == vocab
    config = encoders.EncoderConfig.from_yaml(os.path.join(checkpoint_dir, "encoder.yaml"))
    assert config.type == "bert_v2"
    assert (config.bert_v2.vocab_size, config.bert_v2.hidden_size,
            config.bert_v2.num_layers) == (len(vocab.splitlines()), 16, 1)
    # Every encoder array of both exports is one of the trained checkpoint's arrays (the
    # 2 training steps moved them all away from their initial values).
    trained = list(checkpoint_values(model_dir).values())
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(checkpoint_dir))
    exported = [reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
                if key.startswith("encoder/")]
    hub_encoder = tf.saved_model.load(os.path.join(model_dir, "hub", "encoder"))
    exported += [v.numpy() for v in hub_encoder.variables]
    assert len(exported) > 20
    for array in exported:
        assert any(t.shape == array.shape and np.array_equal(t, array) for t in trained)
    preprocess = tf.saved_model.load(os.path.join(model_dir, "hub", "preprocess"))
    outputs = hub_encoder(preprocess(tf.constant(["the cat sat on the mat."])))
    assert outputs["pooled_output"].shape == (1, 16)
    assert outputs["sequence_output"].shape == (1, tiny_bert_data.SEQ_LENGTH, 16)


def summary_tags(model_dir):
    """Every TensorBoard scalar tag written under model_dir."""
    return {value.tag for log_dir in tf.io.gfile.glob(os.path.join(model_dir, "*"))
            for event in tensorboard_events.events(log_dir) for value in event.summary.value}


def test_accumulation_k4_equals_k1_through_the_cli(trained_runs):
    k1_values = checkpoint_values(trained_runs[1][0])
    k4_values = checkpoint_values(trained_runs[4][0])
    assert "× micro-batch 4 × 4 accumulation step(s)" in trained_runs[4][1].stdout
    assert k1_values.keys() == k4_values.keys()
    weights = [key for key in k1_values if key.startswith("model/")]
    assert len(weights) > 20
    for key, value in k1_values.items():
        if "/gradient_noise_scale/" in key:
            continue  # the noise-scale estimate needs 2+ micro-batches: k=1 has none to average
        np.testing.assert_allclose(k4_values[key], value, rtol=2e-5, atol=2e-6, err_msg=key)
    # The runs did train: the step counter moved and LAMB wrote its moments.
    slots = [key for key in k1_values if key.startswith("optimizer/_variables/")]
    assert slots and any(np.abs(k1_values[key]).max() > 0 for key in slots)


def test_resume_is_a_no_op_when_the_run_is_complete(trained_runs, config_file):
    model_dir, _ = trained_runs[1]
    result = run_pretrain(f"--config_file={config_file}", f"--model_dir={model_dir}",
                          "--mode=train")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "restored" in result.stdout and (
        "already trained to step 2 of train.steps=2: nothing left to train (a larger "
        "train.steps trains it further)") in result.stdout


def test_resume_with_a_changed_key_prints_it_and_keeps_the_old_config(trained_runs,
                                                                      config_file):
    model_dir, _ = trained_runs[1]
    result = run_pretrain(f"--config_file={config_file}", f"--model_dir={model_dir}",
                          "--mode=train", "--params_override=optimizer.learning_rate=0.005")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "config: optimizer.learning_rate 0.01 -> 0.005" in result.stdout
    kept = yaml.safe_load(open(os.path.join(model_dir, "config.1.yaml"), encoding="utf-8"))
    saved = yaml.safe_load(open(os.path.join(model_dir, "config.yaml"), encoding="utf-8"))
    assert (kept["optimizer"]["learning_rate"], saved["optimizer"]["learning_rate"]) == (
        0.01, 0.005)


def test_phase_two_starts_from_phase_one_weights_with_a_fresh_optimizer(
        trained_runs, config_file, tmp_path):
    """train.init_checkpoint loads weights only: the step counter starts again at 0."""
    phase_one_dir, _ = trained_runs[1]
    phase_two_dir = str(tmp_path / "phase2")
    result = run_pretrain(f"--config_file={config_file}", f"--model_dir={phase_two_dir}",
                          "--mode=train", "--params_override=train.steps=2,optimizer."
                          f"learning_rate=0.0,train.init_checkpoint={phase_one_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "initialised weights from" in result.stdout
    phase_one = checkpoint_values(phase_one_dir)
    phase_two = checkpoint_values(phase_two_dir)
    assert int(phase_two["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == 2
    # With learning rate 0 the two updates change nothing: phase 2 ends on phase 1's weights.
    weights = [key for key in phase_one if key.startswith("model/")]
    for key in weights:
        np.testing.assert_array_equal(phase_two[key], phase_one[key], err_msg=key)


def test_bad_config_key_gives_one_line_and_nonzero_exit(config_file, tmp_path):
    result = run_pretrain(f"--config_file={config_file}", f"--model_dir={tmp_path}",
                          "--params_override=train.stepz=3")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: --params_override: unknown config key 'train.stepz'"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert os.listdir(tmp_path) == []


@pytest.fixture
def pretrain_main():
    """The driver's program for `recipes.bert.pretrain.BertPretraining` with the flags parsed
    from a list, in this process (the exit-status wrapper is exercised by the subprocess test
    above)."""
    from absl import flags

    from recipes.bert import pretrain
    from recipes.common import driver
    from recipes.common import flags as flags_lib

    if "model_dir" not in flags.FLAGS:
        flags_lib.define_flags()

    def call(*args):
        flags.FLAGS(["pretrain", *args])
        try:
            return driver.run_from_flags(pretrain.BertPretraining, ["pretrain"])
        finally:
            flags.FLAGS.unparse_flags()

    return call


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--params_override=train.steps=two"], "config key 'train.steps' must be int"),
        (["--params_override=train.micro_batch_size=5"],
         "train.global_batch_size=16 is not divisible by train.micro_batch_size=5"),
        (["--config_file=/nonexistent/bert.yaml"],
         "config file '/nonexistent/bert.yaml' does not exist"),
        (["--params_override=runtime.precision=float16"],
         "runtime.precision='float16' is not one of"),
        (["--mode=export"], "no checkpoint in"),
    ],
    ids=["wrong-type", "batch-arithmetic", "missing-config-file", "bad-precision",
         "export-before-training"],
)
def test_bad_input_raises_one_line_user_error(pretrain_main, config_file, tmp_path, args,
                                              expected):
    from recipes.common.errors import UserError

    with pytest.raises(UserError) as raised:
        pretrain_main(f"--config_file={config_file}", f"--model_dir={tmp_path}", *args)
    message = str(raised.value)
    assert expected in message and "\n" not in message
    assert not os.path.exists(os.path.join(tmp_path, "checkpoints"))


def test_a_dropout_change_on_resume_is_refused_as_a_model_key(trained_runs, config_file,
                                                              pretrain_main):
    """Was: 'its checkpoint does not fit this model', of a key that has no variable."""
    from recipes.common.errors import UserError

    model_dir, _ = trained_runs[1]
    before = sorted(os.listdir(model_dir))
    with pytest.raises(UserError) as raised:
        pretrain_main(f"--config_file={config_file}", f"--model_dir={model_dir}",
                      "--params_override=model.dropout_rate=0.1")
    assert str(raised.value) == (
        f"model.dropout_rate was 0.0 in the run in {model_dir}, now 0.1: a run keeps its "
        "model.* keys from its first step to its last (they define what it trains); keep "
        "model.dropout_rate=0.0 or use a new --model_dir")
    assert sorted(os.listdir(model_dir)) == before
    with pytest.raises(UserError) as raised:  # a new --model_dir holds nothing to evaluate
        pretrain_main(f"--config_file={config_file}", f"--model_dir={model_dir}",
                      "--mode=eval", "--params_override=model.dropout_rate=0.1")
    assert str(raised.value).endswith(
        ": a run keeps its model.* keys from its first step to its last (they define what it "
        "trains); keep model.dropout_rate=0.0 to evaluate the run (without --config_file, its "
        "own config.yaml is the config)")


def test_a_change_the_data_check_refuses_is_not_announced_before_it(
        trained_runs, config_file, pretrain_main, monkeypatch, capsys):
    """The changed keys of a resumed run are printed once the task has checked its data,
    which may refuse one (BERT: data.* keys of the preparation it reuses): was 'config:
    data.seq_length ... (resuming ...)' and then the refusal of that change."""
    from recipes.bert import pretrain
    from recipes.common.errors import UserError

    def refuse(task, mode, model_dir):
        raise UserError("the data check's refusal")

    monkeypatch.setattr(pretrain.BertPretraining, "check_data", refuse)
    model_dir, _ = trained_runs[1]
    with pytest.raises(UserError, match="the data check's refusal"):
        pretrain_main(f"--config_file={config_file}", f"--model_dir={model_dir}",
                      "--params_override=optimizer.learning_rate=0.005")
    assert "config: optimizer.learning_rate" not in capsys.readouterr().out


def test_an_evaluation_of_a_trained_run_keeps_its_training_record(trained_runs, config_file,
                                                                   tmp_path):
    model_dir = str(tmp_path / "run")
    shutil.copytree(trained_runs[1][0], model_dir)
    with open(os.path.join(model_dir, "results.json"), encoding="utf-8") as f:
        trained = json.load(f)
    result = run_pretrain(f"--config_file={config_file}", f"--model_dir={model_dir}",
                          "--mode=eval", "--params_override=train.seed=1234")
    assert result.returncode == 0, result.stderr[-3000:]
    # the changed key is shown for what this run does with the trained one
    seed = yaml.safe_load(open(os.path.join(model_dir, "config.yaml"), encoding="utf-8"))
    assert (f"config: train.seed {seed['train']['seed']!r} -> 1234 (evaluating the run in "
            f"{model_dir})" in result.stdout), result.stdout
    # eval.steps=1 of eval.global_batch_size=8 (tiny_bert_data.config), of the step-2 run
    held_out = [line for line in result.stdout.splitlines() if line.startswith("held-out ")]
    assert len(held_out) == 1 and held_out[0].endswith(" (8 sequences, step 2)  [latest]")
    assert "batch: eval.global_batch_size 8 = 1 replica(s) × 8" in result.stdout
    with open(os.path.join(model_dir, "results.json"), encoding="utf-8") as f:
        evaluated = json.load(f)
    assert evaluated["train"] == trained["train"] and evaluated["mode"] == "train"
    assert evaluated["wall_time_seconds"] == trained["wall_time_seconds"]
    assert evaluated["eval"]["masked_lm_accuracy"] >= 0 and trained["eval"] == {}
    assert evaluated["eval_mode_wall_time_seconds"] > 0
    # the study refuses a misspelt --metric from this list, before any run
    from recipes.study import adapter
    assert sorted(evaluated["eval"]) == sorted(adapter.HELD_OUT_METRICS["bert"])


def test_eval_steps_beyond_the_held_out_files_evaluates_them_and_says_so(
        trained_runs, config_file, pretrain_main, tmp_path, capsys):
    """Keras' evaluate stops where the files end ("ran out of data", a log line): the console
    said nothing, and the figures were of fewer sequences than eval.steps asks (as ResNet's
    recipe says)."""
    model_dir = str(tmp_path / "run")
    shutil.copytree(trained_runs[1][0], model_dir)
    pretrain_main(f"--config_file={config_file}", f"--model_dir={model_dir}", "--mode=eval",
                  "--params_override=eval.steps=1000")
    lines = capsys.readouterr().out.splitlines()
    (held_out,) = [line for line in lines if line.startswith("held-out ")]
    evaluated = int(held_out.split(" (")[1].split(" sequences")[0].replace(",", ""))
    assert 0 < evaluated < 8 * 1000  # eval.global_batch_size=8 (tiny_bert_data.config)
    (note,) = [line for line in lines if line.startswith("eval.steps=")]
    assert note == (f"eval.steps=1000 is more than the held-out files hold (8,000 sequences): "
                    f"evaluated their {evaluated:,}")
    assert lines.index(note) < lines.index(held_out)
