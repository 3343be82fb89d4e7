"""Where a recipe's files live: whether a local directory can be written, and whether its
input files are local, which decides how their records are read.

Files on this machine's file system are read one record after another on the input
pipeline's own thread (a sequential `tf.data` interleave). Files on Cloud Storage (gs://)
or another remote file system are read by parallel workers, which keep several reads in
flight and so hide each read's latency (tf.data's performance guide, "Parallelizing data
extraction": https://www.tensorflow.org/guide/data_performance#parallelizing_data_extraction).
Both give the same records in the same order (the parallel reads are deterministic), so a
run may move between local and remote copies of its data and still resume exactly.

A local read has little latency to hide, and a parallel read hands every record from a
worker thread to the pipeline's. Here (2 CPU cores, local disk) reading in turn started a
checkpoint chunk's pipeline 1.4-3.4x (BERT) and 1.06-1.17x (ResNet) faster, and the
parallel read cost a batch 1.04-1.24x and 1.06-1.13x the CPU time (docs/performance.md,
"Reading the files in turn").
"""

import collections
import contextlib
import fcntl
import os
import re
import tempfile

from recipes.common.errors import UserError


def is_inside(path, directory):
    """Whether `path` is `directory` or a path inside it (local paths made absolute first;
    URLs compared as written)."""
    if "://" not in path + directory:
        path, directory = os.path.abspath(path), os.path.abspath(directory)
    path, directory = path.rstrip("/"), directory.rstrip("/")
    return path == directory or path.startswith(directory + "/")


def local_path(path):
    """`path` as Python's own files name it: a file:// URL (this machine's file system, which
    TensorFlow's files also take) as its path; any other path as it is."""
    return str(path).removeprefix("file://")


def all_local(paths):
    """True when every path is on this machine's file system: no URL scheme, or file://."""
    return all("://" not in path or path.startswith("file://") for path in map(str, paths))


def local_directory_problem(directory):
    """None if `directory` is, or can be made, a directory this process writes in; else why
    not, as words for an error line. Finds out by making and removing one directory in it
    (or in its nearest existing parent), so that a mistake is found before any work. A
    remote URL (gs://) is not checked."""
    if not all_local([directory]):
        return None
    path = os.path.abspath(local_path(directory))
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        return f"{path} is a file, not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".lamb_tf_write_check_", dir=path))
    except OSError as error:
        return f"cannot write in {path} ({error.strerror})"
    return None


def refuse_remote(setting, directory, what):
    """A UserError naming `setting` if `directory` is remote (a URL other than file://):
    `what` writes it with Python's own files (its line says so)."""
    if not all_local([directory]):
        raise UserError(
            f"{setting}={directory} is remote, and {what} writes local files; give a local "
            "directory (a shared mount on a cluster), then copy it (gsutil -m cp -r)")


def check_writable(setting, directory):
    """A UserError naming `setting` (e.g. "export.dir=/x") if `directory` cannot be written
    (`local_directory_problem`)."""
    problem = local_directory_problem(directory)
    if problem:
        raise UserError(f"{setting}: {problem}; give a directory you can write (it is created "
                        "if missing)")


# The files that mark a directory as a training run's: this project's programs' config.yaml,
# Model Garden's trainer's params.yaml.
RUN_FILES = ("config.yaml", "params.yaml")


def check_not_a_run(setting, directory, written):
    """A UserError naming `setting` if the local `directory` holds a training run (one of
    `RUN_FILES`), among whose files a data tool or a study would write `written`."""
    found = run_file(directory)
    if found:
        raise UserError(f"{setting}: it holds a training run (its {found}), among whose "
                        f"files {written} would be written; give a directory of its own")


def run_file(directory):
    """The first of `RUN_FILES` that the local `directory` holds (a training run's), or None
    (for a remote directory too: not looked at)."""
    if not all_local([directory]):
        return None
    return next((name for name in RUN_FILES
                 if os.path.isfile(os.path.join(local_path(directory), name))), None)


