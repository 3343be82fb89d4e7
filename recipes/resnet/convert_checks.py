"""The converter's checks of its input arrays, of the `--npz` archive holding them and of the
hold-out split, in a module without TensorFlow: `convert_flags.check_flags` runs them on the
`--npz` file before TensorFlow loads (`check_npz`: the images array is judged from its .npy
header, never loaded), and `convert` runs the same functions on what it converts."""

import collections
import os
import zipfile
import zlib

import numpy as np

from recipes.common.errors import UserError

# The fewest pixels an image has across: Model Garden's central crop (0.875 of the shorter
# side) of 1 pixel is empty, and training stopped at its first whole-image draw.
MIN_SIDE = 2
MEMBERS = ("images", "labels", "class_names")  # the arrays an `--npz` archive may hold


def check_images(dtype, shape):
    """UserError unless images of `dtype` and `shape` are uint8 [N, H, W] or [N, H, W, 1|3],
    at least one of at least `MIN_SIDE` pixels across."""
    if dtype != np.uint8:
        raise UserError(
            f"images must be uint8 (0..255), got dtype {dtype}; convert with "
            "np.clip(images, 0, 255).astype(np.uint8)"
        )
    shape = tuple(shape) + (1,) if len(shape) == 3 else tuple(shape)
    if len(shape) != 4 or shape[-1] not in (1, 3):
        raise UserError(f"images must have shape [N, H, W] or [N, H, W, 1 or 3], got {list(shape)}")
    if not shape[0] or min(shape[1:3]) < MIN_SIDE:
        raise UserError(f"images must hold at least one image of at least {MIN_SIDE} x "
                        f"{MIN_SIDE} pixels (a central crop of 1 pixel is empty), got shape "
                        f"{list(shape)}")


