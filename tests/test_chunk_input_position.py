"""Where each checkpoint chunk's input pipeline starts (recipes.common.task.chunk_input_position),
and the one dataset of several chunks (recipes.common.task.train_dataset).

Every recipe shuffles a chunk with `train.seed + its regular first step` and skips only the
steps of its own chunk that a run stopped mid-chunk already trained. So the batch of a step
does not depend on where the run started, and a chunk late in a long run never re-reads
what earlier chunks consumed. One `fit` reads several chunks from one dataset, which must
hold exactly the batches of a pipeline made afresh for each chunk.
"""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import tiny_bert_data  # noqa: E402
from recipes.bert import finetune_data  # noqa: E402
from recipes.bert import input as input_lib  # noqa: E402
from recipes.bert import pretrain as bert_pretrain  # noqa: E402
from recipes.bert.config import BertPretrainingConfig  # noqa: E402
from recipes.common import task as task_lib  # noqa: E402
from recipes.common.task import chunk_input_position  # noqa: E402
from recipes.resnet import convert  # noqa: E402
from recipes.resnet import input as resnet_input  # noqa: E402
from recipes.resnet import train as resnet_train  # noqa: E402
from recipes.resnet.config import ResNetConfig  # noqa: E402

CHECKPOINT_EVERY = 4


@pytest.mark.parametrize("first_step, expected", [
    (0, (0, 0)), (3, (0, 3)), (4, (4, 0)), (4001, (4000, 1)),
])
def test_chunk_seed_offset_is_its_regular_start_and_the_rest_is_skipped(first_step, expected):
    assert chunk_input_position(first_step, CHECKPOINT_EVERY) == expected


@pytest.fixture(scope="module")
def digits_pattern(tmp_path_factory):
    """32 random 32x32 images of 4 classes as ImageNet-format TFRecords (2 shards)."""
    output_dir = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(32, 32, 32, 3), dtype=np.uint8)
    convert.convert_arrays(images, np.arange(32) % 4, str(output_dir), num_shards=2)
    return str(output_dir / "train-*")


def _resnet_task(pattern):
    config = ResNetConfig()
    config.data.train_file_pattern = pattern
    config.data.num_classes, config.data.image_size = 4, 32
    config.data.shuffle_buffer_size = 8
    config.train.global_batch_size = config.train.micro_batch_size = 4
    config.train.checkpoint_every, config.train.steps = CHECKPOINT_EVERY, 4 * CHECKPOINT_EVERY
    task = resnet_train.ResNetClassification(config)
    task.prepare(None, "train")
    return task


PLAN = type("Plan", (), {"per_replica_batch_size": 4})()


def _labels(task, first_step, steps):
    """The labels of steps first_step + 1 .. first_step + steps, read as one `fit` would."""
    dataset = task_lib.train_dataset(task, tf.distribute.get_strategy(), PLAN, first_step,
                                     first_step + steps)
    return [labels.numpy() for _, labels in dataset.take(steps)]


def _chunk_labels(task, seed, steps_to_skip, steps):
    """The labels of one chunk's own pipeline, made afresh."""
    dataset = task.train_replica_dataset(tf.distribute.InputContext(), PLAN, seed,
                                         steps_to_skip)
    return [labels.numpy() for _, labels in dataset.take(steps)]


def test_resnet_late_chunk_skips_only_its_own_trained_steps(digits_pattern, monkeypatch):
    task = _resnet_task(digits_pattern)
    calls = []
    real = resnet_input.make_train_dataset
    monkeypatch.setattr(resnet_input, "make_train_dataset",
                        lambda *args, **kwargs: calls.append(kwargs) or real(*args, **kwargs))
    _labels(task, 3 * CHECKPOINT_EVERY + 1, 1)
    assert calls[0]["skip_batches"] == 1  # not the 13 steps the run trained before
    assert calls[0]["seed"] == task.config.train.seed + 3 * CHECKPOINT_EVERY


