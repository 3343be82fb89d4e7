"""BERT pretraining data: text -> TFRecords -> the model's input, checked from the outside.

Expected values come from the rules (BERT's masking procedure, Google's pair construction)
and from the hand-written corpus, never from the code under test.
"""

import dataclasses
import glob
import math
import os
import pathlib
import random
import re
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
from official.nlp.data import pretrain_dataloader

from dataset_graph import interleave_ops

from recipes.bert import corpus
from recipes.bert import input as input_lib
from recipes.bert import masking
from recipes.bert import prepare_data
from recipes.bert import sentence_pairs
from recipes.bert import text_files
from recipes.bert import vocabulary
from recipes.common import storage
from recipes.common.errors import UserError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, CLS, SEP, MASK = 0, 2, 3, 4  # Ids in every vocabulary the tests write.

HAND_WRITTEN_DOCUMENTS = [
    [
        "The quick brown fox jumps over the lazy dog.",
        "It was a bright cold day in April.",
        "The clocks were striking thirteen.",
        "Nobody expected the fox to return so soon.",
    ],
    [
        "Call me Ishmael.",
        "Some years ago I went to sea.",
        "Having little money in my purse, I thought I would sail about a little.",
        "It is a way I have of driving off the spleen.",
    ],
    [
        "All happy families are alike.",
        "Each unhappy family is unhappy in its own way.",
        "Everything was in confusion in the house.",
    ],
    [
        "In a hole in the ground there lived a hobbit.",
        "Not a nasty, dirty, wet hole.",
        "It was a hobbit hole, and that means comfort.",
        "The door was perfectly round like a porthole.",
    ],
]


def words_of(text):
    """The test's own tokenization: lower-case words and single punctuation marks."""
    return re.findall(r"\w+|[^\w\s]", text.lower())


def write_corpus(directory, documents, name="corpus.txt"):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as out:
        out.write("\n\n".join("\n".join(document) for document in documents) + "\n")
    return path


def write_vocab(path, tokens):
    with open(path, "w", encoding="utf-8") as out:
        out.write("".join(token + "\n" for token in tokens))
    return path


def synthetic_documents(num_documents, seed=0):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    return [
        [
            " ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + "."
            for _ in range(rng.randint(3, 9))
        ]
        for _ in range(num_documents)
    ]


def read_records(pattern):
    """All records of the shards matching `pattern`, as dicts of lists, file by file."""
    records = []
    for path in sorted(glob.glob(pattern)):
        for serialized in tf.data.TFRecordDataset(path):
            example = tf.train.Example.FromString(serialized.numpy())
            records.append(
                {
                    name: list(feature.int64_list.value or feature.float_list.value)
                    for name, feature in example.features.feature.items()
                }
            )
    return records


@pytest.fixture(scope="module")
def hand_written(tmp_path_factory):
    """The hand-written corpus prepared with a whole-word vocabulary (exact decoding)."""
    root = tmp_path_factory.mktemp("hand_written")
    corpus_dir = root / "corpus"
    write_corpus(str(corpus_dir), HAND_WRITTEN_DOCUMENTS)
    words = sorted({w for d in HAND_WRITTEN_DOCUMENTS for s in d for w in words_of(s)})
    vocab_tokens = RESERVED + words
    vocab_file = write_vocab(str(root / "vocab.txt"), vocab_tokens)
    prepared = prepare_data.prepare_pretraining_data(
        str(corpus_dir),
        str(root / "out"),
        vocab_file=vocab_file,
        seq_length=48,
        max_predictions_per_seq=6,
        dupe_factor=3,
        num_shards=2,
        heldout_fraction=0.0,
        seed=3,
        progress=False,
    )
    return prepared, vocab_tokens


def test_round_trip_decodes_to_the_source_text(hand_written):
    prepared, vocab_tokens = hand_written
    seq_length, max_predictions = 48, 6
    document_words = [[w for s in d for w in words_of(s)] for d in HAND_WRITTEN_DOCUMENTS]

    def contiguous_in(needle, haystack):
        return any(
            haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1)
        )

    dataset = input_lib.make_pretraining_dataset(
        prepared.train_files,
        seq_length=seq_length,
        max_predictions_per_seq=max_predictions,
        batch_size=4,
        is_training=False,
    )
    num_sequences = 0
    for features, labels in dataset:
        assert features["input_word_ids"].shape == (4, seq_length)
        assert features["input_word_ids"].dtype == tf.int32
        assert features["masked_lm_positions"].shape == (4, max_predictions)
        assert labels["masked_lm_weights"].dtype == tf.float32
        assert labels["next_sentence_labels"].shape == (4, 1)
        for i in range(4):
            ids = features["input_word_ids"][i].numpy()
            mask = features["input_mask"][i].numpy()
            types = features["input_type_ids"][i].numpy()
            positions = features["masked_lm_positions"][i].numpy()
            original = labels["masked_lm_ids"][i].numpy()
            weights = labels["masked_lm_weights"][i].numpy()
            n = int(mask.sum())
            assert list(mask) == [1] * n + [0] * (seq_length - n)  # Real tokens, then padding.
            assert all(ids[n:] == PAD)
            num_predictions = int(weights.sum())
            assert list(weights) == [1.0] * num_predictions + [0.0] * (
                max_predictions - num_predictions
            )
            # Undo the masking with the labels, then decode.
            restored = ids[:n].copy()
            restored[positions[:num_predictions]] = original[:num_predictions]
            assert list(positions[num_predictions:]) == [0] * (max_predictions - num_predictions)
            separators = [j for j in range(n) if restored[j] == SEP]
            assert restored[0] == CLS and len(separators) == 2 and separators[1] == n - 1
            first_sep = separators[0]
            # Segment ids: 0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding.
            assert list(types) == (
                [0] * (first_sep + 1) + [1] * (n - first_sep - 1) + [0] * (seq_length - n)
            )
            segment_a = [vocab_tokens[t] for t in restored[1:first_sep]]
            segment_b = [vocab_tokens[t] for t in restored[first_sep + 1 : n - 1]]
            assert segment_a and segment_b
            assert any(contiguous_in(segment_a, words) for words in document_words)
            assert any(contiguous_in(segment_b, words) for words in document_words)
            if labels["next_sentence_labels"][i, 0] == sentence_pairs.IS_NEXT:
                assert any(contiguous_in(segment_a + segment_b, words) for words in document_words)
            # Special tokens are never prediction targets.
            assert not set(original[:num_predictions]) & {PAD, CLS, SEP}
            num_sequences += 1
    assert num_sequences == prepared.num_train_sequences // 4 * 4  # drop_remainder
    assert num_sequences > 0


def test_masking_follows_bert_rules():
    vocab_size = 1000
    special = vocabulary.SpecialIds(pad=PAD, unk=1, cls=CLS, sep=SEP, mask=MASK)
    masker = masking.Masker(
        vocab_size=vocab_size,
        special_ids=special,
        masked_lm_prob=0.15,
        max_predictions_per_seq=20,
        seed=11,
    )
    rng = np.random.default_rng(0)
    sequences = []
    for _ in range(3000):
        length_a, length_b = rng.integers(1, 100, size=2)
        body = lambda k: list(rng.integers(10, vocab_size, size=k))
        sequence = [CLS] + body(length_a) + [SEP] + body(length_b) + [SEP]
        if rng.random() < 0.2:
            sequence += [PAD] * 5  # [PAD] must never be selected either.
        sequences.append(sequence)
    masked, positions, original = masker(sequences)

    outcomes = {"mask": 0, "random": 0, "unchanged": 0}
    for sequence, masked_row, position_row, original_row in zip(
        sequences, masked, positions, original
    ):
        sequence = np.array(sequence)
        selectable = int(np.sum(~np.isin(sequence, [PAD, CLS, SEP])))
        # 15% of the non-special tokens, rounded up, at most max_predictions_per_seq.
        # tensorflow-text computes the product in float32, where 0.15 is 0.15000000596: at
        # exact multiples (n = 20, 40, 100, ...) it rounds up to one more than 15%.
        assert len(position_row) == min(math.ceil(np.float32(selectable) * np.float32(0.15)), 20)
        assert list(position_row) == sorted(set(position_row))
        assert not np.isin(sequence[position_row], [PAD, CLS, SEP]).any()
        assert list(original_row) == list(sequence[position_row])  # Labels: original ids.
        untouched = np.ones(len(sequence), bool)
        untouched[position_row] = False
        assert (masked_row[untouched] == sequence[untouched]).all()
        for before, after in zip(sequence[position_row], masked_row[position_row]):
            outcomes["mask" if after == MASK else "unchanged" if after == before else "random"] += 1
    total = sum(outcomes.values())
    assert total > 30_000  # ~40k selections: 5 standard deviations < 0.011 for each share.
    # A random replacement equals [MASK] or the original with probability 1/vocab_size each.
    expected = {
        "mask": 0.8 + 0.1 / vocab_size,
        "random": 0.1 * (1 - 2 / vocab_size),
        "unchanged": 0.1 + 0.1 / vocab_size,
    }
    for outcome, share in expected.items():
        assert abs(outcomes[outcome] / total - share) < 0.011, (outcome, outcomes)


