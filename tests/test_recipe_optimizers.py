"""The recipes' `optimizer.name` choices (recipes/common/optimizer.py) and the exclusion
summary both recipes print (recipes/common/exclusion_report.py).

`adamw` is specified by Model Garden's AdamWeightDecay (Google BERT's AdamW baseline): the
recipe builds tf_keras' AdamW, and the two must take the same steps.
"""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from official.modeling.optimization import legacy_adamw

from recipes.common import exclusion_report, schema
from recipes.common import optimizer as optimizer_lib
from recipes.common.config import load_config
from recipes.common.errors import UserError


def _config(**values):
    return schema.OptimizerConfig(**{"warmup_steps": 0, "decay_power": 1.0,
                                     "end_learning_rate": 0.01, "learning_rate": 0.01,
                                     **values})


def _variables():
    return [tf.Variable([[1.0, -2.0], [0.5, 3.0]], name="dense/kernel"),
            tf.Variable([0.3, -0.7], name="dense/bias")]


def _gradients(step):
    rng = np.random.default_rng(step)
    return [tf.constant(rng.normal(size=(2, 2)), tf.float32),
            tf.constant(rng.normal(size=(2,)), tf.float32)]


def test_adamw_takes_model_gardens_adam_weight_decay_steps():
    ours_variables, reference_variables = _variables(), _variables()
    ours = optimizer_lib.build_optimizer(
        _config(name="adamw", weight_decay_rate=0.1, global_clipnorm=None,
                exclude_from_weight_decay=["bias"]), total_steps=10)
    reference = legacy_adamw.AdamWeightDecay(
        learning_rate=0.01, weight_decay_rate=0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
        exclude_from_weight_decay=["bias"], gradient_clip_norm=0.0)
    for step in range(3):
        gradients = _gradients(step)
        ours.apply_gradients(zip(gradients, ours_variables))
        reference.apply_gradients(zip(gradients, reference_variables))
    moved = [not np.allclose(v.numpy(), w.numpy()) for v, w in zip(ours_variables, _variables())]
    assert all(moved)
    for mine, theirs in zip(ours_variables, reference_variables):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", schema.OPTIMIZERS)
def test_every_optimizer_name_trains_and_reports_its_exclusions(name):
    config = _config(name=name, weight_decay_rate=0.01, exclude_from_weight_decay=None)
    optimizer = optimizer_lib.build_optimizer(config, total_steps=10, default_patterns=["bias"])
    variables = _variables()
    optimizer.build(variables)
    before = [v.numpy() for v in variables]
    optimizer.apply_gradients(zip(_gradients(0), variables))
    assert all(not np.array_equal(b, v.numpy()) for b, v in zip(before, variables))
    patterns = optimizer_lib.weight_decay_exclusions(config, ["bias"])
    rows = exclusion_report.exclusion_rows(optimizer, variables, patterns, 0.01)
    decisions = {row.path.split("/")[-1]: (row.decayed, row.adapted) for row in rows}
    layerwise = name in ("lamb", "lars")
    assert decisions == {"kernel": (True, layerwise), "bias": (False, False)}
    assert exclusion_report.has_trust_ratio(optimizer) == layerwise
    summary = exclusion_report.summary(rows, layerwise).splitlines()
    assert summary[0].startswith("optimizer: 1 of 2 variables (2 of 6 parameters) excluded "
                                 "from weight decay")
    # adamw and momentum have no trust ratio: not "2 of 2 variables excluded" from it
    assert summary[1] == ("optimizer: 1 of 2 variables (2 of 6 parameters) excluded from layer "
                          "adaptation, e.g. dense/bias" if layerwise else
                          "optimizer: no layer adaptation (no trust ratio in this optimizer)")


@dataclasses.dataclass
class _SharedSections:
    train: schema.TrainConfig = dataclasses.field(default_factory=schema.TrainConfig)
    eval: schema.EvalConfig = dataclasses.field(default_factory=schema.EvalConfig)
    runtime: schema.RuntimeConfig = dataclasses.field(default_factory=schema.RuntimeConfig)


