"""Tiny BERT pretraining data made by the recipe's own preparation, for distributed tests.

A generated corpus (40 documents of 6 short sentences over a 24-word vocabulary) goes
through `recipes.bert.prepare_data.prepare_pretraining_data`: WordPiece vocabulary,
sentence pairs, masking, sharded TFRecords in Google BERT's format. Takes about a second.
"""
import random

from recipes.bert import prepare_data

WORDS = (
    "the a cat dog bird sat ran flew on under over mat tree house red blue small big "
    "quickly slowly today yesterday and but because then"
).split()
SEQ_LENGTH = 16
MAX_PREDICTIONS_PER_SEQ = 3


def prepare(root):
    """Writes the corpus and the prepared data under the pathlib directory `root`."""
    rng = random.Random(0)
    documents = []
    for _ in range(40):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) + "."
                     for _ in range(6)]
        documents.append("\n".join(sentences))
    (root / "corpus.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return prepare_data.prepare_pretraining_data(
        str(root / "corpus.txt"), str(root / "prepared"), vocab_size=200,
        seq_length=SEQ_LENGTH, max_predictions_per_seq=MAX_PREDICTIONS_PER_SEQ, dupe_factor=2,
        num_shards=2, heldout_fraction=0.2, seed=0, progress=False)