def test_masking_is_reproducible_from_the_seed():
    special = vocabulary.SpecialIds(pad=PAD, unk=1, cls=CLS, sep=SEP, mask=MASK)
    sequences = [[CLS] + list(range(10, 60)) + [SEP] + list(range(60, 90)) + [SEP]] * 30

    def run(seed):
        masker = masking.Masker(
            vocab_size=100,
            special_ids=special,
            masked_lm_prob=0.15,
            max_predictions_per_seq=20,
            seed=seed,
        )
        return [[np.concatenate(rows) for rows in masker(sequences)] for _ in range(2)]

    def same(calls_a, calls_b):
        return all(a.shape == b.shape and (a == b).all() for a, b in zip(calls_a, calls_b))

    first, again, other = run(5), run(5), run(6)
    assert same(first[0], again[0]) and same(first[1], again[1])  # call by call, afresh
    assert not same(first[0], first[1])  # each call of a masker draws anew
    assert not same(first[0], other[0]) and not same(first[1], other[1])


def test_random_replacements_are_drawn_over_the_whole_vocabulary_reserved_ids_included():
    """As Google's `create_pretraining_data.py` (`rng.randint(0, len(vocab_words) - 1)`)."""
    vocab_size = 10
    special = vocabulary.SpecialIds(pad=PAD, unk=1, cls=CLS, sep=SEP, mask=MASK)
    masker = masking.Masker(vocab_size=vocab_size, special_ids=special, masked_lm_prob=0.5,
                            max_predictions_per_seq=20, seed=3)
    sequences = [[CLS] + [5, 6, 7, 8, 9] * 4 + [SEP]] * 2000
    masked, positions, original = masker(sequences)
    replaced = np.concatenate([row[where] for row, where in zip(masked, positions)])
    before = np.concatenate(original)
    drawn = replaced[(replaced != MASK) & (replaced != before)]  # the random replacements
    assert len(drawn) > 1500  # ~2000 selections of 10% each, less draws of [MASK] or the id
    counts = np.bincount(drawn, minlength=vocab_size)
    # Each id is drawn with 1/10. A draw of [MASK] (4) or of the original id (one of 5..9)
    # is not told apart from those outcomes, leaving 8/10 of the draws: ids 0..3 are 1/8
    # of those each.
    for reserved in (PAD, 1, CLS, SEP):
        assert abs(counts[reserved] / len(drawn) - 1 / 8) < 0.03, counts


def numbered_pool(num_documents, rng):
    """Documents whose token ids are unique and increase through each document."""
    pool = []
    for d in range(num_documents):
        next_id = d * 100_000
        document = []
        for _ in range(rng.randint(2, 30)):
            length = rng.randint(1, 25)
            document.append(list(range(next_id, next_id + length)))
            next_id += length
        pool.append(document)
    return pool


def test_sentence_pairs_next_is_consecutive_and_labels_are_balanced():
    rng = random.Random(1)
    pool = numbered_pool(300, rng)
    seq_length = 64
    pairs = [
        pair
        for index in range(len(pool))
        for pair in sentence_pairs.pairs_from_document(
            index, pool, seq_length=seq_length, short_seq_prob=0.1, rng=rng
        )
    ]
    assert len(pairs) > 1500
    for pair in pairs:
        a, b = pair.tokens_a, pair.tokens_b
        assert a and b and len(a) + len(b) <= seq_length - 3
        # Each segment is a contiguous run of one document (truncation trims only the ends).
        for segment in (a, b):
            assert segment == list(range(segment[0], segment[0] + len(segment)))
        same_document = a[0] // 100_000 == b[0] // 100_000
        # Labels as Google's BERT and Model Garden's reader read them: 0 "is next", 1 random.
        assert pair.next_sentence_label in (0, 1)
        if pair.next_sentence_label == 0:
            assert same_document and a[-1] < b[0]  # B comes after A in the same document.
        else:
            assert not same_document
    random_share = np.mean([p.next_sentence_label == 1 for p in pairs])
    # 50% by coin; slightly more because a one-sentence chunk can only take a random B.
    assert 0.45 < random_share < 0.60, random_share


def test_truncation_keeps_the_pair_within_the_limit_trimming_fronts_and_backs():
    rng = random.Random(0)
    lost = {"front": 0, "back": 0}
    for _ in range(200):
        length_a, length_b = rng.randint(1, 80), rng.randint(1, 80)
        a, b = list(range(length_a)), list(range(100, 100 + length_b))
        sentence_pairs.truncate_pair(a, b, 40, rng)
        assert len(a) + len(b) == min(length_a + length_b, 40)
        assert a and b
        for segment, first, last in ((a, 0, length_a - 1), (b, 100, 99 + length_b)):
            assert segment == list(range(segment[0], segment[-1] + 1))  # a run: ends trimmed
            lost["front"] += segment[0] - first
            lost["back"] += last - segment[-1]
    # Google trims the front or the back at random: about as many tokens from each.
    assert 0.4 < lost["front"] / (lost["front"] + lost["back"]) < 0.6, lost


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(30))

    def run(name, seed):
        return prepare_data.prepare_pretraining_data(
            corpus_path,
            str(tmp_path / name),
            vocab_size=120,
            seq_length=32,
            max_predictions_per_seq=5,
            dupe_factor=2,
            num_shards=3,
            heldout_fraction=0.2,
            seed=seed,
            progress=False,
        )

    first, again, other = run("a", 7), run("b", 7), run("c", 8)

    def file_bytes(prepared):
        paths = sorted(glob.glob(prepared.train_files) + glob.glob(prepared.eval_files))
        paths.append(prepared.vocab_file)
        return [pathlib.Path(path).read_bytes() for path in paths]

    assert len(glob.glob(first.train_files)) == 3 and len(glob.glob(first.eval_files)) == 3
    assert first.num_train_sequences > 0 and first.num_eval_sequences > 0
    assert file_bytes(first) == file_bytes(again)
    assert file_bytes(first) != file_bytes(other)


@pytest.mark.slow  # a fresh process or the whole embedded corpus
def test_cli_writes_the_same_bytes_in_a_fresh_process(tmp_path):
    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(20, seed=4))
    arguments = dict(
        vocab_size=100,
        seq_length=32,
        max_predictions_per_seq=5,
        dupe_factor=2,
        num_shards=2,
        heldout_fraction=0.25,
        seed=9,
    )
    in_process = prepare_data.prepare_pretraining_data(
        corpus_path, str(tmp_path / "in_process"), progress=False, **arguments
    )
    environment = dict(os.environ, PYTHONHASHSEED="123")  # Other string hashing too.
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipes.bert.prepare_data",
            f"--input_path={corpus_path}",
            f"--output_dir={tmp_path / 'cli'}",
        ]
        + [f"--{k}={v}" for k, v in arguments.items()],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    for path in sorted(glob.glob(str(tmp_path / "in_process" / "*.tfrecord"))) + [
        in_process.vocab_file
    ]:
        cli_path = path.replace("in_process", "cli")
        assert open(path, "rb").read() == open(cli_path, "rb").read(), path


