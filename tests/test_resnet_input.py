"""Input pipeline: shapes, value ranges, exact eval preprocessing, padding, sharding, resume.

The normalisation constants are ImageNet's per-channel mean/std written out here (not read
from Model Garden), so the expected values are computed independently of the pipeline.
"""

import dataclasses
import re

import numpy as np
import pytest
import tensorflow as tf

from dataset_graph import interleave_ops

from recipes.common import storage
from recipes.resnet import convert
from recipes.resnet import input as input_lib
from recipes.resnet.config import DataConfig

MEAN = 255.0 * np.array([0.485, 0.456, 0.406])  # ImageNet RGB mean, in 0..255 units
STD = 255.0 * np.array([0.229, 0.224, 0.225])  # ImageNet RGB std


def write_file(path, images, labels, image_format):
    """One TFRecord file of ImageNet-format examples (labels written as class index + 1)."""
    names = [str(i) for i in range(10)]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i, (image, label) in enumerate(zip(images, labels)):
            source = convert.Source(label=int(label), filename=f"{path.name}_{i}", pixels=image)
            writer.write(convert.make_example(source, names, image_format, 95))


def data_config(**overrides):
    base = DataConfig(
        num_classes=10,
        label_offset=1,
        image_size=16,
        crop_area_min=0.5,
        shuffle_buffer_size=64,
        seed=3,
    )
    return dataclasses.replace(base, **overrides)


@pytest.fixture(scope="module")
def four_files(tmp_path_factory):
    """Four JPEG files of 6 random 24x20 images; file i holds only label i."""
    directory = tmp_path_factory.mktemp("four")
    rng = np.random.default_rng(0)
    for i in range(4):
        images = rng.integers(0, 256, size=(6, 24, 20, 3), dtype=np.uint8)
        write_file(directory / f"train-{i:05d}-of-00004", images, [i] * 6, "jpeg")
    return str(directory / "train-*")


def context(pipelines, pipeline_id):
    return tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=pipeline_id, num_replicas_in_sync=pipelines
    )


def test_train_batches_have_fixed_shapes_and_normalised_range(four_files):
    dataset = input_lib.make_train_dataset(data_config(), four_files, 5)
    assert dataset.element_spec[0].shape.as_list() == [5, 16, 16, 3]
    assert dataset.element_spec[1].shape.as_list() == [5]
    low, high = (0.0 - MEAN) / STD, (255.0 - MEAN) / STD
    for images, labels in dataset.take(6):
        images = images.numpy()
        assert images.dtype == np.float32
        for channel in range(3):
            assert images[..., channel].min() >= low[channel] - 1e-4
            assert images[..., channel].max() <= high[channel] + 1e-4
        assert set(labels.numpy()) <= {0, 1, 2, 3}  # file labels 1..4 minus label_offset 1
    bf16 = input_lib.make_train_dataset(data_config(), four_files, 5, dtype="bfloat16")
    assert bf16.element_spec[0].dtype == tf.bfloat16


def test_eval_preprocessing_is_exact_normalisation_for_a_full_crop(tmp_path):
    # center_crop_fraction 1 and image_size = stored size: crop and resize are identities,
    # so the pipeline must return exactly (pixels - mean) / std, in file order.
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(5, 8, 8, 3), dtype=np.uint8)
    labels = [4, 0, 9, 2, 7]
    write_file(tmp_path / "validation-0", images, labels, "png")
    config = data_config(image_size=8, center_crop_fraction=1.0, decode_jpeg_only=False)
    dataset = input_lib.make_eval_dataset(config, str(tmp_path / "validation-*"), 5, steps=1)
    ((got_images, got_labels, weights),) = list(dataset.as_numpy_iterator())
    np.testing.assert_allclose(got_images, (images - MEAN) / STD, atol=1e-4)
    np.testing.assert_array_equal(got_labels, labels)
    np.testing.assert_array_equal(weights, np.ones(5))


