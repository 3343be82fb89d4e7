"""The pretrained encoder in the formats the rest of the ecosystem reads.

`export_for_ecosystem(output_dir, encoder, model_config, vocab_file, seq_length)` writes

  <output_dir>/model_garden/encoder-1.{index,data-*}, checkpoint
        `tf.train.Checkpoint(encoder=...)`: what Model Garden's BERT fine-tuning tasks
        (sentence_prediction, question_answering, tagging, ...) restore through
        `task.init_checkpoint` (a directory or the `encoder-1` prefix);
  <output_dir>/model_garden/encoder.yaml
        the matching `task.model.encoder` block (`type: bert_v2`, Model Garden's
        `BertEncoderV2`, which is the class pretraining trains), and `vocab.txt`;
  <output_dir>/hub/preprocess, <output_dir>/hub/encoder
        a SavedModel pair with the conventions of the BERT models published on TF Hub,
        written by Model Garden's own exporter (`official.nlp.tools.export_tfhub_lib`):
        preprocess(strings) -> input_word_ids, input_mask, input_type_ids (seq_length
        pieces; `.tokenize` and `.bert_pack_inputs` for pairs), and
        encoder(those three) -> pooled_output, sequence_output, encoder_outputs, default.

Loading the pair needs the tensorflow-text ops (`import tensorflow_text`). The encoder's
`pooled_output` is the pooler pretraining trained (recipes/bert/model.py).
"""

import os
import uuid

import tensorflow as tf
import yaml
from official.nlp.configs import encoders
from official.nlp.tools import export_tfhub_lib

from recipes.bert import vocabulary

CHECKPOINT_SUBDIR = "model_garden"
HUB_SUBDIR = "hub"
ENCODER_CONFIG_FILE = "encoder.yaml"


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


def write_encoder_checkpoint(directory, encoder, config, vocab_file):
    """`Checkpoint(encoder=encoder)` + `encoder.yaml` + `vocab.txt` into `directory`;
    returns the checkpoint prefix."""
    tf.io.gfile.makedirs(directory)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(encoder=encoder), directory, max_to_keep=1, checkpoint_name="encoder"
    )
    prefix = manager.save(checkpoint_number=1)
    with tf.io.gfile.GFile(os.path.join(directory, ENCODER_CONFIG_FILE), "w") as f:
        yaml.safe_dump(config.as_dict(), f, sort_keys=False)
    tf.io.gfile.copy(vocab_file, os.path.join(directory, "vocab.txt"), overwrite=True)
    return prefix


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


def export_for_ecosystem(output_dir, encoder, model_config, vocab_file, seq_length):
    """Writes `model_garden/` and `hub/` under `output_dir`, each complete or absent (written
    under a temporary name, then renamed into place). Returns the checkpoint prefix."""
    config = encoder_config(model_config, len(vocabulary.read_vocabulary(vocab_file)))
    final = {name: os.path.join(output_dir, name) for name in (CHECKPOINT_SUBDIR, HUB_SUBDIR)}
    temporary = {name: f"{path}.tmp-{uuid.uuid4().hex[:8]}" for name, path in final.items()}
    # CheckpointManager's `checkpoint` state file names the prefix relative to its
    # directory, so the rename keeps it valid.
    try:
        prefix = write_encoder_checkpoint(temporary[CHECKPOINT_SUBDIR], encoder, config,
                                          vocab_file)
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
