"""The embedded default corpus: English text that every Python installation carries.

The corpus is the docstrings of the standard library plus `pydoc_data.topics` (the text of
the language reference that `help()` shows), written as `.txt` files in the format Google's
BERT `create_pretraining_data.py` reads: one sentence per line, a blank line between
documents. One document per module (docstrings) or per help topic. Once written, the
embedded corpus goes through exactly the same code path as any directory of `.txt` files.

How the docstrings are collected, and why this way:
- Pure-Python modules are *parsed* with `ast`, never imported. Importing runs module code
  (`antigravity` opens a web browser, `this` prints, `tkinter` wants a display, test
  packages register things), is slow, and leaves modules in `sys.modules`. Parsing the
  source gives the same module, class and function docstrings with no side effects.
- Compiled modules (`builtins`, `math`, `itertools`, ...) have no source; a fixed list of
  them is imported (C modules run no Python code on import) and their docstrings are read.
- Order is deterministic: source files sorted by module name, then the compiled modules in
  the fixed list order, then help topics sorted by name. The same Python build gives the
  same bytes.
"""

import ast
import importlib
import inspect
import os
import re
import sysconfig
from typing import Iterator, List, Sequence, Tuple

# Packages of the standard library that are skipped: test suites (their docstrings are
# about testing the interpreter, not English prose), GUI code, vendored third-party code,
# and installed packages.
EXCLUDED_TOP_LEVEL = frozenset(
    {
        "test",
        "tests",
        "idlelib",
        "tkinter",
        "turtledemo",
        "lib2to3",
        "ensurepip",
        "site-packages",
        "dist-packages",
        "__pycache__",
        "__phello__",
        "antigravity",
        "this",
    }
)

# Compiled modules whose docstrings are read by importing them. Extension modules run no
# Python code at import, so importing them has no side effects; ones this build lacks are
# skipped.
COMPILED_MODULES = (
    "builtins",
    "sys",
    "itertools",
    "math",
    "cmath",
    "time",
    "gc",
    "errno",
    "array",
    "binascii",
    "zlib",
    "unicodedata",
    "select",
    "mmap",
    "marshal",
    "atexit",
    "faulthandler",
    "posix",
    "pwd",
    "grp",
    "resource",
    "fcntl",
    "termios",
    "pyexpat",
)

EMBEDDED_CORPUS_FILES = ("stdlib_docstrings.txt", "pydoc_topics.txt")

# A sentence ends at . ! or ? followed by whitespace and an upper-case letter, digit or
# opening quote/bracket. A heuristic, good enough for docstrings.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[`])")
# Lines that are code, not prose: doctest prompts and reST directives.
_CODE_LINE = re.compile(r"^\s*(>>>|\.\.\.|\.\. )")


def docstring_sentences(text: str) -> List[str]:
    """Splits a docstring (or help text) into sentences, one string each.

    Paragraphs are separated by blank lines; doctest and reST-directive lines are dropped;
    whitespace inside a sentence collapses to single spaces.
    """
    sentences = []
    for paragraph in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        lines = [line for line in paragraph.splitlines() if not _CODE_LINE.match(line)]
        prose = " ".join(" ".join(lines).split())
        if prose:
            sentences.extend(s for s in _SENTENCE_END.split(prose) if s)
    return sentences


def _stdlib_source_files() -> List[Tuple[str, str]]:
    """(module name, path) of the pure-Python standard library, sorted by module name."""
    root = sysconfig.get_paths()["stdlib"]
    found = []
    for directory, subdirectories, files in os.walk(root):
        relative = os.path.relpath(directory, root)
        parts = [] if relative == "." else relative.split(os.sep)
        if parts and (
            parts[0] in EXCLUDED_TOP_LEVEL
            or parts[0].startswith("config-")
            or any(p in ("test", "tests", "__pycache__") for p in parts)
        ):
            subdirectories[:] = []
            continue
        for file_name in files:
            if not file_name.endswith(".py"):
                continue
            stem = file_name[:-3]
            if not parts and stem in EXCLUDED_TOP_LEVEL:
                continue
            module = ".".join(parts + ([] if stem == "__init__" else [stem]))
            found.append((module, os.path.join(directory, file_name)))
    return sorted(found)


def _source_docstrings(path: str) -> List[str]:
    """Module, class and function docstrings of one source file, in source order."""
    try:
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []  # A few stdlib files are templates or target other Python versions.
    docstrings = []

    def visit(node):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=True)
            if docstring:
                docstrings.append(docstring)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return docstrings


def _compiled_module_docstrings(module_name: str) -> List[str]:
    """Docstrings of a compiled module and of the functions/classes it defines."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return []
    docstrings = [module.__doc__] if module.__doc__ else []
    for name in sorted(vars(module)):
        value = getattr(module, name)
        if name.startswith("_") or getattr(value, "__module__", None) != module_name:
            continue
        if getattr(value, "__doc__", None):
            docstrings.append(value.__doc__)
        if inspect.isclass(value):
            for member_name in sorted(vars(value)):
                member = vars(value)[member_name]
                if not member_name.startswith("_") and getattr(member, "__doc__", None):
                    docstrings.append(member.__doc__)
    return docstrings


def stdlib_documents() -> Iterator[List[str]]:
    """Yields one document (a list of sentences) per standard-library module."""
    for _, path in _stdlib_source_files():
        sentences = [s for d in _source_docstrings(path) for s in docstring_sentences(d)]
        if sentences:
            yield sentences
    for module_name in COMPILED_MODULES:
        sentences = [
            s for d in _compiled_module_docstrings(module_name) for s in docstring_sentences(d)
        ]
        if sentences:
            yield sentences


def pydoc_topic_documents() -> Iterator[List[str]]:
    """Yields one document (a list of sentences) per `pydoc_data.topics` help topic."""
    from pydoc_data import topics  # pylint: disable=g-import-not-at-top (a large dict)

    for name in sorted(topics.topics):
        sentences = docstring_sentences(topics.topics[name])
        if sentences:
            yield sentences


def write_documents(documents, path: str) -> Tuple[int, int]:
    """Writes documents in Google's format; returns (documents, words) written."""
    num_documents = num_words = 0
    with open(path, "w", encoding="utf-8") as out:
        for sentences in documents:
            if num_documents:
                out.write("\n")  # A blank line separates documents.
            out.write("".join(sentence + "\n" for sentence in sentences))
            num_documents += 1
            num_words += sum(len(sentence.split()) for sentence in sentences)
    return num_documents, num_words


def write_embedded_corpus(directory: str) -> Sequence[str]:
    """Writes the embedded corpus as `.txt` files into `directory`; returns their paths."""
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, name) for name in EMBEDDED_CORPUS_FILES]
    write_documents(stdlib_documents(), paths[0])
    write_documents(pydoc_topic_documents(), paths[1])
    return paths
