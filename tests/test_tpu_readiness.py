"""TPU readiness without a TPU: each recipe's whole training step compiles with XLA.

A TPU runs the replica step as one XLA program with static shapes. Here each recipe's own
builders make the model, loss, LAMB/LARS and gradient accumulation under the
`mixed_bfloat16` policy, the recipe's real input pipeline (TFRecords written by the
recipe's own converter, distributed with `distribute_datasets_from_function`) gives one
batch, and `tf.function(model.train_step, jit_compile=True)` is lowered to HLO
(`experimental_get_compiler_ir`, which raises on anything XLA cannot compile: host-only
ops, string tensors) and then run once. The HLO must hold no bounded dynamic dimension
(data-dependent shapes, which XLA:CPU accepts but a TPU program should not have) and the
input pipeline's element spec must be fully static and numeric. The input pipelines are also
checked to shard per host through `InputContext`.
"""
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tiny_bert_data
from lamb_tf import accumulation
from recipes.bert import input as bert_input

_LEGACY_KERAS = os.environ.get("TF_USE_LEGACY_KERAS")
from recipes.bert import pretrain  # noqa: E402  (sets TF_USE_LEGACY_KERAS for its CLI)

if _LEGACY_KERAS is None:  # keep `tf.keras` of this pytest process as it was
    os.environ.pop("TF_USE_LEGACY_KERAS", None)
from recipes.bert.config import BertPretrainingConfig
from recipes.common import driver
from recipes.common import task as task_lib
from recipes.resnet import convert
from recipes.resnet import input as resnet_input
from recipes.resnet import train as resnet_train
from recipes.resnet.config import ResNetConfig

GLOBAL_BATCH, MICRO_BATCH = 8, 4  # one replica: k = 2 accumulation steps


@pytest.fixture(scope="module")
def bert_data(tmp_path_factory):
    return tiny_bert_data.prepare(tmp_path_factory.mktemp("bert_data"))


@pytest.fixture(scope="module")
def digits_pattern(tmp_path_factory):
    """16 random 32x32 RGB images of 4 classes as ImageNet TFRecords (2 shards)."""
    output_dir = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(16, 32, 32, 3), dtype=np.uint8)
    labels = np.arange(16) % 4
    convert.convert_arrays(images, labels, str(output_dir), num_shards=2)
    return str(output_dir / "train-*")


@pytest.fixture
def bfloat16_policy():
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    yield
    tf_keras.mixed_precision.set_global_policy("float32")


def _bert_config(data):
    config = BertPretrainingConfig()
    config.data.train_files, config.data.eval_files = data.train_files, data.eval_files
    config.data.vocab_file = data.vocab_file
    config.data.seq_length = tiny_bert_data.SEQ_LENGTH
    config.data.max_predictions_per_seq = tiny_bert_data.MAX_PREDICTIONS_PER_SEQ
    config.model.hidden_size, config.model.num_layers = 16, 1
    config.model.num_attention_heads, config.model.intermediate_size = 2, 32
    config.model.max_sequence_length = 32
    config.train.global_batch_size, config.train.micro_batch_size = GLOBAL_BATCH, MICRO_BATCH
    config.runtime.precision, config.runtime.jit_compile = "mixed_bfloat16", True
    config.optimizer.warmup_steps = 0  # a non-zero learning rate at the first step
    return config


def _resnet_config(optimizer_name):
    config = ResNetConfig()
    config.data.num_classes, config.data.image_size = 4, 32  # converter labels 1..4, offset 1
    config.data.shuffle_buffer_size = 16
    config.model.depth, config.model.depth_multiplier = 10, 0.25
    config.optimizer.name = optimizer_name
    config.optimizer.warmup_steps = 0  # a non-zero learning rate at the first step
    config.train.global_batch_size, config.train.micro_batch_size = GLOBAL_BATCH, MICRO_BATCH
    config.train.steps = 10
    config.runtime.precision = "mixed_bfloat16"
    return config


def _assert_static_numeric(element_spec):
    for spec in tf.nest.flatten(element_spec):
        assert spec.shape.is_fully_defined(), spec
        assert spec.dtype != tf.string, spec


def _compile_and_run_step(model, optimizer, distributed_dataset):
    """Lowers the whole train step to HLO, runs it once; returns (hlo text, the names of the
    variables the update left unchanged although their gradient was not zero)."""
    batch = next(iter(distributed_dataset))
    _assert_static_numeric(distributed_dataset.element_spec)
    step = tf.function(model.train_step, jit_compile=True)
    hlo = step.experimental_get_compiler_ir(batch)(stage="hlo")
    # XLA:CPU accepts data-dependent shapes (tf.where, boolean_mask) as bounded dynamic
    # dimensions, written `[<=n]`; TPU programs should not have them
    assert "[<=" not in hlo and ",<=" not in hlo
    before = [v.numpy() for v in model.trainable_variables]
    logs = step(batch)
    assert np.isfinite(float(logs["loss"]))
    assert int(model.optimizer.iterations.numpy()) == 1  # k micro-batches, one update
    assert int(optimizer.applied_updates.numpy()) == 1  # applied, not skipped by loss scaling
    unmoved = [v.name for b, v in zip(before, model.trainable_variables)
               if np.array_equal(b, v.numpy())]
    return hlo, [name for name in unmoved if _saw_a_gradient(optimizer, name)]


