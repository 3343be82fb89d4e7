"""Converter round trips, one-line errors for bad folders, and the corrupt-record finder.

Expected values come from the source arrays/files and from the ImageNet TFRecord format
itself (label = class index + 1), never from the converter's own output.
"""

import io
import os
import subprocess
import sys
import types
import zipfile

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO_ROOT
from recipes.common.errors import UserError
from recipes.resnet import convert, convert_checks, convert_flags
from recipes.resnet import digits

FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/format": tf.io.FixedLenFeature([], tf.string),
    "image/height": tf.io.FixedLenFeature([], tf.int64),
    "image/width": tf.io.FixedLenFeature([], tf.int64),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    "image/class/text": tf.io.FixedLenFeature([], tf.string),
    "image/filename": tf.io.FixedLenFeature([], tf.string),
}


def read_records(pattern):
    """Every example of the files matching `pattern`, parsed, as a list of dicts of numpy."""
    files = sorted(tf.io.gfile.glob(pattern))
    examples = []
    for record in tf.data.TFRecordDataset(files):
        parsed = tf.io.parse_single_example(record, FEATURES)
        example = {key: value.numpy() for key, value in parsed.items()}
        example["pixels"] = tf.io.decode_image(parsed["image/encoded"], channels=3).numpy()
        examples.append(example)
    return examples


def test_arrays_round_trip_png_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, size=(12, 9, 7), dtype=np.uint8)  # [N, H, W]
    labels = np.arange(12) % 3
    info = convert.convert_arrays(
        gray, labels, str(tmp_path), class_names=["a", "b", "c"], num_shards=2, image_format="png"
    )
    assert info["splits"]["train"]["num_examples"] == 12
    assert len(tf.io.gfile.glob(str(tmp_path / "train-*-of-00002"))) == 2
    examples = read_records(str(tmp_path / "train-*"))
    assert len(examples) == 12
    by_name = {e["image/filename"].decode(): e for e in examples}
    for i in range(12):
        example = by_name[f"array_{i}"]
        expected_rgb = np.repeat(gray[i][..., None], 3, axis=-1)  # stored as RGB
        np.testing.assert_array_equal(example["pixels"], expected_rgb)
        assert example["image/class/label"] == labels[i] + 1  # 0 = background
        assert example["image/class/text"].decode() == "abc"[labels[i]]
        assert (example["image/height"], example["image/width"]) == (9, 7)
        assert example["image/format"] == b"PNG"
    assert (tmp_path / "labels.txt").read_text() == "a\nb\nc\n"


@pytest.fixture(scope="module")
def mnist_digits():
    return digits.load_digits()


def test_real_digits_round_trip_jpeg_within_stated_bound(tmp_path, mnist_digits):
    # JPEG is lossy: the stated bound is a per-image mean absolute error <= 3 (of 255).
    # Measured on 200 of these digits: <= 1.7 at quality 95 (the default), <= 2.0 at 100.
    images, labels, names = mnist_digits
    images, labels = images[:40], labels[:40]
    convert.convert_arrays(images, labels, str(tmp_path), class_names=names, num_shards=1)
    examples = read_records(str(tmp_path / "train-*"))
    by_name = {e["image/filename"].decode(): e for e in examples}
    for i in range(40):
        example = by_name[f"array_{i}"]
        assert example["image/format"] == b"JPEG"
        assert example["image/class/label"] == labels[i] + 1
        error = np.abs(example["pixels"].astype(int) - images[i][..., None].astype(int))
        assert error.mean() <= 3.0


def test_digits_are_the_bundled_mnist_subset(mnist_digits):
    images, labels, names = mnist_digits
    assert images.shape == (5000, 28, 28) and images.dtype == np.uint8
    np.testing.assert_array_equal(np.bincount(labels), [500] * 10)
    assert names == [str(d) for d in range(10)]
    assert images.max() == 255 and images.min() == 0


def test_holdout_is_stratified_and_disjoint(tmp_path):
    images = np.arange(40, dtype=np.uint8).reshape(40, 1, 1) * np.ones((1, 4, 4), np.uint8)
    labels = np.arange(40) % 4
    info = convert.convert_arrays(
        images, labels, str(tmp_path), validation_fraction=0.3, image_format="png", num_shards=3
    )
    assert info["splits"]["train"]["num_examples"] == 28
    assert info["splits"]["validation"]["num_examples"] == 12
    train = read_records(str(tmp_path / "train-*"))
    validation = read_records(str(tmp_path / "validation-*"))
    train_names = {e["image/filename"] for e in train}
    validation_names = {e["image/filename"] for e in validation}
    assert not train_names & validation_names
    assert len(train_names | validation_names) == 40
    # 10 images per class, 30% held out: 3 of each class
    counts = np.bincount([e["image/class/label"] - 1 for e in validation], minlength=4)
    assert counts.tolist() == [3, 3, 3, 3]