@pytest.mark.slow  # a fresh process or the whole embedded corpus
def test_chunks_stream_and_bound_the_random_pool(tmp_path, monkeypatch):
    documents = synthetic_documents(60, seed=2)
    corpus_path = write_corpus(str(tmp_path / "corpus"), documents)
    longest = max(len(d) for d in documents)
    chunk_sentences = 20
    documents_read = []
    first_pairs_after = []
    largest_pool = []

    real_read = text_files.read_file_documents

    def counting_read(path):
        for document in real_read(path):
            documents_read.append(document)
            yield document

    real_pairs = sentence_pairs.pairs_from_document

    def watching_pairs(index, pool, **kwargs):
        if not first_pairs_after:
            first_pairs_after.append(len(documents_read))
        largest_pool.append(sum(len(d) for d in pool))
        return real_pairs(index, pool, **kwargs)

    monkeypatch.setattr(text_files, "read_file_documents", counting_read)
    monkeypatch.setattr(sentence_pairs, "pairs_from_document", watching_pairs)
    prepared = prepare_data.prepare_pretraining_data(
        corpus_path,
        str(tmp_path / "out"),
        vocab_size=120,
        seq_length=32,
        max_predictions_per_seq=5,
        dupe_factor=1,
        num_shards=1,
        heldout_fraction=0.0,
        seed=0,
        chunk_sentences=chunk_sentences,
        progress=False,
    )
    total_read = len(documents_read)
    # Two passes (count, then pairs): the pairs of the first chunk are made long before
    # the second pass has read all documents.
    assert total_read == 2 * len(documents)
    assert first_pairs_after[0] - len(documents) <= min(chunk_sentences, len(documents) // 3)
    # The random-B pool is the chunk: the documents that start within one run of
    # `chunk_sentences` sentences (the last chunk also takes the rest, under two runs).
    assert max(largest_pool) < 2 * chunk_sentences + longest
    assert min(largest_pool) > chunk_sentences - longest
    assert prepared.num_train_sequences > 0


@pytest.mark.slow  # a fresh process or the whole embedded corpus
def test_embedded_corpus_is_safe_deterministic_and_large(tmp_path, capsys):
    before = set(sys.modules)
    paths = corpus.write_embedded_corpus(str(tmp_path / "a"))
    again = corpus.write_embedded_corpus(str(tmp_path / "b"))
    assert capsys.readouterr().out == ""  # Nothing printed.
    newly_imported = set(sys.modules) - before
    assert not newly_imported & {
        "antigravity",
        "this",
        "tkinter",
        "idlelib",
        "turtle",
        "webbrowser",
    }
    assert not any(name.startswith("test.") for name in newly_imported)
    contents = [open(p, encoding="utf-8").read() for p in paths]
    assert contents == [open(p, encoding="utf-8").read() for p in again]
    words = sum(len(text.split()) for text in contents)
    assert words > 250_000, words
    documents = [d for text in contents for d in text.split("\n\n")]
    assert len(documents) > 300
    assert "Return the absolute value of the argument." in contents[0]  # builtins.abs
    assert all(line.strip() for d in documents for line in d.strip("\n").split("\n"))


def test_docstring_sentences_split_prose_and_drop_doctests():
    text = """Summary line here.

      More text. Another sentence! A third?
      >>> for word in words:
      ...     print(word)
      .. note:: a reST directive
  """
    assert corpus.docstring_sentences(text) == [
        "Summary line here.",
        "More text.",
        "Another sentence!",
        "A third?",
    ]


def test_make_pretraining_dataset_trains_shuffled_repeated_and_sharded(hand_written):
    prepared, _ = hand_written
    kwargs = dict(seq_length=48, max_predictions_per_seq=6, batch_size=4)

    def first_batches(seed, count):
        dataset = input_lib.make_pretraining_dataset(
            prepared.train_files, is_training=True, seed=seed, **kwargs
        )
        return [x["input_word_ids"].numpy() for x, _ in dataset.take(count)]

    count = prepared.num_train_sequences // 4 + 3  # More than one pass: it repeats.
    first, again = first_batches(1, count), first_batches(1, count)
    assert len(first) == count
    assert all((a == b).all() for a, b in zip(first, again))
    in_order = [
        x["input_word_ids"].numpy()
        for x, _ in input_lib.make_pretraining_dataset(
            prepared.train_files, is_training=False, **kwargs
        )
    ]
    assert not all((a == b).all() for a, b in zip(first, in_order))  # Shuffled.

    # Two hosts: each reads its own file (the prepared data has 2 shards), and each
    # replica gets batch / replicas = 2 sequences per element.
    shards = sorted(glob.glob(prepared.train_files))
    assert len(shards) == 2
    for host in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=host, num_replicas_in_sync=2
        )
        dataset = input_lib.make_pretraining_dataset(
            prepared.train_files, is_training=False, input_context=context, **kwargs
        )
        assert dataset.element_spec[0]["input_word_ids"].shape == (2, 48)
        rows = [list(r) for x, _ in dataset for r in x["input_word_ids"].numpy()]
        in_file = [record["input_ids"] for record in read_records(shards[host])]
        assert rows and rows == in_file[: len(in_file) // 2 * 2]
    with pytest.raises(ValueError, match="seed=None"):
        input_lib.make_pretraining_dataset(
            prepared.train_files,
            is_training=True,
            seed=None,
            input_context=tf.distribute.InputContext(2, 0, 2),
            **kwargs,
        )


def test_reader_reads_its_files_one_after_another(hand_written, monkeypatch):
    """Each file to its end before the next (`FILES_READ_AT_ONCE` = 1): the order, so every
    step's batch, is the recipe's choice, not tf.data's runtime default; and files read in
    turn would fill the shuffle buffer from the same stretch of the corpus in each (every
    prepared shard is ordered by document chunk)."""
    prepared, _ = hand_written
    kwargs = dict(seq_length=48, max_predictions_per_seq=6, batch_size=4)
    first, second = (
        [record["input_ids"] for record in read_records(path)]
        for path in sorted(glob.glob(prepared.train_files))
    )
    in_file_order = first + second
    rows = [
        list(r)
        for x, _ in input_lib.make_pretraining_dataset(
            prepared.train_files, is_training=False, **kwargs
        )
        for r in x["input_word_ids"].numpy()
    ]
    assert rows == in_file_order[: len(in_file_order) // 4 * 4]

    # Training: the files in the seed's order; a buffer of one record keeps the order the
    # files give, so the first batches are one file's first records.
    monkeypatch.setattr(input_lib, "SHUFFLE_BUFFER_SIZE", 1)
    training = input_lib.make_pretraining_dataset(
        prepared.train_files, is_training=True, seed=5, **kwargs
    )
    rows = [list(r) for x, _ in training.take(2) for r in x["input_word_ids"].numpy()]
    assert rows in (first[:8], second[:8])


def _model_gardens_batches(files, context, **arguments):
    """Model Garden's own `BertPretrainDataLoader`, configured as `read_pretraining_batches`
    configures it."""
    config = pretrain_dataloader.BertPretrainDataConfig(
        input_path=files, use_next_sentence_label=True, drop_remainder=True,
        deterministic=True, shuffle_buffer_size=input_lib.SHUFFLE_BUFFER_SIZE,
        cycle_length=input_lib.FILES_READ_AT_ONCE, **arguments)
    return pretrain_dataloader.BertPretrainDataLoader(config).load(context)


@pytest.mark.parametrize("is_training", [True, False], ids=["training", "held-out"])
@pytest.mark.parametrize("pipelines", [1, 2, 3])
@pytest.mark.parametrize("local", [True, False], ids=["local", "remote"])
def test_reader_gives_model_gardens_batches_reading_local_files_in_turn(
        hand_written, is_training, pipelines, local, monkeypatch):
    """The recipe's reader (a sequential interleave, `_BertPretrainDataLoaderReadingInTurn`)
    gives every batch Model Garden's own reader gives (its parallel interleave), over more
    than one pass and for each input pipeline; with 3 pipelines for 2 files Model Garden
    reads without an interleave and so does the recipe's. Files taken for remote ones
    (gs://) are read by Model Garden's parallel interleave itself."""
    monkeypatch.setattr(storage, "all_local", lambda files: local)
    prepared, _ = hand_written
    files = sorted(glob.glob(prepared.train_files))
    arguments = dict(seq_length=48, max_predictions_per_seq=6, batch_size=2 * pipelines,
                     is_training=is_training, seed=7 if is_training else None)
    count = prepared.num_train_sequences // 2 + 3  # past the end of each pipeline's files

    def rows(dataset):
        return [(key, row.tolist()) for batch in dataset.take(count)
                for key in sorted(batch) for row in batch[key].numpy()]

    for pipeline in range(pipelines):
        context = tf.distribute.InputContext(pipelines, pipeline, pipelines)
        ours = input_lib.read_pretraining_batches(
            prepared.train_files, input_context=context, **arguments)
        theirs = _model_gardens_batches(
            files, context, **{("global_batch_size" if k == "batch_size" else k): v
                               for k, v in arguments.items()})
        assert rows(ours) == rows(theirs)
        assert ours.cardinality() == theirs.cardinality()  # endless when training
        expected = {"InterleaveDataset" if local else "ParallelInterleaveDatasetV4"}
        assert interleave_ops(ours) == (set() if pipelines > len(files) else expected)


@pytest.mark.parametrize("local", [True, False])
def test_a_pipeline_whose_share_of_files_holds_no_record_is_refused(local, tmp_path,
                                                                    monkeypatch):
    """Each input pipeline reads its share of the shuffled files (Model Garden's
    `_shard_files_then_read`, whose share is the expected one here): a share of empty files
    would wait for a record forever; the first-record check sees one pipeline only."""
    from official.core import input_reader

    monkeypatch.setattr(storage, "all_local", lambda files: local)
    with tf.io.TFRecordWriter(str(tmp_path / "full.tfrecord")) as writer:
        writer.write(b"a record")  # read only by the check: the pipeline is never iterated
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    files = sorted(str(path) for path in tmp_path.iterdir())
    refused = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(2, pipeline, 2)
        share = input_reader._shard_files_then_read(  # pylint: disable=protected-access
            files, tf.data.Dataset.from_tensors, context, seed=7, is_training=True,
            sharding=True)
        (path,) = [path.decode() for path in share.take(1).as_numpy_iterator()]
        try:
            input_lib.read_pretraining_batches(
                files, seq_length=48, max_predictions_per_seq=6, batch_size=2,
                is_training=True, input_context=context, seed=7)
        except UserError as error:
            refused.append((pipeline, path, str(error)))
    ((pipeline, path, message),) = refused
    assert path.endswith("empty.tfrecord")
    assert message.startswith(f"data.train_files: input pipeline {pipeline} of 2 reads {path}, "
                              "which hold no record: it would wait for one forever")


@pytest.mark.parametrize("records_per_file, refused_pipelines", [
    ([1], "pipelines 1 to 2"), ([1, 1], "pipeline 2"), ([2, 1], None)])
def test_fewer_records_than_pipelines_shared_out_one_by_one_are_refused_by_every_pipeline(
        tmp_path, records_per_file, refused_pipelines):
    """With fewer files than pipelines, Model Garden shares out the records before they
    repeat (`_read_files_then_shard`): a pipeline past the last record reads none, and its
    data ends at once. Every pipeline counts the same records, so each one refuses."""
    from official.core import input_reader

    files = []
    for index, count in enumerate(records_per_file):
        files.append(str(tmp_path / f"part-{index}.tfrecord"))
        with tf.io.TFRecordWriter(files[-1]) as writer:
            for record in range(count):
                writer.write(f"record {index}.{record}".encode())
    for pipeline in range(3):
        context = tf.distribute.InputContext(3, pipeline, 3)
        share = input_reader._read_files_then_shard(  # pylint: disable=protected-access
            files, tf.data.TFRecordDataset, context, sharding=True)
        reads_none = not list(share.as_numpy_iterator())
        arguments = dict(seq_length=48, max_predictions_per_seq=6, batch_size=3,
                         is_training=True, input_context=context, seed=7)
        if refused_pipelines is None:
            assert not reads_none
            input_lib.read_pretraining_batches(files, **arguments)  # not iterated: no parse
            continue
        with pytest.raises(UserError) as error:
            input_lib.read_pretraining_batches(files, **arguments)
        found = sum(records_per_file)
        assert str(error.value) == (
            f"data.train_files: {found} record{'s' if found > 1 else ''} in {len(files)} "
            f"file{'s' if len(files) > 1 else ''} shared out one by one among 3 input "
            f"pipelines: {refused_pipelines} of 3 would read none, and stop the training at its "
            "first step; give the training at least 3 records")
        assert reads_none == (pipeline >= found)


# --- Bad input --------------------------------------------------------------------------


def prepare_small(input_path, output_dir, **kwargs):
    arguments = dict(
        vocab_size=60,
        seq_length=32,
        max_predictions_per_seq=5,
        dupe_factor=1,
        num_shards=1,
        heldout_fraction=0.0,
        seed=0,
        progress=False,
    )
    arguments.update(kwargs)
    return prepare_data.prepare_pretraining_data(input_path, output_dir, **arguments)


def test_empty_directory_glob_and_files_are_user_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"empty has no \.txt files"):
        prepare_small(str(tmp_path / "empty"), str(tmp_path / "out"))
    with pytest.raises(UserError, match="matches no files"):
        prepare_small(str(tmp_path / "nothing" / "*.txt"), str(tmp_path / "out"))
    # a glob of directories, and a list as Google's --input_file takes it: said so
    with pytest.raises(UserError, match=re.escape(
            f"matches no files (only the directory {tmp_path / 'empty'}: give it as it is")):
        prepare_small(str(tmp_path / "emp*"), str(tmp_path / "out"))
    with pytest.raises(UserError, match=re.escape(
            "matches no files (one path or glob: a comma-separated list is not taken)")):
        prepare_small(f"{tmp_path}/a.txt,{tmp_path}/b.txt", str(tmp_path / "out"))
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "a.txt").write_text("")
    with pytest.raises(UserError, match="are empty"):
        prepare_small(str(tmp_path / "blank"), str(tmp_path / "out"))


