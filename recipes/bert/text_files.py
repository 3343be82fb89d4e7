"""Raw text input: which `.txt` files, and the documents in them, streamed.

The format is Google BERT's `create_pretraining_data.py` input: one sentence per line, a
blank line between documents. The end of a file also ends a document. Files are read line
by line, so memory holds one document at a time, never a whole file.
"""

import glob
import os
from typing import Iterator, List, Sequence

from recipes.common.errors import UserError


LOCAL_ADVICE = "give a directory of .txt files or a glob such as 'corpus/*.txt'"


def resolve_text_files(input_path: str, setting: str = "text corpus",
                       advice: str = LOCAL_ADVICE) -> List[str]:
    """The sorted `.txt` files named by a directory, a glob pattern or a single file.

    Raises `UserError` when nothing matches or every matched file is empty, its message
    starting with `setting` (what gave the path) and, when nothing matches, ending with
    `advice`. A path with a scheme (`gs://...`) is a glob matched by Beam's `FileSystems`
    (install `apache-beam[gcp]` for gs://).
    """
    input_path = os.fspath(input_path)  # (a pathlib.Path too)
    if "://" in input_path:
        return _resolve_remote(input_path, setting)
    if os.path.isdir(input_path):
        files = _each_file_once(_text_files_below(input_path))
        where = f"directory {input_path} has no .txt files"
    else:
        matched = glob.glob(input_path)
        files = _each_file_once(path for path in matched if os.path.isfile(path))
        directories = [path for path in matched if os.path.isdir(path)]
        where = f"{input_path} matches no files" + (
            f" (only the directory {directories[0]}: give it as it is, to read the .txt "
            "files below it)" if directories else
            " (one path or glob: a comma-separated list is not taken)" if "," in input_path
            else "")
    if not files:
        raise UserError(f"{setting}: {where}: {advice}")
    if all(os.path.getsize(path) == 0 for path in files):
        raise UserError(
            f"{setting}: all {len(files)} file(s) matched by {input_path} are "
            "empty: give files with one sentence per line"
        )
    return files


def _text_files_below(directory: str) -> Iterator[str]:
    """The `.txt` files below `directory`, following links to directories but entering each
    directory once (glob's `**` went round a link back up the tree, each pass doubling)."""
    entered = set()
    for root, subdirectories, names in os.walk(directory, followlinks=True):
        real = os.path.realpath(root)
        if real in entered:
            subdirectories[:] = []
            continue
        entered.add(real)
        # as glob's `**`: no hidden directory or file (`.ipynb_checkpoints/`, say)
        subdirectories[:] = sorted(name for name in subdirectories if not name.startswith("."))
        yield from (os.path.join(root, name) for name in names
                    if name.endswith(".txt") and not name.startswith("."))


def _each_file_once(paths) -> List[str]:
    """The sorted `paths`, each file once: a symbolic link to a file or directory also
    listed (or a link back up the tree) named its files again, whose documents were then
    read twice and could land in both the training and the held-out split."""
    seen, files = set(), []
    for path in sorted(paths):
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            files.append(path)
    return files


def _resolve_remote(pattern: str, setting: str) -> List[str]:
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=g-import-not-at-top

    try:
        metadata = FileSystems.match([pattern])[0].metadata_list
    except Exception as error:  # Beam raises BeamIOError / ValueError for unknown schemes.
        raise UserError(
            f"{setting}: cannot list {pattern} ({error.__class__.__name__}: {error}): "
            "check the path, and install apache-beam[gcp] for gs://"
        ) from None
    files = sorted(m.path for m in metadata)
    if not files:
        raise UserError(f"{setting}: {pattern} matches no files: give a glob such as "
                        "'gs://bucket/corpus/*.txt'")
    if all(m.size_in_bytes == 0 for m in metadata):
        raise UserError(f"{setting}: all {len(files)} file(s) matched by {pattern} are "
                        "empty: give files with one sentence per line")
    return files


_GZIP_MAGIC = b"\x1f\x8b"  # the first bytes of every gzip file (RFC 1952)


def _open(path: str):
    if "://" in path:
        from apache_beam.io.filesystems import FileSystems  # pylint: disable=g-import-not-at-top

        return FileSystems.open(path)
    return open(path, "rb")


def read_documents(files: Sequence[str]) -> Iterator[List[str]]:
    """Yields documents (lists of non-empty, stripped lines) from `files`, in order."""
    for path in files:
        yield from read_file_documents(path)


def read_file_documents(path: str) -> Iterator[List[str]]:
    """Yields the documents of one file (local, or through Beam's `FileSystems` for a path
    with a scheme such as gs://).

    Raises `UserError` (one line naming the file) for a file that is not UTF-8 or cannot
    be read: the whole preparation refuses such a corpus rather than skip part of it.
    """
    number = 0
    try:
        with _open(path) as binary_file:
            document = []
            for number, raw_line in enumerate(binary_file, start=1):
                line = raw_line.decode("utf-8").strip()
                if line:
                    document.append(line)
                elif document:
                    yield document
                    document = []
            if document:
                yield document
    except UnicodeDecodeError as error:
        if number == 1 and raw_line.startswith(_GZIP_MAGIC):
            raise UserError(f"text corpus: {path} is gzip-compressed: decompress it (gunzip "
                            "keeps the name without .gz; give .txt files)") from None
        raise UserError(
            f"text corpus: {path} is not UTF-8 text ({error.reason} at byte {error.start} "
            f"of line {number}): convert it to UTF-8"
        ) from None
    except OSError as error:
        raise UserError(
            f"text corpus: cannot read {path} ({error.strerror or error}): check the "
            "path and its permissions"
        ) from None