def test_eval_reads_the_first_num_examples_records_on_every_pipeline(four_files):
    # data.eval_num_examples below the records: that many (it evaluated whole batches of
    # the files' records, 8 for 5); on 2 pipelines each reads every other of the first 7
    steps = input_lib.eval_steps(7, 10, num_pipelines=2)
    labels_read, total_weight = [], 0.0
    for pipeline_id in range(2):
        for _, labels, weights in input_lib.make_eval_dataset(
                data_config(), four_files, 5, steps, input_context=context(2, pipeline_id),
                num_examples=7).as_numpy_iterator():
            labels_read.extend(labels[weights == 1.0])
            total_weight += weights.sum()
    assert total_weight == 7 == input_lib.eval_examples_read(7, steps, 5, num_pipelines=2)
    every = [labels for _, labels, _ in input_lib.make_eval_dataset(
        data_config(), four_files, 24, 1).as_numpy_iterator()][0]
    assert sorted(labels_read) == sorted(every[:7])


def test_eval_pads_with_zero_weight_and_every_pipeline_covers_its_share(four_files):
    # 24 records, global eval batch 10 over 2 pipelines (1 replica each): 3 steps of
    # 5 per pipeline = 15 slots for 12 records each; every record counted once.
    steps = input_lib.eval_steps(24, 10, num_pipelines=2)
    assert steps == 3
    labels_seen, total_weight = [], 0.0
    for pipeline_id in range(2):
        dataset = input_lib.make_eval_dataset(
            data_config(), four_files, 5, steps, input_context=context(2, pipeline_id)
        )
        batches = list(dataset.as_numpy_iterator())
        assert len(batches) == steps
        for _, labels, weights in batches:
            labels_seen.extend(labels[weights == 1.0])
            total_weight += weights.sum()
            assert set(weights) <= {0.0, 1.0}
    assert total_weight == 24
    assert np.bincount(labels_seen).tolist() == [6, 6, 6, 6]
    assert input_lib.eval_steps(24, 10) == 3  # one pipeline: ceil(24 / 10)


@pytest.mark.parametrize("global_batch, steps", [(10, 2), (2, 6)])
def test_eval_steps_round_an_odd_share_up_per_pipeline(global_batch, steps):
    # 11 examples over 2 pipelines: pipeline 0 reads records 0, 2, .., 10 (6), pipeline 1
    # 5. Batch 10 = 5 a pipeline: ceil(6 / 5) = 2 steps; batch 2 = 1 a pipeline: 6 steps.
    assert input_lib.eval_steps(11, global_batch, num_pipelines=2) == steps


def test_train_pipelines_read_disjoint_files(four_files):
    seen = []
    for pipeline_id in range(2):
        dataset = input_lib.make_train_dataset(
            data_config(), four_files, 4, input_context=context(2, pipeline_id)
        )
        labels = np.concatenate([labels for _, labels in dataset.take(6).as_numpy_iterator()])
        seen.append(set(labels))
    assert seen[0] == {0, 2} and seen[1] == {1, 3}  # shard(2, i) of the sorted files


def test_as_many_files_as_pipelines_give_each_pipeline_one_whole_file(tmp_path):
    # 2 files, 2 pipelines: sharded by file, so pipeline i reads file i only (3 and 5
    # records: shared out record by record, each pipeline would see both labels)
    rng = np.random.default_rng(2)
    for i, count in enumerate((3, 5)):
        images = rng.integers(0, 256, size=(count, 24, 20, 3), dtype=np.uint8)
        write_file(tmp_path / f"train-{i:05d}-of-00002", images, [i] * count, "jpeg")
    for pipeline_id in range(2):
        dataset = input_lib.make_train_dataset(
            data_config(), str(tmp_path / "train-*"), 2, input_context=context(2, pipeline_id))
        labels = np.concatenate([labels for _, labels in dataset.take(8).as_numpy_iterator()])
        assert set(labels) == {pipeline_id}  # file i holds only class i


def test_a_pipeline_whose_files_hold_no_record_is_refused_not_left_waiting(four_files, tmp_path):
    """With several input pipelines each reads its share of the files: a share of empty
    files would wait for a record forever (the first-record check sees one pipeline)."""
    import glob
    import shutil

    from recipes.common.errors import UserError

    for i, source in enumerate(sorted(glob.glob(four_files))[:2]):
        shutil.copy(source, tmp_path / f"train-{2 * i}")
        (tmp_path / f"train-{2 * i + 1}").write_bytes(b"")  # pipeline 1's share: 1 and 3
    files = sorted(str(path) for path in tmp_path.iterdir())
    input_lib.make_train_dataset(data_config(), files, 4, input_context=context(2, 0))
    with pytest.raises(UserError, match=(
            f"^data.train_file_pattern: input pipeline 1 of 2 reads {tmp_path}/train-1 and 1 "
            "more, which hold no record: it would wait for one forever; remove the empty")):
        input_lib.make_train_dataset(data_config(), files, 4, input_context=context(2, 1))


