"""The embedded fine-tuning task: which standard-library module (or help topic) does a
held-out docstring passage come from?

Built only from the documents the pretraining run held out, so neither encoder has seen a
word of it. The pretraining preparation (recipes/bert/prepare_data.py) writes the corpus
as text files, one document per module or help topic, and sends each document to the
held-out split by a seeded coin; this module replays that split with the same function,
seed and fraction, over the same files, and names each document after its module.

Some help topics of `pydoc_data` repeat paragraphs of other topics, so a held-out topic can
share text with a training one; passages that occur in any document pretraining read are
dropped. Classes: the held-out documents with at least `min_examples` passages (a passage is
`sentences_per_example` consecutive sentences), at most `max_examples` passages each (the
first ones), so the classes are balanced up to that cap. Each class's passages go to the
fine-tuning training or test file by a seeded shuffle (`test_fraction` to test).
"""

import json
import os
import random

from recipes.bert import chunks
from recipes.bert import corpus
from recipes.bert import prepare_data
from recipes.bert import text_files
from recipes.common.errors import UserError

TRAIN_FILE, TEST_FILE, LABELS_FILE = "train.jsonl", "test.jsonl", "labels.json"


def document_names():
    """Module / help-topic name of each document of the embedded corpus, in corpus order
    (the order of `corpus.stdlib_documents` then `corpus.pydoc_topic_documents`)."""
    names = []
    for module, path in corpus._stdlib_source_files():  # pylint: disable=protected-access
        docstrings = corpus._source_docstrings(path)  # pylint: disable=protected-access
        if any(corpus.docstring_sentences(d) for d in docstrings):
            names.append(module)
    for module in corpus.COMPILED_MODULES:
        docstrings = corpus._compiled_module_docstrings(module)  # pylint: disable=protected-access
        if any(corpus.docstring_sentences(d) for d in docstrings):
            names.append(module)
    from pydoc_data import topics  # pylint: disable=g-import-not-at-top (a large dict)

    names.extend(f"help topic {name}" for name in sorted(topics.topics)
                 if corpus.docstring_sentences(topics.topics[name]))
    return names


def corpus_files(pretraining_data_dir):
    """The embedded corpus' files a pretraining preparation wrote into its data directory."""
    return [os.path.join(pretraining_data_dir, "corpus", name)
            for name in corpus.EMBEDDED_CORPUS_FILES]


def check_corpus_files(pretraining_data_dir):
    """A UserError naming the first of `corpus_files` missing (the run's data/ deleted)."""
    missing = [path for path in corpus_files(pretraining_data_dir) if not os.path.exists(path)]
    if missing:
        raise UserError(
            f"{missing[0]} does not exist: data.task=stdlib reads the embedded corpus its "
            "pretraining run prepared there; give a run whose prepared data is whole, or use "
            "data.task=classification with your own files")


def heldout_documents(pretraining_data_dir, seed, heldout_fraction=prepare_data.HELDOUT_FRACTION):
    """([(name, sentences)] of the documents the pretraining preparation held out, the text
    of the documents it trained on as one string)."""
    files = corpus_files(pretraining_data_dir)
    check_corpus_files(pretraining_data_dir)
    names = document_names()
    documents = list(text_files.read_documents(files))
    if len(names) != len(documents):
        raise UserError(
            f"the corpus in {pretraining_data_dir} has {len(documents)} documents but this "
            f"Python's standard library gives {len(names)}: pretrain with this Python"
        )
    # The preparation's own coin (recipes/bert/chunks.py): a document's id is its file's
    # index in the sorted list the preparation read, and its index in that file.
    prepared_files = text_files.resolve_text_files(os.path.dirname(files[0]))
    split = [
        (chunks.is_heldout(seed, prepared_files.index(path), index, heldout_fraction), document)
        for path in files
        for index, document in enumerate(text_files.read_documents([path]))
    ]
    heldout, trained_on = [], []
    for name, (is_heldout, document) in zip(names, split):
        if is_heldout:
            heldout.append((name, document))
        else:
            trained_on.append(" ".join(document))
    return heldout, "\n".join(trained_on)


def passages(sentences, sentences_per_example):
    return [" ".join(sentences[i:i + sentences_per_example])
            for i in range(0, len(sentences) - sentences_per_example + 1, sentences_per_example)]


def write_task(output_dir, pretraining_data_dir, pretraining_seed, seed=1, *,
               sentences_per_example=2, min_examples=20, max_examples=30, test_fraction=1 / 3):
    """Writes train.jsonl, test.jsonl ({"sentence", "label"} per line) and labels.json into
    `output_dir`; returns (train_path, test_path, labels). `pretraining_seed` is the
    pretraining run's data.seed (it drew the split), `seed` shuffles the passages."""
    rng = random.Random(seed)
    train, test, labels = [], [], []
    documents, trained_on = heldout_documents(pretraining_data_dir, pretraining_seed)
    seen = set()
    for name, sentences in documents:
        # Some help topics repeat text of others: a passage that also occurs in a document
        # pretraining read is dropped, and a repeated passage is kept once.
        examples = []
        for text in passages(sentences, sentences_per_example):
            if text not in seen and text not in trained_on:
                seen.add(text)
                examples.append(text)
        if len(examples) < min_examples:
            continue
        examples = examples[:max_examples]
        rng.shuffle(examples)
        num_test = round(len(examples) * test_fraction)
        labels.append(name)
        test += [{"sentence": text, "label": name} for text in examples[:num_test]]
        train += [{"sentence": text, "label": name} for text in examples[num_test:]]
    if len(labels) < 2:
        raise UserError(
            f"the held-out split of {pretraining_data_dir} has {len(labels)} document(s) with "
            f"{min_examples} passages or more: the embedded task needs at least 2"
        )
    rng.shuffle(train)
    os.makedirs(output_dir, exist_ok=True)
    paths = [os.path.join(output_dir, name) for name in (TRAIN_FILE, TEST_FILE)]
    for path, rows in zip(paths, (train, test)):
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(row) + "\n" for row in rows))
    with open(os.path.join(output_dir, LABELS_FILE), "w", encoding="utf-8") as f:
        json.dump(labels, f, indent=1)
    return paths[0], paths[1], labels
