"""Keras' `optimizer.exclude_from_weight_decay(var_list=..., var_names=...)` is never a silent
no-op: it extends the constructor's `exclude_from_weight_decay` list (so the exclusion
report, `exclusion_table()` and `get_config` show it), and after `build` it raises.
"""
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
