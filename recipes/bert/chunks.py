"""Which split and which chunk each document belongs to, from stable ids only.

A document's id is (file index, document index in that file), the file index being its
place in the sorted list of input files. Everything random in the preparation is keyed on
these ids and on the seed, never on the order in which a process or a worker sees the
documents, so the single-process path and the Beam pipeline (any runner, any number of
workers) make the same records:

- split: a document is held out when `uniform(seed, "heldout", file, document)` is below
  `heldout_fraction`;
- chunk: within a split, documents are numbered in (file, document) order and a document
  whose first sentence is sentence number `s` of its split goes to chunk
  `min(s // chunk_sentences, num_chunks - 1)`, with `num_chunks = max(1, total //
  chunk_sentences)`. A chunk is thus a run of consecutive documents of about
  `chunk_sentences` to `2 * chunk_sentences` sentences (the last chunk absorbs the rest);
- randomness of a chunk (pairs, shuffle, masks): `random.Random(stable_int(seed, split,
  chunk, ...))`, independent of every other chunk.

Counting the sentences of each file first (`summarize_file`, pass 1) gives every file its
offset in each split, so pass 2 can assign chunks file by file, in parallel.
"""

import dataclasses
import hashlib
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple

TRAIN, HELDOUT = "train", "heldout"
SPLITS = (TRAIN, HELDOUT)


def stable_int(*parts) -> int:
    """A 63-bit integer from `parts` that is the same in every process and on every host
    (unlike `hash`, which Python salts per process)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode("utf-8"), digest_size=8)
    return int.from_bytes(digest.digest(), "little") >> 1


def is_heldout(seed: int, file_index: int, document_index: int, heldout_fraction: float) -> bool:
    """The seeded coin of one document: held out with probability `heldout_fraction`."""
    if heldout_fraction <= 0:
        return False
    return stable_int(seed, "heldout", file_index, document_index) / 2.0**63 < heldout_fraction


@dataclasses.dataclass(frozen=True)
class FileSummary:
    """What pass 1 learns about one input file."""

    file_index: int
    sentences: Tuple[int, int]  # per split (train, held-out)
    documents: Tuple[int, int]  # per split
    words: int  # whitespace-separated words, both splits


def summarize_file(
    file_index: int, documents: Iterable[List[str]], seed: int, heldout_fraction: float
) -> FileSummary:
    sentences, counts, words = [0, 0], [0, 0], 0
    for document_index, document in enumerate(documents):
        split = int(is_heldout(seed, file_index, document_index, heldout_fraction))
        sentences[split] += len(document)
        counts[split] += 1
        words += sum(len(sentence.split()) for sentence in document)
    return FileSummary(file_index, tuple(sentences), tuple(counts), words)


class TrainingSentences:
    """Iterates the documents of one file once, keeping its training sentences on the side
    (pass 1 counts their words for the vocabulary)."""

    def __init__(self, documents: Iterable[List[str]], seed, file_index, heldout_fraction):
        self._documents = documents
        self._key = (seed, file_index, heldout_fraction)
        self.training_sentences: List[str] = []

    def __iter__(self):
        seed, file_index, heldout_fraction = self._key
        for document_index, document in enumerate(self._documents):
            if not is_heldout(seed, file_index, document_index, heldout_fraction):
                self.training_sentences.extend(document)
            yield document


@dataclasses.dataclass(frozen=True)
class ChunkPlan:
    """The sentence offset of every file in each split, and the chunk counts."""

    offsets: Dict[int, Tuple[int, int]]  # file index -> first sentence number per split
    num_chunks: Tuple[int, int]  # per split
    chunk_sentences: int

    @classmethod
    def from_summaries(cls, summaries: Sequence[FileSummary], chunk_sentences: int):
        offsets, totals = {}, [0, 0]
        for summary in sorted(summaries, key=lambda s: s.file_index):
            offsets[summary.file_index] = tuple(totals)
            for split in (0, 1):
                totals[split] += summary.sentences[split]
        num_chunks = tuple(max(1, total // chunk_sentences) for total in totals)
        return cls(offsets, num_chunks, chunk_sentences)

    def keyed_documents(
        self,
        file_index: int,
        documents: Iterable[List[str]],
        seed: int,
        heldout_fraction: float,
    ) -> Iterator[Tuple[Tuple[str, int], Tuple[Tuple[int, int], List[str]]]]:
        """Yields ((split, chunk), ((file index, document index), document)) for one file."""
        position = list(self.offsets[file_index])
        for document_index, document in enumerate(documents):
            split = int(is_heldout(seed, file_index, document_index, heldout_fraction))
            chunk = min(position[split] // self.chunk_sentences, self.num_chunks[split] - 1)
            position[split] += len(document)
            yield (SPLITS[split], chunk), ((file_index, document_index), document)
