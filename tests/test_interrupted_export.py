"""An export stopped by an exception (Ctrl-C, SIGTERM) at any step before the new export is
in place leaves no temporary copy and the earlier export in place; what an export killed
outright (SIGKILL) left beside `export/` is removed by the next export, and nothing else
(`recipes/common/export.py`). Through the command line: tests/test_stopping_signals.py."""

import os
import shutil

import pytest
import tensorflow as tf

from recipes.common import export as export_lib
from recipes.common import fault_injection


def _module(value):
    module = tf.Module()
    module.v = tf.Variable(value)
    module.f = tf.function(lambda x: x * module.v,
                           input_signature=[tf.TensorSpec([], tf.float32)])
    return module


def _loads(export_dir):
    loaded = tf.saved_model.load(export_dir)  # kept: its function reads its variable
    return float(loaded.f(1.0))


def _interrupt(*unused, **unused_keywords):
    raise KeyboardInterrupt


@pytest.fixture
def earlier_export(tmp_path):
    export_dir = str(tmp_path / "export")
    export_lib.export_saved_model(export_dir, _module(1.0))
    return export_dir


def test_interrupt_after_the_save_removes_the_temporary_export(earlier_export, tmp_path,
                                                               monkeypatch):
    monkeypatch.setattr(fault_injection, "pause_before_export", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        export_lib.export_saved_model(earlier_export, _module(2.0))
    assert os.listdir(tmp_path) == ["export"]
    assert _loads(earlier_export) == 1.0


def test_interrupt_between_the_renames_puts_the_earlier_export_back(earlier_export, tmp_path,
                                                                   monkeypatch):
    rename = tf.io.gfile.rename
    calls = []

    def rename_then_interrupt(source, target, overwrite=False):
        calls.append(target)
        if len(calls) == 2:  # the new export into place, after the earlier one went aside
            raise KeyboardInterrupt
        rename(source, target, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", rename_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        export_lib.export_saved_model(earlier_export, _module(2.0))
    monkeypatch.undo()
    assert ".old-" in calls[0]
    assert os.listdir(tmp_path) == ["export"]
    assert _loads(earlier_export) == 1.0


def test_next_export_removes_the_leftovers_of_a_killed_export_and_nothing_else(
        earlier_export, tmp_path, capsys):
    leftovers = ["export.tmp-0123abcd", "export.old-89abcdef"]
    others = ["export.tmp-0123ABCD", "export.tmp-012345678", "export.tmp-notes",
              "exported.tmp-0123abcd", "my-export.tmp-0123abcd", "export.bak-0123abcd"]
    for name in leftovers + others:
        os.makedirs(tmp_path / name / "variables")
    (tmp_path / "export.tmp-0123abcd" / "saved_model.pb").write_text("half")
    capsys.readouterr()
    export_lib.export_saved_model(earlier_export, _module(2.0))
    assert sorted(os.listdir(tmp_path)) == sorted(["export"] + others)
    assert _loads(earlier_export) == 2.0
    removed = ", ".join(str(tmp_path / name) for name in sorted(leftovers))
    assert capsys.readouterr().out.splitlines()[0] == (
        f"removed what an interrupted export left: {removed}")


def test_an_earlier_export_a_killed_export_moved_aside_is_put_back_not_removed(
        earlier_export, tmp_path, capsys, monkeypatch):
    """Killed between its two renames, an export leaves only `.old-*` (the earlier export):
    the next export puts it back first, so that a failing next export keeps it (was: removed
    as a leftover, and a failing next export left no export at all)."""
    aside = tmp_path / "export.old-89abcdef"
    os.rename(earlier_export, aside)
    os.makedirs(tmp_path / "export.old-0123abcd")  # no SavedModel in it: removed
    capsys.readouterr()

    def failing_save(*args, **kwargs):
        raise RuntimeError("the new export fails")

    monkeypatch.setattr(tf.saved_model, "save", failing_save)
    with pytest.raises(RuntimeError):
        export_lib.export_saved_model(earlier_export, _module(2.0))
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["export"]
    assert _loads(earlier_export) == 1.0
    assert capsys.readouterr().out.splitlines() == [
        "put back the earlier export an interrupted export had moved aside: "
        f"{aside} -> {earlier_export}",
        f"removed what an interrupted export left: {tmp_path / 'export.old-0123abcd'}"]


def test_leftovers_of_a_relative_export_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("export.tmp-0123abcd")
    assert export_lib.leftovers("export/") == ["export.tmp-0123abcd"]
    assert export_lib.leftovers("elsewhere/export") == []


HOLDS_THE_RUN = ("it holds --model_dir {model_dir}, whose checkpoints the export would replace; "
                 "give a directory of its own (by default it is export/ in --model_dir)")


@pytest.mark.parametrize("export_dir, model_dir, problem", [
    ("new", "runs/a", None),  # made by the export
    ("empty", "runs/a", None),  # an empty directory: replaced
    ("earlier", "runs/a", None),  # an earlier SavedModel: replaced
    ("runs/a/export", "runs/a", None),  # the default, in the run's directory
    ("runs/ab", "runs/a", None),  # a sibling whose name begins with the run's
    ("runs/a", "runs/a", HOLDS_THE_RUN),
    ("runs/a/", "runs/a", HOLDS_THE_RUN),
    ("runs", "runs/a", HOLDS_THE_RUN),  # a parent of the run's directory
    ("notes", "runs/a", "{export_dir} holds files that are not a SavedModel (notes.txt, ...), "
                        "which the export would replace; give a new or empty directory, or an "
                        "earlier export"),
    ("a_file", "runs/a", "{export_dir} is a file, not a directory"),
    # an earlier export holding more: a file put there, a run trained into it (both deleted
    # by the export before)
    ("earlier_with_notes", "runs/a", "{export_dir} holds files that are not a SavedModel "
                                     "(notes.txt, ...), which the export would replace; give a "
                                     "new or empty directory, or an earlier export"),
    ("earlier_with_a_run", "runs/a", "{export_dir} holds files that are not a SavedModel "
                                     "(checkpoints, ...), which the export would replace; give "
                                     "a new or empty directory, or an earlier export"),
])
def test_an_export_dir_is_refused_when_it_would_replace_the_run_or_other_files(
        tmp_path, export_dir, model_dir, problem):
    """An export.dir above --model_dir passed the check made before any work and was only
    refused after the training; an empty export.dir ended in an IndexError."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("mine")
    (tmp_path / "a_file").write_text("mine")
    export_lib.export_saved_model(str(tmp_path / "earlier"), _module(1.0))
    for earlier, extra in (("earlier_with_notes", "notes.txt"), ("earlier_with_a_run", "")):
        shutil.copytree(tmp_path / "earlier", tmp_path / earlier)
        if extra:
            (tmp_path / earlier / extra).write_text("mine")
        else:
            (tmp_path / earlier / "checkpoints").mkdir()
            (tmp_path / earlier / "config.yaml").write_text("mine")
    export_dir, model_dir = str(tmp_path / export_dir), str(tmp_path / model_dir)
    expected = problem and problem.format(export_dir=export_dir, model_dir=model_dir)
    assert export_lib.replace_problem(export_dir, model_dir) == expected
