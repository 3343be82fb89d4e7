"""The embedded fine-tuning task (recipes/bert/stdlib_classification.py) is built only from
documents the pretraining preparation held out."""
import json

import pytest

from recipes.bert import chunks, corpus
from recipes.bert import stdlib_classification
from recipes.bert import text_files

pytestmark = pytest.mark.slow  # writes and parses the whole embedded corpus

SEED = 12345


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pretraining_data")
    corpus.write_embedded_corpus(str(directory / "corpus"))
    return directory


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_passages_come_only_from_held_out_documents(data_dir, tmp_path):
    train_path, test_path, labels = stdlib_classification.write_task(
        str(tmp_path), str(data_dir), SEED, max_examples=30)
    train, test = read_jsonl(train_path), read_jsonl(test_path)
    # The split as prepare_data makes it (recipes/bert/chunks.py): one seeded coin per
    # document id (index of its file in the sorted list, index in the file), held out when
    # below the 5% held-out fraction.
    files = sorted(str(data_dir / "corpus" / name) for name in corpus.EMBEDDED_CORPUS_FILES)
    held_out, pretrained_on = [], []
    for file_index, path in enumerate(files):
        for index, document in enumerate(text_files.read_documents([path])):
            coin = chunks.is_heldout(SEED, file_index, index, 0.05)
            (held_out if coin else pretrained_on).append(" ".join(document))
    held_out, pretrained_on = "\n".join(held_out), "\n".join(pretrained_on)
    for row in train + test:  # a passage is consecutive sentences of one document
        assert row["sentence"] in held_out, row
        assert row["sentence"] not in pretrained_on, row
    assert len(labels) == len(set(labels)) >= 2
    assert {row["label"] for row in train} == {row["label"] for row in test} == set(labels)
    assert not {row["sentence"] for row in train} & {row["sentence"] for row in test}
    for label in labels:  # at most 30 passages a class, a third of them (rounded) for test
        count = sum(row["label"] == label for row in train + test)
        assert 20 <= count <= 30
        assert sum(row["label"] == label for row in test) == round(count / 3)


def test_same_seed_same_files(data_dir, tmp_path):
    first = stdlib_classification.write_task(str(tmp_path / "a"), str(data_dir), SEED)
    second = stdlib_classification.write_task(str(tmp_path / "b"), str(data_dir), SEED)
    for a, b in zip(first[:2], second[:2]):
        assert open(a).read() == open(b).read()
    assert first[2] == second[2]
