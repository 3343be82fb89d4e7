"""Fine-tuning inputs: what is taken from the pretraining run (its encoder, vocabulary and
sequence length), and the task's examples packed into arrays of the encoder's inputs
(recipes/bert/finetune.py is the task that uses them)."""
import collections
import dataclasses
import json
import os

import numpy as np
import tensorflow as tf
import yaml
from official.nlp.configs import encoders

from recipes.bert import classification
from recipes.bert import ecosystem_export
from recipes.bert import squad
from recipes.bert import stdlib_classification
from recipes.bert import vocabulary
from recipes.common import checkpoints, flags, storage
from recipes.common.errors import UserError


class PretrainingRun:
    """What fine-tuning takes from a pretraining model_dir: the Model Garden encoder export
    (checkpoint, encoder.yaml, vocab.txt, the step it was exported at) and the sequence
    length."""

    def __init__(self, model_dir):
        if not tf.io.gfile.isdir(model_dir):
            what = "is a file" if tf.io.gfile.exists(model_dir) else "does not exist"
            raise UserError(f"encoder.pretraining_dir={model_dir} {what}: "
                            f"{ecosystem_export.GIVE_A_RUN}")
        self.directory = os.path.join(model_dir, ecosystem_export.CHECKPOINT_SUBDIR)
        try:
            self.checkpoint = checkpoints.newest_checkpoint_in(self.directory)
        except UserError as error:
            raise UserError(f"encoder.pretraining_dir: {error}") from None
        if self.checkpoint is None:
            try:  # the advice below is for a BERT pretraining run only
                ecosystem_export.pretraining_config(model_dir)
            except UserError as error:
                raise UserError(f"encoder.pretraining_dir: {error}") from None
            raise UserError(f"encoder.pretraining_dir: {self.directory} holds no encoder "
                            f"checkpoint; {_write_the_export(model_dir)}")
        self.step = ecosystem_export.exported_step(self.directory)
        self.newest = _newest_checkpoint(model_dir)  # (path, step) of the run's, or None
        data = _pretraining_data(model_dir)
        self.seq_length = data["seq_length"]
        fix = _export_again(model_dir)
        self.encoder_config = _encoder_config(self.directory, fix)
        self.vocab_file = os.path.join(self.directory, "vocab.txt")
        _check_vocabulary(self.vocab_file, self.encoder_config, fix)
        # {path in a checkpoint: (shape, name)} of the encoder fine-tuning builds
        self.encoder_variables = _check_checkpoint(self.checkpoint, self.encoder_config, fix)
        # What the embedded task needs: the corpus, where it was prepared, the split's seed.
        self.corpus = "" if data.get("train_files") else data.get("corpus")
        self.data_seed = data.get("seed")
        self.data_dir, self.data_dir_problem = resolve_data_dir(model_dir, data.get("data_dir"))

    def build_encoder(self, seq_length, settings, starts_from_export=True):
        """Model Garden's encoder from the run's encoder.yaml with the fine-tuning dropout of
        `settings` (the config's `encoder` section), with the pretrained weights unless
        `settings.init` is none; an export older than the run's newest checkpoint is said
        when the run `starts_from_export` (`starts_from_export` below)."""
        config = self.encoder_config
        config.bert_v2.dropout_rate = settings.dropout_rate
        config.bert_v2.attention_dropout_rate = settings.attention_dropout_rate
        encoder = ecosystem_export.create_weights(encoders.build_encoder(config), seq_length)
        if settings.init == "pretrained":
            try:
                status = tf.train.Checkpoint(encoder=encoder).read(self.checkpoint)
                status.expect_partial().assert_existing_objects_matched()
            except (ValueError, AssertionError, IndexError, tf.errors.OpError) as error:
                run_dir = os.path.dirname(self.directory)
                raise UserError(
                    f"encoder.pretraining_dir: {self.checkpoint} does not fit the encoder of "
                    f"{run_dir}'s model_garden/encoder.yaml ({str(error).splitlines()[0][:160]}"
                    "); export the run's encoder again (python -m recipes.bert.ecosystem_export "
                    f"--model_dir={run_dir})") from None
            print(self.describe_weights(), flush=True)
            stale = self.stale_export()
            if stale and starts_from_export:
                print(stale, flush=True)
        else:
            print("encoder: random weights (encoder.init: none)", flush=True)
        return encoder

    def describe_weights(self):
        """The console's line naming the pretrained weights and the step they are of."""
        step = (f"step {self.step} of the pretraining run" if self.step is not None else
                "its step not recorded: exported by recipes.bert.ecosystem_export or an "
                "older version")
        return f"encoder: pretrained weights from {self.checkpoint} ({step})"

    def stale_export(self):
        """The console's warning when the export is of an older step than the pretraining
        run's newest checkpoint (the run went on training after it), else None."""
        if self.step is None or self.newest is None or self.newest[1] <= self.step:
            return None
        run_dir = os.path.dirname(self.directory)
        return (f"encoder: warning: the export in {self.directory} is of step {self.step}, "
                f"older than the run's newest checkpoint (step {self.newest[1]}); fine-tuning "
                f"the step-{self.step} encoder; to fine-tune the newest, export it first: "
                f"python -m recipes.bert.pretrain --model_dir={run_dir} --mode=export")


