"""A gradient whose shape cannot be its variable's is a ValueError naming the variable and
both shapes, before any slot or weight moves, for small variables (plain ops) and large ones
(the compiled XLA update, whose own error named neither), in both flavours."""
import numpy as np
import pytest
import tensorflow as tf

from flavours import FLAVOURS, value
from lamb_tf import compiled_updates

SMALL, LARGE = (3, 4), (compiled_updates.SMALLEST_COMPILED // 64, 64)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
@pytest.mark.parametrize("shape", [SMALL, LARGE], ids=["plain_ops", "compiled"])
def test_a_gradient_of_another_shape_is_refused_naming_the_variable(
        flavour_name, optimizer_name, shape):
    flavour = FLAVOURS[flavour_name]()
    variable = flavour.variable("block/kernel", np.ones(shape))
    optimizer = getattr(flavour.module, optimizer_name)(learning_rate=0.1)
    wrong = np.ones((shape[0], shape[1] + 1), np.float32)
    with pytest.raises(ValueError) as raised:
        flavour.apply(optimizer, [wrong], [variable])
    message = str(raised.value)
    assert "block/kernel" in message
    assert str(tf.TensorShape(wrong.shape)) in message and str(tf.TensorShape(shape)) in message
    np.testing.assert_array_equal(value(variable), np.ones(shape))


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_gradient_given_as_a_list_or_array_still_applies(flavour_name):
    """What the base classes accept (nested lists, NumPy arrays) still reaches the update."""
    flavour = FLAVOURS[flavour_name]()
    variables = [flavour.variable("a/kernel", [1.0, 2.0]), flavour.variable("b/kernel", [3.0])]
    optimizer = flavour.module.LAMB(learning_rate=0.1)
    optimizer.apply_gradients([([1.0, 1.0], variables[0]), (np.ones(1, np.float32), variables[1])])
    assert not np.array_equal(value(variables[0]), [1.0, 2.0])
    assert not np.array_equal(value(variables[1]), [3.0])
