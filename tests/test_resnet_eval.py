"""The ResNet task's held-out evaluation counts only real examples, whatever `eval.steps` is.

The eval batches are padded with zero-weight examples (fixed shapes). The expected numbers
are computed here, independently of Keras' evaluate: the model's logits on the examples of
weight 1, and label-smoothed cross-entropy and top-1 written out in NumPy.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from recipes.common import config as config_lib
from recipes.common import driver
from recipes.resnet import convert, digits
from recipes.resnet import input as input_lib
from recipes.resnet import train as resnet_train

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_CONFIG = os.path.join(REPO_ROOT, "configs", "resnet", "tiny_cpu.yaml")
EVAL_BATCH = 8
HELD_OUT = 20  # 2 of each class's 10 digits: 3 eval batches of 8, the last with 4 padded slots


@pytest.fixture(scope="module")
def held_out_digits(tmp_path_factory):
    """10 real digits of each class as ImageNet TFRecords: 80 for training, 20 held out."""
    directory = tmp_path_factory.mktemp("digits")
    images, labels, names = digits.load_digits()
    chosen = np.concatenate([np.flatnonzero(labels == label)[:10] for label in range(10)])
    info = convert.convert_arrays(images[chosen], labels[chosen], str(directory),
                                  class_names=names, validation_fraction=0.2, num_shards=2)
    assert info["splits"]["validation"]["num_examples"] == HELD_OUT
    return str(directory)


def _task_and_model(data_dir, model_dir, strategy, eval_steps, eval_num_examples=0,
                    extra=()):
    override = ",".join([*extra, 
        "data.embedded_digits=false", f"data.train_file_pattern={data_dir}/train-*",
        f"data.eval_file_pattern={data_dir}/validation-*", f"eval.steps={eval_steps}",
        f"eval.global_batch_size={EVAL_BATCH}", "train.global_batch_size=8",
        "train.micro_batch_size=4", f"data.eval_num_examples={eval_num_examples}",
    ])
    config = config_lib.load_config(resnet_train.ResNetConfig, [TINY_CONFIG], override)
    task = resnet_train.ResNetClassification(config)
    task.check_config()
    task.prepare(model_dir, "eval")
    tf_keras.utils.set_random_seed(0)
    plan = driver.plan_batch(config, strategy.num_replicas_in_sync)
    model, _ = driver.compile_model(task, strategy, plan)
    return task, model


def _expected(task, steps):
    """(mean smoothed cross-entropy, top-1, count) over the real examples of `steps` batches."""
    dataset = input_lib.make_eval_dataset(
        task.config.data, task.data.eval_pattern, EVAL_BATCH, steps)
    losses, hits = [], []
    smoothing, classes = task.config.train.label_smoothing, task.config.data.num_classes
    for images, labels, weights in dataset.as_numpy_iterator():
        logits = task.classifier(images[weights == 1], training=False).numpy().astype(np.float64)
        labels = labels[weights == 1]
        log_p = logits - logits.max(1, keepdims=True)
        log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
        target = np.full_like(log_p, smoothing / classes)
        target[np.arange(len(labels)), labels] += 1 - smoothing
        losses.extend(-(target * log_p).sum(1))
        hits.extend(logits.argmax(1) == labels)
    return np.mean(losses), np.mean(hits), len(losses)


@pytest.mark.parametrize("eval_steps, steps_read", [(0, 3), (1000, 3), (1, 1), (2, 2)])
def test_loss_metrics_and_count_are_over_the_real_examples(
        held_out_digits, tmp_path, capsys, eval_steps, steps_read):
    strategy = tf.distribute.get_strategy()
    task, model = _task_and_model(held_out_digits, str(tmp_path), strategy, eval_steps)
    results = task.evaluate(model, strategy)
    loss, top_1, count = _expected(task, steps_read)
    assert count == min(HELD_OUT, steps_read * EVAL_BATCH)
    np.testing.assert_allclose(results["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(results["top_1_accuracy"], top_1, rtol=1e-6)
    assert f"({count:,} examples, step 0)" in task.describe_evaluation(results)
    told = "eval.steps=1000 is more than the 3 step(s) of 8 that hold the 20 held-out " \
           "examples: evaluating 3"
    assert (told in capsys.readouterr().out) == (eval_steps == 1000)


@pytest.mark.parametrize("num_classes", [3, 5, 6])
def test_top_5_is_reported_only_above_5_classes(tmp_path, num_classes):
    """With 5 classes or fewer every label is among the top 5: top-5 accuracy was 1.0 always,
    printed and written to results.json as a figure. It is left out there; above 5 classes it
    is the share of examples whose label is among the 5 largest logits."""
    images, labels, names = digits.load_digits()
    chosen = np.concatenate([np.flatnonzero(labels == label)[:10] for label in range(num_classes)])
    data_dir = str(tmp_path / "digits")
    convert.convert_arrays(images[chosen], labels[chosen], data_dir,
                           class_names=names[:num_classes], validation_fraction=0.2,
                           num_shards=1)
    strategy = tf.distribute.get_strategy()
    task, model = _task_and_model(data_dir, str(tmp_path / "run"), strategy, 0,
                                  extra=[f"data.num_classes={num_classes}"])
    results = task.evaluate(model, strategy)
    dataset = input_lib.make_eval_dataset(task.config.data, task.data.eval_pattern, EVAL_BATCH,
                                          steps=2)  # 2 x 8 slots: the 6, 10 or 12 held out
    ranks = []  # of each real example's label among its logits (0: the largest)
    for images, labels, weights in dataset.as_numpy_iterator():
        if not weights.any():  # (3 classes: the second batch is all padding)
            continue
        logits = task.classifier(images[weights == 1], training=False).numpy()
        label_logit = logits[np.arange(len(logits)), labels[weights == 1]][:, None]
        ranks.extend((logits > label_logit).sum(1))
    ranks = np.array(ranks)
    assert len(ranks) == 2 * num_classes
    if num_classes <= 5:
        assert sorted(results) == ["loss", "top_1_accuracy"]
        assert "top_5" not in task.describe_evaluation(results)
    else:
        assert sorted(results) == ["loss", "top_1_accuracy", "top_5_accuracy"]
        np.testing.assert_allclose(results["top_5_accuracy"], np.mean(ranks < 5), rtol=1e-6)
    np.testing.assert_allclose(results["top_1_accuracy"], np.mean(ranks == 0), rtol=1e-6)


def test_two_replicas_count_the_real_examples_once(held_out_digits, tmp_path, two_cpu_strategy):
    task, model = _task_and_model(held_out_digits, str(tmp_path), two_cpu_strategy, 0)
    results = task.evaluate(model, two_cpu_strategy)
    loss, top_1, count = _expected(task, 3)
    np.testing.assert_allclose(results["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(results["top_1_accuracy"], top_1, rtol=1e-6)
    assert f"({count:,} examples, step 0)" in task.describe_evaluation(results)


def test_two_input_pipelines_scale_the_loss_by_every_pipelines_slots(
        held_out_digits, tmp_path, two_cpu_strategy, monkeypatch):
    """With several input pipelines (multi-worker, TPU pods) the padding correction counted
    one pipeline's batch slots, not all of them: the held-out loss came out divided by the
    number of hosts. Here the 2 replicas are counted as 2 pipelines of 1 replica each:
    3 steps of 2 x 4 slots, as the one pipeline of 2 replicas reads; 20 of them real."""
    task, model = _task_and_model(held_out_digits, str(tmp_path), two_cpu_strategy, 0)
    monkeypatch.setattr(input_lib, "num_input_pipelines", lambda strategy: 2)
    results = task.evaluate(model, two_cpu_strategy)
    loss, top_1, count = _expected(task, 3)
    assert count == HELD_OUT
    np.testing.assert_allclose(results["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(results["top_1_accuracy"], top_1, rtol=1e-6)


def test_an_eval_num_examples_above_the_files_evaluates_and_counts_the_real_ones(
        held_out_digits, tmp_path, capsys):
    # 50 configured, 20 in the files: 7 steps of 8, the 36 slots after the 20 real ones
    # padding; the loss was scaled by 50 and the line said "50 examples"
    strategy = tf.distribute.get_strategy()
    task, model = _task_and_model(held_out_digits, str(tmp_path), strategy, 0,
                                  eval_num_examples=50)
    results = task.evaluate(model, strategy)
    loss, top_1, count = _expected(task, 3)
    assert count == HELD_OUT
    np.testing.assert_allclose(results["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(results["top_1_accuracy"], top_1, rtol=1e-6)
    assert f"({HELD_OUT:,} examples, step 0)" in task.describe_evaluation(results)
    assert ("data.eval_num_examples=50 is more than the held-out files hold: evaluated their "
            f"{HELD_OUT} examples") in capsys.readouterr().out


def test_a_corrupt_held_out_record_is_named_from_the_held_out_files(
        held_out_digits, tmp_path, capsys):
    """An input error while evaluating was looked for in the training files: the one-line
    error named no file (the training files decode) instead of the held-out record."""
    import shutil

    from recipes.common.errors import UserError

    data_dir = tmp_path / "digits"
    shutil.copytree(held_out_digits, data_dir)
    path = sorted(tf.io.gfile.glob(str(data_dir / "validation-*")))[0]
    records = [record.numpy() for record in tf.data.TFRecordDataset(path)]
    example = tf.train.Example.FromString(records[1])
    jpeg = example.features.feature["image/encoded"].bytes_list.value[0]
    example.features.feature["image/encoded"].bytes_list.value[0] = jpeg[:len(jpeg) // 3]
    records[1] = example.SerializeToString()
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    config = config_lib.load_config(resnet_train.ResNetConfig, [TINY_CONFIG], ",".join([
        "data.embedded_digits=false", f"data.train_file_pattern={data_dir}/train-*",
        f"data.eval_file_pattern={data_dir}/validation-*"]))
    task = resnet_train.ResNetClassification(config)
    task.prepare(str(tmp_path), "eval")
    error = tf.errors.InvalidArgumentError(None, None, "jpeg decode failed")
    explained = task.explain_input_error(error, "eval")
    assert isinstance(explained, UserError)
    assert str(explained).startswith(f"corrupt record 1 (0-based) in {path}: ")
    assert f"scanning {data_dir}/validation-* for the record it cannot read" in capsys.readouterr().out


def test_an_eval_set_without_records_is_refused_before_any_evaluation(tmp_path):
    from recipes.common.errors import UserError
    from recipes.resnet import data as data_lib
    from recipes.resnet.config import DataConfig

    (tmp_path / "validation-00000").write_bytes(b"")  # a TFRecord file of no records
    data = DataConfig(eval_file_pattern=str(tmp_path / "validation-*"))
    with pytest.raises(UserError, match=r"data.eval_file_pattern='.*validation-\*' holds no "
                                        "records: nothing to evaluate"):
        data_lib.resolve_data(data, str(tmp_path), "eval")


def test_embedded_digits_evaluate_as_many_examples_as_their_held_out_files_hold(
        tmp_path, monkeypatch):
    """The embedded digits resolved for evaluation: eval_examples is the held-out split's
    size (10 digits of each class, 0.2 held out: 2 a class, 20), not the training split's."""
    from recipes.resnet import data as data_lib
    from recipes.resnet.config import DataConfig

    images, labels, names = digits.load_digits()
    chosen = np.concatenate([np.flatnonzero(labels == label)[:10] for label in range(10)])
    monkeypatch.setattr(data_lib.digits, "load_digits",
                        lambda: (images[chosen], labels[chosen], names))
    data = DataConfig(embedded_digits=True, num_classes=10, digits_validation_fraction=0.2)
    resolved = data_lib.resolve_data(data, str(tmp_path), "eval")
    in_files = sum(1 for _ in tf.data.TFRecordDataset(resolved.eval_files))
    assert resolved.eval_examples == in_files == 20