def test_text_file_that_is_not_utf8_is_a_user_error_naming_it(tmp_path):
    corpus_dir = tmp_path / "corpus"
    write_corpus(str(corpus_dir), synthetic_documents(5))
    (corpus_dir / "latin1.txt").write_bytes(
        "First sentence.\nCaf\xe9 au lait.\nSecond sentence.\n".encode("latin-1")
    )
    with pytest.raises(UserError, match=r"latin1\.txt is not UTF-8 text \(invalid "
                                        r"continuation byte at byte 3 of line 2\)"):
        prepare_small(str(corpus_dir), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()  # made by the refused run: removed
    (tmp_path / "kept").mkdir()  # one the user made stays, as do its files
    (tmp_path / "kept" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"latin1\.txt is not UTF-8 text"):
        prepare_small(str(corpus_dir), str(tmp_path / "kept"))
    assert os.listdir(tmp_path / "kept") == ["notes.txt"]


def test_a_gzip_file_is_told_to_be_decompressed(tmp_path):
    """It was told to "convert it to UTF-8"."""
    import gzip

    corpus_dir = tmp_path / "corpus"
    write_corpus(str(corpus_dir), synthetic_documents(5))
    (corpus_dir / "more.txt").write_bytes(gzip.compress(b"One sentence.\nAnother.\n"))
    with pytest.raises(UserError, match=r"more\.txt is gzip-compressed: decompress it"):
        prepare_small(str(corpus_dir), str(tmp_path / "out"))


def test_a_run_pass_1_refuses_leaves_the_finished_preparation_it_would_replace(tmp_path):
    """Its metadata.json went first: the earlier preparation no longer looked finished, and a
    pretraining run with that data.data_dir prepared its corpus over it."""
    corpus_dir = tmp_path / "corpus"
    write_corpus(str(corpus_dir), synthetic_documents(8))
    prepare_small(str(corpus_dir), str(tmp_path / "out"))
    before = {name: (tmp_path / "out" / name).read_bytes()
              for name in os.listdir(tmp_path / "out")}
    assert "metadata.json" in before
    (corpus_dir / "latin1.txt").write_bytes("Caf\xe9.\nAu lait.\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1\.txt is not UTF-8 text"):
        prepare_small(str(corpus_dir), str(tmp_path / "out"))
    assert {name: (tmp_path / "out" / name).read_bytes()
            for name in os.listdir(tmp_path / "out")} == before


def test_a_remote_output_dir_is_refused_before_any_work(tmp_path, monkeypatch):
    """A preparation writes with Python's own files: gs://bucket/x ran both passes, then
    failed renaming its shards, leaving ./gs:/bucket/x and .tmp shards in the bucket."""
    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(8))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=re.escape(
            "output_dir=gs://bucket/x is remote, and a preparation writes local files; give a "
            "local directory")):
        prepare_small(corpus_path, "gs://bucket/x")
    assert os.listdir(tmp_path) == ["corpus"]


def test_a_remote_vocab_file_is_copied_into_the_preparation(tmp_path):
    """Read from gs:// (here TensorFlow's in-memory file system, the same code path), it was
    then copied with Python's own files: a traceback after the shards were in place."""
    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(8))
    prepare_small(corpus_path, str(tmp_path / "first"))
    vocab = (tmp_path / "first" / "vocab.txt").read_bytes()
    tf.io.gfile.makedirs("ram://lamb_tf_test_vocab")
    with tf.io.gfile.GFile("ram://lamb_tf_test_vocab/vocab.txt", "wb") as f:
        f.write(vocab)
    prepare_small(corpus_path, str(tmp_path / "second"),
                  vocab_file="ram://lamb_tf_test_vocab/vocab.txt")
    assert (tmp_path / "second" / "vocab.txt").read_bytes() == vocab
    assert os.path.exists(tmp_path / "second" / "metadata.json")


def test_files_reached_twice_through_symbolic_links_are_read_once(tmp_path):
    """A linked directory, and a link back up the tree: the documents were read twice (41
    times through the loop) and landed in both splits."""
    write_corpus(str(tmp_path / "corpus" / "a"), synthetic_documents(8))
    os.symlink("a", tmp_path / "corpus" / "b")
    os.symlink("..", tmp_path / "corpus" / "a" / "up")
    files = text_files.resolve_text_files(str(tmp_path / "corpus"))
    assert files == [str(tmp_path / "corpus" / "a" / "corpus.txt")]
    assert text_files.resolve_text_files(tmp_path / "corpus" / "*" / "*.txt") == files
    # a path object, as the API's recorded paths take
    prepared = prepare_small(tmp_path / "corpus", tmp_path / "out")
    assert prepared.inputs.corpus == str(tmp_path / "corpus")


