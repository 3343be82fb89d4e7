"""BERT data preparation on Apache Beam: the same bytes as one process, on any worker count.

The reference is the single-process path (itself checked against BERT's rules in
test_bert_data.py); the Beam pipeline must write byte-identical shards and vocabulary, on
one worker, two threads and (through the command line) two worker processes. The corpus is a slice of the embedded corpus
(the first 240 documents, in three files): the whole embedded corpus takes minutes per run
on two worker processes, and the slice already spans several files and chunks.
"""

import glob
import json
import os
import subprocess
import sys

import pytest

from recipes.bert import chunks
from recipes.bert import corpus
from recipes.bert import prepare_data
from recipes.bert import vocabulary
from recipes.common.errors import UserError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGUMENTS = dict(
    vocab_size=600,
    seq_length=48,
    max_predictions_per_seq=7,
    dupe_factor=2,
    num_shards=3,
    heldout_fraction=0.1,
    seed=11,
    chunk_sentences=400,
    progress=False,
)


@pytest.fixture(scope="module")
def embedded_slice(tmp_path_factory):
    """The first 240 embedded-corpus documents as three files of 80."""
    root = tmp_path_factory.mktemp("embedded_slice")
    documents = []
    for document in corpus.stdlib_documents():
        documents.append(document)
        if len(documents) == 240:
            break
    for index in range(3):
        corpus.write_documents(documents[index * 80 : (index + 1) * 80], str(root / f"{index}.txt"))
    return str(root / "*.txt")


@pytest.fixture(scope="module")
def single_process(embedded_slice, tmp_path_factory):
    output_dir = str(tmp_path_factory.mktemp("single_process"))
    return prepare_data.prepare_pretraining_data(embedded_slice, output_dir, **ARGUMENTS)


def output_bytes(prepared):
    """Every shard and the vocabulary, by file name."""
    paths = glob.glob(prepared.train_files) + glob.glob(prepared.eval_files)
    paths.append(prepared.vocab_file)
    return {os.path.basename(path): open(path, "rb").read() for path in sorted(paths)}


@pytest.mark.slow  # Apache Beam
@pytest.mark.parametrize(
    "beam_options",
    [
        [],  # one worker, in this process
        ["--direct_num_workers=2", "--direct_running_mode=multi_threading"],
    ],  # Two worker processes: through the command line, below.
    ids=["1-worker", "2-threads"],
)
def test_beam_writes_the_bytes_of_the_single_process_path(
    embedded_slice, single_process, beam_options, tmp_path
):
    on_beam = prepare_data.prepare_pretraining_data(
        embedded_slice, str(tmp_path / "beam"), beam_options=beam_options, **ARGUMENTS
    )
    expected = output_bytes(single_process)
    assert len(expected) == 2 * ARGUMENTS["num_shards"] + 1
    assert all(expected.values())  # no empty shard: the comparison covers every shard
    assert output_bytes(on_beam) == expected
    for field in ("num_train_sequences", "num_eval_sequences", "num_train_documents",
                  "num_eval_documents", "num_words", "vocab_size"):
        assert getattr(on_beam, field) == getattr(single_process, field), field
    assert not os.path.exists(tmp_path / "beam" / ".beam")  # pass outputs cleaned up


@pytest.mark.slow  # reads the embedded corpus
def test_the_slice_spans_several_chunks_and_both_splits(embedded_slice):
    """The equality above covers chunk and file boundaries, not one chunk of one file."""
    files = sorted(glob.glob(embedded_slice))
    summaries = []
    for file_index, path in enumerate(files):
        with open(path, encoding="utf-8") as text:
            documents = [d.split("\n") for d in text.read().strip("\n").split("\n\n")]
        summaries.append(chunks.summarize_file(file_index, documents, 11, 0.1))
    plan = chunks.ChunkPlan.from_summaries(summaries, ARGUMENTS["chunk_sentences"])
    assert plan.num_chunks[0] >= 3, plan.num_chunks
    assert sum(s.documents[1] for s in summaries) >= 10