def test_resnet_resumed_mid_chunk_reads_the_batches_of_the_uninterrupted_chunk(digits_pattern):
    task = _resnet_task(digits_pattern)
    chunk = _labels(task, CHECKPOINT_EVERY, 4)
    resumed = _labels(task, CHECKPOINT_EVERY + 2, 2)
    np.testing.assert_array_equal(np.stack(chunk[2:]), np.stack(resumed))
    # the next chunk is shuffled with its own seed, not a continuation of this one
    assert not np.array_equal(np.stack(chunk), np.stack(_labels(task, 0, 4)))


def test_one_dataset_over_chunks_holds_each_chunks_own_pipeline_batches(digits_pattern):
    task = _resnet_task(digits_pattern)
    seed = task.config.train.seed
    # from mid-chunk 0 (a resumed run) through chunks 1 and 2 into chunk 3
    joined = _labels(task, 2, 3 * CHECKPOINT_EVERY + 1 - 2)
    afresh = (_chunk_labels(task, seed, 2, CHECKPOINT_EVERY - 2)
              + _chunk_labels(task, seed + CHECKPOINT_EVERY, 0, CHECKPOINT_EVERY)
              + _chunk_labels(task, seed + 2 * CHECKPOINT_EVERY, 0, CHECKPOINT_EVERY)
              + _chunk_labels(task, seed + 3 * CHECKPOINT_EVERY, 0, 1))
    assert len(joined) == len(afresh) == 3 * CHECKPOINT_EVERY - 1
    np.testing.assert_array_equal(np.stack(joined), np.stack(afresh))


def _bert_task(tmp_path):
    """The BERT pretraining task on tiny TFRecords in `tmp_path`, batch 4."""
    config = BertPretrainingConfig()
    config.data.seq_length = tiny_bert_data.SEQ_LENGTH
    config.data.max_predictions_per_seq = tiny_bert_data.MAX_PREDICTIONS_PER_SEQ
    config.train.global_batch_size = config.train.micro_batch_size = 4
    config.train.checkpoint_every, config.train.steps = CHECKPOINT_EVERY, 4 * CHECKPOINT_EVERY
    task = bert_pretrain.BertPretraining(config)
    task.data = tiny_bert_data.prepare(tmp_path)
    return task


def test_bert_one_dataset_over_chunks_holds_each_chunks_own_pipeline_batches(tmp_path):
    """The BERT pipeline (Model Garden's reader) of each chunk, joined into the one dataset
    of a `fit`: from mid-chunk 0 (a resumed run) into chunk 2."""
    task = _bert_task(tmp_path)
    seed = task.config.train.seed

    def word_ids(dataset, steps):
        return [batch[0]["input_word_ids"].numpy() for batch in dataset.take(steps)]

    def chunk(seed, steps_to_skip, steps):
        return word_ids(task.train_replica_dataset(tf.distribute.InputContext(), PLAN, seed,
                                                   steps_to_skip), steps)

    joined = word_ids(task_lib.train_dataset(task, tf.distribute.get_strategy(), PLAN, 1,
                                             2 * CHECKPOINT_EVERY + 2), 2 * CHECKPOINT_EVERY + 1)
    afresh = (chunk(seed, 1, CHECKPOINT_EVERY - 1)
              + chunk(seed + CHECKPOINT_EVERY, 0, CHECKPOINT_EVERY)
              + chunk(seed + 2 * CHECKPOINT_EVERY, 0, 2))
    np.testing.assert_array_equal(np.stack(joined), np.stack(afresh))
    # and the chunks differ: each is shuffled with its own seed
    assert not np.array_equal(np.stack(afresh[:3]), np.stack(afresh[3:6]))