def test_corpus_without_sentence_pairs_is_a_user_error_and_leaves_no_shards(tmp_path):
    corpus_path = write_corpus(str(tmp_path / "corpus"), [["Only one sentence here."]])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "metadata.json").write_text("{}")  # From an earlier, finished run.
    with pytest.raises(UserError, match="no training sentence pairs") as raised:
        prepare_small(corpus_path, str(tmp_path / "out"))
    assert "\n" not in str(raised.value)
    assert not glob.glob(str(tmp_path / "out" / "*.tfrecord*"))  # No partial output.
    assert not os.path.exists(tmp_path / "out" / "metadata.json")  # Not "finished".


def test_a_preparation_into_a_directory_another_one_is_writing_is_refused(tmp_path):
    """Two runs preparing into one data.data_dir at once replaced each other's shards: the
    first trained on a mix and the damage stayed (its metadata.json marked it finished)."""
    from lock_holder import held_by_another_process

    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(8))
    out = tmp_path / "out"
    out.mkdir()
    with held_by_another_process(out):  # the first preparation's hold
        with pytest.raises(UserError) as raised:
            prepare_small(corpus_path, str(out))
        assert os.listdir(out) == []  # the first one's directory: left as it is
    assert str(raised.value) == (
        f"the preparation directory {out} is in use by another lamb_tf process, which still "
        "writes there; wait for that preparation to finish (a run then reuses it), or give another "
        "directory")
    assert prepare_small(corpus_path, str(out)).num_train_sequences > 0  # released


def test_a_preparation_into_a_directory_a_run_reads_is_refused_and_leaves_it_whole(tmp_path):
    """It removed metadata.json and wrote new shards and a new vocab.txt over the ones a
    running training read."""
    from lock_holder import held_by_another_process

    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(8))
    out = tmp_path / "out"
    prepare_small(corpus_path, str(out))
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    with held_by_another_process(out, shared=True):  # the run's hold while it reads them
        with pytest.raises(UserError) as raised:
            prepare_small(corpus_path, str(out), seed=1)
    assert str(raised.value) == (
        f"the preparation directory {out} holds the data of another lamb_tf process, which "
        "reads it now; wait for the run reading it to end, or give another directory")
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


def test_a_run_preparing_into_its_own_model_dir_is_not_refused_by_its_own_hold(tmp_path):
    """data.data_dir=<model_dir>: the run's hold on its --model_dir (the driver's) refused
    its own preparation there ("... is in use by another process")."""
    from recipes.common import storage

    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(8))
    model_dir = str(tmp_path / "run")
    with storage.exclusive_use(f"--model_dir={model_dir}", model_dir, "unused"):
        assert prepare_small(corpus_path, model_dir).num_train_sequences > 0


def test_heldout_split_without_pairs_is_a_user_error(tmp_path):
    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(3))
    with pytest.raises(UserError, match="no held-out sentence pairs"):
        prepare_small(corpus_path, str(tmp_path / "out"), heldout_fraction=0.01)
    # found once the pairs are made: the --output_dir this run made is not left behind
    assert not (tmp_path / "out").exists()


def test_a_vocab_txt_of_the_users_in_the_output_dir_is_not_replaced(tmp_path):
    """It used to be overwritten by the learned vocabulary without a word."""
    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(8))
    out = tmp_path / "out"
    out.mkdir()
    own = "".join(t + "\n" for t in RESERVED + sorted(
        set(" ".join(" ".join(d) for d in synthetic_documents(8)).lower().replace(".", " ")
            .split()))) + ".\n"
    (out / "vocab.txt").write_text(own)
    with pytest.raises(UserError) as raised:
        prepare_small(corpus_path, str(out))
    assert str(raised.value) == (
        f"--output_dir={out} holds a vocab.txt that no preparation wrote there, and the "
        f"preparation would replace it; pass it as --vocab_file={out / 'vocab.txt'} to prepare "
        "with it, or give another --output_dir")
    assert os.listdir(out) == ["vocab.txt"] and (out / "vocab.txt").read_text() == own
    prepared = prepare_small(corpus_path, str(out), vocab_file=str(out / "vocab.txt"))
    assert (out / "vocab.txt").read_text() == own and prepared.vocab_size == len(
        own.splitlines())
    prepare_small(corpus_path, str(out))  # a preparation's directory now: prepared again
    assert (out / "vocab.txt").read_text() != own


@pytest.mark.parametrize(
    "contents, message",
    [
        (None, "does not exist"),
        (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n\xff\xfe\n", "cannot be read"),
        ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ntwo words\n", "line 6 is malformed"),
        ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nfox\nfox\n", "line 7 repeats the token 'fox'"),
        ("[PAD]\n[UNK]\n[CLS]\n[SEP]\nfox\n", r"lacks the reserved token\(s\) \[MASK\]"),
        ("", r"lacks the reserved token"),
        # an editor's byte-order mark: reported as "lacks [PAD]", which the file shows
        ("\ufeff[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nfox\n", r"starts with a byte-order mark "
         r"\(U\+FEFF\), which its first token would hold: save it as UTF-8 without one"),
    ],
)
def test_bad_vocabulary_files_are_user_errors(tmp_path, contents, message):
    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(5))
    vocab_path = tmp_path / "vocab.txt"
    if isinstance(contents, bytes):
        vocab_path.write_bytes(contents)
    elif contents is not None:
        vocab_path.write_text(contents)
    with pytest.raises(UserError, match=message) as raised:
        prepare_small(corpus_path, str(tmp_path / "out"), vocab_file=str(vocab_path))
    assert str(vocab_path) in str(raised.value) and "\n" not in str(raised.value)


def test_vocabulary_that_is_a_directory_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot be read"):
        vocabulary.read_vocabulary(str(tmp_path))


@pytest.mark.parametrize(
    "argument, value",
    [
        ("seq_length", 4),
        ("max_predictions_per_seq", 0),
        ("masked_lm_prob", 0.0),
        ("dupe_factor", 0),
        ("num_shards", 0),
        ("heldout_fraction", 1.0),
        ("vocab_size", 5),
    ],
)
def test_out_of_range_arguments_name_themselves(tmp_path, argument, value):
    with pytest.raises(ValueError, match=f"{argument}={value!r}"):
        prepare_small("unused", str(tmp_path / "out"), **{argument: value})


@pytest.mark.parametrize(
    "argument, value",
    [("seq_length", "128"), ("dupe_factor", 2.5), ("masked_lm_prob", None), ("num_shards", True)],
)
def test_arguments_of_the_wrong_type_name_themselves(tmp_path, argument, value):
    with pytest.raises(TypeError, match=re.escape(f"{argument}={value!r}")):
        prepare_small("unused", str(tmp_path / "out"), **{argument: value})


@pytest.mark.parametrize("input_path, output_dir", [
    ("corpus", "corpus"),  # the corpus' own directory
    ("corpus", "corpus/prepared"),  # below a directory read recursively
    ("corpus/*.txt", "corpus"),  # where the glob would match vocab.txt
])
def test_an_output_dir_the_corpus_reads_is_refused_before_anything_is_written(
        tmp_path, input_path, output_dir):
    # the vocab.txt written there was a document of the next preparation
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("One sentence here.\nAnother one.\n")
    input_path, output_dir = str(tmp_path / input_path), str(tmp_path / output_dir)
    with pytest.raises(UserError) as raised:
        prepare_small(input_path, output_dir)
    assert str(raised.value) == (
        f"--output_dir={output_dir} is where --input_path={input_path} reads corpus text: the "
        "vocab.txt written there would be a document of the next preparation; give an "
        "--output_dir outside the corpus")
    assert sorted(os.listdir(tmp_path / "corpus")) == ["a.txt"]


def test_an_earlier_preparation_of_another_shard_count_is_refused_before_writing(tmp_path):
    # its -of-00001 shards stayed beside the new -of-00002 ones: train-*.tfrecord read both
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("One sentence here.\nAnother one.\n\n"
                                               "A second document.\nWith two lines.\n")
    output_dir = str(tmp_path / "out")
    prepare_small(str(tmp_path / "corpus"), output_dir)
    before = sorted(os.listdir(output_dir))
    with pytest.raises(UserError) as raised:
        prepare_small(str(tmp_path / "corpus"), output_dir, num_shards=2)
    assert str(raised.value) == (
        f"--output_dir={output_dir} holds 1 train-*.tfrecord file(s) of an earlier run with "
        "another shard count (train-00000-of-00001.tfrecord, ...), which a train-*.tfrecord "
        "glob would read beside this run's 2; give an empty --output_dir or remove them")
    assert sorted(os.listdir(output_dir)) == before



