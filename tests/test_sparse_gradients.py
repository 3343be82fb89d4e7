"""Sparse gradients (tf.IndexedSlices, from embedding lookups) give exactly the dense result:
compared with the NumPy reference fed the dense gradient (rows scatter-added, repeats summed),
on the update x - x0.
"""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from flavours import FLAVOURS, value

VOCAB, WIDTH, STEPS = 6, 3, 4


def _sparse_gradients():
    rng = np.random.default_rng(3)
    # index 2 appears twice (its rows must add up); rows 4 and 5 never appear (zero gradient)
    indices = np.array([2, 0, 2, 3])
    return [(indices, rng.normal(size=(len(indices), WIDTH))) for _ in range(STEPS)]


def _dense(indices, rows):
    dense = np.zeros((VOCAB, WIDTH))
    np.add.at(dense, indices, rows)
    return dense


def _run(flavour, optimizer, x0):
    table = flavour.variable("embeddings/embeddings", x0)
    for indices, rows in _sparse_gradients():
        grad = tf.IndexedSlices(tf.constant(rows, tf.float32), tf.constant(indices),
                                dense_shape=tf.constant([VOCAB, WIDTH]))
        optimizer.apply_gradients([(grad, table)])
    return value(table)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_lamb_sparse_equals_dense_reference(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    x0 = np.random.default_rng(0).normal(size=(VOCAB, WIDTH))
    got = _run(flavour, flavour.module.LAMB(0.01, weight_decay_rate=0.01), x0)
    x, m, v = x0, np.zeros_like(x0), np.zeros_like(x0)
    for t, (indices, rows) in enumerate(_sparse_gradients(), start=1):
        x, m, v = ref.lamb_step(x, _dense(indices, rows), m, v, t, 0.01, 0.9, 0.999, 1e-6, 0.01)
    ref.assert_update_close(got, x, x0, STEPS)
    # rows without gradient still move (the moments and λx act on the whole layer)
    assert not np.allclose(got[5], x0[5])


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_lars_sparse_equals_dense_reference(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    x0 = np.random.default_rng(0).normal(size=(VOCAB, WIDTH))
    got = _run(flavour, flavour.module.LARS(1.0, weight_decay_rate=0.01), x0)
    x, velocity = x0, np.zeros_like(x0)
    for indices, rows in _sparse_gradients():
        x, velocity = ref.lars_step(x, _dense(indices, rows), velocity, 1.0, 0.9, 0.01, 0.001)
    # LARS moves the table by ~1e-3 of its norm per step: compare the update
    ref.assert_update_close(got, x, x0, STEPS)


CLIPS = [{"clipvalue": 0.3}, {"clipnorm": 1.0}, {"global_clipnorm": 1.0}]


def _run_clipped(flavour, optimizer, x0, sparse):
    """STEPS updates of a table from the gradients of `_sparse_gradients`, given as
    tf.IndexedSlices (`sparse`) or as the dense tensor they stand for."""
    table = flavour.variable("embeddings/embeddings", x0)
    for indices, rows in _sparse_gradients():
        grad = tf.IndexedSlices(tf.constant(rows, tf.float32), tf.constant(indices),
                                dense_shape=tf.constant([VOCAB, WIDTH]))
        optimizer.apply_gradients([(grad if sparse else tf.convert_to_tensor(grad), table)])
    return value(table)


@pytest.mark.parametrize("clip", CLIPS, ids=lambda clip: next(iter(clip)))
@pytest.mark.parametrize("optimizer_name", ["LAMB", "LARS"])
@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_sparse_is_made_dense_before_clipping(flavour_name, optimizer_name, clip):
    """A repeated row's copies are summed, then clipped: the clip of the dense gradient (each
    copy clipped apart, or norms over unsummed rows, would give another update)."""
    flavour = FLAVOURS[flavour_name]()
    x0 = np.random.default_rng(0).normal(size=(VOCAB, WIDTH))
    cls = getattr(flavour.module, optimizer_name)
    sparse, dense = [_run_clipped(flavour, cls(0.1, weight_decay_rate=0.01, **clip), x0, kind)
                     for kind in (True, False)]
    # the clip is active: without it the update differs
    unclipped = _run_clipped(flavour, cls(0.1, weight_decay_rate=0.01), x0, False)
    assert not np.allclose(unclipped - x0, dense - x0, rtol=1e-3, atol=0)
    np.testing.assert_allclose(sparse - x0, dense - x0, rtol=1e-5, atol=1e-7)


def test_keras3_apply_takes_its_variables_as_an_iterator():
    """`apply` reads its variables to make sparse gradients dense: an iterator (a generator,
    as Keras' own `apply` accepts) was used up there, and the step built or applied to no
    variable."""
    import keras

    from lamb_tf import keras3_optimizers

    x0 = np.arange(6.0).reshape(3, 2)
    variable = keras.Variable(x0, dtype="float32")
    optimizer = keras3_optimizers.LAMB(0.1)
    optimizer.apply([tf.ones((3, 2))], (v for v in [variable]))
    assert not np.allclose(variable.numpy(), x0)
    assert len(optimizer.variables) > 1  # built over the variable: its m and v slots