@pytest.mark.parametrize("fraction, class_size, held_out", [
    (0.1, 7, 1),  # 0.7 rounds up to 1 (not down to none)
    (0.2, 8, 2),  # 1.6 -> 2
    (0.1, 4, 0),  # 0.4 -> 0
    (0.3, 10, 3),
])
def test_held_out_count_rounds_the_share_of_a_class(fraction, class_size, held_out):
    assert convert_checks.held_out_count(fraction, class_size) == held_out


def test_a_validation_fraction_of_one_is_refused_before_writing(tmp_path):
    # everything held out would leave no training split
    with pytest.raises(UserError) as caught:
        convert.convert_arrays(np.zeros((4, 4, 4), np.uint8), [0, 1, 0, 1], str(tmp_path / "out"),
                               validation_fraction=1.0)
    assert str(caught.value) == "validation_fraction=1.0 must be in [0, 1)"
    assert not (tmp_path / "out").exists()


def _write_png(path, pixels):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tf.io.encode_png(pixels).numpy())


def test_folder_round_trip_keeps_pixels_and_jpeg_bytes(tmp_path):
    rng = np.random.default_rng(1)
    cat = rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
    dog = rng.integers(0, 256, size=(4, 8, 3), dtype=np.uint8)
    _write_png(tmp_path / "photos" / "cat" / "c1.png", cat)
    _write_png(tmp_path / "photos" / "dog" / "d1.png", dog)
    jpeg_bytes = tf.io.encode_jpeg(dog).numpy()
    (tmp_path / "photos" / "dog" / "d2.jpg").write_bytes(jpeg_bytes)
    out = tmp_path / "records"
    convert.convert_image_folder(
        str(tmp_path / "photos"), str(out), num_shards=1, image_format="png"
    )
    png = {e["image/filename"].decode(): e for e in read_records(str(out / "train-*"))}
    np.testing.assert_array_equal(png["c1.png"]["pixels"], cat)
    np.testing.assert_array_equal(png["d1.png"]["pixels"], dog)
    assert png["c1.png"]["image/class/label"] == 1 and png["d1.png"]["image/class/label"] == 2
    out_jpeg = tmp_path / "records_jpeg"
    convert.convert_image_folder(str(tmp_path / "photos"), str(out_jpeg), num_shards=1)
    jpeg = {e["image/filename"].decode(): e for e in read_records(str(out_jpeg / "train-*"))}
    assert jpeg["d2.jpg"]["image/encoded"] == jpeg_bytes  # an RGB JPEG is kept byte for byte


def test_hidden_folders_are_not_classes_and_the_first_real_class_is_label_0(tmp_path):
    # Jupyter leaves .ipynb_checkpoints (with copies of images) in a folder it browsed
    root = tmp_path / "photos"
    for name in (".ipynb_checkpoints/c1-checkpoint.png", "cat/c1.png", "dog/d1.png"):
        _write_png(root / name, np.zeros((2, 2, 3), np.uint8))
    class_names, files = convert.list_image_folder(str(root))
    assert class_names == ["cat", "dog"]
    assert files == [(str(root / "cat" / "c1.png"), 0), (str(root / "dog" / "d1.png"), 1)]


@pytest.mark.parametrize(
    "layout, expected",
    [
        ({}, "is empty"),
        ({"a.jpg": b"x", "b.png": b"y"}, "outside class folders"),
        ({"cls/a.png": None, "stray.jpg": b"x"}, "outside class folders"),
        ({"notes.txt": b"hello"}, "no class subfolders"),
        ({"cls/readme.txt": b"x"}, "holds no image"),
        ({"cls/broken.jpg": b"not an image"}, "cannot be decoded"),
        # a central crop of it is empty: training stopped with a traceback
        ({"cls/a.png": None, "cls/line.png": tf.io.encode_png(np.zeros((1, 3, 3), np.uint8))
          .numpy()}, "line.png' is 1 x 3 pixels; images must be at least 2 x 2"),
    ],
)
def test_bad_folders_give_one_line_errors(tmp_path, layout, expected):
    root = tmp_path / "photos"
    root.mkdir()
    for name, contents in layout.items():
        path = root / name
        if contents is None:
            _write_png(path, np.zeros((2, 2, 3), np.uint8))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(contents)
    with pytest.raises(UserError) as caught:
        convert.convert_image_folder(str(root), str(tmp_path / "out"))
    message = str(caught.value)
    assert expected in message and "\n" not in message
    assert str(root) in message
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("train-*"))


