"""`train.init_checkpoint` of a fine-tuning run that cannot fit its model (a Model Garden
encoder checkpoint, whose encoder belongs in encoder.pretraining_dir; a fine-tuning run of
another number of labels, or of an encoder of another shape) was refused by the restore, after
the data was prepared (labels.json written into a new --model_dir) and the model built: now one
line, exit 2, nothing written."""
import os
import shutil
import types

import pytest
import yaml

from conftest import REPO_ROOT
from recipes.bert import ecosystem_export, finetune_data
from recipes.bert import model as model_lib
from test_finetune import SEQ_LENGTH, TINY_MODEL, finetune_cli
from test_finetune import pretraining_dir  # noqa: F401  (the tiny run, a fixture)

SETTINGS = ["data.task=classification", "data.seq_length=16", "train.steps=1",
            "train.checkpoint_every=1", "train.global_batch_size=2", "train.micro_batch_size=2",
            "optimizer.warmup_steps=0", "eval.global_batch_size=2", "export.enabled=false"]


def _train(model_dir, data, pretraining, *more):
    override = ",".join([f"encoder.pretraining_dir={pretraining}", f"data.train_file={data}",
                         f"data.eval_file={data}", *SETTINGS, *more])
    return finetune_cli(REPO_ROOT, f"--model_dir={model_dir}", "--mode=train",
                        f"--params_override={override}")


def _error_lines(done):
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


TWO_LABELS = "sentence\tlabel\nthe cat sat\tfeline\nthe dog sat\tcanine\n"


