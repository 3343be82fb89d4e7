"""Exclusion patterns match the variable's full path in both flavours, the fallback
convention holds, the build-time report logs one line per pattern and warns on a pattern
that matches nothing, and the exported BERT/ResNet lists fit Model Garden's names.
"""
import logging

import pytest

from flavours import FLAVOURS
from lamb_tf import exclusions


def _nested_model(keras):
    """block/{dense,layer_norm} inside a Sequential, then a head: paths have 3-4 levels."""

    class Block(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = keras.layers.Dense(4, name="dense")
            self.norm = keras.layers.LayerNormalization(name="layer_norm")

        def call(self, x):
            return self.norm(self.dense(x))

    model = keras.Sequential([keras.Input((3,)), Block(name="block"), keras.layers.Dense(1, name="head")])
    return model


def _decisions(optimizer, model):
    optimizer.build(model.trainable_variables)
    return {row.path: (row.decayed, row.adapted) for row in optimizer.exclusion_table()}


def _by_suffix(decisions, suffix):
    (value,) = [d for path, d in decisions.items() if path.endswith(suffix)]
    return value


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
def test_patterns_naming_a_layer_match_the_full_path(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    model = _nested_model(flavour.keras)
    optimizer = getattr(flavour.module, optimizer_name)(
        weight_decay_rate=0.1, exclude_from_weight_decay=["block/layer_norm", "bias"])
    decisions = _decisions(optimizer, model)
    # None for layer adaptation: the weight-decay list is used for both
    assert _by_suffix(decisions, "block/layer_norm/gamma") == (False, False)
    assert _by_suffix(decisions, "block/layer_norm/beta") == (False, False)
    assert _by_suffix(decisions, "block/dense/bias") == (False, False)
    assert _by_suffix(decisions, "head/bias") == (False, False)
    assert _by_suffix(decisions, "block/dense/kernel") == (True, True)
    assert _by_suffix(decisions, "head/kernel") == (True, True)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
def test_a_pattern_anchored_at_the_end_matches_the_path_without_tf_suffix(flavour_name,
                                                                          optimizer_name):
    # Model Garden's LARS searches `head/bias:0`, where `bias$` does not match; its LAMB
    # and ours search `head/bias` (docs/optimizers.md, the deliberate differences)
    flavour = FLAVOURS[flavour_name]()
    model = _nested_model(flavour.keras)
    optimizer = getattr(flavour.module, optimizer_name)(
        weight_decay_rate=0.1, exclude_from_weight_decay=["bias$"])
    decisions = _decisions(optimizer, model)
    assert _by_suffix(decisions, "head/bias") == (False, False)
    assert _by_suffix(decisions, "block/dense/bias") == (False, False)
    assert _by_suffix(decisions, "head/kernel") == (True, True)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_separate_and_empty_adaptation_lists(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    model = _nested_model(flavour.keras)
    separate = _decisions(flavour.module.LAMB(weight_decay_rate=0.1, exclude_from_weight_decay=["bias"],
                                              exclude_from_layer_adaptation=["layer_norm"]), model)
    assert _by_suffix(separate, "block/dense/bias") == (False, True)
    assert _by_suffix(separate, "block/layer_norm/gamma") == (True, False)
    adapt_all = _decisions(flavour.module.LAMB(weight_decay_rate=0.1, exclude_from_weight_decay=["bias"],
                                               exclude_from_layer_adaptation=[]), model)
    assert all(adapted for _, adapted in adapt_all.values())
    no_decay = _decisions(flavour.module.LAMB(exclude_from_weight_decay=["bias"]), model)
    assert not any(decayed for decayed, _ in no_decay.values())


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_build_logs_one_line_per_pattern_and_warns_on_no_match(flavour_name, caplog):
    flavour = FLAVOURS[flavour_name]()
    model = _nested_model(flavour.keras)
    optimizer = flavour.module.LAMB(weight_decay_rate=0.1, exclude_from_weight_decay=["layer_norm", "bias"],
                                    exclude_from_layer_adaptation=["LayerNorm"])
    with caplog.at_level(logging.INFO, logger="lamb_tf.exclusions"):
        optimizer.build(model.trainable_variables)
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "lamb_tf.exclusions"]
    assert (logging.INFO, "LAMB: exclude_from_weight_decay pattern 'layer_norm' matches 2 variables "
                          "(8 parameters).") in messages
    assert (logging.INFO, "LAMB: exclude_from_weight_decay pattern 'bias' matches 2 variables "
                          "(5 parameters).") in messages
    warnings = [text for level, text in messages if level == logging.WARNING]
    assert len(warnings) == 1 and "'LayerNorm' matches NO variable" in warnings[0]
    assert len(messages) == 3
    caplog.clear()
    optimizer.build(model.trainable_variables)
    assert not [r for r in caplog.records if r.name == "lamb_tf.exclusions"]


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_exclusion_table_needs_build_and_formats(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    optimizer = flavour.module.LARS(weight_decay_rate=0.1, exclude_from_weight_decay=["bias"])
    with pytest.raises(ValueError, match="not built yet"):
        optimizer.exclusion_table()
    model = _nested_model(flavour.keras)
    optimizer.build(model.trainable_variables)
    text = exclusions.format_table(optimizer.exclusion_table())
    lines = text.splitlines()
    assert len(lines) == 1 + len(model.trainable_variables)
    assert [line.split()[-2:] for line in lines if "dense/bias" in line] == [["False", "False"]]
    assert [line.split()[-2:] for line in lines if "dense/kernel" in line] == [["True", "True"]]


def test_bert_patterns_fit_model_garden_encoder_names(caplog):
    """Every layer norm and bias of a real (tiny) BertEncoderV2 is excluded, nothing else."""
    import tensorflow as tf
    from official.nlp.modeling.networks import bert_encoder

    from lamb_tf.tf_keras_optimizers import LAMB

    encoder = bert_encoder.BertEncoderV2(vocab_size=30, hidden_size=8, num_layers=2, num_attention_heads=2,
                                         inner_dim=16, max_sequence_length=8)
    ids = tf.ones((1, 4), tf.int32)
    encoder(dict(input_word_ids=ids, input_mask=ids, input_type_ids=tf.zeros_like(ids)))
    optimizer = LAMB(weight_decay_rate=0.01, exclude_from_weight_decay=list(exclusions.BERT_EXCLUDE_PATTERNS))
    with caplog.at_level(logging.INFO, logger="lamb_tf.exclusions"):
        optimizer.build(encoder.trainable_variables)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    for row in optimizer.exclusion_table():
        expected_excluded = "layer_norm" in row.path or row.path.endswith("/bias")
        assert (row.decayed, row.adapted) == (not expected_excluded, not expected_excluded), row.path
    excluded = [row.path for row in optimizer.exclusion_table() if not row.decayed]
    # gamma+beta of 5 layer norms (embeddings, 2 per layer) + 6 biases per layer + pooler bias
    assert len(excluded) == 2 * (1 + 2 * 2) + 6 * 2 + 1


def test_resnet_patterns_fit_model_garden_resnet_names():
    import tf_keras
    from official.vision.modeling.backbones import resnet

    from lamb_tf.tf_keras_optimizers import LARS

    backbone = resnet.ResNet(model_id=18, input_specs=tf_keras.layers.InputSpec(shape=[None, 32, 32, 3]))
    optimizer = LARS(weight_decay_rate=1e-4,
                     exclude_from_weight_decay=list(exclusions.RESNET_EXCLUDE_PATTERNS))
    optimizer.build(backbone.trainable_variables)
    rows = optimizer.exclusion_table()
    norms = [row for row in rows if row.path.split("/")[-1] in ("gamma", "beta")]
    kernels = [row for row in rows if row.path.endswith("kernel")]
    assert norms and kernels and len(norms) + len(kernels) == len(rows)
    assert all((row.decayed, row.adapted) == (False, False) for row in norms)
    assert all((row.decayed, row.adapted) == (True, True) for row in kernels)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_variable_excluded_by_identity_is_not_one_of_several_sharing_its_path(flavour_name):
    """tf_keras names a variable after its layer only: two towers' `proj/kernel` share a
    path, and exclude_from_weight_decay(var_list=[tower A's]), an exclusion by path, took
    tower B's too, silently (Keras' own works by identity)."""
    flavour = FLAVOURS[flavour_name]()
    first, second = (flavour.variable("proj/kernel", [1.0, 2.0]) for _ in range(2))
    optimizer = flavour.module.LAMB(0.01, weight_decay_rate=0.01)
    optimizer.exclude_from_weight_decay(var_list=[first])
    with pytest.raises(ValueError, match="names the variable 'proj/kernel', and 2 variables "
                                         "of the model have that path"):
        optimizer.build([first, second])
    # one variable of that path: excluded as asked
    alone = flavour.module.LAMB(0.01, weight_decay_rate=0.01)
    alone.exclude_from_weight_decay(var_list=[first])
    alone.build([first])
    assert [row.decayed for row in alone.exclusion_table()] == [False]


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "lamb_tf.exclusions" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_an_empty_pattern_warns_that_it_excludes_every_variable(flavour_name, caplog):
    # "bias,".split(",") ends in "", which matches every path: all excluded, said at INFO only
    flavour = FLAVOURS[flavour_name]()
    model = _nested_model(flavour.keras)
    optimizer = flavour.module.LAMB(weight_decay_rate=0.1,
                                    exclude_from_weight_decay="bias,".split(","))
    with caplog.at_level(logging.INFO, logger="lamb_tf.exclusions"):
        decisions = _decisions(optimizer, model)
    assert not any(decayed or adapted for decayed, adapted in decisions.values())
    assert _warnings(caplog) == [
        f"LAMB: exclude_from_weight_decay holds an empty pattern, which matches every variable "
        f"({len(decisions)}), so it excludes them all."]


def test_a_pattern_holding_a_keras3_sequential_models_name_says_why_it_stopped_matching(caplog):
    """Keras 3 names a Sequential model's variables `net/d/bias` when it builds them at
    construction, `d/bias` once built from its config (`.keras` loading does that): a
    pattern a user wrote with the model's name then matched nothing, with a warning that did
    not say why. (A `var_list` exclusion's pattern lets the model's name go: it holds.)"""
    import keras

    from lamb_tf import keras3_optimizers

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")], name="net")
    optimizer = keras3_optimizers.LAMB(weight_decay_rate=0.1)
    optimizer.exclude_from_weight_decay(var_list=[model.layers[0].bias],
                                        var_names=["^net/d/kernel$"])
    assert _decisions(optimizer, model) == {"net/d/kernel": (False, False),
                                            "net/d/bias": (False, False)}
    rebuilt = keras.Sequential.from_config(model.get_config())
    restored = keras3_optimizers.LAMB.from_config(optimizer.get_config())
    with caplog.at_level(logging.INFO, logger="lamb_tf.exclusions"):
        decisions = _decisions(restored, rebuilt)
    # Keras 3's paths: the user's pattern is lost, the var_list exclusion is not
    assert decisions == {"d/kernel": (True, True), "d/bias": (False, False)}
    (warning,) = _warnings(caplog)
    assert warning.startswith("LAMB: exclude_from_weight_decay pattern '^net/d/kernel$' "
                              "matches NO variable")
    assert warning.endswith(
        "Without its first part, '^d/kernel$' would match: Keras 3 leaves a Sequential model's "
        "name out of its variables' paths once the model is loaded or built from its config; "
        "write patterns without it.")
    assert exclusions._model_name_hint("^no/such/bias$", ["d/bias"]) == ""
    assert exclusions._model_name_hint("(a|b)/bias", ["d/bias"]) == ""
    assert exclusions._model_name_hint("^(?:net/)?d/bias$", ["x/bias"]) == ""


@pytest.mark.parametrize("name", ["momentum", "adamw"])
def test_the_recipes_pattern_check_reads_a_path_as_the_optimizer_does(name):
    """`check_configured_patterns` matches with `exclusions.Exclusions` on the paths lamb_tf's
    tf_keras optimizers search: for a variable whose name holds a colon (`stage:1/bias`), the
    report once cut the path at the first colon (`stage`), so a pattern the optimizer applies
    (tf_keras' SGD and AdamW search `stage:1/bias:0`, lamb_tf `stage:1/bias`) was refused
    as matching no variable."""
    import tensorflow as tf
    from recipes.common import exclusion_report, optimizer as optimizer_lib, schema

    config = schema.OptimizerConfig(name=name, warmup_steps=0, decay_power=1.0,
                                    end_learning_rate=0.01, learning_rate=0.01,
                                    weight_decay_rate=0.01, exclude_from_weight_decay=[r"1/bias"],
                                    exclude_from_layer_adaptation=[])
    optimizer = optimizer_lib.build_optimizer(config, total_steps=10)
    variables = [tf.Variable([1.0, 2.0], name="stage:1/bias"),
                 tf.Variable([3.0, 4.0], name="stage:1/kernel")]
    optimizer.build(variables)
    rows = exclusion_report.exclusion_rows(optimizer, variables, [r"1/bias"], 0.01)
    assert [(row.path, row.decayed) for row in rows] == [("stage:1/bias", False),
                                                        ("stage:1/kernel", True)]
    assert exclusion_report.check_configured_patterns(config, rows, layer_adaptation=False) == []
    # the same decision as a lamb_tf optimizer takes for that path
    lamb = FLAVOURS["tf_keras"]().module.LAMB(weight_decay_rate=0.01,
                                              exclude_from_weight_decay=[r"1/bias"])
    lamb.build([tf.Variable([1.0, 2.0], name="stage:1/bias")])
    assert [(row.path, row.decayed) for row in lamb.exclusion_table()] == [("stage:1/bias", False)]
