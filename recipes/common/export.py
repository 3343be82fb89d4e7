"""Atomic SavedModel export: the export directory is complete or absent."""

import os
import uuid

import tensorflow as tf

from recipes.common import fault_injection
from recipes.common.errors import UserError


def replace_problem(export_dir, model_dir=None):
    """None if an export may replace what is at `export_dir` (nothing, an empty directory or
    an earlier SavedModel); else why not, as words for an error line. The export replaces
    the whole directory, so it must not be `model_dir` (the run's checkpoints), hold it, or
    hold anything but a SavedModel."""
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
    entries = sorted(tf.io.gfile.listdir(export_dir))
    if entries and "saved_model.pb" not in entries:
        return (f"{export_dir} holds files that are not a SavedModel ({entries[0]}, ...), which "
                "the export would replace; give a new or empty directory, or an earlier export")
    return None


def export_saved_model(export_dir, obj, signatures=None, options=None):
    """Saves a SavedModel that is either complete at `export_dir` or absent.

    It is written under a temporary sibling name and renamed into place; an existing export
    is moved aside first and deleted only after the new one is in place. (On gs:// a rename
    is a copy: the temporary name still keeps a half-written export out of `export_dir`.)
    Anything at `export_dir` but an earlier export is refused (`replace_problem`): the
    driver checks that before any work, this again before anything is moved.
    """
    problem = replace_problem(export_dir)
    if problem:
        raise UserError(f"export to {export_dir}: {problem}")
    parent = os.path.dirname(export_dir.rstrip("/"))
    if parent:
        tf.io.gfile.makedirs(parent)
    temporary = f"{export_dir.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        tf.saved_model.save(obj, temporary, signatures=signatures, options=options)
    except BaseException:
        if tf.io.gfile.exists(temporary):
            tf.io.gfile.rmtree(temporary)
        raise
    fault_injection.pause_before_export(temporary)
    previous = None
    if tf.io.gfile.exists(export_dir):
        previous = f"{export_dir.rstrip('/')}.old-{uuid.uuid4().hex[:8]}"
        tf.io.gfile.rename(export_dir, previous)
    tf.io.gfile.rename(temporary, export_dir)
    if previous:
        tf.io.gfile.rmtree(previous)
    print(f"exported SavedModel to {export_dir}", flush=True)
    return export_dir
