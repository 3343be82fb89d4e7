"""The optimizer of a run, from the shared `optimizer` config section (tf_keras flavour).

    lamb      lamb_tf LAMB (Algorithm 2 of arXiv 1904.00962)
    lars      lamb_tf LARS (Algorithm 1; Model Garden / MLPerf semantics)
    adamw     Adam with decoupled weight decay as Model Garden's AdamWeightDecay
              (official.modeling.optimization.legacy_adamw, Google BERT's baseline):
              tf_keras.optimizers.AdamW, which computes the same update (Adam with bias
              correction, then w -= lr * rate * w for variables no pattern excludes; tested
              against AdamWeightDecay in tests/test_recipe_optimizers.py). Not
              AdamWeightDecay itself: it is a legacy optimizer, and the recipes' gradient
              accumulation all-reduces through the new optimizer API
              (`aggregate_gradients`, `skip_gradients_aggregation`).
    momentum  tf_keras SGD with momentum (decoupled weight decay, as tf_keras applies it)

All four run over the same schedule: linear warmup, then polynomial decay (lamb_tf.schedules).
"""

import tf_keras

from lamb_tf import exclusions, layerwise, schedules, tf_keras_optimizers
from recipes.common.errors import UserError


def learning_rate_schedule(config, total_steps):
    """Linear warmup to `learning_rate`, then polynomial decay to `end_learning_rate`."""
    return schedules.TfKerasWarmupPolynomialDecay(
        peak_learning_rate=config.learning_rate,
        total_steps=total_steps,
        warmup_steps=config.warmup_steps,
        end_learning_rate=config.end_learning_rate,
        power=config.decay_power,
        decay_includes_warmup=config.decay_includes_warmup,
    )


def weight_decay_exclusions(config, default_patterns):
    """The weight-decay exclusion patterns: the config's, or the recipe's default on null."""
    if config.exclude_from_weight_decay is None:
        return list(default_patterns)
    return list(config.exclude_from_weight_decay)


def build_optimizer(config, total_steps, default_patterns=(), variables=None):
    """The optimizer `config.name` names; an invalid argument is a one-line UserError.
    `variables`: the model's, which `adamw` and `momentum` exclude from weight decay by the
    rule of lamb_tf's optimizers (`keras_weight_decay_exclusions`)."""
    learning_rate = learning_rate_schedule(config, total_steps)
    decay_patterns = weight_decay_exclusions(config, default_patterns)
    clip = {} if config.global_clipnorm is None else {"global_clipnorm": config.global_clipnorm}
    layerwise = dict(
        learning_rate=learning_rate,
        weight_decay_rate=config.weight_decay_rate,
        exclude_from_weight_decay=decay_patterns,
        exclude_from_layer_adaptation=config.exclude_from_layer_adaptation,
        **clip,
    )
    try:
        if config.name == "lamb":
            return tf_keras_optimizers.LAMB(
                beta_1=config.beta_1, beta_2=config.beta_2, epsilon=config.epsilon,
                bias_correction=config.bias_correction, **layerwise,
            )
        if config.name == "lars":
            return tf_keras_optimizers.LARS(
                momentum=config.momentum, eeta=config.eeta, nesterov=config.nesterov,
                classic_momentum=config.classic_momentum, **layerwise,
            )
        if config.name == "adamw":
            optimizer = tf_keras.optimizers.AdamW(
                learning_rate=learning_rate, weight_decay=config.weight_decay_rate,
                beta_1=config.beta_1, beta_2=config.beta_2, epsilon=config.epsilon, **clip,
            )
        else:
            optimizer = tf_keras.optimizers.SGD(
                learning_rate=learning_rate, momentum=config.momentum, nesterov=config.nesterov,
                weight_decay=config.weight_decay_rate or None, **clip,
            )
        optimizer.exclude_from_weight_decay(
            **keras_weight_decay_exclusions(decay_patterns, variables))
        return optimizer
    except (ValueError, TypeError) as error:
        raise UserError(f"optimizer: {error}") from None


def keras_weight_decay_exclusions(patterns, variables):
    """The keywords of tf_keras' `exclude_from_weight_decay` for `patterns`.

    tf_keras' AdamW and SGD search a pattern in `variable.name` (`dense/bias:0`), so `bias$`
    would exclude nothing there, while lamb_tf's optimizers, Model Garden's AdamWeightDecay
    and the run's exclusion report search the path without the `:N` suffix. Given the
    model's variables, the ones that rule excludes are named by identity (`var_list`), so a
    pattern means the same in every optimizer and in the report; without them, the
    patterns as they are (`var_names`), also for a model not built yet (no variables)."""
    if not variables:
        return {"var_names": patterns}
    rule = exclusions.Exclusions(patterns)
    return {"var_list": [variable for variable in variables
                         if not rule.decays(layerwise.name_without_suffix(variable))]}