@pytest.mark.parametrize("name, what, glob", [
    ("dataset_info.json", "ResNet image records (its dataset_info.json, written by python -m "
     "recipes.resnet.convert)", " (a train-* glob reads both)"),
    ("validation-00000-of-00004", "ResNet image records (its validation-00000-of-00004, "
     "written by python -m recipes.resnet.convert)", ""),  # (BERT writes no validation-*)
    ("test-00000-of-00001", "ResNet image records (its test-00000-of-00001, written by "
     "python -m recipes.resnet.convert)", ""),  # (--split=test)
    ("heldout-notes.txt", "heldout-notes.txt, which python -m recipes.bert.prepare_data does "
     "not write", " (a heldout-* glob reads both)"),
])
def test_an_output_dir_of_another_dataset_is_refused_before_writing(tmp_path, name, what, glob):
    """A preparation into a directory of ResNet records wrote its train-*.tfrecord shards
    beside theirs, and `records/train-*` (docs/resnet.md's glob) read both. The line names
    a glob that reads both only for a split the preparation writes (train, heldout)."""
    from recipes.bert import prepare_data_flags

    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(8))
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("")
    expected = (f"--output_dir={out} holds {what}; BERT pretraining data written beside it "
                f"would mix with it{glob}: give each dataset a directory of its own")
    with pytest.raises(UserError) as raised:
        prepare_small(corpus_path, str(out))
    assert str(raised.value) == expected
    assert os.listdir(out) == [name]
    flags = types.SimpleNamespace(runner=None, output_dir=str(out), input_path=corpus_path,
                                  vocab_file=None)
    with pytest.raises(UserError) as raised:  # the command line: before TensorFlow loads
        prepare_data_flags.check_flags(flags, [], [])
    assert str(raised.value) == expected


def test_a_pretraining_run_refuses_a_data_dir_of_another_dataset_before_any_work(tmp_path):
    """A pretraining run preparing its corpus into a data.data_dir of ResNet records was
    refused only once the run had started (its strategy made, a TPU connected), in a line
    naming --output_dir, which the run's user never gave: `check_corpus` (the task's data
    check, before any work) refuses it, and the preparation names data.data_dir too."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    data_dir = tmp_path / "records"
    data_dir.mkdir()
    (data_dir / "dataset_info.json").write_text("{}")
    expected = (f"data.data_dir={data_dir} holds ResNet image records (its dataset_info.json, "
                "written by python -m recipes.resnet.convert); BERT pretraining data written "
                "beside it would mix with it (a train-* glob reads both): give each dataset a "
                "directory of its own")
    with pytest.raises(UserError) as raised:
        data_lib.check_corpus(DataConfig(corpus="stdlib", data_dir=str(data_dir)),
                              str(tmp_path / "run"))
    assert str(raised.value) == expected
    with pytest.raises(UserError) as raised:  # the library call names what it was given
        prepare_data.prepare_pretraining_data(None, str(data_dir), output_setting="data.data_dir")
    assert str(raised.value) == expected
    assert os.listdir(data_dir) == ["dataset_info.json"]


def test_a_preparation_again_into_its_own_directory_is_not_another_dataset(tmp_path):
    from recipes.bert import preparation_files, prepare_data_flags

    corpus_path = write_corpus(str(tmp_path / "corpus"), synthetic_documents(8))
    out = tmp_path / "out"
    prepare_small(corpus_path, str(out), heldout_fraction=0.2)
    (out / "train-00000-of-00001.tfrecord.tmp").write_bytes(b"")  # as a killed run leaves
    assert storage.other_dataset_file(str(out), preparation_files.BERT_DATA,
                                      prepare_data_flags.OTHER_DATASETS) is None
    prepare_small(corpus_path, str(out), heldout_fraction=0.2)
    assert "metadata.json" in os.listdir(out)



def test_earlier_shards_are_refused_before_the_embedded_corpus_is_written(tmp_path):
    # the embedded corpus is written as text files into <output_dir>/corpus/ first
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    (output_dir / "train-00000-of-00001.tfrecord").write_bytes(b"")
    with pytest.raises(UserError, match="earlier run with another shard count"):
        prepare_small(None, str(output_dir), num_shards=2)
    assert sorted(os.listdir(output_dir)) == ["train-00000-of-00001.tfrecord"]

def test_missing_tfrecords_are_a_user_error(tmp_path):
    with pytest.raises(UserError, match="matches no TFRecord files"):
        input_lib.make_pretraining_dataset(
            str(tmp_path / "train-*.tfrecord"),
            seq_length=8,
            max_predictions_per_seq=2,
            batch_size=2,
            is_training=False,
        )


@pytest.mark.slow  # a fresh process or the whole embedded corpus
@pytest.mark.parametrize("output_dir, message", [
    ("{tmp}/out", "has no .txt files"),
    # Linux's /proc takes no new directory, for root too
    ("/proc/lamb_tf_prepared", "--output_dir=/proc/lamb_tf_prepared: cannot write in /proc ("),
    # before any work: it ran both passes, then failed renaming shards (./gs:/... left)
    ("gs://bucket/prepared", "--output_dir=gs://bucket/prepared is remote, and a preparation "
     "writes local files"),
])
def test_cli_reports_bad_input_in_one_line(tmp_path, output_dir, message):
    (tmp_path / "empty").mkdir()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipes.bert.prepare_data",
            f"--input_path={tmp_path / 'empty'}",
            f"--output_dir={output_dir.format(tmp=tmp_path)}",
        ],
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 2
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    # the one line only: no traceback, no TensorFlow start-up lines (CUDA probing, oneDNN)
    assert len(lines) == 1 and lines[0].startswith("error:"), completed.stderr[-2000:]
    assert message in lines[0]


def test_a_finished_preparation_is_reused_from_another_directory_and_after_a_copy(
        tmp_path, monkeypatch, capsys):
    """metadata.json names the files as the preparing run gave them (here relative to its
    working directory); a run elsewhere, or of a copied data directory, still finds them,
    its data.corpus a relative path from there that names the same directory."""
    import shutil

    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    first = tmp_path / "first"
    first.mkdir()
    (first / "corpus").mkdir()
    write_corpus(str(first / "corpus"), HAND_WRITTEN_DOCUMENTS)
    monkeypatch.chdir(first)
    config = DataConfig(corpus="corpus", data_dir="run/data", vocab_size=60, seq_length=32,
                        max_predictions_per_seq=4, dupe_factor=1)
    prepared = data_lib.locate_or_prepare_data(config, "run")
    assert not os.path.isabs(prepared.vocab_file)  # relative to `first`, as given
    shutil.copytree(first / "run" / "data", tmp_path / "copied")
    monkeypatch.chdir(tmp_path)
    for data_dir in (str(first / "run" / "data"), "copied"):
        found = data_lib.locate_or_prepare_data(DataConfig(**{
            **vars(config), "data_dir": data_dir, "corpus": os.path.join("first", "corpus")}),
            "unused")
        assert "data: reusing the preparation in " + data_dir in capsys.readouterr().out
        assert [os.path.dirname(path) for path in (found.train_pattern, found.eval_pattern,
                                                   found.vocab_file)] == [data_dir] * 3
        assert found.train_files == sorted(glob.glob(found.train_pattern)) != []
        assert found.eval_files == sorted(glob.glob(found.eval_pattern)) != []
        assert vocabulary.read_vocabulary(found.vocab_file) == vocabulary.read_vocabulary(
            str(first / prepared.vocab_file))


@pytest.mark.parametrize("given", ["stdlibb", "stdlb", "Stdlib", "texts/stdlibb"])
def test_a_corpus_that_misspells_stdlib_asks_whether_the_embedded_one_was_meant(
        given, tmp_path, monkeypatch):
    """`data.corpus=stdlibb` was made absolute from the current directory, and its line
    said only that <cwd>/stdlibb matches no files; its last component is now compared with
    the key's names (case ignored), before anything is written."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import BertPretrainingConfig
    from recipes.common import config as config_lib

    monkeypatch.chdir(tmp_path)
    config = config_lib.load_config(BertPretrainingConfig, params_override=f"data.corpus={given}")
    config_lib.make_paths_absolute(config)  # as the driver does before the task reads it
    with pytest.raises(UserError) as raised:
        data_lib.check_corpus(config.data, str(tmp_path / "run"))
    assert str(raised.value) == (
        f"data.corpus: {tmp_path / given} matches no files: did you mean 'stdlib' (the "
        "embedded corpus)? otherwise give a directory of .txt files or a glob such as "
        "'corpus/*.txt'")
    assert os.listdir(tmp_path) == []


