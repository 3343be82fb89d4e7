"""The names of the files a conversion (`convert.py`) writes, and their description
(`IMAGE_RECORDS`) for the data tools' check of an output directory, in a module without
TensorFlow: `convert_flags.py` checks --output_dir and --split before TensorFlow loads."""

import os
import re
import uuid

from recipes.common import storage

INFO_FILE = "dataset_info.json"  # written last: marks a finished conversion
LABELS_FILE = "labels.txt"
# A split's name (--split), the start of its shards' names; not hidden (no leading dot).
SPLIT_NAME = r"[A-Za-z0-9_-][A-Za-z0-9_.-]*"
_SHARD = rf"{SPLIT_NAME}-\d{{5,}}-of-\d{{5,}}"


def shard_paths(output_dir, split, num_shards):
    """`split-00000-of-0000N` paths, the ImageNet naming."""
    return [
        os.path.join(output_dir, f"{split}-{i:05d}-of-{num_shards:05d}") for i in range(num_shards)
    ]


def temporary_paths(paths):
    """Where shards `paths` are written before they are renamed into place: hidden names
    (`.<name>.tmp-<8 hex digits>`, the digits one conversion's), so that a `split-*` glob
    never reads a shard being written, nor one left by a killed conversion."""
    token = uuid.uuid4().hex[:8]
    return [os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{token}")
            for path in paths]


IMAGE_RECORDS = storage.DataTool(
    "ResNet image records", "python -m recipes.resnet.convert", INFO_FILE,
    re.compile(rf"{_SHARD}|\.{_SHARD}\.tmp-[0-9a-f]{{8}}"),
    ("train", "validation"),  # a conversion's splits (--split names another one)
    f"the shards, {LABELS_FILE} and {INFO_FILE}")
