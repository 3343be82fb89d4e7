"""The pretrained encoder for the ecosystem (recipes/bert/ecosystem_export.py): Model
Garden's own `bert/sentence_prediction` experiment fine-tunes from the checkpoint (with
lamb_tf's LAMB through `lamb_tf.model_garden.register()`), and the TF-Hub-style
preprocess + encoder pair reproduces the encoder's outputs."""
import os
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops of the preprocessing SavedModel)
import tf_keras
import yaml
from official.core import exp_factory
from official.core import task_factory
from official.nlp.configs import encoders
from official.nlp.configs import finetuning_experiments  # noqa: F401  (bert/sentence_prediction)

from conftest import REPO_ROOT
from lamb_tf import model_garden
from lamb_tf import tf_keras_optimizers
from recipes.bert import ecosystem_export
from recipes.bert import model as model_lib
from recipes.common.errors import UserError

pytestmark = pytest.mark.slow  # Model Garden task, two Hub SavedModels (minutes)

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "dog", "ran", "."]
TINY_MODEL = types.SimpleNamespace(
    hidden_size=16, num_layers=1, num_attention_heads=2, intermediate_size=32,
    max_sequence_length=32, type_vocab_size=2, dropout_rate=0.0, attention_dropout_rate=0.0,
    initializer_range=0.02)
SEQ_LENGTH = 8


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("ecosystem")
    vocab_file = str(root / "vocab.txt")
    with open(vocab_file, "w") as f:
        f.write("".join(t + "\n" for t in VOCAB))
    tf_keras.utils.set_random_seed(3)
    encoder = ecosystem_export.create_weights(
        model_lib.build_encoder(TINY_MODEL, len(VOCAB)), SEQ_LENGTH)
    prefix = ecosystem_export.export_for_ecosystem(str(root / "export"), encoder, TINY_MODEL,
                                                   vocab_file, SEQ_LENGTH)
    return types.SimpleNamespace(root=root, encoder=encoder, prefix=prefix,
                                 directory=os.path.dirname(prefix))


def test_layout_is_model_garden_checkpoint_config_vocab_and_hub_pair(exported):
    assert sorted(os.listdir(exported.directory)) == [
        "checkpoint", "encoder-1.data-00000-of-00001", "encoder-1.index", "encoder.yaml",
        "vocab.txt"]
    assert sorted(os.listdir(exported.root / "export")) == ["hub", "model_garden"]
    assert sorted(os.listdir(exported.root / "export" / "hub")) == ["encoder", "preprocess"]
    config = encoders.EncoderConfig.from_yaml(os.path.join(exported.directory, "encoder.yaml"))
    assert config.type == "bert_v2"
    assert config.bert_v2.vocab_size == len(VOCAB) and config.bert_v2.hidden_size == 16


def test_model_garden_sentence_prediction_task_fine_tunes_from_the_checkpoint(exported):
    experiment = exp_factory.get_exp_config("bert/sentence_prediction")
    experiment.task.init_checkpoint = exported.directory  # a directory, as users pass it
    experiment.task.model.encoder = encoders.EncoderConfig.from_yaml(
        os.path.join(exported.directory, "encoder.yaml"))
    experiment.task.model.num_classes = 3
    experiment.trainer.optimizer_config.optimizer.type = "lamb"
    experiment.trainer.optimizer_config.learning_rate.type = "constant"
    experiment.trainer.optimizer_config.learning_rate.constant.learning_rate = 0.01
    experiment.trainer.optimizer_config.warmup.type = None
    task = task_factory.get_task(experiment.task)
    model = task.build_model()
    before = [w.numpy() for w in model.checkpoint_items["encoder"].weights]
    task.initialize(model)
    restored = model.checkpoint_items["encoder"].weights
    assert len(restored) == len(exported.encoder.weights)
    for ours, theirs, fresh in zip(exported.encoder.weights, restored, before):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert any(not np.array_equal(fresh, w.numpy()) for fresh, w in zip(before, restored))

    model_garden.register()
    try:
        optimizer = task.create_optimizer(experiment.trainer.optimizer_config)
    finally:
        model_garden.unregister()
    assert isinstance(optimizer, tf_keras_optimizers.LAMB)
    rng = np.random.default_rng(0)
    inputs = {
        "input_word_ids": tf.constant(rng.integers(5, len(VOCAB), (4, SEQ_LENGTH)), tf.int32),
        "input_mask": tf.ones((4, SEQ_LENGTH), tf.int32),
        "input_type_ids": tf.zeros((4, SEQ_LENGTH), tf.int32),
        "label_ids": tf.constant([0, 1, 2, 1], tf.int32),
    }
    start = [w.numpy() for w in restored]
    logs = task.train_step(inputs, model, optimizer, metrics=task.build_metrics())
    assert np.isfinite(float(logs["loss"]))
    assert any(not np.array_equal(a, w.numpy()) for a, w in zip(start, restored))


