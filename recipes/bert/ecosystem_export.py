"""The pretrained encoder in the formats the rest of the ecosystem reads.

`export_for_ecosystem(output_dir, encoder, model_config, vocab_file, seq_length)` writes

  <output_dir>/model_garden/encoder-1.{index,data-*}, checkpoint
        `tf.train.Checkpoint(encoder=...)`: what Model Garden's BERT fine-tuning tasks
        (sentence_prediction, question_answering, tagging, ...) restore through
        `task.init_checkpoint` (a directory or the `encoder-1` prefix);
  <output_dir>/model_garden/encoder.yaml
        the matching `task.model.encoder` block (`type: bert_v2`, Model Garden's
        `BertEncoderV2`, which is the class pretraining trains), and `vocab.txt`;
  <output_dir>/model_garden/step.json
        {"step": N}, the pretraining step of the weights (written by the pretraining
        program's export; this command line, from the SavedModel export, knows none);
  <output_dir>/hub/preprocess, <output_dir>/hub/encoder
        a SavedModel pair with the conventions of the BERT models published on TF Hub,
        written by Model Garden's own exporter (`official.nlp.tools.export_tfhub_lib`):
        preprocess(strings) -> input_word_ids, input_mask, input_type_ids (seq_length
        pieces; `.tokenize` and `.bert_pack_inputs` for pairs), and
        encoder(those three) -> pooled_output, sequence_output, encoder_outputs, default.

The pretraining program writes both at export. For a run exported before that (or to
re-export), the command line rebuilds them from a pretraining `model_dir` (its
`config.yaml`, `vocab.txt` and the encoder of its SavedModel export):

  python -m recipes.bert.ecosystem_export --model_dir=/tmp/bert_tiny

Loading the pair needs the tensorflow-text ops (`import tensorflow_text`). The encoder's
`pooled_output` is the pooler pretraining trained (recipes/bert/model.py).
"""

if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    from recipes.common import startup  # (before TensorFlow: its start-up lines off the console)
    from recipes.bert import ecosystem_export_flags

    startup.check_program_flags(ecosystem_export_flags.define_flags,
                                ecosystem_export_flags.check_flags)

from recipes.common import startup  # noqa: F401,E402  (before TensorFlow: legacy Keras, quiet C++)

import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import types  # noqa: E402
import uuid  # noqa: E402

import tensorflow as tf  # noqa: E402
import yaml  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging as absl_logging  # noqa: E402
from official.nlp.configs import encoders  # noqa: E402
from official.nlp.tools import export_tfhub_lib  # noqa: E402

from recipes.bert import ecosystem_export_flags  # noqa: E402
from recipes.bert import model as model_lib  # noqa: E402
from recipes.bert import vocabulary  # noqa: E402
from recipes.common import checkpoints, errors  # noqa: E402
from recipes.common import storage  # noqa: E402
from recipes.common.errors import UserError  # noqa: E402

CHECKPOINT_SUBDIR = "model_garden"
HUB_SUBDIR = "hub"
ENCODER_CONFIG_FILE = "encoder.yaml"
STEP_FILE = "step.json"  # {"step": N}: the pretraining step of model_garden/'s weights


def create_weights(encoder, seq_length):
    """Calls `encoder` once on a dummy batch so that its weights exist (a checkpoint of an
    unbuilt Keras model holds nothing, and a restore into it checks nothing)."""
    ones = tf.ones((1, seq_length), tf.int32)
    encoder(dict(input_word_ids=ones, input_mask=ones, input_type_ids=ones))
    return encoder


