"""Sentence pairs for next-sentence prediction, as Google BERT's `create_pretraining_data.py`.

For each document, segments (runs of whole sentences) are gathered up to a target length;
the first `a_end` sentences become segment A. Half of the time B is the actual continuation
(label 0, "is next"); otherwise B is taken from a random other document (label 1,
"random"), and the unused sentences are put back so they start the next pair. The pair is
then trimmed to `max_num_tokens = seq_length - 3` ([CLS] A [SEP] B [SEP]) by removing
tokens from the longer segment, at its front or back at random.

The one departure from Google's script, for streaming and for parallel workers: Google
draws the random document from the whole corpus, held in memory. Here it is drawn from the
document's chunk (consecutive documents of about `chunk_sentences` sentences; see
`chunks.py`), so memory stays bounded and chunks can be processed independently.

Tokens here are ids (ints); this module is pure Python and knows nothing about TF.
"""

import dataclasses
import random
from typing import List, Sequence

Document = Sequence[Sequence[int]]  # A document is a list of sentences of token ids.

IS_NEXT, IS_RANDOM = 0, 1  # `next_sentence_labels` values, as in Google's BERT.


@dataclasses.dataclass(frozen=True)
class SentencePair:
    tokens_a: List[int]
    tokens_b: List[int]
    next_sentence_label: int  # IS_NEXT or IS_RANDOM


def truncate_pair(
    tokens_a: List[int], tokens_b: List[int], max_num_tokens: int, rng: random.Random
) -> None:
    """Trims the longer segment, one token at a time from its front or back, in place."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        # Google trims from the front or the back at random to add noise against always
        # losing the end of sentences.
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def pairs_from_document(
    document_index: int,
    pool: Sequence[Document],
    *,
    seq_length: int,
    short_seq_prob: float,
    rng: random.Random
) -> List[SentencePair]:
    """All sentence pairs of `pool[document_index]`; random B segments come from `pool`.

    With a pool of a single document no random B exists: such chunks yield only
    "is next" pairs (and nothing from one-sentence documents).
    """
    document = pool[document_index]
    max_num_tokens = seq_length - 3  # Room for [CLS], [SEP], [SEP].
    # Mostly fill the sequence; with probability short_seq_prob use a shorter target so
    # the model also sees short sequences (fine-tuning inputs are often short).
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    pairs = []
    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        current_chunk.append(document[i])
        current_length += len(document[i])
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                # Segment A is the first `a_end` sentences of the chunk.
                a_end = rng.randint(1, len(current_chunk) - 1) if len(current_chunk) >= 2 else 1
                tokens_a = [token for sentence in current_chunk[:a_end] for token in sentence]
                has_other_document = len(pool) > 1
                if has_other_document and (len(current_chunk) == 1 or rng.random() < 0.5):
                    label = IS_RANDOM
                    target_b_length = target_seq_length - len(tokens_a)
                    # Any document of the pool but this one (Google retries 10 times; a direct
                    # draw from the others is equivalent and never picks this document).
                    other = rng.randint(0, len(pool) - 2)
                    random_document = pool[other if other < document_index else other + 1]
                    random_start = rng.randint(0, len(random_document) - 1)
                    tokens_b = []
                    for sentence in random_document[random_start:]:
                        tokens_b.extend(sentence)
                        if len(tokens_b) >= target_b_length:
                            break
                    # The sentences after A were not used: put them back for the next pair.
                    i -= len(current_chunk) - a_end
                else:
                    label = IS_NEXT
                    tokens_b = [token for sentence in current_chunk[a_end:] for token in sentence]
                truncate_pair(tokens_a, tokens_b, max_num_tokens, rng)
                if tokens_a and tokens_b:
                    pairs.append(SentencePair(tokens_a, tokens_b, label))
            current_chunk = []
            current_length = 0
        i += 1
    return pairs