def _write_the_export(model_dir):
    """What writes the encoder export (model_garden/) of the pretraining run in `model_dir`:
    its own --mode=export when it has a checkpoint (a run trained with export.enabled=false,
    say), else a pretraining first or this command line from an older run's export/."""
    if _newest_checkpoint(model_dir):
        return ("export the run's encoder: python -m recipes.bert.pretrain "
                f"--model_dir={model_dir} --mode=export")
    return ("pretrain first, or write it from the run's export with python -m "
            f"recipes.bert.ecosystem_export --model_dir={model_dir}")


def _newest_checkpoint(model_dir):
    """(path, step) of the newest checkpoint of the run in `model_dir`, or None (none, or
    one whose files are incomplete: fine-tuning reads the export, not these)."""
    try:
        path = checkpoints.latest_checkpoint(model_dir)
    except UserError:
        return None
    step = path and checkpoints.checkpoint_step(path)
    return (path, step) if step is not None else None


def resolve_data_dir(model_dir, given):
    """(the pretraining run's data directory, None) or (None, why it is not found): its
    config.yaml's data.data_dir ("": <model_dir>/data), which a run saves absolute; one an
    older version saved relative (to the directory it ran in) is found from the current
    directory or, failing that, from the run's directory or one above it."""
    if not given or "://" in given or os.path.isabs(given):
        return given or os.path.join(model_dir, "data"), None
    tried, ancestor = [os.path.abspath(given)], os.path.abspath(model_dir)
    while True:
        tried.append(os.path.join(ancestor, given))
        if ancestor == os.path.dirname(ancestor):
            break
        ancestor = os.path.dirname(ancestor)
    found = next((path for path in tried if tf.io.gfile.isdir(path)), None)
    if found:
        return found, None
    return None, (
        f"encoder.pretraining_dir: {os.path.join(model_dir, 'config.yaml')} gives the relative "
        f"data.data_dir={given}, relative to the directory pretraining ran in, and neither "
        f"{tried[0]} nor {given} in {model_dir} or a directory above it exists; run fine-tuning "
        "from the directory pretraining ran in, or write that data.data_dir there as an "
        "absolute path")


def _export_again(model_dir):
    return ("export the run's encoder again (python -m recipes.bert.ecosystem_export "
            f"--model_dir={model_dir})")


def _pretraining_data(model_dir):
    """The `data` section of the run's config.yaml, with a positive whole `seq_length`."""
    config_path = os.path.join(model_dir, "config.yaml")
    if not tf.io.gfile.exists(config_path):  # a run's model_garden/ copied alone
        raise UserError(f"encoder.pretraining_dir: {config_path} does not exist: "
                        f"{ecosystem_export.GIVE_A_RUN}")
    try:
        data = storage.read_mapping(config_path, ("data",), ecosystem_export.GIVE_A_RUN)["data"]
    except UserError as error:
        raise UserError(f"encoder.pretraining_dir: {error}") from None
    length = data.get("seq_length") if isinstance(data, dict) else None
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        found = ("no data.seq_length" if length is None
                 else f"data.seq_length={length!r} is not a positive whole number")
        raise UserError(f"encoder.pretraining_dir: {config_path} is not a BERT pretraining "
                        f"run's config ({found}): {ecosystem_export.GIVE_A_RUN}")
    return data


