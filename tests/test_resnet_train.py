"""The real CLI (`python -m recipes.resnet.train`) from configs/resnet/tiny_cpu.yaml: two steps
with LAMB and with LARS, the weight-decay/trust-ratio split each applies, a corrupt JPEG
record named by index and file, and the export reloaded in a fresh process agreeing with the
Keras model restored from the same checkpoint.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import preloaded_cli
import tensorboard_events
from lamb_tf import accumulation
from recipes.common import config as config_lib
from recipes.resnet import convert
from recipes.resnet import digits
from recipes.resnet import input as input_lib
from recipes.resnet import model as model_lib
from recipes.resnet.config import ResNetConfig

pytestmark = pytest.mark.slow  # real command-line / multi-process runs

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_CONFIG = os.path.join(REPO_ROOT, "configs", "resnet", "tiny_cpu.yaml")
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


@pytest.fixture(scope="module")
def small_digits(tmp_path_factory):
    """80 real digits as ImageNet TFRecords: a training and a held-out split."""
    directory = tmp_path_factory.mktemp("digits")
    images, labels, names = digits.load_digits()
    info = convert.convert_arrays(
        images[:80],
        labels[:80],
        str(directory),
        class_names=names,
        validation_fraction=0.25,
        num_shards=2,
    )
    return directory, info


def overrides(data_dir, **extra):
    values = {
        "data.embedded_digits": "false",
        "data.train_file_pattern": f"{data_dir}/train-*",
        "data.eval_file_pattern": f"{data_dir}/validation-*",
        "data.shuffle_buffer_size": "64",
        "train.global_batch_size": "8",
        "train.micro_batch_size": "4",  # 2 accumulation steps
        "train.steps": "2",
        "train.checkpoint_every": "2",
        "optimizer.warmup_steps": "1",
        "eval.global_batch_size": "8",
        **extra,
    }
    return ",".join(f"{key}={value}" for key, value in values.items())


def run_cli(model_dir, params_override, *extra_flags):
    """`python -m recipes.resnet.train` from the tiny config (tests/preloaded_cli.py:
    TensorFlow imported once for the test process's runs)."""
    return preloaded_cli.run(
        "recipes.resnet.train",
        [
            f"--config_file={TINY_CONFIG}",
            f"--model_dir={model_dir}",
            f"--params_override={params_override}",
            *extra_flags,
        ],
        cwd=REPO_ROOT,
        timeout=300,
        env=ENV,
    )


def exclusion_lines(model_dir):
    with open(os.path.join(model_dir, "exclusions.txt")) as f:
        table = f.read().split("\n\n", 1)[1].splitlines()[1:]
    rows = {}
    for line in table:
        path, *_, decayed, adapted = line.split()
        rows[path] = (decayed == "True", adapted == "True")
    return rows


@pytest.fixture(scope="module")
def lamb_run(small_digits, tmp_path_factory):
    data_dir, _ = small_digits
    model_dir = tmp_path_factory.mktemp("lamb_run")
    result = run_cli(model_dir, overrides(data_dir))
    return model_dir, result


def test_lamb_two_steps_from_config(lamb_run):
    model_dir, result = lamb_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "batch: global 8 = 1 replica(s) × micro-batch 4 × 2 accumulation step(s)" in result.stdout
    )
    assert "held-out loss=" in result.stdout and "top_1_accuracy=" in result.stdout
    assert "(20 examples, step 2)" in result.stdout
    assert tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")).endswith("-2")
    saved = config_lib.load_config(ResNetConfig, [os.path.join(model_dir, "config.yaml")])
    assert saved.optimizer.name == "lamb" and saved.train.steps == 2
    rows = exclusion_lines(model_dir)
    # the authors' LAMB: batch norm gets neither; kernels and the head's bias get both
    assert rows["batch_normalization/gamma"] == (False, False)
    assert rows["dense/bias"] == (True, True)
    assert rows["conv2d/kernel"] == (True, True)