def _saw_a_gradient(optimizer, variable_name):
    """Whether the first update's gradient of `variable_name` had a non-zero element.

    LAMB's second moment v = (1 - beta_2) g^2 and LARS' momentum (with no weight decay on a
    zero variable) are zero after one step exactly when g was. A bfloat16 step can give an
    exactly zero gradient: a 2-class bias whose micro-batches hold as many of each label and
    whose logits round to the same bfloat16 value.
    """
    slots = [v for v in optimizer.variables
             if v.name in (f"v/{variable_name}", f"momentum/{variable_name}")]
    assert len(slots) == 1, (variable_name, [v.name for v in optimizer.variables][:8])
    return bool(np.any(slots[0].numpy() != 0))


@pytest.mark.slow  # compiles a whole model's training step with XLA
def test_bert_step_compiles_with_xla_under_bfloat16(bert_data, bfloat16_policy):
    config = _bert_config(bert_data)
    strategy = tf.distribute.get_strategy()
    plan = accumulation.plan_batch(GLOBAL_BATCH, MICRO_BATCH, strategy.num_replicas_in_sync)
    # the program's own builders: the task and the driver's compile_model
    task = pretrain.BertPretraining(config)
    task.prepare(None, "train")
    model, optimizer = driver.compile_model(task, strategy, plan)
    dataset = task_lib.train_dataset(task, strategy, plan, 0, config.train.steps)

    hlo, stuck = _compile_and_run_step(model, optimizer, dataset)

    assert "bf16[" in hlo  # mixed_bfloat16 compute inside the compiled step
    assert "while" in hlo  # the k-micro-batch accumulation loop is inside the XLA program
    assert not stuck  # every variable with a non-zero gradient was updated


@pytest.mark.slow  # compiles a whole model's training step with XLA
def test_resnet_lars_step_compiles_with_xla_under_bfloat16(digits_pattern, bfloat16_policy):
    # LARS here, LAMB in the BERT step: each optimizer's update is compiled once
    config = _resnet_config("lars")
    strategy = tf.distribute.get_strategy()
    plan = accumulation.plan_batch(GLOBAL_BATCH, MICRO_BATCH, strategy.num_replicas_in_sync)
    config.runtime.jit_compile = True
    config.data.train_file_pattern = digits_pattern
    task = resnet_train.ResNetClassification(config)
    task.prepare(None, "train")
    model, optimizer = driver.compile_model(task, strategy, plan)
    dataset = task_lib.train_dataset(task, strategy, plan, 0, config.train.steps)

    hlo, stuck = _compile_and_run_step(model, optimizer, dataset)

    assert "bf16[" in hlo and "while" in hlo
    assert not stuck  # every variable with a non-zero gradient was updated


def _hosts():
    """Input contexts of two hosts with one replica each."""
    return [tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=host,
                                       num_replicas_in_sync=2) for host in (0, 1)]


def test_bert_input_shards_per_host_with_static_shapes(bert_data):
    rows = []
    for context in _hosts():
        dataset = bert_input.make_pretraining_dataset(
            bert_data.train_files, seq_length=tiny_bert_data.SEQ_LENGTH,
            max_predictions_per_seq=tiny_bert_data.MAX_PREDICTIONS_PER_SEQ,
            batch_size=GLOBAL_BATCH, is_training=False, input_context=context)
        _assert_static_numeric(dataset.element_spec)
        features, _ = dataset.element_spec
        assert features["input_word_ids"].shape == (GLOBAL_BATCH // 2, tiny_bert_data.SEQ_LENGTH)
        rows.append({tuple(row) for features, _ in dataset
                     for row in features["input_word_ids"].numpy()})
    assert rows[0] and rows[1] and not rows[0] & rows[1]  # each host reads its own shard


def test_resnet_input_shards_per_host_with_static_shapes(digits_pattern):
    config = _resnet_config("lamb")
    steps = resnet_input.eval_steps(16, GLOBAL_BATCH, num_pipelines=2)
    fingerprints = []  # pixel sum of each real (weight 1) eval image, per host
    for context in _hosts():
        dataset = resnet_input.make_eval_dataset(
            config.data, digits_pattern, GLOBAL_BATCH // 2, steps, input_context=context)
        _assert_static_numeric(dataset.element_spec)
        assert dataset.element_spec[0].shape == (GLOBAL_BATCH // 2, 32, 32, 3)
        fingerprints.append([float(image.numpy().sum()) for images, _, weights in dataset
                             for image, weight in zip(images, weights) if weight > 0])
    assert len(fingerprints[0]) + len(fingerprints[1]) == 16  # every image once
    assert not set(fingerprints[0]) & set(fingerprints[1])


def test_bert_pipeline_feeds_each_replica_its_share(bert_data, two_cpu_strategy):
    config = _bert_config(bert_data)
    task = pretrain.BertPretraining(config)
    task.prepare(None, "train")
    plan = accumulation.plan_batch(GLOBAL_BATCH, GLOBAL_BATCH // 2, 2)
    dataset = task_lib.train_dataset(task, two_cpu_strategy, plan, 0, config.train.steps)
    features, _, _ = next(iter(dataset))
    shares = two_cpu_strategy.experimental_local_results(features["input_word_ids"])
    assert [tuple(share.shape) for share in shares] == [(GLOBAL_BATCH // 2,
                                                         tiny_bert_data.SEQ_LENGTH)] * 2
    assert not np.array_equal(shares[0].numpy(), shares[1].numpy())