def test_the_corpus_and_vocabulary_to_prepare_are_checked_unless_a_preparation_finished(
        tmp_path):
    """What a new preparation would read is checked before any work (nothing is written);
    a finished preparation in the data directory is reused, so its corpus may be gone."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    (tmp_path / "texts").mkdir()
    corpus_missing = DataConfig(corpus=str(tmp_path / "txts"), data_dir="", vocab_file="")
    vocab_missing = DataConfig(corpus="stdlib", data_dir="",
                               vocab_file=str(tmp_path / "vocab.txt"))
    run = tmp_path / "run"
    with pytest.raises(UserError) as raised:
        data_lib.check_corpus(corpus_missing, str(run))
    assert str(raised.value) == (
        f"data.corpus: {tmp_path / 'txts'} matches no files: give 'stdlib' (the embedded "
        "corpus), a directory of .txt files or a glob such as 'corpus/*.txt'")
    with pytest.raises(UserError, match=r"^data.corpus: directory .*/texts has no .txt files"):
        data_lib.check_corpus(DataConfig(corpus=str(tmp_path / "texts"), data_dir=""), str(run))
    with pytest.raises(UserError) as raised:
        data_lib.check_corpus(vocab_missing, str(run))
    assert str(raised.value).startswith(
        f"data.vocab_file: vocabulary file {tmp_path / 'vocab.txt'} does not exist")
    assert not run.exists()
    (run / "data").mkdir(parents=True)
    (run / "data" / "metadata.json").write_text("{}")  # the mark of a finished preparation
    data_lib.check_corpus(corpus_missing, str(run))
    data_lib.check_corpus(vocab_missing, str(run))
    with pytest.raises(UserError, match="^data.corpus: "):  # data.data_dir is where it looks
        data_lib.check_corpus(DataConfig(**{**vars(corpus_missing),
                                            "data_dir": str(tmp_path / "elsewhere")}), str(run))


def test_a_preparation_records_its_inputs_with_absolute_paths_in_metadata_json(
        tmp_path, monkeypatch):
    """metadata.json holds what the preparation was made from (`inputs`: the corpus and
    vocabulary given, made absolute, and every argument that decides the bytes), beside
    what it wrote; the vocabulary size asked for is recorded, not the one learned."""
    import json

    monkeypatch.chdir(tmp_path)
    write_corpus("texts", synthetic_documents(12))
    prepared = prepare_small("texts", "learned", vocab_size=5000, dupe_factor=2, seed=4)
    metadata = json.loads((tmp_path / "learned" / "metadata.json").read_text())
    assert metadata["inputs"] == {
        "corpus": str(tmp_path / "texts"), "vocab_file": None, "vocab_size": 5000,
        "lower_case": True, "masked_lm_prob": 0.15, "short_seq_prob": 0.1, "dupe_factor": 2,
        "seed": 4, "heldout_fraction": 0.0, "num_shards": 1, "chunk_sentences": 10000}
    assert metadata["vocab_size"] == prepared.vocab_size < 5000  # the pieces learned
    assert metadata == {**dataclasses.asdict(prepared), "inputs": metadata["inputs"]}
    write_vocab("vocab.txt", RESERVED + [f"w{i}" for i in range(300)] + ["."])
    prepared = prepare_small("texts", "given", vocab_file="vocab.txt", masked_lm_prob=0.2,
                             short_seq_prob=0.0, num_shards=2, heldout_fraction=0.25,
                             chunk_sentences=7, lower_case=False)
    assert dataclasses.asdict(prepared.inputs) == json.loads(
        (tmp_path / "given" / "metadata.json").read_text())["inputs"] == {
        "corpus": str(tmp_path / "texts"), "vocab_file": str(tmp_path / "vocab.txt"),
        "vocab_size": 60, "lower_case": False, "masked_lm_prob": 0.2, "short_seq_prob": 0.0,
        "dupe_factor": 1, "seed": 0, "heldout_fraction": 0.25, "num_shards": 2,
        "chunk_sentences": 7}


# A hand-written metadata.json of a finished preparation (what prepare_data writes).
RECORDED = {
    "train_files": "data/train-?????-of-00008.tfrecord",
    "eval_files": "data/heldout-?????-of-00008.tfrecord", "vocab_file": "data/vocab.txt",
    "vocab_size": 2026, "seq_length": 64, "max_predictions_per_seq": 10,
    "num_train_sequences": 100, "num_eval_sequences": 10, "num_train_documents": 9,
    "num_eval_documents": 1, "num_words": 1000,
    "inputs": {"corpus": None, "vocab_file": None, "vocab_size": 2048, "lower_case": True,
               "masked_lm_prob": 0.15, "short_seq_prob": 0.1, "dupe_factor": 5,
               "seed": 12345, "heldout_fraction": 0.05, "num_shards": 8,
               "chunk_sentences": 10000},
}
RECIPE_DEFAULTS = dict(corpus="stdlib", vocab_file="", vocab_size=2048, seq_length=64,
                       max_predictions_per_seq=10, dupe_factor=5, seed=12345)


def _finished_preparation(run, metadata):
    import json

    (run / "data").mkdir(parents=True)
    (run / "data" / "metadata.json").write_text(json.dumps(metadata))
    return str(run / "data")


@pytest.mark.parametrize("key, changed, recorded", [
    ("corpus", "/x", "'stdlib'"),
    ("vocab_file", "/v/vocab.txt", "''"),
    ("vocab_size", 4096, "2048"),
    ("dupe_factor", 10, "5"),
    ("seed", 1, "12345"),
    ("seq_length", 128, "64"),
    ("max_predictions_per_seq", 20, "10"),
])
def test_a_preparation_of_other_data_values_is_refused_in_one_line_naming_key_and_values(
        tmp_path, capsys, key, changed, recorded):
    """A changed data.* value that decides a preparation is refused before any work (by
    the driver's check_data) and where the run locates its data, not trained on the old
    data with a config.yaml naming the new values."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    data_dir = _finished_preparation(tmp_path / "run", RECORDED)
    data_lib.check_corpus(DataConfig(**RECIPE_DEFAULTS), str(tmp_path / "run"))  # the same
    config = DataConfig(**{**RECIPE_DEFAULTS, key: changed})
    expected = (f"{data_dir} holds a preparation of data.{key}={recorded}, but data.{key}="
                f"{changed!r}; keep data.{key}={recorded} or give another data.data_dir (a new "
                "preparation is written there)")
    for check in (data_lib.check_corpus, data_lib.locate_or_prepare_data):
        with pytest.raises(UserError) as raised:
            check(config, str(tmp_path / "run"))
        assert str(raised.value) == expected
    assert "reusing" not in capsys.readouterr().out


def test_recorded_paths_match_the_same_file_named_from_another_working_directory(
        tmp_path, monkeypatch):
    """The corpus and vocabulary a preparation recorded (absolute) match a relative
    data.corpus or data.vocab_file that names them from the run's working directory, and
    data.vocab_size is not compared when a vocabulary is given (it is not used); the
    vocab.txt a preparation learned, given as data.vocab_file, is its vocabulary."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    inputs = {**RECORDED["inputs"], "corpus": str(tmp_path / "texts"),
              "vocab_file": str(tmp_path / "vocab.txt"), "vocab_size": 30000}
    _finished_preparation(tmp_path / "run", {**RECORDED, "inputs": inputs})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    same = DataConfig(**{**RECIPE_DEFAULTS, "corpus": "../texts/",
                         "vocab_file": "../elsewhere/../vocab.txt"})
    data_lib.check_corpus(same, str(tmp_path / "run"))
    with pytest.raises(UserError, match=r"data.corpus='texts'; keep data.corpus='/"):
        data_lib.check_corpus(DataConfig(**{**vars(same), "corpus": "texts"}),
                              str(tmp_path / "run"))
    learned = {**RECORDED, "inputs": {**RECORDED["inputs"], "corpus": str(tmp_path / "texts")}}
    _finished_preparation(tmp_path / "learned", learned)
    for vocab_file in ("../learned/data/vocab.txt", ""):
        data_lib.check_corpus(DataConfig(**{**vars(same), "vocab_file": vocab_file}),
                              str(tmp_path / "learned"))
    with pytest.raises(UserError, match=r"data.vocab_size=2048, but data.vocab_size=100;"):
        data_lib.check_corpus(DataConfig(**{**vars(same), "vocab_file": "", "vocab_size": 100}),
                              str(tmp_path / "learned"))


def test_a_preparation_without_recorded_inputs_is_reused_comparing_its_lengths_only(
        tmp_path):
    """metadata.json of a preparation made before the inputs were recorded: accepted
    whatever the corpus, vocabulary and seeds (they cannot be compared); its lengths are."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    old = {key: value for key, value in RECORDED.items() if key != "inputs"}
    _finished_preparation(tmp_path / "run", old)
    data_lib.check_corpus(DataConfig(**{**RECIPE_DEFAULTS, "corpus": "/x", "seed": 1,
                                        "vocab_size": 100, "dupe_factor": 1}),
                          str(tmp_path / "run"))
    with pytest.raises(UserError, match=r"holds a preparation of data.seq_length=64, but "
                                        r"data.seq_length=128;"):
        data_lib.check_corpus(DataConfig(**{**RECIPE_DEFAULTS, "seq_length": 128}),
                              str(tmp_path / "run"))


def test_an_evaluation_compares_a_reused_preparations_lengths_only(tmp_path, monkeypatch):
    """`--model_dir=RUN --mode=eval` from another working directory than the run's, whose
    config.yaml names a relative data.corpus, was refused: the relative path names another
    directory there, though an evaluation reads no corpus."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    inputs = {**RECORDED["inputs"], "corpus": str(tmp_path / "texts")}
    _finished_preparation(tmp_path / "run", {**RECORDED, "inputs": inputs})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    as_trained = DataConfig(**{**RECIPE_DEFAULTS, "corpus": "texts"})  # relative to tmp_path
    with pytest.raises(UserError, match=r"data.corpus='texts'; keep data.corpus='/"):
        data_lib.check_corpus(as_trained, str(tmp_path / "run"))  # training: refused
    data_lib.check_corpus(as_trained, str(tmp_path / "run"), compare_inputs=False)
    with pytest.raises(UserError, match=r"holds a preparation of data.seq_length=64, but "
                                        r"data.seq_length=128;"):
        data_lib.check_corpus(DataConfig(**{**vars(as_trained), "seq_length": 128}),
                              str(tmp_path / "run"), compare_inputs=False)


def test_the_data_line_after_a_preparation_has_thousands_separators(
        tmp_path, monkeypatch, capsys):
    """As the rest of the console: the counts of the embedded corpus' preparation."""
    import types

    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    prepared = types.SimpleNamespace(
        train_files="t", eval_files="e", vocab_file="v", num_train_sequences=49224,
        num_eval_sequences=259, num_words=313671, vocab_size=2026)
    monkeypatch.setattr(prepare_data, "prepare_pretraining_data", lambda *_, **__: prepared)
    data_lib._prepare(DataConfig(data_dir=str(tmp_path / "data")), str(tmp_path / "data"))
    assert capsys.readouterr().out.splitlines()[-1] == (
        "data: 49,224 training and 259 held-out sequences from 313,671 words, vocabulary of "
        "2,026 pieces")


def test_a_directory_given_for_the_tfrecords_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=f"names the directory {tmp_path}: give a glob of its "
                                        f"files, such as {tmp_path}/train-\\*.tfrecord"):
        input_lib.make_pretraining_dataset(
            str(tmp_path), seq_length=8, max_predictions_per_seq=2, batch_size=2,
            is_training=False)


