"""Keras' `optimizer.exclude_from_weight_decay(var_list=..., var_names=...)` is never a silent
no-op: it extends the constructor's `exclude_from_weight_decay` list (so the exclusion
report, `exclusion_table()` and `get_config` show it), and after `build` it raises.
"""
import re

import numpy as np
import pytest

import numpy_reference as ref
from flavours import FLAVOURS

X0, G = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 6.0, 7.0, 2.0])


def _expected(decay):
    x, _, _ = ref.lamb_step(X0, G, 0, 0, 1, 0.5, 0.9, 0.999, 1e-6, 0.1, decay=decay, adapt=True)
    return x


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_var_names_and_var_list_are_excluded_from_decay(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    optimizer = flavour.module.LAMB(0.5, weight_decay_rate=0.1, exclude_from_layer_adaptation=[])
    decayed = flavour.variable("dense/kernel", X0)
    by_name = flavour.variable("dense/bias", X0)
    by_variable = flavour.variable("other/kernel", X0)
    optimizer.exclude_from_weight_decay(var_list=[by_variable], var_names=["bias"])
    flavour.apply(optimizer, [G, G, G], [decayed, by_name, by_variable])
    assert ref.relative_error(decayed.numpy(), _expected(decay=True)) < 1e-5
    assert ref.relative_error(by_name.numpy(), _expected(decay=False)) < 1e-5
    assert ref.relative_error(by_variable.numpy(), _expected(decay=False)) < 1e-5
    assert [row.decayed for row in optimizer.exclusion_table()] == [True, False, False]
    assert optimizer.get_config()["exclude_from_weight_decay"] == ["bias", "^other/kernel$"]


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_var_list_variable_is_matched_by_its_literal_path(flavour_name):
    """A '.' is allowed in a TensorFlow name but is a regex wildcard: excluding the variable
    `block.1/kernel` must leave `block_1/kernel` decayed."""
    flavour = FLAVOURS[flavour_name]()
    optimizer = flavour.module.LAMB(0.5, weight_decay_rate=0.1)
    dotted, underscored = (flavour.variable(path, X0)
                           for path in ("block.1/kernel", "block_1/kernel"))
    optimizer.exclude_from_weight_decay(var_list=[dotted])
    optimizer.build([dotted, underscored])
    assert [(row.path, row.decayed) for row in optimizer.exclusion_table()] == [
        ("block.1/kernel", False), ("block_1/kernel", True)]


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_after_build_it_raises_naming_the_constructor_argument(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    optimizer = flavour.module.LAMB(0.5, weight_decay_rate=0.1)
    optimizer.build([flavour.variable("dense/kernel", X0)])
    with pytest.raises(ValueError, match=r"pass exclude_from_weight_decay=\[\.\.\.\] to the constructor"):
        optimizer.exclude_from_weight_decay(var_names=["kernel"])


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_without_adaptation_patterns_the_method_excludes_from_both(flavour_name):
    """`exclude_from_layer_adaptation=None` (the default) falls back to the weight-decay
    list, the one the method extends: a variable it names gets neither decay nor trust
    ratio, and the config keeps None (so the fallback survives a round trip)."""
    flavour = FLAVOURS[flavour_name]()
    optimizer = flavour.module.LAMB(0.5, weight_decay_rate=0.1)
    kernel, bias = flavour.variable("dense/kernel", X0), flavour.variable("dense/bias", X0)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    flavour.apply(optimizer, [G, G], [kernel, bias])
    plain, _, _ = ref.lamb_step(X0, G, 0, 0, 1, 0.5, 0.9, 0.999, 1e-6, 0.1, decay=False,
                                adapt=False)
    assert ref.relative_error(kernel.numpy(), _expected(decay=True)) < 1e-5
    assert ref.relative_error(bias.numpy(), plain) < 1e-5
    assert [(row.decayed, row.adapted) for row in optimizer.exclusion_table()] == [
        (True, True), (False, False)]
    config = optimizer.get_config()
    assert (config["exclude_from_weight_decay"], config["exclude_from_layer_adaptation"]) == (
        ["bias"], None)


def test_a_keras3_var_list_exclusion_holds_in_the_training_continued_from_a_keras_file(
        tmp_path):
    """Keras 3 names a Sequential model's variables `sequential/d1/bias` when it builds them
    at construction (an `Input` first) and `d1/bias` once the model is loaded from a `.keras`
    file: the pattern a `var_list` variable added, once its literal path, matched nothing
    after the reload, and the continued training decayed and adapted those biases (with a
    WARNING only), away from the run that was not interrupted."""
    import keras

    from lamb_tf import keras3_optimizers

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="d1"),
                              keras.layers.Dense(1, name="d2")])
    optimizer = keras3_optimizers.LAMB(1e-2, weight_decay_rate=0.5)
    optimizer.exclude_from_weight_decay(var_list=[layer.bias for layer in model.layers])
    model.compile(optimizer=optimizer, loss="mse")
    x = np.random.default_rng(0).random((8, 4), np.float32)
    y = np.random.default_rng(1).random((8, 1), np.float32)
    model.fit(x, y, batch_size=4, shuffle=False, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    for continued in (model, loaded):
        continued.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    assert [v.path for v in loaded.trainable_variables] == [
        "d1/kernel", "d1/bias", "d2/kernel", "d2/bias"]  # Keras 3's reload drops the name
    assert [(row.decayed, row.adapted) for row in loaded.optimizer.exclusion_table()] == [
        (True, True), (False, False), (True, True), (False, False)]
    for uninterrupted, resumed in zip(model.trainable_variables, loaded.trainable_variables):
        np.testing.assert_allclose(resumed.numpy(), uninterrupted.numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_var_list_pattern_lets_only_keras3_model_names_go(flavour_name):
    """Keras 3: a prefix of the parts before a variable's layer may be absent (the names of
    models, which a reload drops outermost first), a middle part alone may not (no reload
    gives `outer/d1/bias`), nor the layer and variable names; tf_keras names a variable after
    its layer only and never drops a part, so its pattern stays the literal path."""
    flavour = FLAVOURS[flavour_name]()
    optimizer = flavour.module.LAMB(0.5, weight_decay_rate=0.1)
    excluded, middle_dropped, other = (
        flavour.variable(path, X0) for path in ("outer/inner/d1/bias", "outer/d1/bias", "d1/bias"))
    optimizer.exclude_from_weight_decay(var_list=[excluded])
    (pattern,) = optimizer.get_config()["exclude_from_weight_decay"]
    if flavour_name == "tf_keras":
        assert pattern == "^outer/inner/d1/bias$"
        optimizer.build([excluded, middle_dropped, other])
        assert [row.decayed for row in optimizer.exclusion_table()] == [False, True, True]
        return
    assert pattern == "^(?:(?:outer/)?inner/)?d1/bias$"
    matched = ["outer/inner/d1/bias", "inner/d1/bias", "d1/bias"]
    not_matched = ["outer/d1/bias", "inner/outer/d1/bias", "x/d1/bias", "x/inner/d1/bias",
                   "d2/bias", "d1/bias/x"]
    assert [re.search(pattern, path) is not None for path in matched + not_matched
            ] == [True] * len(matched) + [False] * len(not_matched)
    # a layer's sibling one level up is not taken: the build accepts the exclusion
    optimizer.build([excluded, middle_dropped])
    assert [row.decayed for row in optimizer.exclusion_table()] == [False, True]
    refused = flavour.module.LAMB(0.5, weight_decay_rate=0.1)
    refused.exclude_from_weight_decay(var_list=[excluded])
    with pytest.raises(ValueError, match=r"names the variable 'outer/inner/d1/bias', whose "
                                         r"pattern .* matches 'd1/bias' too"):
        refused.build([excluded, middle_dropped, other])  # it would take `d1/bias` as well


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_var_list_pattern_may_match_another_var_list_variable(flavour_name):
    """Both excluded anyway, so no harm: the build accepts a var_list variable whose pattern
    matches another one given there (in Keras 3 a nested model's `outer/inner/d1/bias` and
    a top-level `d1/bias`; in tf_keras two layers of one name), and still refuses it when the
    pattern takes a variable not given, naming that one."""
    flavour = FLAVOURS[flavour_name]()
    paths = (("outer/inner/d1/bias", "d1/bias") if flavour_name == "keras3"
             else ("d1/bias", "d1/bias"))
    first, second = (flavour.variable(path, X0) for path in paths)
    kept = flavour.variable("d2/bias", X0)
    optimizer = flavour.module.LAMB(0.5, weight_decay_rate=0.1, exclude_from_layer_adaptation=[])
    optimizer.exclude_from_weight_decay(var_list=[first, second])
    optimizer.build([first, second, kept])
    assert [row.decayed for row in optimizer.exclusion_table()] == [False, False, True]
    flavour.apply(optimizer, [G, G, G], [first, second, kept])
    assert ref.relative_error(first.numpy(), _expected(decay=False)) < 1e-5
    assert ref.relative_error(second.numpy(), _expected(decay=False)) < 1e-5
    assert ref.relative_error(kept.numpy(), _expected(decay=True)) < 1e-5
    # a third variable at `d1/bias`, not given: refused, naming it
    third = flavour.variable("d1/bias", X0)
    refused = flavour.module.LAMB(0.5, weight_decay_rate=0.1)
    refused.exclude_from_weight_decay(var_list=[first, second])
    message = (r"matches 'd1/bias' too \(1 variables not in var_list" if flavour_name == "keras3"
               else r"names the variable 'd1/bias', and 3 variables of the model have that path")
    with pytest.raises(ValueError, match=message):
        refused.build([first, second, third])