def test_one_record_shared_out_among_three_pipelines_feeds_every_one(tmp_path):
    """With fewer files than pipelines the records are shared out, after they repeat: each
    pipeline reads the one record, none is left without data (as BERT's reader would be)."""
    image = np.random.default_rng(1).integers(0, 256, size=(1, 24, 20, 3), dtype=np.uint8)
    write_file(tmp_path / "train-00000-of-00001", image, [7], "jpeg")
    files = [str(tmp_path / "train-00000-of-00001")]
    for pipeline_id in range(3):
        dataset = input_lib.make_train_dataset(
            data_config(), files, 2, input_context=context(3, pipeline_id))
        ((_, labels),) = dataset.take(1).as_numpy_iterator()
        assert labels.tolist() == [7, 7]


@pytest.mark.parametrize("decode_jpeg_only", [True, False])
def test_skipping_batches_resumes_the_same_crops_and_flips(four_files, decode_jpeg_only):
    """A run resumed inside a chunk (SIGTERM saved its step) makes the chunk's pipeline with
    `skip_batches`: its examples must be cropped and flipped as the pipeline that never
    stopped crops them (Model Garden's stateful draws started again: other images)."""
    config = data_config(decode_jpeg_only=decode_jpeg_only)
    fresh = input_lib.make_train_dataset(config, four_files, 3, seed=5)
    resumed = input_lib.make_train_dataset(config, four_files, 3, skip_batches=2, seed=5)
    fresh_images = [images for images, _ in fresh.take(6).as_numpy_iterator()]
    resumed_images = [images for images, _ in resumed.take(4).as_numpy_iterator()]
    np.testing.assert_array_equal(np.stack(fresh_images[2:]), np.stack(resumed_images))
    # the draws differ from example to example, and with the seed
    assert len({images.tobytes() for images in fresh_images}) == 6
    other = input_lib.make_train_dataset(config, four_files, 3, seed=6)
    assert next(other.as_numpy_iterator())[0].tobytes() != fresh_images[0].tobytes()


@pytest.mark.parametrize("decode_jpeg_only", [True, False])
def test_training_preprocessing_is_model_gardens_where_nothing_is_drawn(four_files,
                                                                         decode_jpeg_only):
    """With crop_area_min=1 the crop is the whole image, which both replace by the central
    crop, and without the flip nothing is random: the image is Model Garden's parser's."""
    from official.vision.dataloaders import classification_input  # pylint: disable=all

    config = data_config(crop_area_min=1.0, random_flip=False, decode_jpeg_only=decode_jpeg_only)
    record = next(iter(tf.data.TFRecordDataset(tf.io.gfile.glob(four_files)[0])))
    ours, label = input_lib._train_parse_fn(config, "float32", 5, None)(tf.constant(0, tf.int64),
                                                                        record)
    parse = input_lib.make_parser(config, "float32").parse_fn(True)
    theirs, their_label = parse(classification_input.Decoder().decode(record))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert int(label) == int(their_label) - config.label_offset


def test_the_crops_of_two_input_pipelines_are_their_own(four_files):
    """Two hosts' k-th examples get different draws (their places are numbered apart)."""
    from recipes.resnet import augment  # pylint: disable=import-outside-toplevel

    seeds = {tuple(augment.example_seed(5, 3, 2, pipeline_id).numpy()) for pipeline_id in (0, 1)}
    seeds |= {tuple(augment.example_seed(5, place, 2, 0).numpy()) for place in (0, 1, 2)}
    assert len(seeds) == 5


def test_skipping_batches_resumes_the_same_example_order(four_files):
    config = data_config()
    fresh = input_lib.make_train_dataset(config, four_files, 3)
    resumed = input_lib.make_train_dataset(config, four_files, 3, skip_batches=2)
    fresh_labels = [labels for _, labels in fresh.take(6).as_numpy_iterator()]
    resumed_labels = [labels for _, labels in resumed.take(4).as_numpy_iterator()]
    np.testing.assert_array_equal(np.stack(fresh_labels[2:]), np.stack(resumed_labels))