def encoder_config(model_config, vocab_size):
    """Model Garden's `EncoderConfig` that builds the same `BertEncoderV2` as
    `recipes.bert.model.build_encoder` (hidden activation "gelu" is Model Garden's
    tanh-approximated GELU, BertEncoderV2's default, so the two agree)."""
    return encoders.EncoderConfig(
        type="bert_v2",
        bert_v2=encoders.BertEncoderConfig(
            vocab_size=vocab_size,
            hidden_size=model_config.hidden_size,
            num_layers=model_config.num_layers,
            num_attention_heads=model_config.num_attention_heads,
            hidden_activation="gelu",
            intermediate_size=model_config.intermediate_size,
            dropout_rate=model_config.dropout_rate,
            attention_dropout_rate=model_config.attention_dropout_rate,
            max_position_embeddings=model_config.max_sequence_length,
            type_vocab_size=model_config.type_vocab_size,
            initializer_range=model_config.initializer_range,
        ),
    )


def write_encoder_checkpoint(directory, encoder, config, vocab_file, step=None):
    """`Checkpoint(encoder=encoder)` + `encoder.yaml` + `vocab.txt` (+ `step.json`, the
    pretraining `step` of the weights, if known) into `directory`; returns the checkpoint
    prefix."""
    tf.io.gfile.makedirs(directory)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(encoder=encoder), directory, max_to_keep=1, checkpoint_name="encoder"
    )
    prefix = manager.save(checkpoint_number=1)
    with tf.io.gfile.GFile(os.path.join(directory, ENCODER_CONFIG_FILE), "w") as f:
        yaml.safe_dump(config.as_dict(), f, sort_keys=False)
    tf.io.gfile.copy(vocab_file, os.path.join(directory, "vocab.txt"), overwrite=True)
    if step is not None:
        storage.write_text(os.path.join(directory, STEP_FILE), json.dumps({"step": step}) + "\n")
    return prefix


def exported_step(directory):
    """The pretraining step of the encoder checkpoint in `directory` (model_garden/) that its
    `step.json` records, or None (none: an export of this command line or an older
    version; unreadable)."""
    path = os.path.join(directory, STEP_FILE)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as f:
            step = json.load(f).get("step")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def write_hub_models(directory, checkpoint_prefix, config, vocab_file, seq_length):
    """The TF-Hub-style `preprocess` and `encoder` SavedModels, by Model Garden's exporter."""
    export_tfhub_lib.export_model(
        os.path.join(directory, "encoder"),
        encoder_config=config,
        model_checkpoint_path=checkpoint_prefix,
        with_mlm=False,
        vocab_file=vocab_file,
        do_lower_case=True,  # the pretraining vocabulary is uncased
    )
    export_tfhub_lib.export_preprocessing(
        os.path.join(directory, "preprocess"),
        vocab_file=vocab_file,
        do_lower_case=True,
        tokenize_with_offsets=False,
        default_seq_length=seq_length,
    )


@contextlib.contextmanager
def _reload_warnings_off():
    """Model Garden's exporter reloads the model it saves, and tf_keras then warns that the
    reloaded model's metrics are not built (they are not used here). Off the console at the
    recipes' default WARNING level; with --verbose the warning stays."""
    logger = tf.get_logger()
    level = logger.level
    if level >= logging.WARNING:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _written_here(name, entry):
    """Whether `entry` of `output_dir/name` is one this export writes (and so replaces)."""
    if name == HUB_SUBDIR:
        return entry.rstrip("/") in ("encoder", "preprocess")
    return entry in ("checkpoint", ENCODER_CONFIG_FILE, "vocab.txt", STEP_FILE) or re.fullmatch(
        r"encoder-\d+\.(index|data-\d+-of-\d+)", entry) is not None


def replace_problem(output_dir):
    """None if the export may replace `model_garden/` and `hub/` in `output_dir` (absent, or
    holding only what an earlier export wrote); else why not, as words for an error line:
    it replaces each directory whole, and would delete what else is there."""
    for name in (CHECKPOINT_SUBDIR, HUB_SUBDIR):
        path = os.path.join(output_dir, name)
        if not tf.io.gfile.isdir(path):
            if tf.io.gfile.exists(path):
                return f"{path} is a file, where the export writes a directory; move it away"
            continue
        others = [entry for entry in sorted(tf.io.gfile.listdir(path))
                  if not _written_here(name, entry)]
        if others:
            return (f"{path} holds files that are not an earlier export's ({others[0]}"
                    f"{', ...' if len(others) > 1 else ''}), which the export would delete; "
                    "move them away")
    return None