def test_heldout_share_follows_the_fraction_and_keys_on_document_ids():
    held = [chunks.is_heldout(5, f, d, 0.2) for f in range(4) for d in range(2500)]
    assert 0.18 < sum(held) / len(held) < 0.22
    # The coin of a document depends on its id only, not on the order of the questions.
    assert chunks.is_heldout(5, 3, 17, 0.2) == held[3 * 2500 + 17]
    assert not any(chunks.is_heldout(5, 0, d, 0.0) for d in range(100))


def test_chunks_are_runs_of_consecutive_documents():
    # Three files of documents of 3 sentences; chunks of 10 sentences.
    summaries = [chunks.FileSummary(i, (9, 0), (3, 0), 0) for i in range(3)]
    plan = chunks.ChunkPlan.from_summaries(summaries, 10)
    assert plan.num_chunks[0] == 2  # 27 sentences: two chunks, the last takes the rest
    keys = []
    for file_index in range(3):
        documents = [["s."] * 3] * 3
        keys += [key for key, _ in plan.keyed_documents(file_index, documents, 0, 0.0)]
    # Documents start at sentences 0, 3, ..., 24: 0-9 -> chunk 0, 12.. -> chunk 1.
    assert keys == [("train", 0)] * 4 + [("train", 1)] * 5


def test_word_counts_are_bert_basic_words_summed_over_batches():
    sentences = ["The cat, the dog.", "A DOG!"] * 3
    expected = {"the": 6, "cat": 3, ",": 3, "dog": 6, ".": 3, "a": 3, "!": 3}
    assert vocabulary.count_words(sentences) == expected
    assert vocabulary.count_words_in_batches(sentences, batch_size=4) == expected


@pytest.mark.slow  # Apache Beam
def test_non_utf8_file_is_refused_on_beam_before_anything_is_written(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "good.txt").write_text("One sentence.\nTwo sentences.\n")
    (tmp_path / "corpus" / "latin1.txt").write_bytes("Caf\xe9 au lait.\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1\.txt is not UTF-8 text"):
        prepare_data.prepare_pretraining_data(
            str(tmp_path / "corpus"), str(tmp_path / "out"), beam_options=[], **ARGUMENTS
        )
    assert not (tmp_path / "out").exists()  # made by the refused run: removed


@pytest.mark.slow  # Apache Beam
@pytest.mark.parametrize(
    "beam_options, message",
    [
        (["--no_such_option=1"], "--no_such_option=1: neither a prepare_data flag nor a Beam"),
        (["--runner=NoSuchRunner"], "--runner=NoSuchRunner: not a Beam runner"),
    ],
)
def test_bad_beam_options_are_user_errors(tmp_path, beam_options, message):
    with pytest.raises(UserError, match=message):
        prepare_data.prepare_pretraining_data(
            None, str(tmp_path / "out"), beam_options=beam_options, **ARGUMENTS
        )
    assert not os.path.exists(tmp_path / "out")  # found before anything was written


@pytest.mark.slow  # Apache Beam
@pytest.mark.parametrize(
    "beam_options, message",
    [
        (
            ["--runner=FnApiRunner", "--direct_num_workers=two"],
            "Beam option --direct_num_workers: invalid int value: 'two'; see Apache Beam's "
            "pipeline options",
        ),
        (
            ["--direct_running_mode=fast"],
            "Beam option --direct_running_mode: invalid choice: 'fast' (choose from "
            "'in_memory', 'multi_threading', 'multi_processing'); see Apache Beam's pipeline "
            "options",
        ),
        (["--direct_num_workers"], "Beam option --direct_num_workers: expected one argument"),
    ],
    ids=["not-an-int", "not-a-choice", "no-value"],
)
def test_a_value_a_beam_option_refuses_is_one_user_error_naming_the_option(
    tmp_path, capsys, beam_options, message
):
    """A value Beam's parser refuses printed argparse's usage block of every Beam option
    (139 lines), then `prepare_data.py: error: argument ...`, and exited (SystemExit), where
    an unknown option was already one line."""
    with pytest.raises(UserError) as refused:
        prepare_data.prepare_pretraining_data(
            None, str(tmp_path / "out"), beam_options=beam_options, **ARGUMENTS
        )
    assert str(refused.value).startswith(message)
    assert capsys.readouterr().err == ""  # not argparse's usage block
    assert not os.path.exists(tmp_path / "out")  # found before anything was written


