"""Atomic SavedModel export: the export directory is complete or absent."""

import os
import re
import uuid

import tensorflow as tf

from recipes.common import fault_injection, storage
from recipes.common.errors import UserError


# What a SavedModel directory holds (`tf.saved_model.save`, Keras' and TF Hub's additions):
# an export replaces a directory of these only, not one where anything else was put.
SAVED_MODEL_ENTRIES = frozenset({"saved_model.pb", "saved_model.pbtxt", "variables", "assets",
                                 "assets.extra", "fingerprint.pb", "keras_metadata.pb"})


def replace_problem(export_dir, model_dir=None):
    """None if an export may replace what is at `export_dir` (nothing, an empty directory or
    an earlier SavedModel); else why not, as words for an error line. The export replaces
    the whole directory, so it must not be `model_dir` (the run's checkpoints), hold it, or
    hold anything but a SavedModel's entries (a file put into an earlier export, a run
    trained into it)."""
    target = export_dir.rstrip("/")
    if model_dir is not None:
        run_dir = model_dir.rstrip("/")
        if "://" not in target:
            target, run_dir = os.path.abspath(target), os.path.abspath(run_dir)
        if run_dir == target or run_dir.startswith(target.rstrip("/") + "/"):
            return (f"it holds --model_dir {model_dir}, whose checkpoints the export would "
                    "replace; give a directory of its own (by default it is export/ in "
                    "--model_dir)")
    if not tf.io.gfile.isdir(export_dir):
        return (f"{export_dir} is a file, not a directory" if tf.io.gfile.exists(export_dir)
                else None)
    entries = sorted(entry.rstrip("/") for entry in tf.io.gfile.listdir(export_dir))
    others = [entry for entry in entries if entry not in SAVED_MODEL_ENTRIES]
    if others or (entries and "saved_model.pb" not in entries):
        return (f"{export_dir} holds files that are not a SavedModel ({(others or entries)[0]}, "
                "...), which the export would replace; give a new or empty directory, or an "
                "earlier export")
    return None


def export_saved_model(export_dir, obj, signatures=None, options=None):
    """Saves a SavedModel that is either complete at `export_dir` or absent.

    It is written under a temporary sibling name and renamed into place; an existing export
    is moved aside first and deleted only after the new one is in place. (On gs:// a rename
    is a copy: the temporary name still keeps a half-written export out of `export_dir`.)
    Anything at `export_dir` but an earlier export is refused (`replace_problem`): the
    driver checks that before any work, this again before anything is moved. An exception
    (Ctrl-C and SIGTERM too) before the new export is in place removes what this call wrote
    and puts the earlier export back; what a killed export left is removed first
    (`remove_leftovers`).
    """
    export_dir = storage.local_path(export_dir)  # what Python's own files name
    problem = replace_problem(export_dir)
    if problem:
        raise UserError(f"export to {export_dir}: {problem}")
    parent = os.path.dirname(export_dir.rstrip("/"))
    if parent:
        tf.io.gfile.makedirs(parent)
    remove_leftovers(export_dir)
    temporary = _sibling(export_dir, "tmp")
    previous = None
    try:
        tf.saved_model.save(obj, temporary, signatures=signatures, options=options)
        fault_injection.pause_before_export(temporary)
        if tf.io.gfile.exists(export_dir):
            previous = _sibling(export_dir, "old")
            tf.io.gfile.rename(export_dir, previous)
        tf.io.gfile.rename(temporary, export_dir)
    except BaseException:
        _undo(export_dir, temporary, previous)
        raise
    if previous:
        tf.io.gfile.rmtree(previous)
    print(f"exported SavedModel to {export_dir}", flush=True)
    return export_dir


def _sibling(export_dir, kind):
    """`<export_dir>.<kind>-<8 hex digits>`: the names `leftovers` finds."""
    return f"{export_dir.rstrip('/')}.{kind}-{uuid.uuid4().hex[:8]}"


def _undo(export_dir, temporary, previous):
    """After an exception in `export_saved_model`: the earlier export back in place, and
    nothing of this one left."""
    if previous and not tf.io.gfile.exists(export_dir):
        tf.io.gfile.rename(previous, export_dir)
    if tf.io.gfile.exists(temporary):
        tf.io.gfile.rmtree(temporary)


def leftovers(export_dir):
    """The siblings of `export_dir` an export killed outright (SIGKILL, a lost machine) can
    leave: `<export_dir>.tmp-XXXXXXXX` (the export being written) and `.old-XXXXXXXX` (the
    export it replaced, not yet deleted); 8 lowercase hex digits, nothing else."""
    target = export_dir.rstrip("/")
    parent, name = os.path.dirname(target), os.path.basename(target)
    if not tf.io.gfile.isdir(parent or "."):
        return []
    pattern = re.compile(re.escape(name) + r"\.(tmp|old)-[0-9a-f]{8}")
    return sorted(os.path.join(parent, entry.rstrip("/"))
                  for entry in tf.io.gfile.listdir(parent or ".")
                  if pattern.fullmatch(entry.rstrip("/")))


def remove_leftovers(export_dir):
    """Removes `leftovers(export_dir)` (a full SavedModel copy each), with one line naming
    them; first, when `export_dir` is absent, a local export killed between its two renames
    moved aside (the newest `.old-*` holding a saved_model.pb) is put back, with a line of its
    own. Only one export to `export_dir` may run at a time: another's would be removed."""
    found = leftovers(export_dir)
    moved_aside = [path for path in found if ".old-" in os.path.basename(path)
                   and os.path.isfile(os.path.join(path, "saved_model.pb"))]
    if moved_aside and not tf.io.gfile.exists(export_dir) and storage.all_local([export_dir]):
        earlier = max(moved_aside, key=os.path.getmtime)  # a local rename: complete
        os.rename(earlier, export_dir.rstrip("/"))
        found.remove(earlier)
        print(f"put back the earlier export an interrupted export had moved aside: {earlier} "
              f"-> {export_dir}", flush=True)
    for path in found:
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)
    if found:
        print(f"removed what an interrupted export left: {', '.join(found)}", flush=True)
