"""The raw-text input of the BERT data preparation (Google's format: one sentence per line, a
blank line between documents) and its WordPiece vocabulary files."""
import pytest

from recipes.bert import corpus
from recipes.bert import text_files
from recipes.bert import vocabulary
from recipes.common.errors import UserError

RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # Google's ids 0, 100, 101, 102, 103


def test_a_directory_gives_its_txt_files_in_subdirectories_too_sorted(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("b.txt", "sub/a.txt", "notes.md"):
        (tmp_path / name).write_text("A sentence.\n")
    assert text_files.resolve_text_files(str(tmp_path)) == [
        str(tmp_path / "b.txt"), str(tmp_path / "sub" / "a.txt")]


def test_an_empty_file_among_others_is_read_only_all_empty_is_refused(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "full.txt").write_text("A sentence.\n")
    assert text_files.resolve_text_files(str(tmp_path)) == [
        str(tmp_path / "empty.txt"), str(tmp_path / "full.txt")]
    (tmp_path / "full.txt").write_text("")
    with pytest.raises(UserError, match=r"all 2 file\(s\) matched by .* are empty"):
        text_files.resolve_text_files(str(tmp_path))


@pytest.mark.parametrize("text, documents", [
    ("  a first  \n   \n\t b \n", [["a first"], ["b"]]),  # a blank line may hold spaces
    ("x\r\ny\r\n\r\nz", [["x", "y"], ["z"]]),  # Windows line ends; no newline at the end
    ("\n\nx\n\n\n\ny\n\n", [["x"], ["y"]]),  # several blank lines end one document
])
def test_lines_are_stripped_and_a_blank_line_ends_a_document(tmp_path, text, documents):
    (tmp_path / "corpus.txt").write_bytes(text.encode())
    assert list(text_files.read_file_documents(str(tmp_path / "corpus.txt"))) == documents


def test_written_documents_are_separated_by_one_blank_line(tmp_path):
    path = str(tmp_path / "corpus.txt")
    assert corpus.write_documents([["A b.", "C."], ["D e f."]], path) == (2, 6)
    assert open(path, encoding="utf-8").read() == "A b.\nC.\n\nD e f.\n"
    assert list(text_files.read_file_documents(path)) == [["A b.", "C."], ["D e f."]]


def test_a_learned_vocabulary_starts_with_the_reserved_tokens_pad_first():
    counts = vocabulary.count_words(["the cat sat on the mat."] * 20 + ["a dog ran."] * 5)
    tokens = vocabulary.learn_from_counts(counts, 60)
    assert tokens[:5] == RESERVED  # [PAD] is id 0: the records pad with 0
    ids = vocabulary.special_ids(tokens)
    assert (ids.pad, ids.unk, ids.cls, ids.sep, ids.mask) == (0, 1, 2, 3, 4)


def test_a_learner_that_overshoots_is_cut_to_vocab_size_keeping_its_head(monkeypatch):
    learned = RESERVED + [f"piece{i}" for i in range(20)]
    monkeypatch.setattr(vocabulary.learner, "learn", lambda *args, **kwargs: list(learned))
    assert vocabulary.learn_from_counts({"piece": 3}, 12) == learned[:12]


def test_a_vocabulary_file_with_windows_line_ends_reads_as_its_tokens(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("\r\n".join(RESERVED + ["the", "##s"]).encode() + b"\r\n")
    assert vocabulary.read_vocabulary(str(path)) == RESERVED + ["the", "##s"]
