"""Pinned on purpose: with weight decay on, `keras.optimizers.Lamb` is not the paper's LAMB.

Keras decays the weights outside the trust ratio (w' = w(1 - ηλ), base class) and then takes
the ratio ‖w'‖/‖r‖ without λw in the direction or the norm. lamb_tf's LAMB follows
Algorithm 2 (λw inside both). Both are compared with the float64 NumPy reference; Keras'
result is also checked against the closed form of its decoupled decay, so if a future Keras
changes its algorithm this test says so.
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS, value

# the vector of peers.md §3: w, g, η, λ, ε and one step
W = np.array([1.0, 2.0, 3.0, 4.0])
G = np.array([1.0, 6.0, 7.0, 2.0])
ETA, LAMBDA, EPSILON = 0.5, 0.1, 1e-6


def _keras_closed_form():
    """Decoupled decay, then a trust ratio on the decayed weights without λw."""
    m_hat = G  # (1 - β1) g / (1 - β1) at t = 1
    v_hat = G ** 2
    r = m_hat / (np.sqrt(v_hat) + EPSILON)
    w_decayed = W * (1 - ETA * LAMBDA)
    ratio = np.linalg.norm(w_decayed) / np.linalg.norm(r)
    return w_decayed - ETA * ratio * r


def _one_step(flavour, optimizer):
    variable = flavour.variable("dense/kernel", W)
    optimizer.apply_gradients([(tf.constant(G, tf.float32), variable)])
    return value(variable)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_ours_matches_paper_and_keras_lamb_does_not(flavour_name):
    paper, _, _ = ref.lamb_step(W, G, 0 * W, 0 * W, 1, ETA, 0.9, 0.999, EPSILON, LAMBDA)
    # the published vector (peers.md §3, Model Garden LAMB): an independent check of the reference
    np.testing.assert_allclose(paper, [-0.20020, 0.69069, 1.58158, 2.47247], atol=1e-5)

    flavour = FLAVOURS[flavour_name]()
    ours = _one_step(flavour, flavour.module.LAMB(ETA, weight_decay_rate=LAMBDA, epsilon=EPSILON))
    assert ref.relative_error(ours, paper) < 1e-5

    keras3 = FLAVOURS["keras3"]()
    theirs = _one_step(keras3, keras3.keras.optimizers.Lamb(ETA, weight_decay=LAMBDA, epsilon=EPSILON))
    assert ref.relative_error(theirs, paper) > 1e-2
    assert ref.relative_error(theirs, _keras_closed_form()) < 1e-5


def test_keras_lamb_agrees_without_weight_decay():
    """The two agree when λ = 0 and nothing is excluded (so the difference is the decay)."""
    keras3 = FLAVOURS["keras3"]()
    paper, _, _ = ref.lamb_step(W, G, 0 * W, 0 * W, 1, ETA, 0.9, 0.999, EPSILON, 0.0)
    theirs = _one_step(keras3, keras3.keras.optimizers.Lamb(ETA, epsilon=EPSILON))
    assert ref.relative_error(theirs, paper) < 1e-5
