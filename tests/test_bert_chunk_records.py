"""One chunk of documents -> its pretraining records and shards (recipes/bert/chunk_records.py),
and the sharded writer they go through (recipes/bert/tfrecords.py)."""
import os

import numpy as np
import pytest
import tensorflow as tf

from recipes.bert import chunk_records
from recipes.bert import tfrecords

NUM_DOCUMENTS = 20
VOCAB = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") + tuple(
    f"w{d}" for d in range(NUM_DOCUMENTS))
CLS = 2
# Document d: four sentences of its own word, so every token names its document.
DOCUMENTS = [[f"w{d} w{d} w{d}"] * 4 for d in range(NUM_DOCUMENTS)]


def processor(**overrides):
    settings = dict(vocab_tokens=VOCAB, lower_case=True, seq_length=16,
                    max_predictions_per_seq=3, masked_lm_prob=0.15, short_seq_prob=0.0,
                    dupe_factor=1, num_shards=3, seed=5)
    settings.update(overrides)
    return chunk_records.ChunkProcessor(chunk_records.RecordSettings(**settings))


def source_document(record):
    """The document of a record's segment A: its first token after [CLS], unmasked."""
    features = tf.train.Example.FromString(record).features.feature
    ids = np.array(features["input_ids"].int64_list.value)
    weights = np.array(features["masked_lm_weights"].float_list.value)
    positions = np.array(features["masked_lm_positions"].int64_list.value)[weights > 0]
    ids[positions] = np.array(features["masked_lm_ids"].int64_list.value)[weights > 0]
    assert ids[0] == CLS
    return int(ids[1]) - VOCAB.index("w0")


def test_record_i_of_chunk_c_goes_to_shard_c_plus_i_modulo_the_shard_count():
    for chunk in (0, 1, 5):
        written = list(processor().records("train", chunk, DOCUMENTS))
        assert [index for _, index, _ in written] == list(range(len(written)))
        assert [shard for shard, _, _ in written] == [(chunk + i) % 3 for i in range(len(written))]


def test_a_chunks_pairs_are_shuffled_not_left_in_document_order():
    documents = [source_document(record)
                 for _, _, record in processor().records("train", 0, DOCUMENTS)]
    assert sorted(set(documents)) == list(range(NUM_DOCUMENTS))
    # In document order the sources would never decrease; shuffled, about half the steps do.
    decreasing = sum(later < earlier for earlier, later in zip(documents, documents[1:]))
    assert decreasing > len(documents) // 4, documents


def test_dupe_factor_repeats_the_training_pairs_only_never_the_held_out_ones():
    def count(split, dupe_factor):
        return sum(1 for _ in processor(dupe_factor=dupe_factor).records(split, 0, DOCUMENTS))

    assert count("heldout", 3) == count("heldout", 1) > 0
    assert count("train", 3) > 2 * count("train", 1)


def test_a_failed_write_is_raised_and_leaves_no_temporary_shard(tmp_path):
    with pytest.raises(RuntimeError, match="the preparation failed"):
        with tfrecords.ShardedWriter(str(tmp_path), "train", 2) as writer:
            writer.write(0, b"a record")
            raise RuntimeError("the preparation failed")
    assert os.listdir(tmp_path) == []