def test_label_outside_num_classes_fails_with_a_named_reason(four_files):
    dataset = input_lib.make_train_dataset(data_config(num_classes=2), four_files, 24)
    with pytest.raises(tf.errors.InvalidArgumentError, match="data.label_offset"):
        next(iter(dataset))


def test_label_equal_to_num_classes_after_the_offset_fails_with_a_named_reason(tmp_path):
    # num_classes 3, label_offset 1: image/class/label 1..3 are classes 0..2; 4 would be
    # class 3, outside [0, 3). write_file stores class index + 1.
    image = np.zeros((1, 8, 8, 3), np.uint8)
    config = data_config(num_classes=3)
    for class_index in range(3):
        path = tmp_path / f"validation-{class_index}"
        write_file(path, image, [class_index], "jpeg")
        _, label = input_lib.first_example(config, str(path))
        assert int(label) == class_index
    write_file(tmp_path / "validation-3", image, [3], "jpeg")
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape(input_lib.LABEL_RANGE_ERROR)):
        input_lib.first_example(config, str(tmp_path / "validation-3"))


def test_empty_pattern_is_a_user_error(tmp_path):
    with pytest.raises(input_lib.UserError, match="matches no file"):
        input_lib.make_train_dataset(data_config(), str(tmp_path / "nothing-*"), 4)


def test_eval_under_two_replicas_counts_every_example_once(four_files, two_cpu_strategy):
    # MirroredStrategy over 2 logical CPUs: one input pipeline feeding 2 replicas.
    steps = input_lib.eval_steps(24, 10)  # global eval batch 10 = 2 replicas x 5
    dataset = two_cpu_strategy.distribute_datasets_from_function(
        lambda context: input_lib.make_eval_dataset(
            data_config(), four_files, 5, steps, input_context=context
        )
    )
    labels_seen, total_weight, batches = [], 0.0, 0
    for _, labels, weights in dataset:
        batches += 1
        for replica_labels, replica_weights in zip(
            two_cpu_strategy.experimental_local_results(labels),
            two_cpu_strategy.experimental_local_results(weights),
        ):
            assert replica_weights.shape == (5,)
            labels_seen.extend(replica_labels.numpy()[replica_weights.numpy() == 1.0])
            total_weight += float(replica_weights.numpy().sum())
    assert batches == steps == 3
    assert total_weight == 24
    assert np.bincount(labels_seen).tolist() == [6, 6, 6, 6]


@pytest.mark.parametrize("pipelines", [1, 2, 8], ids=["1-pipeline", "2-pipelines", "8-pipelines"])
def test_local_files_read_in_turn_give_the_records_of_parallel_remote_reads(
        four_files, pipelines, monkeypatch):
    """Local files are read by a sequential interleave, remote ones (gs://) by a parallel
    one, and both give the same records in the same order for every input pipeline, over
    more than one pass of the files (8 pipelines for 4 files: records sharded after the
    read). Each record is known by a hash of its bytes, so the order is seen record by
    record, not only file by file."""
    monkeypatch.setattr(input_lib, "_train_parse_fn", lambda data, dtype, seed, context: (
        lambda place, record: (tf.strings.to_hash_bucket_fast(record, 2**62), tf.constant(0))))

    def records_and_interleaves(local, pipeline_id):
        monkeypatch.setattr(storage, "all_local", lambda files: local)
        dataset = input_lib.make_train_dataset(
            data_config(shuffle_buffer_size=5), four_files, 2,
            input_context=context(pipelines, pipeline_id), seed=11)
        records = [ids.tolist() for ids, _ in dataset.take(40).as_numpy_iterator()]
        return records, interleave_ops(dataset)

    for pipeline_id in range(pipelines):
        in_turn, sequential = records_and_interleaves(True, pipeline_id)
        in_parallel, parallel = records_and_interleaves(False, pipeline_id)
        assert sequential == {"InterleaveDataset"}
        assert parallel == {"ParallelInterleaveDatasetV4"}
        assert in_turn == in_parallel  # 80 records: more than a pass of the 24 (shuffle 5)
        assert len({r for batch in in_turn for r in batch}) > 2  # records, not a constant