def test_bert_chunk_pipeline_is_the_readers_batches_after_the_skipped_ones_split_for_keras(
        tmp_path):
    """A BERT chunk pipeline that skips 2 steps yields the reader's 3rd, 4th, ... batches
    (`make_pretraining_dataset`, the same seed) as Keras' (inputs, targets, sample_weights):
    the features as inputs, the masked-LM ids and next-sentence labels as targets, the
    masked-LM weights and ones as weights."""
    task = _bert_task(tmp_path)
    config = task.config
    seed, skipped, steps = 7, 2, 3
    chunk = list(task.train_replica_dataset(tf.distribute.InputContext(), PLAN, seed,
                                            skipped).take(steps))
    reader = list(input_lib.make_pretraining_dataset(
        task.data.train_files, seq_length=config.data.seq_length,
        max_predictions_per_seq=config.data.max_predictions_per_seq, batch_size=4,
        is_training=True, input_context=tf.distribute.InputContext(),
        seed=seed).skip(skipped).take(steps))
    assert len(chunk) == len(reader) == steps
    for (inputs, targets, weights), (features, labels) in zip(chunk, reader):
        assert sorted(inputs) == sorted(features)
        for name in features:
            np.testing.assert_array_equal(inputs[name], features[name])
        np.testing.assert_array_equal(targets["masked_lm"], labels["masked_lm_ids"])
        np.testing.assert_array_equal(targets["next_sentence"],
                                      np.reshape(labels["next_sentence_labels"], [-1]))
        np.testing.assert_array_equal(weights["masked_lm"], labels["masked_lm_weights"])
        np.testing.assert_array_equal(weights["next_sentence"], np.ones([4], np.float32))


def test_the_dataset_of_a_fit_goes_on_with_its_last_chunk_like_a_chunk_pipeline(
        digits_pattern):
    # a dataset exactly as long as its `fit` trained the BERT recipe to other weights
    task = _resnet_task(digits_pattern)
    dataset = task_lib.train_dataset(task, tf.distribute.get_strategy(), PLAN, 0,
                                     2 * CHECKPOINT_EVERY)
    assert dataset.cardinality() == tf.data.INFINITE_CARDINALITY
    beyond = [labels.numpy() for _, labels in dataset.take(2 * CHECKPOINT_EVERY + 2)]
    last_chunk = _chunk_labels(task, task.config.train.seed + CHECKPOINT_EVERY, 0,
                               CHECKPOINT_EVERY + 2)
    np.testing.assert_array_equal(np.stack(beyond[CHECKPOINT_EVERY:]), np.stack(last_chunk))


def test_finetune_resumed_mid_chunk_reads_the_batches_of_the_uninterrupted_chunk():
    features = {"ids": np.arange(40, dtype=np.int32)}
    targets = {"label": np.arange(40, dtype=np.int32) % 3}
    examples = tf.data.Dataset.from_tensor_slices((features, targets))

    def first_ids(steps_to_skip, steps):
        dataset = finetune_data.train_replica_dataset(tf.distribute.InputContext(), examples,
                                                      4, seed=7, steps_to_skip=steps_to_skip)
        return [batch[0]["ids"].numpy() for batch in dataset.take(steps)]

    np.testing.assert_array_equal(np.stack(first_ids(0, 5)[3:]), np.stack(first_ids(3, 2)))


# One input pipeline feeding 2 replicas: each step takes one per-replica batch per replica,
# so a chunk resumed after k trained steps starts at the pipeline's batch 2k.
TWO_REPLICAS_ONE_PIPELINE = tf.distribute.InputContext(
    num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)


def test_finetune_resumed_with_two_replicas_per_pipeline_skips_two_batches_a_step():
    features = {"ids": np.arange(40, dtype=np.int32)}
    targets = {"label": np.arange(40, dtype=np.int32) % 3}
    examples = tf.data.Dataset.from_tensor_slices((features, targets))

    def ids(steps_to_skip, batches):
        dataset = finetune_data.train_replica_dataset(
            TWO_REPLICAS_ONE_PIPELINE, examples, 4, seed=7, steps_to_skip=steps_to_skip)
        return [batch[0]["ids"].numpy() for batch in dataset.take(batches)]

    fresh = ids(0, 8)
    assert fresh[0].shape == (2,)  # global batch 4 over 2 replicas
    # 3 steps trained: 6 per-replica batches read; the resumed run starts at batch 6
    np.testing.assert_array_equal(np.stack(ids(3, 2)), np.stack(fresh[6:8]))


