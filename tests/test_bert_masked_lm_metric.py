"""The masked-LM cross-entropy metric (`recipes.bert.model.MaskedLMCrossEntropy`): the mean
cross-entropy per masked token, weighted by `masked_lm_weights`, from the same computation as
the masked-LM loss, so that TensorFlow's graph optimizer (and XLA) runs it once per step."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from lamb_tf import accumulation, tf_keras_optimizers
from recipes.bert import model as model_lib
from recipes.bert.config import ModelConfig

VOCAB, SEQ_LENGTH, PREDICTIONS, BATCH = 30, 16, 3, 4


def _numpy_cross_entropy(labels, logits, weights):
    """float64, from the definition: sum(w * -log softmax(logits)[label]) / sum(w)."""
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    cross_entropy = -np.take_along_axis(log_softmax, labels[..., None], axis=-1)[..., 0]
    return (weights * cross_entropy).sum() / weights.sum()


def test_the_metric_is_the_weighted_mean_cross_entropy_per_masked_token_over_batches():
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 7, (3, 4)).astype(np.int32),
                (3 * rng.normal(size=(3, 4, 7))).astype(np.float32),
                (rng.random((3, 4)) < 0.7).astype(np.float32)) for _ in range(2)]
    metric = model_lib.MaskedLMCrossEntropy()
    keras_metric = tf_keras.metrics.SparseCategoricalCrossentropy(from_logits=True)
    for labels, logits, weights in batches:
        metric.update_state(labels, logits, weights)
        keras_metric.update_state(labels, logits, weights)
    expected = _numpy_cross_entropy(*(np.concatenate(parts) for parts in zip(*batches)))
    assert float(metric.result()) == pytest.approx(expected, rel=1e-5)
    assert float(metric.result()) == pytest.approx(float(keras_metric.result()), rel=1e-6)
    assert metric.name == "cross_entropy"  # logged as masked_lm_cross_entropy


def _computation(tensor, memo):
    """A tensor's computation as a nested tuple (op types, attributes, inputs; no names): two
    tensors with equal computations are what common-subexpression elimination merges."""
    key = tensor.name
    if key not in memo:
        op = tensor.op
        attributes = tuple(sorted((name, str(value)) for name, value in op.node_def.attr.items()
                                  if not name.startswith("_")))
        if op.type in ("Placeholder", "VarHandleOp", "ReadVariableOp"):
            memo[key] = (op.type, key)  # a leaf: the same leaf only if the same tensor
        else:
            memo[key] = (op.type, attributes, tensor.value_index,
                         tuple(_computation(t, memo) for t in op.inputs))
    return memo[key]


def _masked_lm_cross_entropy_computations(metrics):
    _, pretrainer = model_lib.build_pretrainer(
        ModelConfig(hidden_size=16, num_layers=1, num_attention_heads=2, intermediate_size=32,
                    max_sequence_length=SEQ_LENGTH, dropout_rate=0.0,
                    attention_dropout_rate=0.0), VOCAB)
    model = accumulation.GradientAccumulationModel(
        model_lib.build_training_model(pretrainer, SEQ_LENGTH, PREDICTIONS), 1)
    model.compile(optimizer=tf_keras_optimizers.LAMB(1e-3), loss=model_lib.losses(),
                  weighted_metrics=metrics)
    features = {name: tf.TensorSpec([BATCH, SEQ_LENGTH], tf.int32)
                for name in model_lib.ENCODER_INPUTS}
    features[model_lib.MASKED_LM_POSITIONS] = tf.TensorSpec([BATCH, PREDICTIONS], tf.int32)
    targets = {"masked_lm": tf.TensorSpec([BATCH, PREDICTIONS], tf.int32),
               "next_sentence": tf.TensorSpec([BATCH], tf.int32)}
    weights = {"masked_lm": tf.TensorSpec([BATCH, PREDICTIONS], tf.float32),
               "next_sentence": tf.TensorSpec([BATCH], tf.float32)}
    graph = tf.function(model.train_step).get_concrete_function(
        (features, targets, weights)).graph
    memo = {}
    return [_computation(op.outputs[0], memo) for op in graph.get_operations()
            if op.type == "SparseSoftmaxCrossEntropyWithLogits"
            and op.inputs[0].shape[-1] == VOCAB]  # not the next-sentence head's 2 classes


def test_the_training_step_gives_the_loss_and_the_metric_one_cross_entropy_computation():
    loss, metric = _masked_lm_cross_entropy_computations(model_lib.weighted_metrics())
    assert loss == metric


def test_keras_own_metric_would_compute_the_cross_entropy_a_second_time():
    """Why the recipe has its own metric: Keras' casts the labels to float first."""
    keras_metrics = model_lib.weighted_metrics()
    keras_metrics["masked_lm"][1] = tf_keras.metrics.SparseCategoricalCrossentropy(
        from_logits=True, name="cross_entropy")
    loss, metric = _masked_lm_cross_entropy_computations(keras_metrics)
    assert loss != metric
