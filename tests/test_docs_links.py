"""Every relative link in README.md and docs/*.md leads somewhere: the file exists, and a
`#fragment` names a heading of that file (GitHub's anchors: the heading in lower case, its
punctuation dropped, its spaces made hyphens)."""

import os
import re

import pytest

from conftest import REPO_ROOT

DOC_FILES = ["README.md"] + sorted(
    os.path.join("docs", name) for name in os.listdir(os.path.join(REPO_ROOT, "docs"))
    if name.endswith(".md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCED_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def _read(path):
    with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
        return f.read()


def github_anchor(heading):
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    text = FENCED_BLOCK.sub("", _read(path))
    return {github_anchor(heading) for heading in HEADING.findall(text)}


def relative_links(doc):
    """(target, file it names relative to the repository, fragment) of each relative link."""
    links = []
    for target in LINK.findall(FENCED_BLOCK.sub("", _read(doc))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path, _, fragment = target.partition("#")
        named = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        links.append((target, named, fragment))
    return links


def test_anchor_of_a_heading_with_code_and_punctuation():
    assert github_anchor("One optimizer update (`benchmarks/optimizer_step.py`)") == (
        "one-optimizer-update-benchmarksoptimizer_steppy")
    assert github_anchor("`steps_per_execution` > 1 (fixed)") == "steps_per_execution--1-fixed"


@pytest.mark.parametrize("doc", DOC_FILES)
def test_every_relative_link_names_an_existing_file_and_heading(doc):
    broken = []
    for target, named, fragment in relative_links(doc):
        if not os.path.exists(os.path.join(REPO_ROOT, named)):
            broken.append(f"{target}: no file {named}")
        elif fragment and named.endswith(".md") and fragment not in anchors(named):
            broken.append(f"{target}: no heading #{fragment} in {named}")
    assert not broken, f"{doc}: " + "; ".join(broken)
