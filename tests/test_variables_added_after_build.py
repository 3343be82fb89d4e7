"""An optimizer is built for the variables of its first update; a variable that joins later
(a layer unfrozen after a first `fit`, then compiled again with the same optimizer) is
refused before anything moves, with the way out, and the way out trains the layer.

Model Garden's legacy LAMB grows its slots instead: ours are saved by their place in one
list (`optimizer/_variables/N`), so an optimizer grown in another order than a fresh one
would restore another variable's slots (docs/optimizers.md, the deliberate differences).
"""
import numpy as np
import pytest

from flavours import FLAVOURS

X, Y = np.ones((8, 4), np.float32), np.zeros((8, 1), np.float32)


def _two_layer_model(keras):
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="body"),
                             keras.layers.Dense(1, name="head")])


def _weights(model):
    return [w.numpy().copy() for w in model.weights]


@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
def test_tf_keras_a_layer_unfrozen_after_the_first_update_is_refused_before_anything_moves(
        optimizer_name):
    flavour = FLAVOURS["tf_keras"]()
    model = _two_layer_model(flavour.keras)
    model.get_layer("body").trainable = False
    optimizer = getattr(flavour.module, optimizer_name)(learning_rate=0.1)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(X, Y + 1, verbose=0)
    model.get_layer("body").trainable = True
    model.compile(optimizer=optimizer, loss="mse")
    before = _weights(model)
    with pytest.raises(KeyError) as raised:
        model.fit(X, Y + 1, verbose=0)
    message = str(raised.value)
    assert f"{optimizer_name} was built for the 2 variables of its first update" in message
    assert "cannot update body/kernel" in message
    assert "optimizer.build(model.trainable_variables)" in message
    assert "tf.keras.optimizers.legacy" not in message
    for was, now in zip(before, _weights(model)):
        np.testing.assert_array_equal(was, now)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_built_with_every_variable_first_the_unfrozen_layer_trains(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    model = _two_layer_model(flavour.keras)
    optimizer = flavour.module.LAMB(learning_rate=0.1)
    optimizer.build(model.trainable_variables)  # every layer trainable yet
    body = model.get_layer("body")
    body.trainable = False
    model.compile(optimizer=optimizer, loss="mse")
    kernel_before = body.kernel.numpy().copy()
    model.fit(X, Y + 1, verbose=0)
    np.testing.assert_array_equal(body.kernel.numpy(), kernel_before)  # frozen: unmoved
    body.trainable = True
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(X, Y + 1, verbose=0)
    assert np.abs(body.kernel.numpy() - kernel_before).max() > 1e-4
    assert int(optimizer.iterations) == 2
