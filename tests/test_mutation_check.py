"""tests/mutation_check.py still applies to the current source: every mutation's old line
occurs exactly once in its file, the new line differs, and its test files exist. (Running
the mutations is slow and not part of this suite: see docs/testing.md.)"""
import fnmatch
import os
import re

import pytest

import mutation_check


@pytest.mark.parametrize("mutation", mutation_check.MUTATIONS, ids=lambda m: m.name)
def test_mutation_applies_to_the_current_source(mutation):
    mutation_check.check_applies(mutation)


def test_mutation_names_are_unique_and_every_one_requires_named_catches():
    names = [m.name for m in mutation_check.MUTATIONS]
    assert len(names) == len(set(names))
    assert all(m.caught_by and m.tests for m in mutation_check.MUTATIONS)


def test_a_line_that_occurs_twice_or_not_at_all_is_refused():
    mutation = mutation_check.Mutation("m", "bug", "f.py", "x = 1", "x = 2", ["t.py"], ["t"])
    assert mutation_check.mutated_text("a\nx = 1\nb", mutation) == "a\nx = 2\nb"
    for text in ("a\nb", "x = 1\nx = 1", "  x = 1"):
        with pytest.raises(mutation_check.MutationDoesNotApply, match="occurs"):
            mutation_check.mutated_text(text, mutation)


def test_every_mutation_is_in_the_table_of_docs_testing_md():
    """docs/testing.md lists every mutation by name (a row may name several with `*_...`
    for the tf_keras_ and keras3_ pair): one was planted without a row."""
    with open(os.path.join(mutation_check.REPO_ROOT, "docs", "testing.md"),
              encoding="utf-8") as page:
        rows = [line.split("|")[1] for line in page if line.startswith("| `")]
    listed = [name for row in rows for name in re.findall(r"`([*\w]+)`", row)]
    unlisted = [m.name for m in mutation_check.MUTATIONS
                if not any(fnmatch.fnmatchcase(m.name, name) for name in listed)]
    assert not unlisted
