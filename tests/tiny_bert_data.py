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


def config(data, *, micro_batch_size, steps, checkpoint_every, dropout_rate, train_files=None):
    """A config dict (for a YAML file) for a 1-layer, 16-wide BERT over `prepare`'s data at a
    global batch of 16; the tests vary the accumulation, length, checkpoints and dropout."""
    return {
        "data": {
            "train_files": train_files or data.train_files,
            "eval_files": data.eval_files,
            "vocab_file": data.vocab_file,
            "seq_length": SEQ_LENGTH,
            "max_predictions_per_seq": MAX_PREDICTIONS_PER_SEQ,
        },
        "model": {
            "hidden_size": 16,
            "num_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 32,
            "max_sequence_length": 32,
            "dropout_rate": dropout_rate,
            "attention_dropout_rate": dropout_rate,
        },
        "optimizer": {"learning_rate": 0.01, "warmup_steps": 1},
        "train": {
            "global_batch_size": 16,
            "micro_batch_size": micro_batch_size,
            "steps": steps,
            "checkpoint_every": checkpoint_every,
            "log_every": 1,
        },
        "eval": {"global_batch_size": 8, "steps": 1},
    }