def test_hub_pair_serves_the_encoder_outputs_from_raw_text(exported):
    preprocess = tf.saved_model.load(str(exported.root / "export" / "hub" / "preprocess"))
    encoder = tf.saved_model.load(str(exported.root / "export" / "hub" / "encoder"))
    inputs = preprocess(tf.constant(["The cat sat.", "dog"]))
    # [CLS]=2 the=5 cat=6 sat=7 .=10 [SEP]=3, padded with [PAD]=0 to SEQ_LENGTH 8.
    assert inputs["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 10, 3, 0, 0],
                                                         [2, 8, 3, 0, 0, 0, 0, 0]]
    assert inputs["input_mask"].numpy().tolist()[1] == [1, 1, 1, 0, 0, 0, 0, 0]
    outputs = encoder(inputs)
    assert {"pooled_output", "sequence_output", "encoder_outputs", "default"} <= set(outputs)
    expected = exported.encoder(inputs, training=False)
    np.testing.assert_allclose(outputs["pooled_output"].numpy(),
                               expected["pooled_output"].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs["sequence_output"].numpy(),
                               expected["sequence_output"].numpy(), rtol=1e-5, atol=1e-6)
    assert len(outputs["encoder_outputs"]) == TINY_MODEL.num_layers


@pytest.mark.parametrize("config", [
    {"model": {"depth": 10}, "data": {"image_size": 32}},  # a ResNet run's
    {"model": {key: 2 for key in ecosystem_export.MODEL_KEYS}, "data": {}},
    ["not", "a", "mapping"],
], ids=["resnet-run", "no-seq-length", "not-a-mapping"])
def test_a_model_dir_that_is_no_pretraining_run_is_one_line(tmp_path, config):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(UserError, match=r"config.yaml (is not a BERT pretraining run's config "
                                        r"\(.*\):|holds a list, not a mapping;) give the "
                                        r"--model_dir of a pretraining run"):
        ecosystem_export.read_pretraining_run(str(tmp_path))


def test_fine_tuning_from_a_directory_that_is_no_pretraining_run_is_one_line(tmp_path):
    from recipes.bert import finetune_data

    missing = str(tmp_path / "none")
    with pytest.raises(UserError, match=f"encoder.pretraining_dir={missing} does not exist: give "
                                        "the --model_dir of a pretraining run"):
        finetune_data.PretrainingRun(missing)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"model": {"depth": 10}, "data": {}}))
    with pytest.raises(UserError, match="encoder.pretraining_dir: .*config.yaml is not a BERT "
                                        "pretraining run's config"):
        finetune_data.PretrainingRun(str(tmp_path))


@pytest.mark.parametrize("args", [[], ["--model_dir="]], ids=["left-out", "empty"])
def test_the_command_without_a_model_dir_is_one_line_saying_what_it_is(args):
    """absl's words were "flag --model_dir=None: Flag --model_dir must have a value other
    than None."."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-m", "recipes.bert.ecosystem_export", *args],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["error: --model_dir is required: the --model_dir of the "
                                        "pretraining run to export (see --help)"]


@pytest.mark.parametrize("what", ["is a file", "does not exist"])
def test_the_command_given_a_file_or_nothing_says_so(tmp_path, what):
    """It said "<file>/config.yaml does not exist", after TensorFlow's import."""
    model_dir = tmp_path / "run"
    if what == "is a file":
        model_dir.write_text("")
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-m", "recipes.bert.ecosystem_export",
                           f"--model_dir={model_dir}"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: --model_dir={model_dir} {what}: give the --model_dir of a pretraining run "
        "(python -m recipes.bert.pretrain)"]


def test_the_command_into_a_run_another_process_writes_is_one_line(tmp_path):
    """Run while the pretraining run trained or exported, it wrote model_garden/ and hub/
    beside the run's own export of them."""
    from lock_holder import held_by_another_process

    with open(os.path.join(REPO_ROOT, "configs", "bert", "tiny_cpu.yaml"), encoding="utf-8") as f:
        (tmp_path / "config.yaml").write_text(f.read())
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    with held_by_another_process(tmp_path):  # as the run's own process holds it
        done = subprocess.run([sys.executable, "-m", "recipes.bert.ecosystem_export",
                               f"--model_dir={tmp_path}"], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        f"error: --model_dir={tmp_path} is in use by another lamb_tf process, which still "
        "writes there; wait for it to finish, then export again"]
    assert sorted(os.listdir(tmp_path)) == ["config.yaml"]


def test_the_learned_vocabulary_is_found_in_the_runs_data_directory_from_anywhere(
        tmp_path, monkeypatch):
    """metadata.json names vocab.txt as the preparation was given its directory (relative
    to that run's working directory): the command from another one said "vocabulary file
    runs/b1/data/vocab.txt does not exist"."""
    import json

    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    with open(os.path.join(REPO_ROOT, "configs", "bert", "tiny_cpu.yaml"), encoding="utf-8") as f:
        (run / "config.yaml").write_text(f.read())
    recorded = {"vocab_file": "runs/b1/data/vocab.txt"}
    (run / "data" / "metadata.json").write_text(json.dumps(recorded))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    vocab_file = ecosystem_export.read_pretraining_run(str(run))[1]
    assert vocab_file == str(run / "data" / "vocab.txt")