class DataTool(collections.namedtuple(
        "DataTool", ["dataset", "program", "mark", "shards", "splits", "files"])):
    """The files of one data tool's dataset, as the tool that writes them describes them
    (`recipes.bert.preparation_files.BERT_DATA`, `recipes.resnet.conversion_files.
    IMAGE_RECORDS`): `dataset` (its words), `program` (the command that writes it), `mark`
    (the file it writes last), `shards` (a regular expression of its shards' names, and of
    those of shards being written, which a killed run leaves), `splits` (the names of the
    splits it writes, whose globs read `<split>-*`) and `files` (its files, in words)."""


def check_output_dir(setting, directory, own, others):
    """A UserError naming `setting` (`--output_dir`) if the local `directory` a data tool
    writes `own` (a `DataTool`) into holds a training run (`check_not_a_run`) or another
    dataset (`check_no_other_dataset`): a data tool's flags' check."""
    check_not_a_run(f"{setting}={directory}", directory, own.files)
    check_no_other_dataset(setting, directory, own, others)


def check_no_other_dataset(setting, directory, own, others):
    """A UserError naming `setting` if the local `directory` holds files of another dataset
    than `own`'s (`DataTool`s), among which `own`'s tool would write its files: the mark or
    shards of one of `others`, or a split file (`<split>-`, a split of any of them) that is
    not one of `own`'s shards, which a split's glob would read beside them. `own`'s files
    (an earlier run's, which a run again replaces) are not refused; nor is a missing or
    remote directory."""
    found = other_dataset_file(directory, own, others)
    if found is None:
        return
    name, other = found
    what = (f"{other.dataset} (its {name}, written by {other.program})" if other
            else f"{name}, which {own.program} does not write")
    split = _split_of(name, [own, *others])
    glob = f" (a {split}-* glob reads both)" if split in own.splits else ""
    raise UserError(f"{setting}={directory} holds {what}; {own.dataset} written beside it "
                    f"would mix with it{glob}: give each dataset a directory of its own")


def _split_of(name, tools):
    """The split whose glob reads the file `name`: a shard's, a split file's (of a split of
    one of `tools`); else train."""
    shard = re.fullmatch(r"\.?(.+?)-\d{5,}-of-\d{5,}.*", name)
    if shard:
        return shard.group(1)
    return next((split for split in _splits(tools) if name.startswith(split + "-")), "train")


def _splits(tools):
    """The names of the splits `tools` (`DataTool`s) write, each once."""
    return list(dict.fromkeys(split for tool in tools for split in tool.splits))


def other_dataset_file(directory, own, others):
    """(the name of a file in the local `directory` of another dataset than `own`'s, the
    one of `others` that writes it or None), or None (`check_no_other_dataset`); the
    others' marks first."""
    path = local_path(directory)
    if not all_local([directory]) or not os.path.isdir(path):
        return None
    names = sorted(name for name in os.listdir(path) if os.path.isfile(os.path.join(path, name)))
    marks = [other.mark for other in others if other.mark in names]
    split_starts = tuple(split + "-" for split in _splits([own, *others]))
    for name in marks + names:
        if name == own.mark or own.shards.fullmatch(name):
            continue
        other = next((other for other in others
                      if name == other.mark or other.shards.fullmatch(name)), None)
        if other or name.startswith(split_starts):
            return name, other
    return None


# The directories this process holds (`exclusive_use`, `shared_use`): (device, inode) ->
# holds.
_HELD = {}


@contextlib.contextmanager
def exclusive_use(label, directory, advice, wait=False, advice_if_read=None):
    """Holds an exclusive lock on the local `directory` (made if missing) while the block
    runs, so that another process of the project's programs that asks for it at the same
    time gets a UserError naming it as `label` (`--model_dir=<directory>`, say), with
    `advice` (what to do), instead of writing its files over the first one's; a process
    that reads it (`shared_use`: a run reading the data there) refuses it too. The lock is
    the operating system's (`flock` on the directory itself: no lock file, and none left
    behind by a killed process) and this process's: a hold it asks for again (a run that
    prepares its data into its own --model_dir) is granted. A remote URL (gs://) is not
    locked, nor a file system that refuses the lock (some NFS mounts: one line says so).
    With `wait`, a lock held elsewhere is waited for (a directory just made, which another
    process's `held_elsewhere` may be trying for a moment). `advice_if_read`: what to do
    when only processes that read it hold it (default `advice`). The directories it made
    are removed again if the block ends in an exception (a UserError, Ctrl-C, SIGTERM) and
    leaves them empty."""
    made = []
    if all_local([directory]):
        made = _missing_directories(local_path(directory))
        os.makedirs(local_path(directory), exist_ok=True)
    try:
        with _held(label, directory, (advice, advice_if_read or advice), fcntl.LOCK_EX, wait):
            yield
    except BaseException:
        for path in made:  # the innermost first
            with contextlib.suppress(OSError):  # not empty (or gone): it stays
                os.rmdir(path)
        raise