@pytest.mark.parametrize("override, message", [
    ("data.num_classes=5", "data.num_classes=5, but {info} (written by recipes.resnet.convert) "
                           "names 10 classes; give data.num_classes=10"),
    ("data.label_offset=0", "data.label_offset=0, but {info} (written by "
                            "recipes.resnet.convert) gives the records' labels from 1; give "
                            "data.label_offset=1"),
    ("data.num_classes=12", None),  # more classes than the data's: unused outputs, trains
])
def test_a_class_count_or_offset_against_the_converters_info_is_refused_before_any_work(
        held_out_digits, override, message):
    """Was found only once the model was built, by the first record's label (or not at
    all, when the first record's label fitted), with neither value named."""
    from recipes.common import config as config_lib
    from recipes.common.errors import UserError
    from recipes.resnet import data as data_lib
    from recipes.resnet.config import ResNetConfig

    config = config_lib.load_config(ResNetConfig, [TINY_CONFIG], ",".join([
        "data.embedded_digits=false", f"data.train_file_pattern={held_out_digits}/train-*",
        f"data.eval_file_pattern={held_out_digits}/validation-*", override]))
    if message is None:
        assert data_lib.list_data_files(config.data, "train_and_eval")["eval"]
        return
    with pytest.raises(UserError) as error:
        data_lib.list_data_files(config.data, "train")
    info = os.path.join(held_out_digits, "dataset_info.json")
    assert str(error.value) == message.format(info=info)
