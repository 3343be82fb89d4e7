"""BERT for pretraining: Model Garden's encoder and pretrainer, BERT's two losses and metrics.

The trainable model is a tf_keras functional model over Model Garden's `BertPretrainerV2`
with two float32 outputs, `masked_lm` (logits at the masked positions) and
`next_sentence` (two logits), so that the ordinary `compile(loss=..., weighted_metrics=...)`
+ `fit` machinery (and the gradient accumulation wrapped around it) does the rest.

Masked-LM loss and exactness under accumulation. Google's BERT divides the summed masked
cross-entropy of a batch by the batch's sum of `masked_lm_weights`. That ratio is not a
mean over examples: the mean of k micro-batch ratios is not the ratio of the whole batch,
so accumulating it would not give the gradient of the big batch. Here the loss is Keras'
SUM_OVER_BATCH_SIZE reduction of the weighted per-position cross-entropy:

        L_mlm = sum_{b, j} w_bj * CE_bj / (B * P)        P = max_predictions_per_seq

i.e. the mean over examples of each example's masked cross-entropy sum divided by the
constant P. It is a mean over examples, so k micro-batches of B/k accumulate to exactly the
gradient of B (and replicas all-reduce to it). It equals BERT's loss times the batch's
mean fill rate sum(w)/(B*P), which is close to constant (about 0.95 at length 128 with 20
predictions, since 15% of 128 is 19.2); LAMB's update direction and trust ratio do not
change under a constant loss scale (up to epsilon), so only the relative weight of the
next-sentence loss moves, by that factor.
"""
import tensorflow as tf
import tf_keras
from official.nlp.modeling import models, networks

from recipes.common import schema
from recipes.common.errors import UserError

# Input names of the encoder (Model Garden) and of the pretraining heads.
ENCODER_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")
MASKED_LM_POSITIONS = "masked_lm_positions"