def _missing_directories(path):
    """`path` and those of its parents that do not exist, the innermost first."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


@contextlib.contextmanager
def shared_use(label, directory, advice):
    """Holds a shared lock on the existing local `directory` while the block runs: for a
    process that reads the files there (a run, its data). Any number of processes hold a
    directory so at once; one that asks for it exclusively (`exclusive_use`: a preparation
    that would write new files over them) is refused while they do, and one that asks for
    it while another holds it exclusively gets a UserError naming it as `label`, with
    `advice`. A hold of this process, of either kind, is granted again. Not locked: a
    remote URL, a directory that is missing or cannot be listed, or one on a file system
    without `flock` (silently: reading changes nothing there)."""
    if all_local([directory]) and not os.access(local_path(directory), os.R_OK | os.X_OK):
        yield  # (missing, or not to be opened: its files are read by name)
        return
    with _held(label, directory, (advice, advice), fcntl.LOCK_SH, wait=False):
        yield


@contextlib.contextmanager
def _held(label, directory, advice, kind, wait):
    """`exclusive_use` or `shared_use` (`kind`: fcntl.LOCK_EX or LOCK_SH) of `directory`;
    `advice`: (what to do if a writer holds it, if only readers do)."""
    if not all_local([directory]):
        yield
        return
    path = local_path(directory)
    descriptor = os.open(path, os.O_RDONLY)
    key = (os.fstat(descriptor).st_dev, os.fstat(descriptor).st_ino)
    try:
        if key not in _HELD:
            _lock(descriptor, kind, wait, f"{label} cannot be locked on its file system")
        _HELD[key] = _HELD.get(key, 0) + 1
    except BlockingIOError:
        os.close(descriptor)
        if kind == fcntl.LOCK_EX and not _held_against(path, fcntl.LOCK_SH):  # readers only
            raise UserError(f"{label} holds the data of another lamb_tf process, which reads "
                            f"it now; {advice[1]}") from None
        raise UserError(f"{label} is in use by another lamb_tf process, which still writes "
                        f"there; {advice[0]}") from None
    try:
        yield
    finally:
        _HELD[key] -= 1
        if not _HELD[key]:
            del _HELD[key]
        os.close(descriptor)  # (releases the lock this descriptor took)


def _lock(descriptor, kind, wait, unlockable):
    """`flock` for `_held` (BlockingIOError: another process holds it, unless `wait`). On a
    file system without it, an exclusive hold says so (`unlockable`, a line's start)."""
    try:
        fcntl.flock(descriptor, kind if wait else kind | fcntl.LOCK_NB)
    except BlockingIOError:  # (an OSError too): `_held`'s to say
        raise
    except OSError as error:  # EBADF, ENOLCK, EOPNOTSUPP: a file system without flock
        if kind == fcntl.LOCK_EX:
            print(f"note: {unlockable} ({error.strerror}): a second run into it at the same "
                  "time is not refused", flush=True)


def held_elsewhere(directory):
    """Whether another process holds the local `directory` (`exclusive_use`) now (not if
    it is gone)."""
    try:
        directory_stat = os.stat(directory)
    except FileNotFoundError:  # removed by its process as it ended
        return False
    if (directory_stat.st_dev, directory_stat.st_ino) in _HELD:
        return False
    return _held_against(directory, fcntl.LOCK_EX)


def _held_against(path, kind):
    """Whether another process holds `path` so that this one cannot have a `kind` lock on it
    now: tried on an open file description of its own (so not this process's holds), and let
    go at once. False if it is gone, or on a file system without `flock`."""
    try:
        probe = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(probe, kind | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:  # no flock on its file system: nobody can hold it
        return False
    finally:
        os.close(probe)


def check_no_earlier_shards(setting, output_dir, pattern, shards):
    """A UserError naming `setting` if `output_dir` holds files of `pattern` (a shard glob
    such as `train-*`) other than this run's `shards`: an earlier run's of another shard
    count, which the glob a training run reads would take beside the new ones."""
    import tensorflow as tf  # (gs:// too; this module is imported before TensorFlow)

    others = sorted(set(tf.io.gfile.glob(os.path.join(output_dir, pattern))) - set(shards))
    if others:
        raise UserError(
            f"{setting}={output_dir} holds {len(others)} {pattern} file(s) of an earlier run "
            f"with another shard count ({os.path.basename(others[0])}, ...), which a {pattern} "
            f"glob would read beside this run's {len(shards)}; give an empty {setting} or "
            "remove them")


def refuse_unexpanded_home(setting, paths):
    """A UserError for a path (or one of comma-separated globs) that starts with '~': nothing
    here or in TensorFlow expands it, and a shell does only at the start of a word (not after
    `--flag=`, nor in a config file), so it would name a directory called '~' in the working
    directory."""
    for path in str(paths).split(","):
        if path.strip().startswith("~"):
            raise UserError(
                f"{setting}={paths}: '~' is not expanded here (a shell expands it only at the "
                f"start of a word, not after --flag= or in a config); give the full path, "
                f"such as {os.path.expanduser(path.strip())}")


def yaml_error_words(error):
    """PyYAML's `error` in one line: its problem and where (`expected ',' or ']', but got
    '<stream end>' at line 2, column 1`)."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return (getattr(error, "problem", None) or "invalid YAML") + where


def write_text(path, text):
    """Writes `text` to `path` (local or gs://) whole or not at all: into `<path>.tmp`, then
    renamed over `path`, so a reader (or a run killed while writing) never sees half a file.
    A local file is written to disk before the rename (a machine that crashes after it
    keeps the whole file), and without TensorFlow."""
    temporary = path + ".tmp"
    if all_local([path]):
        with open(local_path(temporary), "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(local_path(temporary), local_path(path))
        return
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    with tf.io.gfile.GFile(temporary, "w") as f:
        f.write(text)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def read_document(path, advice=""):
    """What the JSON file, or YAML file (`.yaml`), at `path` holds (local or gs://); a
    one-line `UserError` naming the file when it cannot be read or is not valid: what the
    project writes damaged or replaced by hand. `advice`: what to do, after "; ". A local
    file is read without TensorFlow (the batch study reads its runs' files before, or
    without, importing it)."""
    import json  # pylint: disable=import-outside-toplevel

    import yaml  # pylint: disable=import-outside-toplevel

    parse = yaml.safe_load if path.endswith(".yaml") else json.loads
    try:
        return parse(_read_text(path))
    except OSError as error:
        problem = f"cannot be read ({error.strerror or error})"
    except UnicodeDecodeError as error:
        problem = f"is not UTF-8 text (byte {error.start})"
    except json.JSONDecodeError as error:
        problem = f"is not valid JSON (line {error.lineno}: {error.msg})"
    except yaml.YAMLError as error:
        problem = f"is not valid YAML ({yaml_error_words(error)})"
    raise UserError(f"{path} {problem}" + (f"; {advice}" if advice else ""))


def _read_text(path):
    if all_local([path]):
        with open(local_path(path), encoding="utf-8") as f:
            return f.read()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    try:
        with tf.io.gfile.GFile(path) as f:
            return f.read()
    except tf.errors.OpError as error:
        raise OSError(error.message) from None


def read_mapping(path, keys=(), advice=""):
    """The mapping the JSON file, or YAML file (`.yaml`), at `path` holds, with each of
    `keys` (local or gs://); a one-line `UserError` naming the file when it cannot be read,
    is not valid, is not a mapping or lacks one of `keys` (`read_document`)."""
    content = read_document(path, advice)
    missing = [key for key in keys if not isinstance(content, dict) or key not in content]
    if isinstance(content, dict) and not missing:
        return content
    problem = (f"lacks {missing[0]!r}" if isinstance(content, dict)
               else f"holds a {type(content).__name__}, not a mapping")
    raise UserError(f"{path} {problem}" + (f"; {advice}" if advice else ""))