def test_old_key_names_are_one_error_naming_the_new_key(tmp_path):
    config_file = tmp_path / "old.yaml"
    config_file.write_text("train:\n  precision: mixed_bfloat16\n")

    with pytest.raises(UserError, match="'train.precision' is now 'runtime.precision'"):
        load_config(_SharedSections, [str(config_file)], renamed_keys=schema.RENAMED_KEYS)
    with pytest.raises(UserError, match="'eval.batch_size' is now 'eval.global_batch_size'"):
        load_config(_SharedSections, params_override="eval.batch_size=8",
                    renamed_keys=schema.RENAMED_KEYS)


def test_a_configured_pattern_list_that_matches_no_variable_is_refused():
    # BatchNorm for Keras' batch_normalization: every variable would be decayed and adapted
    rows = [exclusion_report.exclusions.ExclusionRow(path, (2,), True, True) for path in
            ("res_net/conv2d/kernel", "res_net/batch_normalization/gamma",
             "res_net/batch_normalization_1/gamma", "res_net/dense/bias")]
    with pytest.raises(UserError) as raised:
        exclusion_report.check_configured_patterns(
            _config(exclude_from_weight_decay=["BatchNorm", "LayerNorm"]), rows)
    assert str(raised.value) == (
        "optimizer.exclude_from_weight_decay=['BatchNorm', 'LayerNorm'] matches no variable "
        "of the model, so it would exclude nothing (searched in paths such as "
        "'res_net/conv2d/kernel', 'res_net/batch_normalization/gamma', 'res_net/dense/bias'); "
        "fix the patterns, or give [] to exclude nothing")
    with pytest.raises(UserError, match=r"^optimizer.exclude_from_layer_adaptation=\['Bias'\]"):
        exclusion_report.check_configured_patterns(
            _config(exclude_from_layer_adaptation=["Bias"]), rows)
    # an evaluation or export of a run trained so: a line, not a refusal
    assert exclusion_report.check_configured_patterns(
        _config(exclude_from_weight_decay=["BatchNorm"]), rows, refuse=False) == [
            "optimizer: optimizer.exclude_from_weight_decay=['BatchNorm'] matches no variable "
            "of the model, so it would exclude nothing (searched in paths such as "
            "'res_net/conv2d/kernel', 'res_net/batch_normalization/gamma', "
            "'res_net/dense/bias')"]
    # without a trust ratio (adamw, momentum) the layer-adaptation list is not read
    assert exclusion_report.check_configured_patterns(
        _config(exclude_from_layer_adaptation=["Bias"]), rows, layer_adaptation=False) == []


def test_a_configured_pattern_that_matches_nothing_beside_others_that_match_gets_a_line():
    rows = [exclusion_report.exclusions.ExclusionRow(path, (2,), True, True)
            for path in ("encoder/layer_norm/gamma", "encoder/dense/bias")]
    lines = exclusion_report.check_configured_patterns(
        _config(exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"],
                exclude_from_layer_adaptation=[]), rows)
    assert lines == ["optimizer: exclude_from_weight_decay pattern 'LayerNorm' matches no "
                     "variable (the list's other patterns do)"]
    # null lists (the recipe's defaults) and [] are not checked
    assert exclusion_report.check_configured_patterns(_config(), rows[:1]) == []


@pytest.mark.parametrize("name", ["adamw", "momentum"])
def test_keras_optimizers_read_an_anchored_pattern_as_lamb_tf_does(name):
    # tf_keras searches `dense/bias:0`, where `bias$` matches nothing; given the variables,
    # the recipe's adamw/momentum exclude what lamb_tf's rule (and the report) excludes.
    variables = _variables()
    optimizer = optimizer_lib.build_optimizer(
        _config(name=name, weight_decay_rate=0.5, momentum=0.0, global_clipnorm=None,
                exclude_from_weight_decay=["bias$"]), total_steps=10, variables=variables)
    before = [v.numpy() for v in variables]
    # zero gradients: Adam's and SGD's own step is 0, so only weight decay can move a weight
    optimizer.apply_gradients(zip([tf.zeros_like(v) for v in variables], variables))
    kernel, bias = (v.numpy() for v in variables)
    np.testing.assert_allclose(kernel, before[0] * (1 - 0.01 * 0.5), rtol=1e-6)  # decayed
    np.testing.assert_array_equal(bias, before[1])  # excluded, as in the report below
    rows = exclusion_report.exclusion_rows(optimizer, variables, ["bias$"], 0.5)
    assert [(row.path, row.decayed) for row in rows] == [("dense/kernel", True),
                                                         ("dense/bias", False)]