def check_replace(model_dir):
    """A UserError, before any work, if the export into the run's `model_dir` would delete
    what an earlier export did not write (`replace_problem`)."""
    problem = replace_problem(model_dir)
    if problem:
        raise UserError(f"--model_dir={model_dir}: {problem}")


def export_for_ecosystem(output_dir, encoder, model_config, vocab_file, seq_length, step=None):
    """Writes `model_garden/` and `hub/` under `output_dir`, each complete or absent (written
    under a temporary name, then renamed into place): refused (`replace_problem`) where that
    would delete what an earlier export did not write; `step`: the pretraining step of the
    weights, if known (model_garden/step.json). Returns the checkpoint prefix."""
    problem = replace_problem(output_dir)
    if problem:
        raise UserError(f"the Model Garden and TF-Hub export: {problem}")
    config = encoder_config(model_config, len(vocabulary.read_vocabulary(vocab_file)))
    final = {name: os.path.join(output_dir, name) for name in (CHECKPOINT_SUBDIR, HUB_SUBDIR)}
    temporary = {name: f"{path}.tmp-{uuid.uuid4().hex[:8]}" for name, path in final.items()}
    # CheckpointManager's `checkpoint` state file names the prefix relative to its
    # directory, so the rename keeps it valid.
    try:
        prefix = write_encoder_checkpoint(temporary[CHECKPOINT_SUBDIR], encoder, config,
                                          vocab_file, step)
        with _reload_warnings_off():
            write_hub_models(temporary[HUB_SUBDIR], prefix, config, vocab_file, seq_length)
        for name, path in final.items():
            if tf.io.gfile.exists(path):
                tf.io.gfile.rmtree(path)
            tf.io.gfile.rename(temporary[name], path)
    finally:
        for path in temporary.values():
            if tf.io.gfile.exists(path):
                tf.io.gfile.rmtree(path)
    print(f"exported Model Garden encoder checkpoint to {final[CHECKPOINT_SUBDIR]} and "
          f"TF-Hub-style SavedModels to {final[HUB_SUBDIR]}", flush=True)
    return os.path.join(final[CHECKPOINT_SUBDIR], os.path.basename(prefix))


# ---- From a pretraining model_dir ------------------------------------------------------

MODEL_KEYS = ("hidden_size", "num_layers", "num_attention_heads", "intermediate_size",
              "max_sequence_length", "type_vocab_size", "dropout_rate",
              "attention_dropout_rate", "initializer_range")


GIVE_A_RUN = "give the --model_dir of a pretraining run (python -m recipes.bert.pretrain)"


def pretraining_config(model_dir):
    """The `config.yaml` of a BERT pretraining run in `model_dir` (a dict), or a one-line
    error saying that `model_dir` is not such a run."""
    config_path = os.path.join(model_dir, "config.yaml")
    if not tf.io.gfile.exists(config_path):
        raise UserError(f"{config_path} does not exist: {GIVE_A_RUN}")
    config = storage.read_mapping(config_path, advice=GIVE_A_RUN)
    model, data = config.get("model"), config.get("data")
    missing = [key for key in MODEL_KEYS if not isinstance(model, dict) or key not in model]
    if missing or not isinstance(data, dict) or "seq_length" not in data:
        raise UserError(f"{config_path} is not a BERT pretraining run's config (no "
                        f"model.{(missing or ['hidden_size'])[0]} or data.seq_length): "
                        f"{GIVE_A_RUN}")
    return config


