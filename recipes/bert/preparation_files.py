"""The names of the files a BERT preparation (`prepare_data.py`) writes, and their
description (`BERT_DATA`) for the data tools' check of an output directory, in a module
without TensorFlow: `prepare_data_flags.py` checks --output_dir before TensorFlow loads."""

import os
import re
from typing import List

from recipes.common import storage

TRAIN_PREFIX, HELDOUT_PREFIX = "train", "heldout"
SHARD_EXTENSION = ".tfrecord"
# A shard is written as `<its path>.tmp` and renamed when the preparation is complete.
TEMPORARY_SUFFIX = ".tmp"
METADATA_FILE = "metadata.json"  # written last: marks a finished preparation


def shard_paths(output_dir: str, prefix: str, num_shards: int) -> List[str]:
    return [
        os.path.join(output_dir, f"{prefix}-{i:05d}-of-{num_shards:05d}{SHARD_EXTENSION}")
        for i in range(num_shards)
    ]


def shard_pattern(output_dir: str, prefix: str, num_shards: int) -> str:
    """The glob that matches exactly the shards of one run (not stale ones of other counts)."""
    return os.path.join(output_dir, f"{prefix}-?????-of-{num_shards:05d}{SHARD_EXTENSION}")


BERT_DATA = storage.DataTool(
    "BERT pretraining data", "python -m recipes.bert.prepare_data", METADATA_FILE,
    re.compile(rf"({TRAIN_PREFIX}|{HELDOUT_PREFIX})-\d{{5,}}-of-\d{{5,}}"
               rf"{re.escape(SHARD_EXTENSION)}({re.escape(TEMPORARY_SUFFIX)})?"),
    (TRAIN_PREFIX, HELDOUT_PREFIX), f"the shards, vocab.txt and {METADATA_FILE}")