def _pretraining_run(tmp_path, hidden_size=None):
    """(model_dir, data dir) of a pretraining run as ecosystem_export reads one: the tiny
    config, a preparation's metadata.json and vocabulary, and an export's variables (of an
    encoder with `hidden_size`, default the config's)."""
    import json

    run, data = tmp_path / "run", tmp_path / "run" / "data"
    data.mkdir(parents=True)
    with open(os.path.join(REPO_ROOT, "configs", "bert", "tiny_cpu.yaml"), encoding="utf-8") as f:
        (run / "config.yaml").write_text(f.read())
    (data / "metadata.json").write_text(json.dumps({"vocab_file": str(data / "vocab.txt")}))
    (data / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB))
    model_config = ecosystem_export.read_pretraining_run(str(run))[0]
    if hidden_size:
        model_config = types.SimpleNamespace(**{**vars(model_config), "hidden_size": hidden_size})
    encoder = ecosystem_export.create_weights(
        model_lib.build_encoder(model_config, len(VOCAB)), SEQ_LENGTH)
    tf.train.Checkpoint(encoder=encoder).write(str(run / "export" / "variables" / "variables"))
    return run, data


def test_the_command_holds_the_vocabularys_directory_while_it_exports(tmp_path, monkeypatch):
    """It read the run's vocabulary without a hold: a preparation into the run's data
    directory meanwhile could write another vocab.txt under the export."""
    from lock_holder import held_by_some_process

    run, data = _pretraining_run(tmp_path)
    seen = []
    monkeypatch.setattr(ecosystem_export, "export_for_ecosystem",
                        lambda *args: seen.append((held_by_some_process(data),  # a writer: no
                                                   held_by_some_process(data, shared=True))))
    ecosystem_export.export_pretraining_run(str(run))
    assert seen == [(True, False)]
    assert not held_by_some_process(data)  # let go after


@pytest.mark.parametrize("damage", ["cut short", "another model's"])
def test_a_damaged_or_foreign_export_is_one_line(tmp_path, damage):
    """A truncated variables file was an IndexError's traceback, an export of another
    encoder shape a ValueError's."""
    run, _ = _pretraining_run(tmp_path, hidden_size=32 if damage == "another model's" else None)
    variables = run / "export" / "variables"
    if damage == "cut short":
        (data_file,) = variables.glob("variables.data-*")
        data_file.write_bytes(data_file.read_bytes()[:100])
    with pytest.raises(UserError) as refused:
        ecosystem_export.export_pretraining_run(str(run))
    again = (f"write the run's own export again with python -m recipes.bert.pretrain "
             f"--model_dir={run} --mode=export")
    if damage == "cut short":
        assert re.fullmatch(rf"the export {run}/export cannot be read \(.+\): its files are "
                            rf"damaged; {re.escape(again)}", str(refused.value))
    else:
        assert re.fullmatch(rf"the export {run}/export does not fit the encoder of the run's "
                            rf"config.yaml \(.*shape.*\): it is another model's; "
                            rf"{re.escape(again)}", str(refused.value))
    assert sorted(os.listdir(run)) == ["config.yaml", "data", "export"]  # nothing written


def test_an_earlier_export_is_replaced_and_other_files_are_refused_not_deleted(
        exported, tmp_path):
    """The export replaced model_garden/ and hub/ whole: a file of the user's there was
    deleted without a word."""
    output_dir = str(exported.root / "export")
    assert ecosystem_export.replace_problem(output_dir) is None  # what an export writes
    for name, mine in (("hub", "notes.txt"), ("model_garden", "mystuff")):
        copy = tmp_path / name
        shutil.copytree(os.path.join(output_dir, name), copy / name)
        if mine == "mystuff":
            os.makedirs(copy / name / mine)
        else:
            (copy / name / mine).write_text("mine")
        with pytest.raises(UserError) as refused:
            ecosystem_export.export_for_ecosystem(str(copy), exported.encoder, TINY_MODEL,
                                                  str(exported.root / "vocab.txt"), SEQ_LENGTH)
        assert str(refused.value) == (
            f"the Model Garden and TF-Hub export: {copy / name} holds files that are not an "
            f"earlier export's ({mine}), which the export would delete; move them away")
        assert os.path.exists(copy / name / mine)
        assert sorted(os.listdir(copy)) == [name]  # nothing written beside it


def test_a_pretraining_run_that_would_delete_a_users_file_is_refused_before_any_work(
        tmp_path):
    (tmp_path / "model_garden").mkdir()
    (tmp_path / "model_garden" / "notes.txt").write_text("mine")
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-m", "recipes.bert.pretrain",
                           "--config_file=configs/bert/tiny_cpu.yaml", f"--model_dir={tmp_path}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        f"error: --model_dir={tmp_path}: {tmp_path / 'model_garden'} holds files that are not "
        "an earlier export's (notes.txt), which the export would delete; move them away"]
    assert sorted(os.listdir(tmp_path)) == ["model_garden"]
