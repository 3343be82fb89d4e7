"""Raw text input: which `.txt` files, and the documents in them, streamed.

The format is Google BERT's `create_pretraining_data.py` input: one sentence per line, a
blank line between documents. The end of a file also ends a document. Files are read line
by line, so memory holds one document at a time, never a whole file.
"""

import glob
import os
from typing import Iterator, List, Sequence

from recipes.common.errors import UserError


def resolve_text_files(input_path: str) -> List[str]:
    """The sorted `.txt` files named by a directory, a glob pattern or a single file.

    Raises `UserError` when nothing matches or every matched file is empty.
    """
    if os.path.isdir(input_path):
        files = sorted(glob.glob(os.path.join(input_path, "**", "*.txt"), recursive=True))
        where = f"directory {input_path} has no .txt files"
    else:
        files = sorted(path for path in glob.glob(input_path) if os.path.isfile(path))
        where = f"{input_path} matches no files"
    if not files:
        raise UserError(
            f"text corpus: {where}: give a directory of .txt files or a glob "
            "such as 'corpus/*.txt'"
        )
    if all(os.path.getsize(path) == 0 for path in files):
        raise UserError(
            f"text corpus: all {len(files)} file(s) matched by {input_path} are "
            "empty: give files with one sentence per line"
        )
    return files


def read_documents(files: Sequence[str]) -> Iterator[List[str]]:
    """Yields documents (lists of non-empty, stripped lines) from `files`, in order."""
    for path in files:
        yield from read_file_documents(path)


def read_file_documents(path: str, opener=None) -> Iterator[List[str]]:
    """Yields the documents of one file. `opener(path)` returns a binary file object
    (default: the local `open`; the Beam pipeline passes Beam's FileSystems, for gs://).

    Raises `UserError` (one line naming the file) for a file that is not UTF-8 or cannot
    be read: the whole preparation refuses such a corpus rather than skip part of it.
    """
    try:
        with (opener or _open_local)(path) as binary_file:
            document = []
            for raw_line in binary_file:
                line = raw_line.decode("utf-8").strip()
                if line:
                    document.append(line)
                elif document:
                    yield document
                    document = []
            if document:
                yield document
    except UnicodeDecodeError as error:
        raise UserError(
            f"text corpus: {path} is not UTF-8 text ({error.reason} in a line at byte "
            f"{error.start} of that line): convert it to UTF-8"
        ) from None
    except OSError as error:
        raise UserError(
            f"text corpus: cannot read {path} ({error.strerror or error}): check the "
            "path and its permissions"
        ) from None


def _open_local(path: str):
    return open(path, "rb")


def total_bytes(files: Sequence[str]) -> int:
    """The summed size of `files` (the progress bar's total)."""
    return sum(os.path.getsize(path) for path in files)