def _encoder_config(directory, fix):
    """Model Garden's `EncoderConfig` of <directory>/encoder.yaml (a BERT encoder)."""
    path = os.path.join(directory, ecosystem_export.ENCODER_CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        raise UserError(f"encoder.pretraining_dir: {path} does not exist; {fix}")
    try:
        config = encoders.EncoderConfig.from_yaml(path)
    except (yaml.YAMLError, ValueError, KeyError, TypeError, AttributeError,
            tf.errors.OpError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:120]
        raise UserError(f"encoder.pretraining_dir: {path} is not a Model Garden encoder config "
                        f"({first}); {fix}") from None
    if config.type != "bert_v2":
        raise UserError(f"encoder.pretraining_dir: {path} has type {config.type!r}, not the "
                        f"bert_v2 encoder a pretraining run exports; {fix}")
    return config


def _check_vocabulary(vocab_file, encoder_config, fix):
    """vocab.txt is a BERT vocabulary with an embedding row for each of its word pieces."""
    empty = False
    if tf.io.gfile.exists(vocab_file) and tf.io.gfile.stat(vocab_file).length < 64:
        with tf.io.gfile.GFile(vocab_file, "rb") as f:  # (BERT's reserved tokens: 27 bytes)
            empty = not f.read().strip()
    if empty:
        raise UserError(f"encoder.pretraining_dir: {vocab_file} is empty, not the vocabulary "
                        f"the run trained with (an export or copy that stopped early?); {fix}")
    try:  # (adding the reserved tokens would shift the ids the encoder was trained on)
        tokens = vocabulary.read_vocabulary(vocab_file, fix, fix_missing_reserved=(
            f"the run trained with a BERT vocabulary, so its export is damaged; {fix}"))
    except UserError as error:
        raise UserError(f"encoder.pretraining_dir: {error}") from None
    size = encoder_config.bert_v2.vocab_size
    if len(tokens) > size:
        raise UserError(
            f"encoder.pretraining_dir: {vocab_file} has {len(tokens)} word pieces, more than the "
            f"vocab_size {size} of the encoder (encoder.yaml): the ids past {size - 1} have "
            f"no embedding; {fix}")


def encoder_variables(encoder_config):
    """{path: (shape, variable name)} of each variable of the encoder `encoder_config` builds
    (in a graph of its own: nothing is computed), by its path in the encoder's checkpoint
    (`tf.train.Checkpoint(encoder=...)` keeps it under encoder/<path>/; a fine-tuning run's
    under its model's path to the encoder): the saver's breadth-first walk, each variable
    under the first path that reaches it, the names escaped as the saver escapes them."""
    with tf.Graph().as_default():
        encoder = ecosystem_export.create_weights(encoders.build_encoder(encoder_config), 2)
        found, seen, queue = {}, {id(encoder)}, [(encoder, "")]
        while queue:
            node, path = queue.pop(0)
            for name, child in tf.train.TrackableView.children(node).items():
                if id(child) in seen:
                    continue
                seen.add(id(child))
                child_path = path + name.replace(".", "..").replace("/", ".S")
                if isinstance(child, tf.Variable):
                    found[child_path] = (child.shape.as_list(), child.name.removesuffix(":0"))
                else:
                    queue.append((child, child_path + "/"))
        return found


def _check_checkpoint(checkpoint, encoder_config, fix):
    """The encoder checkpoint is whole (its data files hold at least its tensors' bytes)
    and holds a variable of each shape of the encoder of `encoder_config`; returns that
    encoder's variables (`encoder_variables`, by the paths the checkpoint has them under)."""
    where = f"encoder.pretraining_dir: {checkpoint}"
    try:
        reader = tf.train.load_checkpoint(checkpoint)
        shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
        stored = sum(tf.io.gfile.stat(path).length
                     for path in tf.io.gfile.glob(checkpoint + ".data-*"))
    except (tf.errors.OpError, ValueError) as error:
        raise UserError(f"{where} cannot be read ({str(error).splitlines()[0][:120]}); "
                        f"{fix}") from None
    needed = sum(int(np.prod(shape)) * dtypes[name].size for name, shape in shapes.items()
                 if dtypes[name].is_numpy_compatible and dtypes[name] != tf.string)
    if stored < needed:
        raise UserError(f"{where} is cut short: its data files hold {stored} bytes, its "
                        f"variables need {needed} (a copy that stopped early?); {fix}")
    found = sorted(tuple(shape) for name, shape in shapes.items() if name.startswith("encoder/"))
    try:
        variables = encoder_variables(encoder_config)
    except (ValueError, TypeError, tf.errors.OpError) as error:
        raise UserError(f"encoder.pretraining_dir: its model_garden/encoder.yaml gives no "
                        f"encoder ({str(error).splitlines()[0][:120]}); {fix}") from None
    expected = sorted(tuple(shape) for shape, _ in variables.values())
    if found != expected:
        extra = collections.Counter(expected) - collections.Counter(found)
        lacking = collections.Counter(found) - collections.Counter(expected)
        shape = list(next(iter(extra or lacking)))
        raise UserError(
            f"{where} does not fit the encoder of its model_garden/encoder.yaml (the encoder has "
            f"{len(expected)} variables, the checkpoint {len(found)}; shape {shape} is in "
            f"{'the encoder' if extra else 'the checkpoint'} only); {fix}")
    saved = {name[len("encoder/"):-len(VALUE_SUFFIX)]: shape for name, shape in shapes.items()
             if name.startswith("encoder/") and name.endswith(VALUE_SUFFIX)}
    if set(saved) != set(variables):  # the walk missed the saver's paths: those, unnamed
        variables = {path: (list(shape), path) for path, shape in saved.items()}
    return variables


@dataclasses.dataclass
class ClassificationData:
    """Packed classification examples: (features, {"logits": label ids}) per split."""
    train_arrays: tuple
    eval_arrays: tuple
    labels: list
    pairs: bool  # sentence pairs (two texts per example) or single sentences


def _what_run_read(run):
    return f"data.corpus={run.corpus}" if run.corpus else "its own data.train_files"


def check_task_run(data, run):
    """The sequence length of fine-tuning (`data.seq_length`, 0: the run's), or a UserError
    if the pretraining run (`PretrainingRun`) cannot give `data.task` or that length."""
    if data.task == "stdlib" and run.corpus != "stdlib":
        raise UserError(
            "data.task=stdlib needs a pretraining run on the embedded corpus "
            f"(data.corpus: stdlib, no data.train_files); the pretraining run read "
            f"{_what_run_read(run)}; give such a run as encoder.pretraining_dir, or use "
            "data.task=classification with your own files"
        )
    if data.task == "stdlib" and getattr(run, "data_dir_problem", None):
        raise UserError(run.data_dir_problem)
    if data.task == "stdlib":
        stdlib_classification.check_corpus_files(run.data_dir)
    seq_length = data.seq_length or run.seq_length
    if seq_length > run.seq_length:
        raise UserError(
            f"data.seq_length={seq_length} is longer than the pretraining run's "
            f"{run.seq_length}; use at most {run.seq_length} (0 = the run's)"
        )
    # [CLS] question [SEP] context [SEP]: a window must keep a piece of the context, or
    # Model Garden's windowing (squad_lib) never ends
    if data.task == "squad" and seq_length <= data.max_query_length + 3:
        raise UserError(
            f"data.seq_length={seq_length} leaves no room for the context after a question of "
            f"data.max_query_length={data.max_query_length} pieces and [CLS] [SEP] [SEP]; give "
            f"a data.max_query_length below {seq_length - 3}, or a pretraining run of a longer "
            "data.seq_length (BERT: 384 with 64)")
    if data.task != "squad" and seq_length < 5:  # [CLS] a [SEP] (b [SEP]): a piece of each
        raise UserError(
            f"data.seq_length={seq_length} leaves no room for text beside [CLS] and one [SEP] "
            "per sentence (a sentence pair's second sentence would be cut whole); give at "
            "least 5 (0 = the pretraining run's)")
    return seq_length


ClassificationExamples = collections.namedtuple(
    "ClassificationExamples", ["train", "evaluation", "labels", "pairs", "label_ids"])


def read_examples(train_file, eval_file, labels, keys=(None, None)):
    """`ClassificationExamples` of two files, checked (one kind of example, every label in
    the label list); errors name the config `keys` of the files, if given."""
    names = [f"{key}={path}" if key else path for key, path in zip(keys, (train_file, eval_file))]
    train = classification.read_examples(train_file, keys[0])
    evaluation = classification.read_examples(eval_file, keys[1])
    labels = list(labels or sorted({e.label for e in train}))
    if len(labels) < 2:  # one class: trained to nothing, and scored 1.0 (chance 1.0)
        raise UserError(f"{names[0]} has one label, {labels[0]!r}; a classification needs "
                        "examples of at least 2")
    pairs = train[0].second is not None
    if (evaluation[0].second is not None) != pairs:
        raise UserError(f"{names[0]} and {names[1]} differ: one has sentence pairs, the other "
                        "single sentences; give two files of the same kind")
    ids = [classification.label_ids(examples, labels, name)
           for examples, name in zip((train, evaluation), names)]
    return ClassificationExamples(train, evaluation, labels, pairs, ids)


LABELS_FILE = "labels.json"  # a classification run's labels, by class id
INPUTS_FILE = "inputs.json"  # and whether its examples are sentence pairs


def keep_labels(model_dir, labels, train_file, pairs=None):
    """A run's class ids keep their labels: a UserError if <model_dir>/labels.json holds
    other ones and the run has a checkpoint (without data.labels they are the training
    file's, sorted, so an edited file would rename the trained classes silently); else the
    labels are written there (a labels.json of a start that saved no checkpoint, stopped or
    failed, trained nothing: it is replaced). `pairs` (whether the examples are sentence
    pairs), if given, goes to <model_dir>/inputs.json: with the labels, what an evaluation
    or export of the run needs besides the held-out file (`labels_of_run`)."""
    path = os.path.join(model_dir, LABELS_FILE)
    if tf.io.gfile.exists(path) and checkpoints.latest_checkpoint(model_dir) is not None:
        with tf.io.gfile.GFile(path) as f:
            kept = json.load(f)
        if kept != list(labels):
            raise UserError(
                f"the run in {model_dir} trained the labels {kept} (class ids 0, 1, ...; "
                f"{path}), but data.train_file={train_file} now gives {list(labels)}: restore "
                "the file's labels, or train a new run in another --model_dir")
    else:
        tf.io.gfile.makedirs(model_dir)
        storage.write_text(path, json.dumps(list(labels), indent=1) + "\n")
    if pairs is not None:
        storage.write_text(os.path.join(model_dir, INPUTS_FILE),
                           json.dumps({"sentence_pairs": bool(pairs)}) + "\n")


def _saved(model_dir, name, valid):
    """The JSON value of <model_dir>/`name` if there and `valid(value)`, else None."""
    path = os.path.join(model_dir, name)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as f:
            value = json.load(f)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if valid(value) else None


def _train_file_examples(data, what, path):
    """The training file's examples, for a run that lacks its record of `what` (`path`),
    or a UserError saying what to give."""
    problem = classification.file_problem(data.train_file)
    if not problem:
        return classification.read_examples(data.train_file, "data.train_file")
    if path.endswith(INPUTS_FILE):  # runs trained before 2026-12-07 wrote none
        write = ('or write it: {"sentence_pairs": true} (or false: one sentence an example), '
                 "as the run was trained")
    else:
        write = 'or write it: the labels in class-id order, as JSON (["neg", "pos"])'
    raise UserError(
        f"{path} is missing or damaged ({what} of the run), and data.train_file="
        f"{data.train_file}, which gives them, {problem}: put the training file at that "
        f"path, {write}")


def labels_of_run(data, mode, model_dir, evaluation):
    """`ClassificationExamples` of an evaluation or export (`mode`) of the classification
    run in `model_dir`: its labels (labels.json, else data.labels, else the training file's
    sorted) and input kind (inputs.json, else the held-out or training file's), without
    reading the training file when the run recorded them; `evaluation`: the held-out
    examples (None for export), checked against the labels."""
    labels_path = os.path.join(model_dir, LABELS_FILE)
    inputs_path = os.path.join(model_dir, INPUTS_FILE)
    labels = _saved(model_dir, LABELS_FILE, lambda v: isinstance(v, list) and len(v) > 1
                    and all(isinstance(label, str) for label in v)) or data.labels
    train = None
    if not labels:
        train = _train_file_examples(data, "the labels", labels_path)
        labels = sorted({e.label for e in train})
    saved = _saved(model_dir, INPUTS_FILE, lambda v: isinstance(v, dict) and isinstance(
        v.get("sentence_pairs"), bool))
    if saved is not None:
        pairs = saved["sentence_pairs"]
    elif evaluation:
        pairs = evaluation[0].second is not None
    else:
        train = train or _train_file_examples(data, "whether it reads sentence pairs",
                                              inputs_path)
        pairs = train[0].second is not None
    if evaluation and (evaluation[0].second is not None) != pairs:
        raise UserError(f"data.eval_file={data.eval_file} holds "
                        f"{'single sentences' if pairs else 'sentence pairs'}, the run in "
                        f"{model_dir} was trained on {'pairs' if pairs else 'single sentences'}"
                        "; give a held-out file of the kind it trained on")
    ids = [None, classification.label_ids(evaluation, labels, f"data.eval_file={data.eval_file}")
           if evaluation else None]
    return ClassificationExamples([], evaluation or [], list(labels), pairs, ids)


def read_classification(data, mode=None):
    """The checked `ClassificationExamples` of data.task=classification (data.train_file,
    data.eval_file, data.labels): read before any work, by the task's config check. In an
    evaluation (`mode` eval) the held-out examples only (`labels_of_run` completes them);
    in an export none (None)."""
    if mode == "export":
        return None
    if mode == "eval":
        evaluation = classification.read_examples(data.eval_file, "data.eval_file")
        return ClassificationExamples(None, evaluation, None, None, None)
    return read_examples(data.train_file, data.eval_file, data.labels,
                         keys=("data.train_file", "data.eval_file"))




def read_task_files(data, mode=None):
    """(`ClassificationExamples` or None, `SquadQuestions` or None): what `mode` reads of
    data.task's files (None: as training)."""
    if data.task == "classification":
        return read_classification(data, mode), None
    return None, read_squad(data, mode) if data.task == "squad" else None


def of_run(data, mode, model_dir, examples):
    """`examples` (`read_task_files`'), completed out of training for data.task=
    classification with the run's labels and input kind (`labels_of_run`): a missing
    record is one line before any work."""
    if data.task != "classification" or mode in flags.TRAIN_MODES:
        return examples
    return labels_of_run(data, mode, model_dir, examples and examples.evaluation)


def check_data(config, mode, model_dir, examples, run):
    """`of_run`, then `check_init_checkpoint`: the task's `check_data` (`run`: the
    `PretrainingRun` of encoder.pretraining_dir). Returns `of_run`'s examples and
    `starts_from_export` (read before any work: a training writes checkpoints there)."""
    examples = of_run(config.data, mode, model_dir, examples)
    check_init_checkpoint(config, mode, model_dir, examples and examples.labels, run)
    return examples, starts_from_export(config, mode, model_dir)


def starts_from_export(config, mode, model_dir):
    """Whether a run of `mode` into `model_dir` trains from the pretrained export: no
    checkpoint of the fine-tuning run, nor train.init_checkpoint, is restored over it."""
    return (mode in flags.TRAIN_MODES and not config.train.init_checkpoint
            and checkpoints.latest_checkpoint(model_dir) is None)


FINETUNED_PREFIX = "model/inner_model/"  # where a run of the driver keeps its weights
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"  # a variable's value, in a checkpoint's names


def check_init_checkpoint(config, mode, model_dir, labels, run):
    """A UserError, before any work, for a train.init_checkpoint that a fresh training run
    (`mode`) would restore into the fine-tuning model and that cannot fit it: no run's
    weights (a Model Garden encoder checkpoint: the pretrained encoder is
    encoder.pretraining_dir's), a fine-tuning run of an encoder of another shape than
    `run`'s (the `PretrainingRun`: hidden size, layers, vocabulary, position embeddings),
    or of another task or number of `labels`. (A misfit found only by the restore is
    refused after the model is built.)"""
    given = config.train.init_checkpoint
    if (not given or mode not in flags.TRAIN_MODES
            or checkpoints.latest_checkpoint(model_dir) is not None):
        return
    path = checkpoints.init_checkpoint_path(given)
    shapes = {name: shape for name, shape in tf.train.list_variables(path)
              if "/" in name and not name.startswith("save_counter/")}
    where = f"train.init_checkpoint={given!r}"
    fits = ("give a fine-tuning run of this task and its labels, or none; the pretrained "
            "encoder comes from encoder.pretraining_dir (give its pretraining run there)")
    if not any(name.startswith(FINETUNED_PREFIX) for name in shapes):
        top = sorted({name.split("/")[0] + "/" for name in shapes})[:3]
        raise UserError(f"{where}: {path} holds no weights of a fine-tuning run (its "
                        f"variables are under {', '.join(top) or 'nothing'}, not "
                        f"{FINETUNED_PREFIX}: a Model Garden encoder checkpoint?); {fits}")
    saved = os.path.join(given, "config.yaml")
    other = {}
    if tf.io.gfile.isdir(given) and tf.io.gfile.exists(saved):
        with tf.io.gfile.GFile(saved) as f:
            other = yaml.safe_load(f) or {}
    _check_init_encoder(where, path, shapes, config.encoder.pretraining_dir, run,
                        (other.get("encoder") or {}).get("pretraining_dir"))
    if not other:
        return
    other_data, other_labels = other.get("data") or {}, _saved(given, LABELS_FILE,
                                                                lambda v: isinstance(v, list))
    if other_data.get("task", "stdlib") != config.data.task:
        raise UserError(f"{where} is a fine-tuning run of data.task="
                        f"{other_data.get('task', 'stdlib')}, this run's is data.task="
                        f"{config.data.task}; {fits}")
    if labels is not None and other_labels is not None and len(other_labels) != len(labels):
        raise UserError(f"{where} is a run of {len(other_labels)} labels ({given}/{LABELS_FILE}), "
                        f"this one has {len(labels)}; {fits}")


def _check_init_encoder(where, path, shapes, pretraining_dir, run, its_pretraining_dir):
    """A UserError if the encoder in the fine-tuning checkpoint `path` (`shapes`: {name:
    shape} of its variables) is not of the shape of `run`'s, the `PretrainingRun` of this
    run's `pretraining_dir` (its model_garden/encoder.yaml); `its_pretraining_dir`: the
    encoder.pretraining_dir the checkpoint's run names in its config.yaml, if known."""
    this_encoder = (f"this run's encoder (encoder.pretraining_dir={pretraining_dir}, by its "
                    "model_garden/encoder.yaml)")
    misfit = encoder_misfit(encoder_in_checkpoint(shapes, run.encoder_variables),
                            run.encoder_variables, this_encoder)
    if not misfit:
        return
    source = ("" if not its_pretraining_dir or its_pretraining_dir == pretraining_dir
              else f" ({its_pretraining_dir}, by its config.yaml)")
    raise UserError(
        f"{where}: {path} was fine-tuned from an encoder of another shape: {misfit}; give a "
        "fine-tuning run of an encoder of this shape, or, as encoder.pretraining_dir, the "
        f"pretraining run that the checkpoint's run was fine-tuned from{source}")


def encoder_in_checkpoint(shapes, expected):
    """{path: shape} of the encoder's variables in a fine-tuning run's checkpoint (`shapes`:
    {name: shape} of its variables), those under the path to which most of the paths of
    `expected` (`encoder_variables`) are added; {} where none is."""
    values = {name.removesuffix(VALUE_SUFFIX): shape for name, shape in shapes.items()
              if name.startswith(FINETUNED_PREFIX) and name.endswith(VALUE_SUFFIX)}
    prefixes = collections.Counter(name[:-len(path)] for name in values for path in expected
                                   if name.endswith("/" + path))
    if not prefixes:
        return {}
    prefix = prefixes.most_common(1)[0][0]
    return {name[len(prefix):]: shape for name, shape in values.items()
            if name.startswith(prefix)}


def encoder_misfit(found, expected, this_encoder="this run's encoder"):
    """Where the encoder variables of a checkpoint (`found`: {path: shape}) and those of
    the encoder a run builds (`expected`: `encoder_variables`; `this_encoder` names it)
    differ, in a few words, or None (the same, or no encoder found)."""
    if not found:
        return None
    for path, (shape, name) in expected.items():
        if path in found and list(found[path]) != shape:
            return f"its {name} has shape {list(found[path])}, {this_encoder} makes {shape}"
    missing = [name for path, (_, name) in expected.items() if path not in found]
    extra = [path for path in found if path not in expected]
    if not missing and not extra:
        return None
    return (f"its encoder has {len(found)} variables, {this_encoder} makes {len(expected)}, "
            + (f"among them {missing[0]}, which the checkpoint lacks" if missing
               else f"but not its {extra[0]}"))


def prepare_classification(data, run, seq_length, model_dir, seed, examples=None,
                           mode="train"):
    """The examples of `data.task` (classification: `examples`, `read_classification`'s,
    completed by `of_run` out of training; or the embedded stdlib task written into
    <model_dir>/data from the pretraining run's held-out documents), packed: the training
    examples only in a `mode` that trains (`train_arrays` is None otherwise), the held-out
    ones unless `mode` is export."""
    training = mode in flags.TRAIN_MODES
    if data.task == "stdlib":
        examples = read_examples(*stdlib_classification.write_task(
            os.path.join(model_dir, "data"), run.data_dir, run.data_seed, seed))
    elif examples is None or examples.labels is None:  # not read or completed yet
        examples = of_run(data, mode, model_dir, examples or read_classification(data, mode))
    if data.task == "classification" and training:
        keep_labels(model_dir, examples.labels, data.train_file, examples.pairs)
    packer = classification.TextPacker(run.vocab_file, seq_length)

    def arrays(split, ids):
        features = classification.pack_examples(packer, split)
        return {k: v.numpy() for k, v in features.items()}, {"logits": np.array(ids)}

    read = (f"{len(examples.train)} training and {len(examples.evaluation)} held-out examples"
            if training or data.task == "stdlib" else
            f"the training examples not read (--mode={mode}) and {len(examples.evaluation)} "
            "held-out examples" if mode == "eval" else f"no examples read (--mode={mode})")
    print(f"data: {data.task}, {read}, {len(examples.labels)} labels", flush=True)
    return ClassificationData(arrays(examples.train, examples.label_ids[0]) if training else None,
                              arrays(examples.evaluation, examples.label_ids[1])
                              if mode != "export" else None,
                              examples.labels, examples.pairs)


@dataclasses.dataclass
class SquadData:
    """SQuAD training windows with their span targets; the held-out questions, their
    windows (features) and the dataset JSON the official metric reads."""
    train_arrays: tuple
    eval_arrays: tuple
    eval_dataset_json: list
    eval_examples: list
    eval_features: list


SquadQuestions = collections.namedtuple("SquadQuestions",
                                        ["train", "evaluation", "dataset", "skipped"])


def read_squad(data, mode=None):
    """`SquadQuestions`: the training and held-out `squad_lib.SquadExample`s, the held-out
    file's `data` list (what the official metric reads), each file checked whole, and the
    places of the training questions Model Garden's reader skipped; of the files `mode`
    reads only (None: both; eval: the held-out one, export: none), the others empty."""
    train, skipped = [], []
    if mode is None or mode in flags.TRAIN_MODES:
        train, skipped = squad.read_examples_and_skipped(data.train_file, is_training=True,
                                                         key="data.train_file")
    if mode == "export":
        return SquadQuestions(train, [], [], skipped)
    return SquadQuestions(
        train, squad.read_examples(data.eval_file, is_training=False, key="data.eval_file"),
        squad.read_dataset(data.eval_file, key="data.eval_file"), skipped)


def prepare_squad(data, run, seq_length, questions, mode="train"):
    """`questions` (`read_squad(data, mode)`) converted to doc-stride windows by Model
    Garden's squad_lib: the training questions only in a `mode` that trains (`train_arrays`
    is None otherwise), the held-out ones unless `mode` is export (then no windows)."""
    tokenizer = squad.make_tokenizer(run.vocab_file)
    convert = lambda examples, is_training: squad.convert_examples(
        examples, tokenizer, seq_length, is_training, data.doc_stride, data.max_query_length)
    train = None
    if mode in flags.TRAIN_MODES:
        arrays = squad.feature_arrays(convert(questions.train, True), is_training=True)
        train = (arrays, {"start_logits": arrays.pop("start_positions"),
                          "end_logits": arrays.pop("end_positions")})
    eval_features = convert(questions.evaluation, False) if mode != "export" else []
    trained = (f"{len(questions.train)} training questions "
               f"({len(train[1]['start_logits'])} windows)" if train
               else f"the training questions not read (--mode={mode})")
    print(f"data: squad, {trained} and {len(questions.evaluation)} held-out questions "
          f"({len(eval_features)} windows)" if mode != "export"
          else f"data: squad, no questions read (--mode={mode})", flush=True)
    if train and questions.skipped:
        print(f"data: {len(questions.skipped)} training question(s) skipped, as Model Garden's "
              "reader skips them (their answer's words are not at its answer_start), such as "
              f"{questions.skipped[0]} of data.train_file", flush=True)
    return SquadData(train, (squad.feature_arrays(eval_features, is_training=False), None),
                     questions.dataset, questions.evaluation, eval_features)


def train_examples(data):
    """`tf.data.Dataset.from_tensor_slices(data.train_arrays)`, made once per `data` (a
    `ClassificationData` or `SquadData`), so that every chunk's pipeline shares its tensors."""
    if getattr(data, "train_dataset", None) is None:
        data.train_dataset = tf.data.Dataset.from_tensor_slices(data.train_arrays)
    return data.train_dataset


def train_replica_dataset(input_context, examples, global_batch_size, seed, steps_to_skip=0):
    """The training examples (`examples`: `train_examples`) of one input pipeline
    (`input_context`) repeated, shuffled with `seed`, batched per replica, from the step
    after the first `steps_to_skip` global batches."""
    size = int(examples.cardinality())
    dataset = examples.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    dataset = dataset.repeat().shuffle(size, seed=seed)
    dataset = dataset.batch(input_context.get_per_replica_batch_size(global_batch_size),
                            drop_remainder=True)
    replicas = input_context.num_replicas_in_sync // input_context.num_input_pipelines
    return dataset.skip(steps_to_skip * replicas)