def check_labels(labels, num_images):
    """UserError unless `labels` holds `num_images` integer class indices."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != num_images:
        raise UserError(f"labels must have shape [N] = [{num_images}], got {list(labels.shape)}")
    if not np.issubdtype(labels.dtype, np.integer) or (len(labels) and labels.min() < 0):
        raise UserError(
            "labels must be integers >= 0 (class indices), got "
            f"dtype {labels.dtype}" + (f", min {labels.min()}" if len(labels) else "")
        )


def check_arrays(images, labels):
    """UserError unless `images` is uint8 [N, H, W] or [N, H, W, 1|3] and `labels` holds N
    integer class indices."""
    images = np.asarray(images)
    check_images(images.dtype, images.shape)
    check_labels(labels, len(images))


def default_class_names(labels):
    """"0", "1", ... up to the largest label: the class names of arrays given without them."""
    return [str(i) for i in range(int(np.max(labels)) + 1)]


def held_out_count(validation_fraction, class_size):
    """Examples of a class of `class_size` that `convert.split_holdout` holds out."""
    return int(round(validation_fraction * class_size))


def check_holdout(validation_fraction, labels, class_names):
    """UserError when a hold-out of `validation_fraction` of each class of `labels` would hold
    out no image at all, or every image of a class (which training would then never see)."""
    class_sizes = collections.Counter(int(label) for label in labels)
    held_out = {label: held_out_count(validation_fraction, size)
                for label, size in class_sizes.items()}
    if not any(held_out.values()):  # each class holds out round(fraction x its size) images
        raise UserError(
            f"validation_fraction={validation_fraction} holds out no image (each class "
            f"holds out its share, rounded; the smallest class has "
            f"{min(class_sizes.values())}); give a larger fraction, or 0 for no validation "
            "split")
    untrained = sorted(label for label, size in class_sizes.items() if held_out[label] == size)
    if untrained:  # a class of one image at 0.6: all of it held out
        raise UserError(
            f"validation_fraction={validation_fraction} holds out every image of class "
            f"{class_names[untrained[0]]!r} ({len(untrained)} class(es) in all), which "
            "training would then never see; give a smaller fraction, or more images of "
            "each class")


# ----------------------------------------------------------------------------- the --npz file


def check_npz(path, validation_fraction=0.0):
    """The UserError `read_npz` and the conversion of its arrays would raise for the `--npz`
    archive at `path`, found without loading the images array (its .npy header says its
    dtype and shape; the labels and class names are loaded)."""
    with open_npz(path) as archive:
        labels, names = _checked_contents(archive, path)
    if validation_fraction > 0:
        check_holdout(validation_fraction, labels,
                      default_class_names(labels) if names is None else names)


def read_npz(path):
    """`images`, `labels` and `class_names` (None when absent) of the `--npz` archive, checked
    before anything is written; errors name the file."""
    with open_npz(path) as archive:
        labels, names = _checked_contents(archive, path)
        images = _load_member(archive, path, "images")
    return images, labels, names


def open_npz(path):
    """The `np.load` of `--npz`, an archive holding `images` and `labels`; else a UserError."""
    if not os.path.exists(path):
        raise UserError(f"--npz={path!r} does not exist")
    try:  # (mmap_mode: a .npy given for the archive is not read)
        arrays = np.load(path, mmap_mode="r")  # allow_pickle=False: object arrays are refused
    except (ValueError, OSError):  # (numpy's words for a text file: "pickled data")
        raise UserError(f"--npz={path!r} is not a NumPy .npz archive; save it with "
                        "np.savez(path, images=..., labels=...)") from None
    except EOFError:  # numpy's words for an empty file
        raise UserError(f"--npz={path!r} is empty (0 bytes), not a NumPy .npz archive; save "
                        "it with np.savez(path, images=..., labels=...)") from None
    except zipfile.BadZipFile as error:  # a zip's start, but not its end: cut short in a copy
        raise _damaged(path, error) from None
    if not isinstance(arrays, np.lib.npyio.NpzFile):
        raise UserError(f"--npz={path!r} holds one array, not an .npz archive of named "
                        "arrays; save it with np.savez(path, images=..., labels=...)")
    missing = {"images", "labels"} - set(arrays.files)
    if missing:
        arrays.close()
        raise UserError(
            f"--npz={path!r} lacks array(s) {sorted(missing)}; save it with "
            "np.savez(path, images=..., labels=..., class_names=... optional)")
    return arrays


def _damaged(path, error):
    return UserError(f"--npz={path!r} is a truncated or damaged .npz archive ({error}); "
                     "save or copy it again with np.savez(path, images=..., labels=...)")


def _checked_contents(archive, path):
    """(labels, class names or None) of an open `--npz` archive, checked with its images,
    which are judged from their .npy header alone."""
    headers = {key: _member_header(archive, path, key) for key in MEMBERS
               if key in archive.files}
    labels = _load_member(archive, path, "labels")
    names = _load_member(archive, path, "class_names") if "class_names" in headers else None
    images_dtype, images_shape = headers["images"]
    try:
        check_images(images_dtype, images_shape)
        check_labels(labels, images_shape[0])
    except UserError as error:
        raise UserError(f"--npz={path!r}: {error}") from None
    if names is None:
        return labels, None
    return labels, _checked_class_names(path, names, labels)


# What reading a member of a damaged archive raises (zlib.error: deflated data that is not)
DAMAGED_MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, ValueError)


def _member_header(archive, path, key):
    """(dtype, shape) of the array `key` of an open archive, read from its .npy header."""
    name = key + ".npy" if key + ".npy" in archive.zip.namelist() else key
    try:
        with archive.zip.open(name) as member:
            magic = member.read(np.lib.format.MAGIC_LEN)  # b"\x93NUMPY", major, minor
            if not magic.startswith(np.lib.format.MAGIC_PREFIX):  # np.load gives its bytes
                raise UserError(f"--npz={path!r}: {key} is not a NumPy array; save it with "
                                "np.savez(path, images=..., labels=...)")
            version = tuple(magic[len(np.lib.format.MAGIC_PREFIX):])
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(member)
    except DAMAGED_MEMBER_ERRORS as error:
        raise _damaged(path, error) from None
    if dtype.hasobject:  # allow_pickle=False: np.load refuses object arrays
        raise UserError(f"--npz={path!r}: {key} is an array of Python objects, which NumPy "
                        "loads only by unpickling; save it as numbers or strings (np.array(..., "
                        "dtype=str))")
    return dtype, shape


def _load_member(archive, path, key):
    """The array `key` of an open archive whose header `_member_header` read."""
    try:
        return archive[key]
    except DAMAGED_MEMBER_ERRORS as error:  # (an object array: refused by its header)
        raise _damaged(path, error) from None


def _checked_class_names(path, names, labels):
    """`names` as a list of str, unless too few for `labels` or one is repeated."""
    needed = int(labels.max()) + 1 if len(labels) else 0
    if names.ndim != 1 or len(names) < needed:
        raise UserError(
            f"--npz={path!r}: class_names must be a list of at least {needed} names (labels go "
            f"up to {needed - 1}), got shape {list(names.shape)}")
    names = [str(name) for name in names]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:  # two class ids of one name in labels.txt and the export's answers
        raise UserError(f"--npz={path!r}: class_names holds {repeated[0]!r} more than once; "
                        "give each class its own name")
    return names