@pytest.fixture(scope="module")
def first(pretraining_dir, tmp_path_factory):  # noqa: F811
    """A fine-tuning run of two labels (its model_dir), one step from `pretraining_dir`."""
    root = tmp_path_factory.mktemp("first_run")
    (root / "two.tsv").write_text(TWO_LABELS)
    done = _train(root / "first", root / "two.tsv", pretraining_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "first"


def _pretraining_run_of_shape(directory, pretraining_dir, vocab_words=0, **shape):  # noqa: F811
    """A pretraining run's layout (model_garden/ and config.yaml, no Hub export) of the tiny
    run's vocabulary (`vocab_words` more word pieces) and encoder with the `shape` changes."""
    model = types.SimpleNamespace(**{**vars(TINY_MODEL), **shape})
    directory.mkdir()
    vocab = directory / "vocab.txt"
    shutil.copy(os.path.join(pretraining_dir, "model_garden", "vocab.txt"), vocab)
    with open(vocab, "a") as f:
        f.write("".join(f"extra{i}\n" for i in range(vocab_words)))
    size = len(vocab.read_text().split())
    encoder = ecosystem_export.create_weights(model_lib.build_encoder(model, size), SEQ_LENGTH)
    ecosystem_export.write_encoder_checkpoint(str(directory / "model_garden"), encoder,
                                              ecosystem_export.encoder_config(model, size),
                                              str(vocab))
    (directory / "config.yaml").write_text(yaml.safe_dump({"data": {
        "corpus": "my_texts", "seq_length": SEQ_LENGTH, "seed": 1}}))
    return str(directory)


@pytest.mark.slow  # command-line runs
def test_an_init_checkpoint_that_cannot_fit_is_refused_first(pretraining_dir,  # noqa: F811
                                                             first, tmp_path):
    two = tmp_path / "two.tsv"
    two.write_text(TWO_LABELS)
    three = tmp_path / "three.tsv"
    three.write_text(TWO_LABELS + "the mat sat\tobject\n")
    # a run of the same task and labels: its weights are restored (the check refuses no fit)
    again = _train(tmp_path / "again", two, pretraining_dir, f"train.init_checkpoint={first}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "initialised weights from" in again.stdout
    garden = os.path.join(pretraining_dir, "model_garden")
    refused = _train(tmp_path / "garden", two, pretraining_dir, f"train.init_checkpoint={garden}")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert _error_lines(refused) == [
        f"error: train.init_checkpoint={garden!r}: {garden}/encoder-1 holds no weights of a "
        "fine-tuning run (its variables are under encoder/, not model/inner_model/: a Model "
        "Garden encoder checkpoint?); give a fine-tuning run of this task and its labels, or "
        "none; the pretrained encoder comes from encoder.pretraining_dir (give its pretraining "
        "run there)"]
    other_labels = _train(tmp_path / "three", three, pretraining_dir,
                          f"train.init_checkpoint={first}")
    assert other_labels.returncode == 2 and "Traceback" not in other_labels.stderr
    assert _error_lines(other_labels) == [
        f"error: train.init_checkpoint='{first}' is a run of 2 labels "
        f"({first}/labels.json), this one has 3; give a fine-tuning run of this "
        "task and its labels, or none; the pretrained encoder comes from "
        "encoder.pretraining_dir (give its pretraining run there)"]
    assert not (tmp_path / "garden").exists() and not (tmp_path / "three").exists()


@pytest.mark.slow  # a command-line run, and the module's fine-tuning run
def test_an_init_checkpoint_of_another_encoder_shape_is_refused_first(pretraining_dir,  # noqa: F811
                                                                      first, tmp_path):
    """A fine-tuning run from another pretraining run, of another hidden size, layers,
    vocabulary or position embeddings, passed the check and was refused by the restore
    after the data was prepared (labels.json and inputs.json written into the new
    --model_dir) and the model built; of more layers, it was restored without a word (its
    first layers only)."""
    (tmp_path / "two.tsv").write_text(TWO_LABELS)
    wider = _pretraining_run_of_shape(tmp_path / "wider", pretraining_dir, hidden_size=48)
    refused = _train(tmp_path / "new", tmp_path / "two.tsv", wider,
                     f"train.init_checkpoint={first}")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    with open(os.path.join(pretraining_dir, "model_garden", "vocab.txt")) as f:
        vocab_size = len(f.read().split())
    assert _error_lines(refused) == [
        f"error: train.init_checkpoint='{first}': {first}/checkpoints/ckpt-1 was fine-tuned "
        f"from an encoder of another shape: its bert_encoder_v2/word_embeddings/embeddings has "
        f"shape [{vocab_size}, 32], this run's encoder (encoder.pretraining_dir={wider}, by its "
        f"model_garden/encoder.yaml) makes [{vocab_size}, 48]; give a fine-tuning run of an "
        "encoder of this shape, or, as encoder.pretraining_dir, the pretraining run that the "
        f"checkpoint's run was fine-tuned from ({pretraining_dir}, by its config.yaml)"]
    assert not (tmp_path / "new").exists()
    # the other shapes, by the check itself
    config = types.SimpleNamespace(
        train=types.SimpleNamespace(init_checkpoint=str(first)),
        data=types.SimpleNamespace(task="classification"),
        encoder=types.SimpleNamespace(pretraining_dir="RUN"))
    for name, changes, misfit in [
            ("deeper", {"num_layers": 2}, "its encoder has 23 variables, this run's encoder "
             "(encoder.pretraining_dir=RUN, by its model_garden/encoder.yaml) makes 39, among "
             "them bert_encoder_v2/transformer/layer_1/self_attention_layer_norm/gamma, which "
             "the checkpoint lacks"),
            ("longer", {"max_sequence_length": 128}, "its bert_encoder_v2/position_embedding/"
             "embeddings has shape [64, 32], this run's encoder (encoder.pretraining_dir=RUN, "
             "by its model_garden/encoder.yaml) makes [128, 32]"),
            ("more_words", {"vocab_words": 3}, "its bert_encoder_v2/word_embeddings/embeddings "
             f"has shape [{vocab_size}, 32], this run's encoder (encoder.pretraining_dir=RUN, by "
             f"its model_garden/encoder.yaml) makes [{vocab_size + 3}, 32]")]:
        run = finetune_data.PretrainingRun(_pretraining_run_of_shape(
            tmp_path / name, pretraining_dir, **changes))
        with pytest.raises(finetune_data.UserError) as error:
            finetune_data.check_init_checkpoint(config, "train", str(tmp_path / "new"), None, run)
        assert f"was fine-tuned from an encoder of another shape: {misfit}; " in str(error.value)
    same = finetune_data.PretrainingRun(pretraining_dir)  # the run's own: no refusal
    finetune_data.check_init_checkpoint(config, "train", str(tmp_path / "new"), None, same)


def test_an_encoder_of_fewer_layers_than_the_checkpoints_is_a_misfit():
    """A fine-tuning run of more layers restored into this run's encoder its first layers
    only, silently (the restore checks that the model's variables are in the checkpoint)."""
    expected = {"_transformer_layers/0/_output_dense/kernel": (
        [64, 32], "bert_encoder_v2/transformer/layer_0/output/kernel")}
    found = {"_transformer_layers/0/_output_dense/kernel": [64, 32],
             "_transformer_layers/1/_output_dense/kernel": [64, 32]}
    assert finetune_data.encoder_misfit(found, expected) == (
        "its encoder has 2 variables, this run's encoder makes 1, but not its "
        "_transformer_layers/1/_output_dense/kernel")
    assert finetune_data.encoder_misfit(dict(list(found.items())[:1]), expected) is None
    prefix = finetune_data.FINETUNED_PREFIX + "layer_with_weights-0/layer_with_weights-0/"
    in_checkpoint = {prefix + path + finetune_data.VALUE_SUFFIX: shape
                     for path, shape in found.items()}
    in_checkpoint[finetune_data.FINETUNED_PREFIX + "layer_with_weights-0/layer_with_weights-1/"
                  "out_proj/kernel" + finetune_data.VALUE_SUFFIX] = [32, 2]  # the head's
    assert finetune_data.encoder_in_checkpoint(in_checkpoint, expected) == found
