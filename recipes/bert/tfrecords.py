"""The pretraining TFRecord format of Google's BERT and Model Garden, and a sharded writer.

One `tf.train.Example` per sequence, with the feature names of Google's
`create_pretraining_data.py`, which Model Garden's `BertPretrainDataLoader` reads by default
(`use_v2_feature_names=False`):

| feature | type | shape | meaning |
| --- | --- | --- | --- |
| `input_ids` | int64 | [seq_length] | [CLS] A [SEP] B [SEP] after masking, 0-padded |
| `input_mask` | int64 | [seq_length] | 1 for real tokens, 0 for padding |
| `segment_ids` | int64 | [seq_length] | 0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding |
| `masked_lm_positions` | int64 | [max_predictions_per_seq] | positions, ascending, 0-padded |
| `masked_lm_ids` | int64 | [max_predictions_per_seq] | original ids there, 0-padded |
| `masked_lm_weights` | float | [max_predictions_per_seq] | 1.0 per real prediction, 0.0 padding |
| `next_sentence_labels` | int64 | [1] | 0: B follows A, 1: B is random |

Shards are written to a temporary name and renamed when the preparation is complete, so a
crashed run never leaves a shard that looks finished.
"""

import os

import numpy as np
import tensorflow as tf

from recipes.bert.preparation_files import TEMPORARY_SUFFIX, shard_paths, shard_pattern


def _int64(values) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _float(values) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def serialize_example(
    *,
    input_ids: np.ndarray,
    segment_ids: np.ndarray,
    masked_lm_positions: np.ndarray,
    masked_lm_ids: np.ndarray,
    next_sentence_label: int,
    seq_length: int,
    max_predictions_per_seq: int,
    pad_id: int,
) -> bytes:
    """One sequence (unpadded arrays) as a serialized `tf.train.Example` (padded)."""
    num_tokens = len(input_ids)
    num_predictions = len(masked_lm_positions)
    token_padding = seq_length - num_tokens
    prediction_padding = max_predictions_per_seq - num_predictions
    features = {
        "input_ids": _int64(list(input_ids) + [pad_id] * token_padding),
        "input_mask": _int64([1] * num_tokens + [0] * token_padding),
        "segment_ids": _int64(list(segment_ids) + [0] * token_padding),
        "masked_lm_positions": _int64(list(masked_lm_positions) + [0] * prediction_padding),
        "masked_lm_ids": _int64(list(masked_lm_ids) + [0] * prediction_padding),
        "masked_lm_weights": _float([1.0] * num_predictions + [0.0] * prediction_padding),
        "next_sentence_labels": _int64([next_sentence_label]),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    # `feature` is a protobuf map: without `deterministic=True` its serialized order
    # follows Python's per-process string hashing, and the bytes change between runs.
    return example.SerializeToString(deterministic=True)


class ShardedWriter:
    """Writes records into `num_shards` TFRecord files; use as a context manager.

    Records go to `<shard path>.tmp`; the caller renames them to their final names once the
    whole preparation has succeeded. On an error the temporary files are removed.
    """

    def __init__(self, output_dir: str, prefix: str, num_shards: int):
        self.paths = shard_paths(output_dir, prefix, num_shards)
        self.pattern = shard_pattern(output_dir, prefix, num_shards)
        self.num_records = 0
        self._writers = []

    def __enter__(self):
        self._writers = [tf.io.TFRecordWriter(path + TEMPORARY_SUFFIX) for path in self.paths]
        return self

    def write(self, shard: int, record: bytes) -> None:
        self._writers[shard].write(record)
        self.num_records += 1

    def __exit__(self, error_type, error, traceback):
        for writer in self._writers:
            writer.close()
        if error_type is not None:
            for path in self.paths:
                if os.path.exists(path + TEMPORARY_SUFFIX):
                    os.remove(path + TEMPORARY_SUFFIX)
        return False