BAD_USAGE = {
    "beam-option-without-runner": (
        ["--direct_num_workers=2"],
        "--direct_num_workers=2: not a prepare_data flag; Beam pipeline options need --runner",
    ),
    "unknown-option": (["--runner=FnApiRunner", "--no_such_option=1"], "--no_such_option=1: neither"),
    "misspelt-flag-without-runner": (
        ["--seq_lenght=64"],
        "--seq_lenght=64: not a prepare_data flag; did you mean --seq_length? (Beam pipeline "
        "options need --runner"),
    "empty-glob": (["--runner=FnApiRunner", "--input_path=/nonexistent/*.txt"], "matches no files"),
    "beam-option-bad-value": (
        ["--runner=FnApiRunner", "--direct_num_workers=two"],
        "error: Beam option --direct_num_workers: invalid int value: 'two'; see Apache Beam's",
    ),
}


@pytest.fixture(scope="module")
def command_lines(embedded_slice, tmp_path_factory):
    """Runs the command lines through tests/preloaded_cli.py (TensorFlow imported once):
    the slice on two Beam worker processes, and the bad usages; returns {name: (exit
    status, stderr, output_dir)}."""
    root = tmp_path_factory.mktemp("command_lines")
    flags = [f"--{name}={value}" for name, value in ARGUMENTS.items() if name != "progress"]
    arguments = {
        "two-processes": [
            f"--input_path={embedded_slice}",
            "--runner=FnApiRunner",
            "--direct_num_workers",  # Beam's option in the two-argument form
            "2",
            "--direct_running_mode=multi_processing",
            *flags,
        ],
        **{name: usage for name, (usage, _) in BAD_USAGE.items()},
    }
    jobs = [
        {
            "module": "recipes.bert.prepare_data",
            "args": [f"--output_dir={root / name}", *args],
            "stdout": str(root / f"{name}.out"),
            "stderr": str(root / f"{name}.err"),
            "timeout": 900,
        }
        for name, args in arguments.items()
    ]
    with open(root / "jobs.json", "w") as f:
        json.dump(jobs, f)
    subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tests", "preloaded_cli.py"),
         str(root / "jobs.json"), str(root / "results.json")],
        cwd=REPO_ROOT, check=True, timeout=1800, start_new_session=True,
    )
    with open(root / "results.json") as f:
        results = json.load(f)
    return {
        name: (result["returncode"], open(job["stderr"]).read(), root / name)
        for name, result, job in zip(arguments, results, jobs)
    }


@pytest.mark.slow  # Apache Beam
def test_cli_on_two_worker_processes_writes_the_bytes_of_the_single_process_path(
    command_lines, single_process
):
    returncode, stderr, output_dir = command_lines["two-processes"]
    assert returncode == 0, stderr[-2000:]
    written = {
        os.path.basename(path): open(path, "rb").read()
        for path in sorted(glob.glob(str(output_dir / "*.tfrecord")))
        + [str(output_dir / "vocab.txt")]
    }
    assert written == output_bytes(single_process)
    assert "words/s" in stderr and "Beam, FnApiRunner" in stderr


@pytest.mark.slow  # Apache Beam
@pytest.mark.parametrize("name", sorted(BAD_USAGE))
def test_cli_reports_bad_beam_usage_in_one_line(command_lines, name):
    returncode, stderr, output_dir = command_lines[name]
    assert returncode == 2, stderr[-2000:]
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and BAD_USAGE[name][1] in lines[0], stderr[-2000:]
    assert "Traceback" not in stderr
    assert not glob.glob(str(output_dir / "*.tfrecord"))