def read_pretraining_run(model_dir):
    """(model config, vocab_file, seq_length, encoder SavedModel) of a pretraining run,
    from its `config.yaml`, its data preparation and its export."""
    config = pretraining_config(model_dir)
    model, data = config["model"], config["data"]
    model_config = types.SimpleNamespace(**{key: model[key] for key in MODEL_KEYS})
    vocab_file = data.get("vocab_file") or ""
    if not vocab_file:  # learned by the preparation, in the data directory
        data_dir = data.get("data_dir") or os.path.join(model_dir, "data")
        metadata = os.path.join(data_dir, "metadata.json")
        if not tf.io.gfile.exists(metadata):
            raise UserError(f"{metadata} does not exist: the data preparation that learned "
                            "the run's vocabulary is not there; give the --model_dir of a "
                            "pretraining run with its data")
        recorded = storage.read_mapping(metadata, ("vocab_file",), GIVE_A_RUN)["vocab_file"]
        # named as given then, relative to that run's working directory: found in data_dir
        # itself, from any working directory (as recipes.bert.data finds the preparation's)
        vocab_file = os.path.join(data_dir, os.path.basename(recorded))
    export = config.get("export", {})
    export_dir = export.get("dir") or export.get("export_dir") or os.path.join(model_dir,
                                                                              "export")
    return model_config, vocab_file, int(data["seq_length"]), export_dir


def export_pretraining_run(model_dir):
    """Writes `model_garden/` and `hub/` into a pretraining `model_dir` from its export."""
    model_config, vocab_file, seq_length, export_dir = read_pretraining_run(model_dir)
    check_replace(model_dir)  # (before the work)
    variables = os.path.join(export_dir, "variables", "variables")
    if not tf.io.gfile.exists(variables + ".index"):
        raise UserError(f"{export_dir} holds no SavedModel export; run the pretraining with "
                        "--mode=export first")
    # no preparation writes another vocabulary there meanwhile (as while the run exports)
    with storage.shared_use(f"the data directory {os.path.dirname(vocab_file)}",
                            os.path.dirname(vocab_file), "wait for it to finish, then export "
                            "again"):
        encoder = create_weights(
            model_lib.build_encoder(model_config, len(vocabulary.read_vocabulary(vocab_file))),
            seq_length)
        _read_encoder(encoder, export_dir, model_dir)
        return export_for_ecosystem(model_dir, encoder, model_config, vocab_file, seq_length)


def _read_encoder(encoder, export_dir, model_dir):
    """The weights of the run's SavedModel export at `export_dir` into `encoder`: its root
    module keeps the encoder as its attribute `encoder` (recipes/bert/export.py), the same
    path as Checkpoint(encoder=...). One line if they cannot be read or do not fit."""
    again = ("write the run's own export again with python -m recipes.bert.pretrain "
             f"--model_dir={model_dir} --mode=export")
    try:
        tf.train.Checkpoint(encoder=encoder).read(
            os.path.join(export_dir, "variables", "variables")).expect_partial() \
            .assert_existing_objects_matched()
    except checkpoints.UNREADABLE as error:
        raise UserError(f"the export {export_dir} cannot be read ("
                        f"{checkpoints.misfit(error)}): its files are damaged; {again}") from None
    except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as error:
        raise UserError(f"the export {export_dir} does not fit the encoder of the run's "
                        f"config.yaml ({checkpoints.misfit(error)}): it is another model's; "
                        f"{again}") from None


def _main(argv):
    ecosystem_export_flags.check_flags(flags.FLAGS, argv[1:])
    # TensorFlow's and Keras' INFO and WARNING lines of loading and writing SavedModels
    absl_logging.set_verbosity(absl_logging.ERROR)
    tf.get_logger().setLevel("ERROR")
    model_dir = flags.FLAGS.model_dir
    pretraining_config(model_dir)  # not a run: refused before the hold makes the directory
    # the run's own hold (recipes.common.driver): not while it trains or exports itself
    with storage.exclusive_use(f"--model_dir={model_dir}", model_dir, "wait for it to "
                               "finish, then export again"), errors.doing("while exporting"):
        export_pretraining_run(model_dir)


if __name__ == "__main__":
    ecosystem_export_flags.define_flags()
    errors.run(_main, trains=False)
