"""ResNet classifier, loss and LAMB/LARS optimizer for the ResNet recipe (tf_keras).

The network is Model Garden's: `official.vision.modeling.backbones.ResNet(model_id=depth)`
under `official.vision.modeling.classification_model.ClassificationModel` (global average
pooling, dropout, one dense layer producing logits). No kernel regularizer: with LAMB and
LARS the weight decay is inside the optimizer (the authors' run sets the L2 loss to 0).
"""

import tensorflow as tf
import tf_keras
from official.vision.modeling import classification_model
from official.vision.modeling.backbones import resnet

from lamb_tf import exclusions as exclusions_lib
from lamb_tf import schedules
from lamb_tf import tf_keras_optimizers
from recipes.common.errors import UserError

OPTIMIZERS = ("lamb", "lars")


def build_model(model_config, num_classes, image_size):
    """ResNet-`depth` backbone + classification head, for `image_size`² RGB inputs."""
    if model_config.depth not in resnet.RESNET_SPECS:
        raise UserError(
            f"model.depth={model_config.depth} is not a Model Garden ResNet; use one of "
            f"{sorted(resnet.RESNET_SPECS)}"
        )
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


def metrics():
    """Top-1 and top-5 accuracy over integer labels and logits."""
    return [
        tf_keras.metrics.SparseTopKCategoricalAccuracy(k=1, name="top_1_accuracy"),
        tf_keras.metrics.SparseTopKCategoricalAccuracy(k=5, name="top_5_accuracy"),
    ]


def learning_rate_schedule(optimizer_config, total_steps):
    """Linear warmup to the peak, then polynomial decay from the peak to the end rate.

    The decay starts at the peak when the warmup ends (`decay_includes_warmup=False`), as in
    both sources: the authors' LAMB run (`(T - t) * lr / (T - W)` after `t = W`) and MLPerf's
    LARS `poly_rate_schedule` (polynomial_decay over `T - W` steps after the warmup).
    """
    return schedules.TfKerasWarmupPolynomialDecay(
        peak_learning_rate=optimizer_config.learning_rate,
        total_steps=total_steps,
        warmup_steps=optimizer_config.warmup_steps,
        end_learning_rate=optimizer_config.end_learning_rate,
        power=optimizer_config.decay_power,
        decay_includes_warmup=False,
    )


def build_optimizer(optimizer_config, total_steps):
    """`lamb_tf` LAMB or LARS (tf_keras flavour) with the config's schedule and exclusions."""
    config = optimizer_config
    try:
        common = dict(
            learning_rate=learning_rate_schedule(config, total_steps),
            weight_decay_rate=config.weight_decay_rate,
            exclude_from_weight_decay=list(config.exclude_from_weight_decay),
            exclude_from_layer_adaptation=list(config.exclude_from_layer_adaptation),
        )
        if config.global_clipnorm > 0:
            common["global_clipnorm"] = config.global_clipnorm
        if config.name == "lamb":
            return tf_keras_optimizers.LAMB(
                beta_1=config.beta_1,
                beta_2=config.beta_2,
                epsilon=config.epsilon,
                bias_correction=config.bias_correction,
                **common,
            )
        if config.name == "lars":
            return tf_keras_optimizers.LARS(
                momentum=config.momentum,
                eeta=config.eeta,
                nesterov=config.nesterov,
                classic_momentum=config.classic_momentum,
                **common,
            )
    except (ValueError, TypeError) as error:
        raise UserError(f"optimizer: {error}") from None
    raise UserError(f"optimizer.name={config.name!r} is not one of {OPTIMIZERS}")


def exclusion_summary(optimizer):
    """Counts of (decayed, adapted) variables and parameters, and the full table text."""
    rows = optimizer.exclusion_table()
    lines = []
    for decayed in (True, False):
        for adapted in (True, False):
            matching = [r for r in rows if r.decayed == decayed and r.adapted == adapted]
            if matching:
                parameters = sum(int(tf.TensorShape(r.shape).num_elements()) for r in matching)
                lines.append(
                    f"{optimizer.name}: weight decay {'yes' if decayed else 'no '}, "
                    f"trust ratio {'yes' if adapted else 'no '}: {len(matching)} variables, "
                    f"{parameters} parameters (e.g. {matching[0].path})"
                )
    return "\n".join(lines), exclusions_lib.format_table(rows)
