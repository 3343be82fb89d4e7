"""lamb_tf's LAMB is Algorithm 2 of the paper with weight decay on, where
`keras.optimizers.Lamb` is not (that Keras behaviour is pinned in
tests/test_peer_behaviour_pins.py).

The vector: one step on w = [1, 2, 3, 4], g = [1, 6, 7, 2], η = 0.5, λ = 0.1, ε = 1e-6, worked
by hand from Algorithm 2 (arXiv 1904.00962): at t = 1 with zero moments m̂ = g and v̂ = g²,
so r = g/(|g| + ε) ≈ [1, 1, 1, 1]; u = r + λw = [1.1, 1.2, 1.3, 1.4]; ‖w‖ = √30, ‖u‖ = √6.3;
x = w − η·(√30/√6.3)·u = [−0.20020, 0.69069, 1.58158, 2.47247] (to 5 decimals).
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS, value

W = np.array([1.0, 2.0, 3.0, 4.0])
G = np.array([1.0, 6.0, 7.0, 2.0])
ETA, LAMBDA, EPSILON = 0.5, 0.1, 1e-6
BY_HAND = [-0.20020, 0.69069, 1.58158, 2.47247]


def _one_step(flavour, optimizer):
    variable = flavour.variable("dense/kernel", W)
    optimizer.apply_gradients([(tf.constant(G, tf.float32), variable)])
    return value(variable)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_ours_matches_paper_and_keras_lamb_does_not(flavour_name):
    paper, _, _ = ref.lamb_step(W, G, 0 * W, 0 * W, 1, ETA, 0.9, 0.999, EPSILON, LAMBDA)
    # the vector worked by hand (module docstring): an independent check of the reference
    np.testing.assert_allclose(paper, BY_HAND, atol=1e-5)

    flavour = FLAVOURS[flavour_name]()
    ours = _one_step(flavour, flavour.module.LAMB(ETA, weight_decay_rate=LAMBDA, epsilon=EPSILON))
    assert ref.relative_error(ours, paper) < 1e-5

    keras3 = FLAVOURS["keras3"]()
    theirs = _one_step(keras3, keras3.keras.optimizers.Lamb(ETA, weight_decay=LAMBDA, epsilon=EPSILON))
    assert ref.relative_error(theirs, ours) > 1e-2


def test_keras3_method_exclusion_keeps_the_trust_ratio_with_an_empty_adaptation_list():
    """`exclude_from_weight_decay(var_names=...)` with the default
    `exclude_from_layer_adaptation=None` also takes the trust ratio from those variables
    (Model Garden's and TF Addons' fallback), where `keras.optimizers.Lamb` has no
    adaptation exclusion: with λ = 0 its call changes nothing, ours gives a plain Adam step.
    `exclude_from_layer_adaptation=[]` gives Keras' update (docs/optimizers.md)."""
    keras3 = FLAVOURS["keras3"]()

    def two_steps(optimizer):
        variable = keras3.variable("dense/bias", W)
        optimizer.exclude_from_weight_decay(var_names=["bias"])
        for gradient in (G, G[::-1]):
            optimizer.apply_gradients([(tf.constant(gradient, tf.float32), variable)])
        return value(variable)

    theirs = two_steps(keras3.keras.optimizers.Lamb(ETA, epsilon=EPSILON))
    assert ref.relative_error(
        two_steps(keras3.module.LAMB(ETA, exclude_from_layer_adaptation=[])), theirs) < 1e-5
    assert ref.relative_error(two_steps(keras3.module.LAMB(ETA)), theirs) > 1e-2
