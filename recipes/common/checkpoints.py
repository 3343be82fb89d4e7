"""Checkpoints of a run: what they hold, where they live, restoring them.

A checkpoint holds the model, the optimizer (slots and step counter) and the state of the
layers' random generators (dropout), so that a resumed run continues exactly. The files
are complete before `tf.train.CheckpointManager` updates its `checkpoint` index (written
to a temporary name and renamed), so a process killed while saving leaves the previous
checkpoint as the latest one. See docs/reliability.md.
"""

import os
import re

import tensorflow as tf

from recipes.common.errors import UserError

CHECKPOINT_SUBDIR = "checkpoints"


def random_generators(model):
    """The `tf.random.Generator` of every random layer (dropout) of `model`, in layer order.

    tf_keras keeps these out of checkpoints on purpose (`BaseRandomLayer` exposes them to
    SavedModel only); training checkpoints need them for an exact resume. Creates them now
    if the layer has not run yet (tf_keras creates them lazily, which would be too late for
    a restore): call inside the strategy scope, as `build_optimizer_state` does.
    """
    generators = []
    for layer in model.submodules:
        state = getattr(layer, "_random_generator", None)  # tf_keras.backend.RandomGenerator
        if state is None or not hasattr(state, "_maybe_init"):
            continue
        state._maybe_init()  # pylint: disable=protected-access
        if getattr(state, "_generator", None) is not None:
            generators.append(state._generator)  # pylint: disable=protected-access
    return generators


def make_checkpoint_manager(model, directory, max_to_keep=3):
    """A CheckpointManager over the model, its optimizer (slots and step counter) and the
    layers' random-generator states."""
    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=model.optimizer, random_generators=random_generators(model)
    )
    # Create the lazily made save counter now, on every worker alike: made later inside
    # `fit` (a MultiWorkerMirroredStrategy scope) it would be a broadcast that only the
    # workers which had not restored would run, and the collectives would mismatch.
    checkpoint.save_counter  # pylint: disable=pointless-statement
    return tf.train.CheckpointManager(
        checkpoint, os.path.join(directory, CHECKPOINT_SUBDIR), max_to_keep=max_to_keep
    )


def latest_checkpoint(model_dir):
    """Path of the newest checkpoint under `model_dir`, or None; a UserError if its files
    are incomplete (`newest_checkpoint_in`)."""
    return newest_checkpoint_in(os.path.join(model_dir, CHECKPOINT_SUBDIR))


def newest_checkpoint_in(directory):
    """The checkpoint that `directory`'s `checkpoint` file names as the newest, or None.

    `tf.train.latest_checkpoint` returns None, after a logged error, for a newest checkpoint
    whose `.index` file is missing, and a run would start again from step 0; a missing data
    file fails only in the restore. Both are a partial copy of a run (or of a checkpoint
    being written to a bucket): a UserError naming the missing file, before any work."""
    state = tf.train.get_checkpoint_state(directory)
    if state is None or not state.model_checkpoint_path:
        return None
    path = state.model_checkpoint_path
    missing = missing_checkpoint_file(path)
    if missing:
        raise UserError(
            f"{directory}: its newest checkpoint {os.path.basename(path)} (named in its "
            f"'checkpoint' file) is incomplete: {os.path.basename(missing)} is missing; copy "
            "the run's files again, or name an earlier complete checkpoint as "
            "model_checkpoint_path in that file to resume from it")
    return path


def missing_checkpoint_file(path):
    """The first file of checkpoint `path` (its `.index` and `.data-i-of-n` shards) that does
    not exist, or None."""
    index = path + ".index"
    if not tf.io.gfile.exists(index):
        return index
    shards = tf.io.gfile.glob(path + ".data-?????-of-?????")
    count = int(shards[0][-5:]) if shards else 1
    expected = [f"{path}.data-{i:05d}-of-{count:05d}" for i in range(count)]
    return next((name for name in expected if name not in shards), None)


def checkpoint_step(path):
    """The optimizer step of a checkpoint the recipes saved (they number each by its step:
    `<model_dir>/checkpoints/ckpt-<step>`), or None for another name."""
    number = re.fullmatch(r"ckpt-(\d+)", os.path.basename(path))
    return int(number.group(1)) if number else None


def restore(manager, restore_dir=None):
    """Restores the newest checkpoint of `restore_dir` (default: the manager's directory)
    into the manager's objects; returns the restored optimizer step (0 if none).

    The model and optimizer must already be built, so that a checkpoint of another model
    shape fails here with one line instead of deep inside training.
    """
    path = latest_checkpoint(restore_dir) if restore_dir else manager.latest_checkpoint
    if path is None:
        return 0
    try:
        manager.checkpoint.restore(path).assert_existing_objects_matched()
    except UNREADABLE as error:
        raise UserError(_damaged(path, error)) from None
    except (ValueError, AssertionError, tf.errors.InvalidArgumentError) as error:
        raise UserError(
            f"checkpoint {path} does not fit this model ({misfit(error)}); it was trained with "
            "other model.* settings or another vocabulary / number of classes: use the "
            "config and data it was trained with, or a new --model_dir"
        ) from None
    step = int(manager.checkpoint.optimizer.iterations.numpy())
    print(f"restored {path} at step {step}", flush=True)
    return step