def test_lars_two_steps_from_config(small_digits, tmp_path):
    data_dir, _ = small_digits
    result = run_cli(
        tmp_path,
        overrides(
            data_dir,
            **{
                "optimizer.name": "lars",
                "optimizer.learning_rate": "0.5",
                "optimizer.weight_decay_rate": "0.0002",
                "optimizer.exclude_from_weight_decay": "[batch_normalization, bias]",
                "optimizer.exclude_from_layer_adaptation": "[batch_normalization, bias]",
                "export.enabled": "false",
                "train.checkpoint_every": "1",  # checkpoints after step 1 and step 2
            },
        ),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "top_1_accuracy=" in result.stdout
    # the optimizer really is LARS: it holds one slot (momentum) per weight where LAMB would
    # hold two (m, v) and AdamW two (m, v) — the single `optimizer/` kernel below; the shared
    # exclusion summary (recipes/common/exclusion_report.py) no longer names the class
    with open(os.path.join(tmp_path, "exclusions.txt")) as f:
        summary = f.read().split("\n\n", 1)[0].splitlines()
    assert summary and all(line.startswith("optimizer: ") for line in summary)
    step_1, step_2 = (os.path.join(tmp_path, "checkpoints", f"ckpt-{n}") for n in (1, 2))
    shapes = dict(tf.train.list_variables(step_2))

    def first_conv_kernels(prefix):
        return [k for k, shape in shapes.items() if k.startswith(prefix) and shape == [7, 7, 3, 64]]

    (kernel,) = first_conv_kernels("model/")
    (momentum,) = first_conv_kernels("optimizer/")
    assert np.any(tf.train.load_variable(step_2, momentum) != 0)
    # and the weights moved at step 2
    assert np.any(tf.train.load_variable(step_1, kernel) != tf.train.load_variable(step_2, kernel))
    rows = exclusion_lines(tmp_path)
    # MLPerf's LARS skip list: batch norm and biases get neither
    assert rows["batch_normalization/gamma"] == (False, False)
    assert rows["dense/bias"] == (False, False)
    assert rows["conv2d/kernel"] == (True, True)
    assert not os.path.exists(os.path.join(tmp_path, "export"))  # one layout: issue 14


def test_corrupt_jpeg_record_is_named_by_index_and_file(small_digits, tmp_path):
    data_dir, _ = small_digits
    shard, *_ = sorted(tf.io.gfile.glob(f"{data_dir}/train-*"))
    records = [r.numpy() for r in tf.data.TFRecordDataset(shard)]
    example = tf.train.Example.FromString(records[5])
    encoded = example.features.feature["image/encoded"].bytes_list.value[0]
    example.features.feature["image/encoded"].bytes_list.value[0] = encoded[: len(encoded) // 2]
    records[5] = example.SerializeToString()
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad_shard = bad_dir / "train-00000-of-00001"
    with tf.io.TFRecordWriter(str(bad_shard)) as writer:
        for record in records:
            writer.write(record)
    params = overrides(
        data_dir,
        **{
            "data.train_file_pattern": f"{bad_dir}/train-*",
            "train.global_batch_size": "40",
            "train.micro_batch_size": "40",
            "export.enabled": "false",
        },
    )
    result = run_cli(tmp_path / "model", params, "--mode=train")
    assert result.returncode == 2, result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"error: corrupt record 5 (0-based) in {bad_shard}:")
    assert "Traceback" not in result.stderr


def test_export_reloaded_in_a_fresh_process_agrees_with_keras(lamb_run, small_digits, tmp_path):
    model_dir, result = lamb_run
    assert result.returncode == 0, result.stderr[-3000:]
    data_dir, info = small_digits
    eval_pattern = f"{data_dir}/validation-*"
    records = list(tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(eval_pattern))))
    encoded = [
        tf.io.parse_single_example(r, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})[
            "image/encoded"
        ].numpy()
        for r in records
    ]
    np.save(tmp_path / "bytes.npy", np.array(encoded, dtype=object), allow_pickle=True)
    served_file = tmp_path / "served.npy"
    script = (
        "import sys, numpy as np, tensorflow as tf\n"
        "serve = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "images = np.load(sys.argv[2], allow_pickle=True).tolist()\n"
        "out = serve(image_bytes=tf.constant(images))\n"
        "np.save(sys.argv[3], out['probabilities'].numpy())\n"
    )
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            os.path.join(model_dir, "export"),  # one layout for every recipe (issue 14)
            str(tmp_path / "bytes.npy"),
            str(served_file),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=ENV,
    )
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    served = np.load(served_file)

    # The Keras model, restored from the run's checkpoint, on the eval pipeline's images.
    config = config_lib.load_config(ResNetConfig, [os.path.join(model_dir, "config.yaml")])
    classifier = model_lib.build_model(
        config.model, config.data.num_classes, config.data.image_size
    )
    wrapper = accumulation.GradientAccumulationModel(classifier, 2)
    checkpoint = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    tf.train.Checkpoint(model=wrapper).restore(checkpoint).expect_partial()
    count = info["splits"]["validation"]["num_examples"]
    dataset = input_lib.make_eval_dataset(config.data, eval_pattern, count, steps=1)
    ((images, _, _),) = list(dataset.as_numpy_iterator())
    logits = classifier(images, training=False).numpy().astype(np.float64)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    assert served.shape == (count, 10)
    np.testing.assert_allclose(served, expected, atol=1e-5)
    assert isinstance(classifier, tf_keras.Model)


@pytest.mark.slow
def test_training_scalars_are_written_every_log_every_steps(small_digits, tmp_path):
    """learning_rate and examples_per_second reach <model_dir>/train_scalars when log_every
    is not 1: Keras' TensorBoard callback keeps a record_if on other steps during fit."""
    data_dir, _ = small_digits
    result = run_cli(tmp_path, overrides(data_dir, **{
        "train.steps": "4", "train.checkpoint_every": "4", "train.log_every": "2",
        "export.enabled": "false"}))
    assert result.returncode == 0, result.stderr[-3000:]
    steps = {}
    for step, tag, _ in tensorboard_events.scalars(tmp_path / "train_scalars"):
        steps.setdefault(tag, set()).add(step)
    assert steps.get("learning_rate") and steps.get("examples_per_second"), sorted(steps)