def test_only_paths_without_a_remote_scheme_are_local():
    assert storage.all_local(["/data/train-0", "relative/train-1", "file:///data/train-2"])
    assert not storage.all_local(["/data/train-0", "gs://bucket/train-1"])
    assert not storage.all_local(["hdfs://namenode/train-0"])


@pytest.mark.parametrize("steps", [1, 2, 3, 4])
def test_examples_read_are_the_weight_one_examples_of_the_pipelines(four_files, steps):
    # 24 records over 2 pipelines of 5 slots a step: 3 steps read them all, fewer a part
    weights = sum(
        weights.sum()
        for pipeline_id in range(2)
        for _, _, weights in input_lib.make_eval_dataset(
            data_config(), four_files, 5, steps, input_context=context(2, pipeline_id)
        ).as_numpy_iterator()
    )
    assert input_lib.eval_examples_read(24, steps, 5, num_pipelines=2) == weights
    assert weights == min(24, steps * 10)


@pytest.mark.parametrize("failing_op", ["label check", "image decode"])
def test_records_of_another_kind_are_named_whichever_op_fails_first(failing_op, tmp_path,
                                                                     monkeypatch):
    """A BERT record fails the parser's label check or its image decode, whichever op runs
    first (it varies from run to run): the check names the records' kind either way."""
    from recipes.common.errors import UserError
    from recipes.resnet import data as data_lib

    example = tf.train.Example(features=tf.train.Features(feature={
        "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2]))}))
    with tf.io.TFRecordWriter(str(tmp_path / "train-0")) as writer:
        writer.write(example.SerializeToString())
    message = {"label check": input_lib.LABEL_RANGE_ERROR, "image decode": "not a JPEG"}

    def first_example(data, path):
        raise tf.errors.InvalidArgumentError(None, None, message[failing_op])

    monkeypatch.setattr(input_lib, "first_example", first_example)
    with pytest.raises(UserError, match=(
            f"data.train_file_pattern: the first record of {tmp_path}/train-0 is not an "
            r"ImageNet-format example \(no image/encoded; it holds input_ids\)")):
        data_lib.check_first_record("train", [str(tmp_path / "train-0")], data_config())


@pytest.mark.parametrize("label_offset, first, second, gives", [
    (1, 0, 5, "gives image/class/label=6, class 5 with data.label_offset=1, outside [0, "
              "data.num_classes=3)"),
    (2, 1, 0, "gives image/class/label=1, class -1 with data.label_offset=2, outside [0, "
              "data.num_classes=3)"),
])
def test_a_label_outside_the_classes_mid_run_is_named_by_record_and_file(
        label_offset, first, second, gives, tmp_path, capsys):
    """The label check failing after the run's first steps advised checking data.label_offset,
    which the records read before fit: the record and its file are named, with advice for a
    damaged or foreign record among good ones (and a too small data.num_classes, only for a
    label above the classes)."""
    # write_file stores class index + 1, so a record gives index + 1 - label_offset; with
    # num_classes 3 the first record is inside, the second outside
    from recipes.common.errors import UserError
    from recipes.resnet import data as data_lib

    config = data_config(num_classes=3, label_offset=label_offset)
    path = str(tmp_path / "train-0")
    write_file(tmp_path / "train-0", np.zeros((2, 8, 8, 3), np.uint8), [first, second], "jpeg")
    data_lib.check_first_record("train", [path], config)  # the check before the model passes
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:  # (shuffled, endless)
        list(input_lib.make_train_dataset(config, path, 2).take(16))
    explained = data_lib.explain_input_error(raised.value, path, config)
    assert isinstance(explained, UserError)
    too_few = "; or, if class 5 is one of yours, data.num_classes is too small"
    assert str(explained) == (
        f"record 1 (0-based) in {path} {gives}, while the record before it fits "
        "data.label_offset and data.num_classes: a damaged record, or one from another "
        "dataset, among good ones; re-create that file "
        "with `python -m recipes.resnet.convert` or drop the record"
        f"{too_few if second + 1 - label_offset >= 3 else ''}")
    assert (f"scanning {path} for the record whose label is outside the classes ..."
            in capsys.readouterr().out)


def _explain_label_check(tmp_path, config, value):
    """What the recipe says for the input pipeline's label check failing with `value` while it
    reads tmp_path/train-*."""
    from recipes.resnet import data as data_lib

    error = tf.errors.InvalidArgumentError(
        None, None, f"assertion failed: [{input_lib.LABEL_RANGE_ERROR}] [{value}]")
    return data_lib.explain_input_error(error, str(tmp_path / "train-*"), config)


def test_a_record_without_a_label_in_a_later_file_is_named_after_the_good_ones(tmp_path):
    from recipes.common.errors import UserError

    config = data_config(num_classes=3)
    write_file(tmp_path / "train-0", np.zeros((3, 8, 8, 3), np.uint8), [0, 1, 2], "jpeg")
    write_file(tmp_path / "train-1", np.zeros((2, 8, 8, 3), np.uint8), [2, 0], "jpeg")
    later = str(tmp_path / "train-1")
    records = [record.numpy() for record in tf.data.TFRecordDataset(later)]
    example = tf.train.Example.FromString(records[1])
    del example.features.feature[input_lib.LABEL_KEY]  # (Model Garden's decoder: label -1)
    with tf.io.TFRecordWriter(later) as writer:
        writer.write(records[0])
        writer.write(example.SerializeToString())
    explained = _explain_label_check(tmp_path, config, -2)
    assert str(explained).startswith(
        f"record 1 (0-based) in {later} has no image/class/label, while the 4 records before "
        "it fit data.label_offset and data.num_classes: a damaged record, or one from another "
        "dataset, among good ones; ")
    # a first record outside: nothing vouches for data.label_offset, which is still advised
    write_file(tmp_path / "train-0", np.zeros((1, 8, 8, 3), np.uint8), [7], "jpeg")
    explained = _explain_label_check(tmp_path, config, -2)
    assert str(explained) == (
        f"record 0 (0-based) in {tmp_path}/train-0: {input_lib.LABEL_RANGE_ERROR} (it "
        "gives 7); check data.label_offset (1 for the ImageNet conversion scripts' 1..1000 "
        "labels) and data.num_classes")  # its own class (8 - 1), not the pipeline's -2
    assert isinstance(explained, UserError)


def test_the_label_scan_passes_over_a_file_it_cannot_read(tmp_path):
    # the run reads its files interleaved: the record may be in a file after a damaged one
    config = data_config(num_classes=3)
    write_file(tmp_path / "train-0", np.zeros((2, 8, 8, 3), np.uint8), [0, 1], "jpeg")
    (tmp_path / "train-1").write_bytes(b"not a TFRecord file")
    write_file(tmp_path / "train-2", np.zeros((2, 8, 8, 3), np.uint8), [2, 6], "jpeg")
    explained = _explain_label_check(tmp_path, config, 6)
    assert str(explained).startswith(
        f"record 1 (0-based) in {tmp_path}/train-2 gives image/class/label=7, class 6 with "
        "data.label_offset=1, outside [0, data.num_classes=3), while the 3 records before it "
        "(of the files the scan could read) fit data.label_offset and data.num_classes")
    # no such record among the readable ones: the unreadable file is named
    write_file(tmp_path / "train-2", np.zeros((1, 8, 8, 3), np.uint8), [2], "jpeg")
    explained = _explain_label_check(tmp_path, config, 6)
    assert f"{tmp_path}/train-1" in str(explained) and "no such record" not in str(explained)


def test_a_first_record_without_a_label_is_named_as_such(tmp_path):
    # Model Garden's decoder fills a missing label with -1: it was blamed on label_offset
    from recipes.common.errors import UserError
    from recipes.resnet import data as data_lib

    source = convert.Source(label=0, filename="a", pixels=np.zeros((8, 8, 3), np.uint8))
    example = tf.train.Example.FromString(convert.make_example(source, ["a"], "jpeg", 95))
    del example.features.feature[input_lib.LABEL_KEY]
    with tf.io.TFRecordWriter(str(tmp_path / "train-0")) as writer:
        writer.write(example.SerializeToString())
    with pytest.raises(UserError) as raised:
        data_lib.check_first_record("train", [str(tmp_path / "train-0")], data_config())
    assert str(raised.value) == (
        f"data.train_file_pattern: the first record of {tmp_path}/train-0 has no "
        "image/class/label; give labelled ImageNet-format TFRecords (`python -m "
        "recipes.resnet.convert` writes them)")