def test_missing_folder_and_bad_arrays(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        convert.convert_image_folder(str(tmp_path / "nope"), str(tmp_path / "out"))
    (tmp_path / "photo.jpg").write_bytes(b"")  # a file given for the folder: not "missing"
    with pytest.raises(UserError, match="photo.jpg' is a file, not a folder; pass --image_dir"):
        convert.convert_image_folder(str(tmp_path / "photo.jpg"), str(tmp_path / "out"))
    with pytest.raises(UserError, match="uint8"):
        convert.convert_arrays(np.zeros((2, 3, 3), np.float32), [0, 1], str(tmp_path))
    with pytest.raises(UserError, match="labels must have shape"):
        convert.convert_arrays(np.zeros((2, 3, 3), np.uint8), [0, 1, 2], str(tmp_path))


@pytest.mark.slow  # a fresh process
def test_cli_refuses_an_output_dir_it_cannot_write_before_converting(tmp_path):
    (tmp_path / "a_file").write_text("")
    for output_dir, reason in ((tmp_path / "a_file" / "records", "is a file, not a directory"),
                               ("/proc/lamb_tf_records", "cannot write in /proc (")):
        completed = subprocess.run(
            [sys.executable, "-m", "recipes.resnet.convert", "--digits",
             f"--output_dir={output_dir}"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
            env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"})
        assert completed.returncode == 2, completed.stderr[-2000:]
        lines = completed.stderr.strip().splitlines()
        # the one line only: no traceback, no TensorFlow start-up lines (CUDA probing, oneDNN)
        assert len(lines) == 1, completed.stderr[-2000:]
        assert lines[0].startswith(f"error: --output_dir={output_dir}: ") and reason in lines[0]


def write_records_with_corrupt_jpeg(directory, bad_index=2, count=5):
    """A shard of `count` JPEG records whose record `bad_index` holds a truncated JPEG."""
    images = np.full((count, 8, 8), 100, np.uint8)
    convert.convert_arrays(images, np.zeros(count, int), str(directory), num_shards=1)
    (path,) = tf.io.gfile.glob(str(directory / "train-*"))
    records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    example = tf.train.Example.FromString(records[bad_index])
    good_jpeg = example.features.feature["image/encoded"].bytes_list.value[0]
    example.features.feature["image/encoded"].bytes_list.value[0] = good_jpeg[: len(good_jpeg) // 3]
    records[bad_index] = example.SerializeToString()
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    return path


@pytest.mark.slow  # command lines (a forked child each: libjpeg writes to the real fd 2)
def test_cli_libjpeg_lines_stay_off_the_console_of_a_conversion_and_a_check(tmp_path):
    """libjpeg's own lines (`Unsupported marker type 0x20` for a bad image in the folder,
    `Input file read error` twice for a truncated record's JPEG in --check) came before the
    error line; they are dropped (convert has no log file) unless --verbose."""
    import preloaded_cli

    _write_png(tmp_path / "photos" / "b" / "y.png", np.zeros((4, 4, 3), np.uint8))
    (tmp_path / "photos" / "a").mkdir()
    (tmp_path / "photos" / "a" / "x.jpg").write_bytes(JPEG_MAGIC_THEN_TEXT)
    path = write_records_with_corrupt_jpeg(tmp_path / "badrec")
    for args, expected in [
            ([f"--image_dir={tmp_path / 'photos'}", f"--output_dir={tmp_path / 'records'}"],
             [f"error: image '{tmp_path / 'photos' / 'a' / 'x.jpg'}' cannot be decoded"]),
            ([f"--check={tmp_path / 'badrec' / 'train-*'}"],
             [f"corrupt record 2 (0-based) in {path}: ", "error: 1 corrupt record(s) in "])]:
        completed = preloaded_cli.run("recipes.resnet.convert", args, cwd=REPO_ROOT,
                                      env=USER_ENV, timeout=300)
        assert completed.returncode == 2, completed.stderr[-2000:]
        lines = completed.stderr.splitlines()
        assert len(lines) == len(expected), completed.stderr[-2000:]
        assert all(line.startswith(start) for line, start in zip(lines, expected)), lines
    assert not (tmp_path / "records").exists()


JPEG_MAGIC_THEN_TEXT = b"\xff\xd8\xff this is text\n"  # libjpeg: Unsupported marker type 0x20
# TF_CPP_MIN_LOG_LEVEL as a user has it: unset, so the recipes' start-up default applies.
USER_ENV = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}


@pytest.mark.slow  # a fresh process: --verbose sets TensorFlow's log level at import
def test_cli_verbose_shows_libjpegs_lines(tmp_path):
    _write_png(tmp_path / "photos" / "b" / "y.png", np.zeros((4, 4, 3), np.uint8))
    (tmp_path / "photos" / "a").mkdir()
    (tmp_path / "photos" / "a" / "x.jpg").write_bytes(JPEG_MAGIC_THEN_TEXT)
    status, _, stderr = _run_convert(f"--image_dir={tmp_path / 'photos'}",
                                     f"--output_dir={tmp_path / 'records'}", "--verbose")
    assert status == 2, stderr[-20:]
    assert any("Unsupported marker type 0x20" in line for line in stderr), stderr[-20:]
    assert any(line.startswith("error: image ") for line in stderr), stderr[-20:]


def test_find_corrupt_records_names_record_and_file(tmp_path):
    path = write_records_with_corrupt_jpeg(tmp_path, bad_index=2)
    (found,) = convert.find_corrupt_records(str(tmp_path / "train-*"))
    assert (found.file, found.index) == (path, 2)
    line = convert.describe_corrupt_record(found)
    assert "record 2" in line and path in line and "\n" not in line


def test_png_record_is_flagged_only_when_the_pipeline_reads_jpeg_only(tmp_path):
    convert.convert_arrays(
        np.zeros((3, 4, 4), np.uint8), [0, 1, 0], str(tmp_path), image_format="png", num_shards=1
    )
    found = convert.find_corrupt_records(str(tmp_path / "train-*"), jpeg_only=True)
    assert [record.index for record in found] == [0, 1, 2]
    assert "decode_jpeg_only" in found[0].problem and "function_node" not in found[0].problem
    # a PNG is not damaged: not "corrupt", nor "re-create that file ... or drop the record"
    assert convert.describe_corrupt_record(found[0]) == (
        f"record 0 (0-based) in {tmp_path}/train-00000-of-00001 holds an image that is not a "
        "JPEG (PNG) and data.decode_jpeg_only is true: set it to false or convert with "
        "--image_format=jpeg")
    assert convert.find_corrupt_records(str(tmp_path / "train-*"), jpeg_only=False) == []


@pytest.mark.parametrize("flag, value, message", [
    ("validation_fraction", 2.0, "--validation_fraction=2.0 must be at least 0 and below 1; "
                                 "give the share of each class to hold out as split "
                                 "`validation` (e.g. 0.1; 0: none)"),
    ("validation_fraction", -0.1, "--validation_fraction=-0.1 must be at least 0 and below 1"),
    ("num_shards", 0, "--num_shards=0 must be at least 1; give the number of files per split"),
    ("jpeg_quality", 101, "--jpeg_quality=101 must be from 1 to 100; give e.g. 95"),
    # a slash: a NotFoundError's traceback and hidden .tmp shards left; empty: "-00000-of-..."
    ("split", "a/b", "--split='a/b' must be a name for the shards' files (letters, digits, "
                     "_ . -; such as train or validation)"),
    ("split", "", "--split='' must be a name for the shards' files"),
    ("split", "val", "--split=val names the one split of a conversion without "
                     "--validation_fraction, which writes train and validation; drop one of "
                     "them"),  # (it was ignored)
])
def test_cli_values_the_converter_refuses_are_named_as_flags(flag, value, message, tmp_path):
    good = dict(check="", image_dir="", npz="", digits=True, output_dir=str(tmp_path / "out"),
                validation_fraction=0.1, num_shards=4, jpeg_quality=95, split="train")
    convert_flags.check_flags(types.SimpleNamespace(**good), [])
    with pytest.raises(UserError) as caught:
        convert_flags.check_flags(types.SimpleNamespace(**{**good, flag: value}), [])
    assert str(caught.value).startswith(message)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a fresh process
def test_cli_names_the_validation_fraction_flag_before_writing(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "recipes.resnet.convert", "--digits",
         f"--output_dir={tmp_path / 'records'}", "--validation_fraction=2"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"})
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert completed.stderr.strip().splitlines() == [
        "error: --validation_fraction=2.0 must be at least 0 and below 1; give the share of "
        "each class to hold out as split `validation` (e.g. 0.1; 0: none)"]
    assert not (tmp_path / "records").exists()


def test_shards_being_written_match_no_glob_and_an_interrupted_split_leaves_nothing(
        tmp_path, monkeypatch):
    # a Ctrl-C while writing: the `train-*` glob a run reads never sees a partial shard
    seen_while_writing = []

    def make_example(source, *_):
        if source == 3:
            seen_while_writing.append((sorted(os.listdir(tmp_path)),
                                       tf.io.gfile.glob(str(tmp_path / "train-*"))))
            raise KeyboardInterrupt
        return b"record"

    monkeypatch.setattr(convert, "make_example", make_example)
    with pytest.raises(KeyboardInterrupt):
        convert.write_split(range(8), str(tmp_path), "train", 2, ["a"], "png", 95)
    ((written, globbed),) = seen_while_writing
    assert len(written) == 2 and all(name.startswith(".train-") for name in written)
    assert globbed == []
    assert os.listdir(tmp_path) == []


def test_a_failed_rename_of_the_shards_leaves_nothing(tmp_path, monkeypatch):
    # the renames were outside the clean-up: hidden .tmp shards stayed (a --split with a
    # slash, now refused by the flags, failed there)
    real_rename = tf.io.gfile.rename

    def rename(source, target, overwrite=False):
        if target.endswith("00001-of-00002"):
            raise tf.errors.NotFoundError(None, None, "no such directory")
        real_rename(source, target, overwrite)

    monkeypatch.setattr(convert.tf.io.gfile, "rename", rename)
    monkeypatch.setattr(convert, "make_example", lambda *_: b"record")
    with pytest.raises(tf.errors.NotFoundError):
        convert.write_split(range(8), str(tmp_path), "train", 2, ["a"], "png", 95)
    assert [name for name in os.listdir(tmp_path) if ".tmp-" in name] == []


@pytest.mark.slow  # fresh processes
@pytest.mark.parametrize("written, flags, message", [
    (b"not an archive", [], "error: --npz='{npz}' is not a NumPy .npz archive; save it "
                            "with np.savez(path, images=..., labels=...)"),
    # the archive's own mistakes name it (they did not), and an object array is one line
    # (it was np.load's traceback)
    ({"images": np.zeros((2, 4, 4), np.float32), "labels": [0, 1]}, [],
     "error: --npz='{npz}': images must be uint8 (0..255), got dtype float32"),
    ({"images": np.zeros((2, 4, 4), np.uint8), "labels": [0, 1],
      "class_names": np.array(["cat", 1], dtype=object)}, [],
     "error: --npz='{npz}': class_names is an array of Python objects"),
    ({"images": np.zeros((2, 4, 4), np.uint8), "labels": [0, 2], "class_names": ["a", "b"]},
     [], "error: --npz='{npz}': class_names must be a list of at least 3 names (labels go up "
         "to 2), got shape [2]"),
    # (no image: was a ValueError's traceback, np.max of no labels)
    ({"images": np.zeros((0, 4, 4), np.uint8), "labels": np.zeros((0,), np.int64)}, [],
     "error: --npz='{npz}': images must hold at least one image of at least 2 x 2 pixels (a "
     "central crop of 1 pixel is empty), got shape [0, 4, 4, 1]"),
    ({"images": np.zeros((2, 0, 4), np.uint8), "labels": [0, 1]}, [],
     "error: --npz='{npz}': images must hold at least one image of at least 2 x 2 pixels"),
    # Model Garden's central crop (0.875 of the shorter side) of 1 pixel is empty: training
    # stopped with a traceback at its first whole-image draw
    ({"images": np.zeros((2, 1, 4), np.uint8), "labels": [0, 1]}, [],
     "error: --npz='{npz}': images must hold at least one image of at least 2 x 2 pixels"),
    ({"images": np.zeros((2, 4, 4), np.uint8), "labels": [0, 1], "class_names": ["a", "a"]},
     [], "error: --npz='{npz}': class_names holds 'a' more than once; give each class its own "
         "name"),
    ({"images": np.zeros((4, 4, 4), np.uint8), "labels": [0, 1, 1, 1]},
     ["--validation_fraction=0.6"],  # train: 0 examples of class 0, exit 0
     "error: validation_fraction=0.6 holds out every image of class '0' (1 class(es) in "
     "all), which training would then never see; give a smaller fraction, or more images "
     "of each class"),
    (None, ["--validation_fraction=0.01"],
     "error: validation_fraction=0.01 holds out no image (each class holds out its share, "
     "rounded; the smallest class has 10); give a larger fraction, or 0 for no validation "
     "split"),
])
def test_cli_an_npz_it_cannot_read_or_an_empty_validation_split_is_one_line_naming_it(
        tmp_path, written, flags, message):
    npz = tmp_path / "input.npz"
    if written is None:  # 2 classes of 10 images: 1% of 10 rounds to none
        np.savez(npz, images=np.zeros((20, 4, 4), np.uint8), labels=np.repeat([0, 1], 10))
    elif isinstance(written, dict):
        np.savez(npz, **written)
    else:
        npz.write_bytes(written)
    completed = subprocess.run(
        [sys.executable, "-m", "recipes.resnet.convert", f"--npz={npz}",
         f"--output_dir={tmp_path / 'records'}", *flags],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"})
    assert completed.returncode == 2, completed.stderr[-2000:]
    (line,) = completed.stderr.strip().splitlines()
    assert line.startswith(message.format(npz=npz)), line
    assert not (tmp_path / "records").exists()


def test_an_earlier_conversion_of_another_shard_count_is_refused_before_writing(tmp_path):
    # its train-*-of-00004 shards stayed beside the new -of-00002 ones: a train-* glob read both
    images, labels = np.zeros((8, 4, 4), np.uint8), np.arange(8) % 2
    convert.convert_arrays(images, labels, str(tmp_path), num_shards=4, image_format="png")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(UserError) as raised:
        convert.convert_arrays(images, labels, str(tmp_path), num_shards=2, image_format="png")
    assert str(raised.value) == (
        f"output_dir={tmp_path} holds 4 train-* file(s) of an earlier run with another shard "
        "count (train-00000-of-00004, ...), which a train-* glob would read beside this run's "
        "2; give an empty output_dir or remove them")
    assert sorted(os.listdir(tmp_path)) == before
    # the same shard count again replaces them
    convert.convert_arrays(images, labels, str(tmp_path), num_shards=4, image_format="png")
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("bert_file, glob", [
    ("metadata.json", " (a train-* glob reads both)"),
    ("heldout-00000-of-00008.tfrecord", ""),  # (a conversion writes no heldout-*)
])
@pytest.mark.parametrize("split", ["train", "validation"])
def test_a_conversion_into_a_bert_preparation_is_refused_before_writing(
        tmp_path, bert_file, glob, split):
    """A conversion wrote its shards beside a BERT preparation's: refused only when a BERT
    shard matched its own split's glob, and then as "an earlier run with another shard
    count". The line names a glob that reads both only for a split a conversion writes."""
    out = tmp_path / "out"
    out.mkdir()
    (out / bert_file).write_text("")
    expected = (f"output_dir={out} holds BERT pretraining data (its {bert_file}, written by "
                "python -m recipes.bert.prepare_data); ResNet image records written beside it "
                f"would mix with it{glob}: give each dataset a directory of its own")
    with pytest.raises(UserError) as raised:
        convert.convert_arrays(np.zeros((4, 4, 4), np.uint8), [0, 1, 0, 1], str(out),
                               split=split, num_shards=1, image_format="png")
    assert str(raised.value) == expected
    assert os.listdir(out) == [bert_file]
    flags = types.SimpleNamespace(check="", image_dir="", npz="", digits=True,
                                  output_dir=str(out), validation_fraction=0.0, num_shards=1,
                                  jpeg_quality=95, split=split)
    with pytest.raises(UserError) as raised:  # the command line: before TensorFlow loads
        convert_flags.check_flags(flags, [])
    assert str(raised.value) == "--" + expected


def test_a_conversion_of_another_split_into_its_own_records_is_not_another_dataset(tmp_path):
    images, labels = np.zeros((4, 4, 4), np.uint8), [0, 1, 0, 1]
    convert.convert_arrays(images, labels, str(tmp_path), num_shards=2, image_format="png")
    (tmp_path / ".train-00000-of-00002.tmp-0123abcd").write_bytes(b"")  # a killed run's
    convert.convert_arrays(images, labels, str(tmp_path), split="test", num_shards=1,
                           image_format="png")
    assert sorted(convert.read_info(str(tmp_path))["splits"]) == ["test", "train"]



def test_a_conversion_into_a_directory_a_run_reads_or_another_writes_is_refused(tmp_path):
    """A conversion wrote new shards over the ones a running training read (each checkpoint
    chunk opens its files again), and two conversions into one directory mixed their shards."""
    from lock_holder import held_by_another_process

    images, labels = np.zeros((8, 4, 4), np.uint8), np.arange(8) % 2
    convert.convert_arrays(images, labels, str(tmp_path), num_shards=2, image_format="png")
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    for shared, problem, advice in [
            (True, "holds the data of another lamb_tf process, which reads it now",
             "wait for the run reading it to end"),
            (False, "is in use by another lamb_tf process, which still writes there",
             "wait for that conversion to finish")]:
        with held_by_another_process(tmp_path, shared=shared):
            with pytest.raises(UserError) as raised:
                convert.convert_arrays(images, 1 - labels, str(tmp_path), num_shards=2,
                                       image_format="png")
        assert str(raised.value) == (
            f"output_dir={tmp_path} {problem}; {advice}, or give another output_dir")
        assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before


def _run_convert(*flags):
    """`python -m recipes.resnet.convert *flags` in a fresh process: (exit status, stdout
    lines, stderr lines)."""
    completed = subprocess.run(
        [sys.executable, "-m", "recipes.resnet.convert", *flags],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"})
    return (completed.returncode, completed.stdout.strip().splitlines(),
            completed.stderr.strip().splitlines())


@pytest.mark.slow  # fresh processes
def test_cli_an_empty_or_truncated_npz_is_one_line_naming_it(tmp_path):
    """An empty --npz file was numpy's `EOFError: No data left in file` traceback, and the
    first half of an np.savez archive zipfile's `BadZipFile` traceback."""
    whole = tmp_path / "whole.npz"
    np.savez(whole, images=np.zeros((4, 4, 4), np.uint8), labels=[0, 1, 0, 1])
    empty, truncated = tmp_path / "empty.npz", tmp_path / "truncated.npz"
    empty.write_bytes(b"")
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    for npz, message in [
            (empty, f"error: --npz='{empty}' is empty (0 bytes), not a NumPy .npz archive; "
                    "save it with np.savez(path, images=..., labels=...)"),
            (truncated, f"error: --npz='{truncated}' is a truncated or damaged .npz archive ("),
    ]:
        status, _, stderr = _run_convert(f"--npz={npz}", f"--output_dir={tmp_path / 'out'}")
        assert status == 2, stderr[-20:]
        (line,) = stderr
        assert line.startswith(message), line
        assert "np.savez(path, images=..., labels=...)" in line
    assert not (tmp_path / "out").exists()


# The pre-TensorFlow check of the program, run as `python -m recipes.resnet.convert ARGS` does
# (runpy: its `__main__` path), then what it left imported.
_RUN_CONVERT_THEN_LIST_TENSORFLOW = """
import runpy, sys
sys.argv = ["recipes.resnet.convert", *sys.argv[1:]]
try:
    runpy.run_module("recipes.resnet.convert", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    print(stop.code, "tensorflow" in sys.modules, "official" in sys.modules)
"""


@pytest.mark.slow  # a fresh process
def test_cli_a_bad_npz_is_refused_before_tensorflow_loads(tmp_path):
    """Every mistake in the --npz file was found after TensorFlow and Model Garden loaded
    (about 7 s of CPU each): the flags' check now reads the archive (its images' header)."""
    npz = tmp_path / "input.npz"
    np.savez(npz, images=np.zeros((2, 4, 4), np.float32), labels=[0, 1])
    completed = subprocess.run(
        [sys.executable, "-c", _RUN_CONVERT_THEN_LIST_TENSORFLOW, f"--npz={npz}",
         f"--output_dir={tmp_path / 'records'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
             "PYTHONPATH": REPO_ROOT})
    status, tensorflow_loaded, model_garden_loaded = completed.stdout.split()
    assert (tensorflow_loaded, model_garden_loaded) == ("False", "False")
    assert status == "2", completed.stderr[-2000:]
    assert completed.stderr.strip().splitlines() == [
        f"error: --npz='{npz}': images must be uint8 (0..255), got dtype float32; convert with "
        "np.clip(images, 0, 255).astype(np.uint8)"]
    assert not (tmp_path / "records").exists()


def test_the_check_of_an_npz_reads_the_header_of_its_images_not_their_data(tmp_path):
    """The images array can be large: `check_npz` judges it from its .npy header (an archive
    whose images data is cut short passes it; reading it is refused as damaged)."""
    header = io.BytesIO()
    np.lib.format.write_array(header, np.zeros((3, 4, 4), np.uint8))
    labels = io.BytesIO()
    np.lib.format.write_array(labels, np.array([0, 1, 1]))
    npz = tmp_path / "input.npz"
    with zipfile.ZipFile(npz, "w") as archive:
        archive.writestr("images.npy", header.getvalue()[:-40])  # 8 of 48 pixels
        archive.writestr("labels.npy", labels.getvalue())
    convert_checks.check_npz(str(npz), validation_fraction=0.4)
    with pytest.raises(UserError, match=r"^--npz='.*' is a truncated or damaged .npz archive"):
        convert_checks.read_npz(str(npz))
    with pytest.raises(UserError) as caught:  # 0.4 held out 1 of class 1 (of 2); 0.2: none
        convert_checks.check_npz(str(npz), validation_fraction=0.2)
    assert str(caught.value).startswith("validation_fraction=0.2 holds out no image")


@pytest.mark.parametrize("fraction, labels, message", [
    (0.01, np.repeat([0, 1], 10), "validation_fraction=0.01 holds out no image (each class "
                                  "holds out its share, rounded; the smallest class has 10)"),
    (0.6, [0, 1, 1, 1], "validation_fraction=0.6 holds out every image of class 'a' (1 "
                        "class(es) in all)"),
])
def test_a_library_conversion_refuses_a_hold_out_of_no_image_or_a_whole_class(
        tmp_path, fraction, labels, message):
    # the command line finds these before TensorFlow loads; convert_arrays, the same
    with pytest.raises(UserError) as caught:
        convert.convert_arrays(np.zeros((len(labels), 4, 4), np.uint8), labels,
                               str(tmp_path / "out"), class_names=["a", "b"],
                               validation_fraction=fraction)
    assert str(caught.value).startswith(message)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # fresh processes
def test_cli_check_refuses_a_directory_and_files_without_records_in_one_line(tmp_path):
    """--check=records/ (the directory the converter writes) was a FailedPreconditionError
    traceback ("Is a directory"), and --check of an empty or a 3-byte file said "every record
    ... decodes" (exit 0) after checking no record at all."""
    records = tmp_path / "records"
    records.mkdir()
    (tmp_path / "empty.rec").write_bytes(b"")
    (tmp_path / "short.rec").write_text("abc")
    for check, message in [
            (f"{records}/", f"error: --check='{records}/' is a directory, not TFRecord files; "
                            f"give a glob of the files in it, such as --check='{records}/train-*'"),
            (str(tmp_path / "empty.rec"),
             f"error: --check='{tmp_path}/empty.rec' matches 1 file(s) that hold no TFRecord "
             f"record ('{tmp_path}/empty.rec' is empty); give a glob of the files the converter "
             f"wrote, such as --check='{tmp_path}/train-*'"),
            (str(tmp_path / "*.rec"),
             f"error: --check='{tmp_path}/*.rec' matches 2 file(s) that hold no TFRecord record "
             f"('{tmp_path}/empty.rec' is empty); give a glob"),
            (str(tmp_path / "short.rec"),
             f"error: --check='{tmp_path}/short.rec' matches 1 file(s) that hold no TFRecord "
             f"record ('{tmp_path}/short.rec' holds 3 byte(s)); give a glob"),
    ]:
        status, stdout, stderr = _run_convert(f"--check={check}")
        assert (status, stdout) == (2, []), stderr[-20:]
        (line,) = stderr
        assert line.startswith(message), line


@pytest.mark.slow  # fresh processes
def test_cli_check_counts_the_records_it_read_and_says_when_it_stopped_at_its_limit(tmp_path):
    """--check said "every record in ... decodes" without saying how many records it read,
    and `error: 10 corrupt record(s)` when it stopped at 10 among more corrupt records."""
    images = np.zeros((12, 4, 4), np.uint8)
    convert.convert_arrays(images[:6], np.arange(6) % 2, str(tmp_path / "jpeg"), num_shards=2)
    status, stdout, stderr = _run_convert(f"--check={tmp_path}/jpeg/train-*")
    assert (status, stderr) == (0, []), stderr[-20:]
    assert stdout == [f"every record in {tmp_path}/jpeg/train-* decodes: 6 record(s) in 2 "
                      "file(s) checked"]
    # 12 PNG records, each refused by a check of what the JPEG-only pipeline reads
    convert.convert_arrays(images, np.arange(12) % 2, str(tmp_path / "png"), num_shards=1,
                           image_format="png")
    status, stdout, stderr = _run_convert(f"--check={tmp_path}/png/train-*")
    assert (status, stdout) == (2, []), stderr[-20:]
    listed = [line for line in stderr if line.startswith("record ")]
    # the check's own flag is the fix (it named data.decode_jpeg_only, a training key); a
    # PNG is not damaged: not called corrupt
    assert len(listed) == 10 and all(line.endswith(
        "holds an image that is not a JPEG (PNG) and --image_format=jpeg (the default) expects "
        "JPEG: check PNG records with --image_format=png") for line in listed), listed[0]
    assert stderr[-1] == (
        f"error: at least 10 record(s) of another image format than JPEG in {tmp_path}/png/"
        "train-* (the check stops at 10: it stopped in file 1 of 1); if they hold PNG images, "
        "check them with --image_format=png"), stderr[-1]
    status, _, stderr = _run_convert(f"--check={tmp_path}/png/train-*", "--image_format=png")
    assert (status, stderr) == (0, []), stderr[-20:]


def test_a_check_of_a_whole_output_dir_reads_its_records_not_labels_or_dataset_info(tmp_path):
    """--check='records/*' named labels.txt and dataset_info.json, which the conversion
    writes beside the shards, as damaged TFRecord files."""
    convert.convert_arrays(np.zeros((6, 4, 4), np.uint8), np.arange(6) % 2, str(tmp_path),
                           num_shards=2)
    assert sorted(os.listdir(tmp_path))[:2] == ["dataset_info.json", "labels.txt"]
    assert convert.scan_records(str(tmp_path / "*")) == convert.RecordScan([], 6, 2)
    with pytest.raises(UserError, match=r"matches no file \(but the conversion's labels.txt"):
        convert.check_files(str(tmp_path / "*.*"), jpeg_only=True)


def test_find_corrupt_records_stops_at_its_limit_when_a_file_is_also_truncated(tmp_path):
    """A truncated file's own finding was not counted against `limit`: limit=1 gave 2."""
    path = write_records_with_corrupt_jpeg(tmp_path, bad_index=1)
    with open(path, "rb+") as f:
        f.truncate(os.path.getsize(path) - 5)  # the last record cut short
    found = convert.find_corrupt_records(str(tmp_path / "train-*"), limit=10)
    assert sorted(record.index for record in found) == [1, 4]  # record 1, and the cut at 4
    assert len(convert.find_corrupt_records(str(tmp_path / "train-*"), limit=1)) == 1
