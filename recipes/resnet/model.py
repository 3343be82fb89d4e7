"""ResNet classifier, loss and metrics for the ResNet recipe (tf_keras).

The network is Model Garden's: `official.vision.modeling.backbones.ResNet(model_id=depth)`
under `official.vision.modeling.classification_model.ClassificationModel` (global average
pooling, dropout, one dense layer producing logits). No kernel regularizer: with LAMB and
LARS the weight decay is inside the optimizer (the authors' run sets the L2 loss to 0).
"""

import tensorflow as tf
import tf_keras
from official.vision.modeling import classification_model
from official.vision.modeling.backbones import resnet

from recipes.common import schema
from recipes.common.errors import UserError


def check_model_config(model_config):
    """One-line UserErrors for `model.*` values Model Garden's ResNet would reject deep
    inside its constructor, or train to NaN (a negative batch-norm epsilon)."""
    if model_config.depth not in resnet.RESNET_SPECS:
        raise UserError(
            f"model.depth={model_config.depth} is not a Model Garden ResNet; use one of "
            f"{sorted(resnet.RESNET_SPECS)}"
        )
    schema.check_positive("model", model_config, ("depth_multiplier", "norm_epsilon"))
    schema.check_rates("model", model_config, ("dropout_rate",))
    if not 0 <= model_config.norm_momentum <= 1:
        raise UserError(f"model.norm_momentum={model_config.norm_momentum} must be in [0, 1]")


def build_model(model_config, num_classes, image_size):
    """ResNet-`depth` backbone + classification head, for `image_size`² RGB inputs."""
    input_specs = tf_keras.layers.InputSpec(shape=[None, image_size, image_size, 3])
    backbone = resnet.ResNet(
        model_id=model_config.depth,
        input_specs=input_specs,
        depth_multiplier=model_config.depth_multiplier,
        norm_momentum=model_config.norm_momentum,
        norm_epsilon=model_config.norm_epsilon,
    )
    return classification_model.ClassificationModel(
        backbone=backbone,
        num_classes=num_classes,
        input_specs=input_specs,
        dropout_rate=model_config.dropout_rate,
    )


class SmoothedCrossEntropy(tf_keras.losses.Loss):
    """Softmax cross-entropy of logits against integer labels with label smoothing.

    tf_keras' SparseCategoricalCrossentropy has no label smoothing, so the labels are
    one-hot encoded here (as Model Garden's image classification task does). Logits are
    cast to float32 first (they are bfloat16 under mixed precision).
    """

    def __init__(self, num_classes, label_smoothing, name="smoothed_cross_entropy"):
        super().__init__(name=name)
        self.num_classes = num_classes
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        labels = tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), self.num_classes)
        return tf_keras.losses.categorical_crossentropy(
            labels,
            tf.cast(y_pred, tf.float32),
            from_logits=True,
            label_smoothing=self.label_smoothing,
        )

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "label_smoothing": self.label_smoothing,
        }


def examples_counted(model):
    """The examples the last `evaluate` counted: the summed weights of its top-1 accuracy
    (the evaluation's padding has weight 0), over every replica."""
    (top_1,) = [metric for metric in model.metrics if metric.name == "top_1_accuracy"]
    return int(round(float(top_1.count.numpy())))


TOP_K = 5  # the second accuracy reported, as Model Garden's evaluation.top_k default


def reports_top_k(num_classes):
    """Whether `num_classes` classes get the top-`TOP_K` accuracy: only above `TOP_K` (with
    as few classes every label is among the top k: always 1.0). The study's --metric check
    (recipes/study/adapter.py) asks this too."""
    return num_classes > TOP_K


def metrics(num_classes):
    """Top-1 accuracy over integer labels and logits, and top-`TOP_K` when
    `reports_top_k(num_classes)`."""
    reported = [tf_keras.metrics.SparseTopKCategoricalAccuracy(k=1, name="top_1_accuracy")]
    if reports_top_k(num_classes):
        reported.append(tf_keras.metrics.SparseTopKCategoricalAccuracy(
            k=TOP_K, name=f"top_{TOP_K}_accuracy"))
    return reported