def test_bert_resumed_with_two_replicas_per_pipeline_skips_two_batches_a_step(tmp_path):
    task = _bert_task(tmp_path)  # global batch 4: 2 sequences per replica

    def word_ids(steps_to_skip, batches):
        dataset = task.train_replica_dataset(TWO_REPLICAS_ONE_PIPELINE, PLAN, 7, steps_to_skip)
        return [batch[0]["input_word_ids"].numpy() for batch in dataset.take(batches)]

    fresh = word_ids(0, 6)
    assert fresh[0].shape == (2, tiny_bert_data.SEQ_LENGTH)
    # 2 steps trained: 4 per-replica batches read; the resumed run starts at batch 4
    np.testing.assert_array_equal(np.stack(word_ids(2, 2)), np.stack(fresh[4:6]))


def test_resnet_resumed_with_two_replicas_per_pipeline_skips_two_batches_a_step(digits_pattern):
    """A ResNet run resumed mid-chunk with 2 replicas per input pipeline (several GPUs, a TPU
    host's cores) skipped one batch per trained step, not one per replica, and so trained
    again on batches the interrupted run had already used."""
    task = _resnet_task(digits_pattern)

    def batch_labels(steps_to_skip, batches):
        dataset = task.train_replica_dataset(TWO_REPLICAS_ONE_PIPELINE, PLAN, 7, steps_to_skip)
        return [labels.numpy() for _, labels in dataset.take(batches)]

    fresh = batch_labels(0, 8)  # 8 batches of 4: the 32 images once
    assert fresh[0].shape == (4,)
    # 3 steps trained: 6 per-replica batches read; the resumed run starts at batch 6
    np.testing.assert_array_equal(np.stack(batch_labels(3, 2)), np.stack(fresh[6:8]))
    # and not at batch 3, whose labels differ: the check can tell the two apart
    assert not np.array_equal(np.stack(fresh[3:5]), np.stack(fresh[6:8]))


def test_benchmarks_one_pipeline_loop_reads_on_through_chunks_where_the_recipe_starts_anew(
        tmp_path):
    """benchmarks/chunk_boundaries.py's ONE_PIPELINE_LOOP (what exact resume costs) reads the
    first chunk's pipeline on through the next chunks, as Model Garden's loop reads one
    pipeline; the recipe's dataset starts the next chunk's own pipeline instead."""
    from benchmarks import chunk_boundaries

    task = _bert_task(tmp_path)
    seed, steps = task.config.train.seed, 2 * CHECKPOINT_EVERY + 1

    def word_ids(dataset):
        return np.stack([batch[0]["input_word_ids"].numpy() for batch in dataset.take(steps)])

    strategy = tf.distribute.get_strategy()
    one = word_ids(chunk_boundaries.one_pipeline_dataset(task, strategy, PLAN, 0))
    np.testing.assert_array_equal(one, word_ids(task.train_replica_dataset(
        tf.distribute.InputContext(), PLAN, seed, 0)))
    chunked = word_ids(task_lib.train_dataset(task, strategy, PLAN, 0, steps))
    np.testing.assert_array_equal(one[:CHECKPOINT_EVERY], chunked[:CHECKPOINT_EVERY])
    assert not np.array_equal(one[CHECKPOINT_EVERY:], chunked[CHECKPOINT_EVERY:])
    # from mid-chunk, at the chunk's own position (its seed, its trained steps skipped)
    np.testing.assert_array_equal(
        word_ids(chunk_boundaries.one_pipeline_dataset(task, strategy, PLAN, 1))[:2],
        chunked[1:3])