# A data file cut short (IndexError: "Read less bytes than requested") or unreadable.
UNREADABLE = (tf.errors.NotFoundError, tf.errors.DataLossError, IndexError)


def _damaged(path, error):
    return (f"checkpoint {path} cannot be read ({_first_line(error)}): its files are damaged, "
            "as a partial copy leaves them; copy the run's files again, or resume from an "
            "earlier checkpoint (model_checkpoint_path in the directory's 'checkpoint' file)")


def misfit(error):
    """What TensorFlow's restore error says, in a few words: how many of this model's
    variables the checkpoint lacks and the first, or the first line (a shape mismatch)."""
    text = str(error).strip()
    missing = re.findall(r"<tf\.Variable '([^']+)'", text)
    if "not bound to checkpointed values" in text and missing:
        return (f"{len(missing)} of this model's variables are not in it, such as "
                f"{missing[0].removesuffix(':0')}")
    first = text.splitlines()[0]
    return first if len(first) <= 240 else first[:240].rsplit(" ", 1)[0] + " ..."


def build_optimizer_state(model):
    """Creates the optimizer's slots and the layers' random generators now (needed before
    restoring a checkpoint into them); call inside the strategy scope."""
    model.optimizer.build(model.trainable_variables)
    random_generators(model)


def require_checkpoint(model_dir):
    """The newest checkpoint path, or a UserError saying that there is none yet."""
    path = latest_checkpoint(model_dir)
    run_dir = os.path.dirname(model_dir.rstrip("/"))
    if path is None and os.path.basename(model_dir.rstrip("/")) == CHECKPOINT_SUBDIR and \
            run_dir and latest_checkpoint(run_dir):  # the run's checkpoints/ given
        raise UserError(
            f"no checkpoint in {os.path.join(model_dir, CHECKPOINT_SUBDIR)}: {model_dir} is "
            f"the checkpoints directory of the run in {run_dir}; give --model_dir={run_dir}")
    if path is None:
        raise UserError(
            f"no checkpoint in {os.path.join(model_dir, CHECKPOINT_SUBDIR)}; train "
            "first (--mode=train) or point --model_dir at a trained run"
        )
    return path


def init_checkpoint_path(init_checkpoint):
    """The checkpoint `train.init_checkpoint` names (a run's model_dir, a directory of
    checkpoints or a checkpoint prefix; gs:// too), or a one-line UserError."""
    path = init_checkpoint
    if tf.io.gfile.isdir(init_checkpoint):
        path = latest_checkpoint(init_checkpoint) or newest_checkpoint_in(init_checkpoint)
    fix = ("give phase 1's model_dir or a checkpoint path such as "
           "<model_dir>/checkpoints/ckpt-7038")
    if path is None or not tf.io.gfile.glob(path + "*"):
        raise UserError(f"train.init_checkpoint={init_checkpoint!r} holds no checkpoint; {fix}")
    missing = missing_checkpoint_file(path)
    if missing:
        raise UserError(f"train.init_checkpoint={init_checkpoint!r}: {missing} is missing, so "
                        f"{path} is not a complete TensorFlow checkpoint; {fix}")
    try:
        tf.train.list_variables(path)  # reads the index
    except (tf.errors.OpError, ValueError) as error:
        raise UserError(f"train.init_checkpoint={init_checkpoint!r}: {path}.index cannot be "
                        f"read as a checkpoint's ({_first_line(error)}); {fix}") from None
    return path


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def restore_weights_only(model, init_checkpoint, fits):
    """The weights of another run (`train.init_checkpoint`: a model_dir or a checkpoint
    path) into `model.inner_model`; the optimizer state and step start fresh (phase 2 of
    mixed-batch training starts from phase 1's weights). `fits` ends the error line of a
    checkpoint that does not fit: what the two runs need (the task's own words)."""
    path = init_checkpoint_path(init_checkpoint)
    # Only the path checkpoint -> model -> inner_model (the weights): a compiled Keras model
    # also tracks its optimizer, which must not come along.
    weights_only = tf.train.Checkpoint(model=tf.train.Checkpoint(inner_model=model.inner_model))
    try:  # a variable of another shape fails in `restore`, a missing one in the assertion
        weights_only.restore(path).expect_partial().assert_existing_objects_matched()
    except UNREADABLE as error:
        raise UserError("train.init_checkpoint: " + _damaged(path, error)) from None
    except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as error:
        raise UserError(
            f"train.init_checkpoint {path} does not fit this model ({misfit(error)}); {fits}"
        ) from None
    print(f"initialised weights from {path} (optimizer state starts fresh)", flush=True)


def restore_latest(model, model_dir):
    """The newest checkpoint of this run (model and optimizer), or a one-line error."""
    require_checkpoint(model_dir)
    return restore(make_checkpoint_manager(model, model_dir))