def test_every_directory_of_the_configured_files_is_checked_against_its_preparation(tmp_path):
    """data.train_files may join several preparations, and data.eval_files may come from
    another one: each directory's metadata.json must fit the config, and the line names the
    key and the directory that does not."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    def preparation(name, seq_length):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "part-00000.tfrecord").write_bytes(b"")
        (directory / "metadata.json").write_text(
            f'{{"seq_length": {seq_length}, "max_predictions_per_seq": 4}}')
        return str(directory)

    fits, other, held_out = (preparation("fits", 32), preparation("other", 16),
                             preparation("held_out", 16))
    vocab_file = str(tmp_path / "vocab.txt")
    write_vocab(vocab_file, RESERVED + ["a", "b"])

    def check(train_files, eval_files):
        data_lib.list_data_files(DataConfig(
            train_files=train_files, eval_files=eval_files, vocab_file=vocab_file,
            seq_length=32, max_predictions_per_seq=4))

    check(f"{fits}/part-*", f"{fits}/part-*")  # one preparation that fits: no error
    with pytest.raises(UserError, match=f"^data.train_files: {other} holds data prepared with "
                                        "seq_length=16, but data.seq_length=32;"):
        check(f"{fits}/part-*,{other}/part-*", f"{fits}/part-*")
    with pytest.raises(UserError, match=f"^data.eval_files: {held_out} holds data prepared "
                                        "with seq_length=16"):
        check(f"{fits}/part-*", f"{held_out}/part-*")


def test_configured_files_name_their_key_and_the_files_to_give(tmp_path):
    """Held-out files are prepare_data's heldout-* shards; a vocabulary that cannot be read
    beside configured training files names data.vocab_file and is not told to learn one
    (a vocabulary is learned only for a corpus being prepared)."""
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    (tmp_path / "train-00000-of-00001.tfrecord").write_bytes(b"")
    vocab_file = str(tmp_path / "vocab.txt")
    write_vocab(vocab_file, RESERVED + ["a"])
    configured = dict(train_files=f"{tmp_path}/train-*", eval_files=f"{tmp_path}/heldout-*",
                      vocab_file=vocab_file)
    with pytest.raises(UserError) as error:
        data_lib.list_data_files(DataConfig(**configured))
    assert str(error.value) == (
        f"data.eval_files: {tmp_path}/heldout-* matches no TFRecord files: run `python -m "
        "recipes.bert.prepare_data --output_dir=DIR` and point the config at "
        "DIR/heldout-*.tfrecord")
    configured.update(eval_files=f"{tmp_path}/train-*", vocab_file=str(tmp_path / "none.txt"))
    with pytest.raises(UserError) as error:
        data_lib.list_data_files(DataConfig(**configured))
    assert str(error.value) == (
        f"data.vocab_file: vocabulary file {tmp_path}/none.txt does not exist: give the "
        "vocab.txt the training files were made with")


def test_the_first_records_ids_are_checked_against_the_vocabulary_and_segments_at_the_bound(
        tmp_path):
    """A piece id equal to the vocabulary's size, or a segment id equal to
    model.type_vocab_size, has no embedding: refused; one below it fits."""
    from recipes.bert import data as data_lib
    from recipes.bert import tfrecords
    from recipes.bert.config import DataConfig

    path = str(tmp_path / "train-00000-of-00001.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:  # largest piece id 9, largest segment id 1
        writer.write(tfrecords.serialize_example(
            input_ids=np.array([2, 9, 3, 5, 3]), segment_ids=np.array([0, 0, 0, 1, 1]),
            masked_lm_positions=np.array([1]), masked_lm_ids=np.array([7]),
            next_sentence_label=0, seq_length=8, max_predictions_per_seq=2, pad_id=0))
    config = DataConfig(train_files=path, eval_files=path, vocab_file="v.txt", seq_length=8,
                        max_predictions_per_seq=2)
    files = data_lib.DataFiles(path, path, [path], [path], "v.txt", None)
    data_lib.check_first_records(config, files, vocab_size=10, type_vocab_size=2,
                                 evaluates=True)
    with pytest.raises(UserError, match=f"^data.train_files: the first record of {path} holds "
                                        "piece id 9, outside the 9 pieces of data.vocab_file"):
        data_lib.check_first_records(config, files, vocab_size=9, type_vocab_size=2,
                                     evaluates=True)
    with pytest.raises(UserError, match=f"^data.train_files: the first record of {path} holds "
                                        "segment id 1, which model.type_vocab_size=1 has no"):
        data_lib.check_first_records(config, files, vocab_size=10, type_vocab_size=1,
                                     evaluates=True)


def test_empty_held_out_files_are_refused_only_where_the_mode_evaluates(tmp_path):
    """A preparation with --heldout_fraction=0 writes its held-out shards empty: given as
    data.train_files/eval_files they were refused for --mode=train too."""
    from recipes.bert import data as data_lib
    from recipes.bert import tfrecords
    from recipes.bert.config import DataConfig

    train, held_out = str(tmp_path / "train-0.tfrecord"), str(tmp_path / "heldout-0.tfrecord")
    with tf.io.TFRecordWriter(train) as writer:
        writer.write(tfrecords.serialize_example(
            input_ids=np.array([2, 9, 3, 5, 3]), segment_ids=np.array([0, 0, 0, 1, 1]),
            masked_lm_positions=np.array([1]), masked_lm_ids=np.array([7]),
            next_sentence_label=0, seq_length=8, max_predictions_per_seq=2, pad_id=0))
    with tf.io.TFRecordWriter(held_out):
        pass
    config = DataConfig(train_files=train, eval_files=held_out, vocab_file="v.txt",
                        seq_length=8, max_predictions_per_seq=2)
    files = data_lib.DataFiles(train, held_out, [train], [held_out], "v.txt", None)
    data_lib.check_first_records(config, files, 10, 2, evaluates=False)
    with pytest.raises(UserError, match=f"^data.eval_files: the 1 file.s. of {held_out} "
                                        "hold no record"):
        data_lib.check_first_records(config, files, 10, 2, evaluates=True)


def test_configured_training_files_without_a_vocabulary_name_the_empty_key():
    from recipes.bert import data as data_lib
    from recipes.bert.config import DataConfig

    with pytest.raises(UserError) as error:
        data_lib.check_data_config(DataConfig(train_files="t-*", eval_files="h-*"))
    assert str(error.value) == (
        "data.train_files is set but data.vocab_file is empty; give the held-out files and the "
        "vocabulary the training files were made with")
