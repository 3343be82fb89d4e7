"""One chunk of documents -> its serialized pretraining records and their shards.

The same function runs in the single-process path and in the Beam workers: tokenize
(`tensorflow_text.BertTokenizer`), build sentence pairs `dupe_factor` times
(`sentence_pairs.py`, random B segments drawn from the chunk), shuffle the chunk's pairs,
mask them (`masking.py`) and serialize them (`tfrecords.py`). Record `i` of chunk `c` goes to
shard `(c + i) % num_shards`; inside a shard, records are ordered by (chunk, i).
"""

import dataclasses
import itertools
import random
from typing import Iterator, List, Sequence, Tuple

import tensorflow as tf

from recipes.bert import chunks
from recipes.bert import masking
from recipes.bert import sentence_pairs
from recipes.bert import tfrecords
from recipes.bert import vocabulary

_MASK_BATCH = 2048  # Sequences per call of the masking graph.


@dataclasses.dataclass(frozen=True)
class RecordSettings:
    """Everything but the documents that decides a chunk's records (picklable)."""

    vocab_tokens: Tuple[str, ...]
    lower_case: bool
    seq_length: int
    max_predictions_per_seq: int
    masked_lm_prob: float
    short_seq_prob: float
    dupe_factor: int
    num_shards: int
    seed: int


class ChunkProcessor:
    """Builds the records of chunks; holds the tokenizer (build once per process)."""

    def __init__(self, settings: RecordSettings):
        self.settings = settings
        self._special_ids = vocabulary.special_ids(settings.vocab_tokens)
        self._tokenizer = vocabulary.tokenizer_from_tokens(
            settings.vocab_tokens, lower_case=settings.lower_case
        )

    def records(
        self, split: str, chunk: int, documents: Sequence[List[str]]
    ) -> Iterator[Tuple[int, int, bytes]]:
        """Yields (shard, index in chunk, serialized example) for the documents of one chunk,
        given in (file, document) order."""
        settings = self.settings
        tokenized = self.tokenize(documents)
        rng = random.Random(chunks.stable_int(settings.seed, split, chunk, "pairs"))
        dupe_factor = settings.dupe_factor if split == chunks.TRAIN else 1
        pairs = []
        for _ in range(dupe_factor):  # Google: for each dupe, for each document.
            for index in range(len(tokenized)):
                pairs.extend(
                    sentence_pairs.pairs_from_document(
                        index,
                        tokenized,
                        seq_length=settings.seq_length,
                        short_seq_prob=settings.short_seq_prob,
                        rng=rng,
                    )
                )
        rng.shuffle(pairs)  # Google shuffles all pairs; here within the chunk.
        masker = masking.Masker(
            vocab_size=len(settings.vocab_tokens),
            special_ids=self._special_ids,
            masked_lm_prob=settings.masked_lm_prob,
            max_predictions_per_seq=settings.max_predictions_per_seq,
            seed=chunks.stable_int(settings.seed, split, chunk, "masks"),
        )
        for start in range(0, len(pairs), _MASK_BATCH):
            batch = pairs[start : start + _MASK_BATCH]
            for offset, record in enumerate(self._serialize(batch, masker)):
                index = start + offset
                yield (chunk + index) % settings.num_shards, index, record

    def tokenize(self, documents: Sequence[List[str]]) -> List[List[List[int]]]:
        """Documents of strings -> documents of id lists; empty sentences/documents dropped."""
        sentences = [sentence for document in documents for sentence in document]
        if not sentences:
            return []
        ids = self._tokenizer.tokenize(tf.constant(sentences)).merge_dims(-2, -1)
        values = ids.flat_values.numpy().tolist()
        splits = ids.row_splits.numpy().tolist()
        rows = iter(values[splits[i] : splits[i + 1]] for i in range(len(sentences)))
        tokenized = []
        for document in documents:
            sentences_of_document = [row for row in itertools.islice(rows, len(document)) if row]
            if sentences_of_document:
                tokenized.append(sentences_of_document)
        return tokenized

    def _serialize(self, pairs, masker) -> List[bytes]:
        settings, special = self.settings, self._special_ids
        sequences = [[special.cls] + p.tokens_a + [special.sep] + p.tokens_b + [special.sep]
                     for p in pairs]
        masked_ids, positions, original_ids = masker(sequences)
        records = []
        for i, pair in enumerate(pairs):
            segment_a = len(pair.tokens_a) + 2  # [CLS] A [SEP]
            segment_ids = [0] * segment_a + [1] * (len(pair.tokens_b) + 1)  # B [SEP]
            records.append(
                tfrecords.serialize_example(
                    input_ids=masked_ids[i],
                    segment_ids=segment_ids,
                    masked_lm_positions=positions[i],
                    masked_lm_ids=original_ids[i],
                    next_sentence_label=pair.next_sentence_label,
                    seq_length=settings.seq_length,
                    max_predictions_per_seq=settings.max_predictions_per_seq,
                    pad_id=special.pad,
                )
            )
        return records
