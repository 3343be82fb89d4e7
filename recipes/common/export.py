"""Atomic SavedModel export: the export directory is complete or absent."""

import os
import uuid

import tensorflow as tf

from recipes.common import fault_injection


def export_saved_model(export_dir, obj, signatures=None, options=None):
    """Saves a SavedModel that is either complete at `export_dir` or absent.

    It is written under a temporary sibling name and renamed into place; an existing export
    is moved aside first and deleted only after the new one is in place. (On gs:// a rename
    is a copy: the temporary name still keeps a half-written export out of `export_dir`.)
    """
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