class NextSentenceHead(tf_keras.layers.Layer):
    """Next-sentence logits from the encoder's own pooler, as in Google's BERT.

    Hand-written rather than Model Garden's `ClassificationHead` because that head trains
    its own pooling dense layer and leaves the encoder's `pooler_layer` untrained, while the
    exported encoder serves `pooled_output` from `pooler_layer`. Sharing the pooler makes
    the exported pooled output the one pretraining trained (BERT's `cls/seq_relationship`
    sits on the pooled output).
    """

    def __init__(self, pooler_layer, initializer, name="next_sentence", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pooler_layer = pooler_layer
        self.out_proj = tf_keras.layers.Dense(2, kernel_initializer=initializer, name="logits")

    def call(self, sequence_output):
        # pooled = tanh(W_p * h_[CLS] + b_p): the encoder's pooler on the first token.
        pooled_output = self.pooler_layer(sequence_output[:, 0, :])
        return self.out_proj(pooled_output)


def check_model_config(model_config):
    """One-line UserErrors for `model.*` values Model Garden's encoder would reject deep
    inside its constructor, or build into another model than BERT's."""
    schema.check_positive("model", model_config, (
        "hidden_size", "num_layers", "num_attention_heads", "intermediate_size",
        "max_sequence_length", "type_vocab_size", "initializer_range"))
    schema.check_rates("model", model_config, ("dropout_rate", "attention_dropout_rate"))
    if model_config.hidden_size % model_config.num_attention_heads:
        raise UserError(
            f"model.hidden_size={model_config.hidden_size} is not a multiple of "
            f"model.num_attention_heads={model_config.num_attention_heads}: each head takes "
            "hidden_size / num_attention_heads dimensions (BERT-Base: 768 / 12)"
        )


def _initializer(model_config):
    """A new truncated-normal initializer (an instance reused across layers would give them
    identical values)."""
    return tf_keras.initializers.TruncatedNormal(stddev=model_config.initializer_range)


def build_encoder(model_config, vocab_size):
    """Model Garden's BertEncoderV2 with the config's shape."""
    return networks.BertEncoderV2(
        vocab_size=vocab_size,
        hidden_size=model_config.hidden_size,
        num_layers=model_config.num_layers,
        num_attention_heads=model_config.num_attention_heads,
        inner_dim=model_config.intermediate_size,
        max_sequence_length=model_config.max_sequence_length,
        type_vocab_size=model_config.type_vocab_size,
        output_dropout=model_config.dropout_rate,
        attention_dropout=model_config.attention_dropout_rate,
        initializer=_initializer(model_config),
    )


def build_pretrainer(model_config, vocab_size):
    """Returns (encoder, pretrainer): BertPretrainerV2 with the masked-LM and NSP heads."""
    encoder = build_encoder(model_config, vocab_size)
    pretrainer = models.BertPretrainerV2(
        encoder_network=encoder,
        mlm_activation=tf_keras.activations.gelu,  # BERT's transform before the output
        mlm_initializer=_initializer(model_config),
        classification_heads=[NextSentenceHead(encoder.pooler_layer, _initializer(model_config))],
    )
    return encoder, pretrainer


def build_training_model(pretrainer, seq_length, max_predictions_per_seq):
    """A functional model: features in, {"masked_lm", "next_sentence"} float32 logits out."""
    inputs = {
        name: tf_keras.Input((seq_length,), dtype=tf.int32, name=name) for name in ENCODER_INPUTS
    }
    inputs[MASKED_LM_POSITIONS] = tf_keras.Input(
        (max_predictions_per_seq,), dtype=tf.int32, name=MASKED_LM_POSITIONS
    )
    outputs = pretrainer(inputs)
    # Linear float32 layers name the outputs (Keras names losses and metrics after them) and
    # keep the losses in float32 under a mixed_bfloat16 policy.
    masked_lm = tf_keras.layers.Activation("linear", dtype="float32", name="masked_lm")
    next_sentence = tf_keras.layers.Activation("linear", dtype="float32", name="next_sentence")
    return tf_keras.Model(
        inputs,
        {
            "masked_lm": masked_lm(outputs["mlm_logits"]),
            "next_sentence": next_sentence(outputs["next_sentence"]),
        },
        name="bert_pretraining",
    )


def losses():
    """Per-output losses for `compile`; see the module docstring for the normalisation."""
    return {
        "masked_lm": tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        "next_sentence": tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    }


class MaskedLMCrossEntropy(tf_keras.metrics.Mean):
    """The mean cross-entropy per masked token (weighted by `masked_lm_weights`), the value of
    Keras' `SparseCategoricalCrossentropy(from_logits=True)` metric, from the same ops as the
    masked-LM loss.

    Keras' metric casts the labels to float before its cross-entropy, so its softmax
    cross-entropy op had other inputs than the loss's and ran a second time over every
    masked position's logits (13% of the tiny BERT's step). Given the loss's own labels and
    logits, the two ops are the same computation, and TensorFlow's graph optimizer (Grappler's
    common-subexpression elimination; XLA's under `jit_compile`) runs it once: the step in
    0.93× the time (docs/performance.md, "The masked-LM cross-entropy once")."""

    def __init__(self, name="cross_entropy", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def update_state(self, y_true, y_pred, sample_weight=None):
        per_position = tf_keras.losses.sparse_categorical_crossentropy(  # as the loss calls it
            y_true, y_pred, from_logits=True)
        return super().update_state(per_position, sample_weight=sample_weight)


def weighted_metrics():
    """Metrics over real masked positions only (the sample weights are `masked_lm_weights`):
    `masked_lm_accuracy`, `masked_lm_cross_entropy` (mean cross-entropy per masked token,
    the number Google's BERT reports as masked_lm_loss); and `next_sentence_accuracy`."""
    return {
        "masked_lm": [
            tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            MaskedLMCrossEntropy(name="cross_entropy"),
        ],
        "next_sentence": [tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    }


def sequences_counted(model):
    """The sequences the last `evaluate` read: the summed weights (one per sequence,
    `keras_targets`) of its next-sentence accuracy, over every replica."""
    (accuracy,) = [metric for metric in model.metrics if metric.name == "next_sentence_accuracy"]
    return int(round(float(accuracy.count.numpy())))


def keras_targets(features, labels):
    """Maps the reader's `(features, labels)` (recipes.bert.input) to Keras'
    `(inputs, targets, sample_weights)` for the two outputs."""
    next_sentence_labels = tf.reshape(labels["next_sentence_labels"], [-1])
    targets = {"masked_lm": labels["masked_lm_ids"], "next_sentence": next_sentence_labels}
    sample_weights = {
        "masked_lm": labels["masked_lm_weights"],
        "next_sentence": tf.ones_like(next_sentence_labels, dtype=tf.float32),
    }
    return features, targets, sample_weights
