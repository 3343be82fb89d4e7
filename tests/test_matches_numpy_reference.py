"""LAMB and LARS, both Keras flavours, many steps on odd shapes, equal the float64 NumPy
reference of tests/numpy_reference.py (written from the paper / Model Garden's LARS): the
update x - x0 to 1e-5 of its size, beyond float32 rounding of the weights.

The update, not the weights: LARS moves the weights by 1e-3 to 1e-2 of their size here, so
a 1e-5 check on the weights would let the update be off by up to 1%, which is what dropping
LARS' weight decay does.

Every case runs twice: each variable's update as plain TensorFlow ops and as its XLA kernel
(`lamb_tf.compiled_updates` picks by size; these variables are small, so the kernel is
forced by lowering the threshold).
"""
import re
import sys

import numpy as np
import pytest

import numpy_reference as ref
from flavours import FLAVOURS, value
from lamb_tf import compiled_updates

STEPS = 8
# paths and odd shapes; "zero_init/bias" starts at 0 (trust ratio 1 on the first step)
VARIABLES = {
    "dense/kernel": (5, 7),
    "dense/bias": (3,),
    "conv/kernel": (2, 3, 4),
    "block/layer_norm/gamma": (7,),
    "zero_init/bias": (4,),
}


@pytest.fixture(autouse=True, params=["plain ops", "XLA kernel"])
def update_kernel(request, monkeypatch):
    smallest = sys.maxsize if request.param == "plain ops" else 0
    monkeypatch.setattr(compiled_updates, "SMALLEST_COMPILED", smallest)
    return request.param


def _initial_values(seed=0):
    rng = np.random.default_rng(seed)
    values = {path: rng.normal(size=shape) for path, shape in VARIABLES.items()}
    values["zero_init/bias"] = np.zeros(VARIABLES["zero_init/bias"])
    return values


def _gradients(seed=1):
    rng = np.random.default_rng(seed)
    return [{path: rng.normal(scale=0.1 * (1 + step), size=shape) for path, shape in VARIABLES.items()}
            for step in range(STEPS)]


def _excluded(path, patterns):
    return any(re.search(p, path) for p in (patterns or ()))


def _decisions(path, wd_patterns, adaptation_patterns):
    """(decay, adapt) computed here, independently of lamb_tf.exclusions."""
    adaptation = wd_patterns if adaptation_patterns is None else adaptation_patterns
    return not _excluded(path, wd_patterns), not _excluded(path, adaptation)


def _run(flavour, optimizer):
    variables = {p: flavour.variable(p, v) for p, v in _initial_values().items()}
    for grads in _gradients():
        flavour.apply(optimizer, [grads[p] for p in variables], list(variables.values()))
    return {p: value(v) for p, v in variables.items()}


LAMB_CASES = {
    "no_decay": dict(),
    "decay_fallback_exclusions": dict(weight_decay_rate=0.01, exclude_from_weight_decay=["bias", "layer_norm"]),
    "separate_exclusions": dict(weight_decay_rate=0.1, exclude_from_weight_decay=["bias"],
                                exclude_from_layer_adaptation=["layer_norm"]),
    "adapt_everything": dict(weight_decay_rate=0.01, exclude_from_weight_decay=["bias"],
                             exclude_from_layer_adaptation=[]),
    "no_bias_correction_phi_bounds": dict(weight_decay_rate=0.01, bias_correction=False, phi_bounds=(0.5, 2.0)),
}


def _lamb_reference(lr_at, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay_rate=0.0,
                    exclude_from_weight_decay=None, exclude_from_layer_adaptation=None,
                    bias_correction=True, phi_bounds=None):
    x = _initial_values()
    m = {p: np.zeros(s) for p, s in VARIABLES.items()}
    v = {p: np.zeros(s) for p, s in VARIABLES.items()}
    for step, grads in enumerate(_gradients()):
        for p in VARIABLES:
            decay, adapt = _decisions(p, exclude_from_weight_decay, exclude_from_layer_adaptation)
            x[p], m[p], v[p] = ref.lamb_step(
                x[p], grads[p], m[p], v[p], step + 1, lr_at(step), beta_1, beta_2, epsilon,
                weight_decay_rate, adapt=adapt, decay=decay, bias_correction=bias_correction,
                phi_bounds=phi_bounds)
    return x


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("case", LAMB_CASES)
def test_lamb_matches_reference(flavour_name, case):
    flavour = FLAVOURS[flavour_name]()
    kwargs = LAMB_CASES[case]
    got = _run(flavour, flavour.module.LAMB(learning_rate=0.05, **kwargs))
    want = _lamb_reference(lambda step: 0.05, **kwargs)
    for p in VARIABLES:
        ref.assert_update_close(got[p], want[p], _initial_values()[p], STEPS)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_lamb_with_schedule_matches_reference(flavour_name):
    """The schedule is read at the number of updates applied so far (0 for the first)."""
    flavour = FLAVOURS[flavour_name]()
    schedule = flavour.polynomial_decay(0.1, STEPS, 0.01)
    got = _run(flavour, flavour.module.LAMB(learning_rate=schedule, weight_decay_rate=0.01))
    want = _lamb_reference(lambda step: 0.01 + (0.1 - 0.01) * (1 - step / STEPS), weight_decay_rate=0.01)
    for p in VARIABLES:
        ref.assert_update_close(got[p], want[p], _initial_values()[p], STEPS)


def test_keras3_lamb_with_gradient_accumulation_steps_counts_t_in_applied_updates():
    """Keras 3's own `gradient_accumulation_steps=2`: the 8 gradients make 4 updates, each
    with the mean of two, and LAMB's bias correction uses t = 1, 2, 3, 4 (the updates
    applied), not the micro-batch count Keras keeps in `_iterations` (2, 4, 6, 8)."""
    flavour = FLAVOURS["keras3"]()
    optimizer = flavour.module.LAMB(learning_rate=0.05, weight_decay_rate=0.01,
                                    gradient_accumulation_steps=2)
    got = _run(flavour, optimizer)
    x = _initial_values()
    m = {p: np.zeros(s) for p, s in VARIABLES.items()}
    v = {p: np.zeros(s) for p, s in VARIABLES.items()}
    gradients = _gradients()
    for update in range(STEPS // 2):
        for p in VARIABLES:
            mean = (gradients[2 * update][p] + gradients[2 * update + 1][p]) / 2
            x[p], m[p], v[p] = ref.lamb_step(x[p], mean, m[p], v[p], update + 1, 0.05, 0.9,
                                             0.999, 1e-6, 0.01)
    assert int(optimizer.iterations.numpy()) == STEPS // 2
    for p in VARIABLES:
        ref.assert_update_close(got[p], x[p], _initial_values()[p], STEPS // 2)


LARS_CASES = {
    "classic": dict(weight_decay_rate=1e-4),
    "classic_nesterov_exclusions": dict(weight_decay_rate=1e-2, nesterov=True,
                                        exclude_from_weight_decay=["bias", "layer_norm"]),
    "popular": dict(weight_decay_rate=1e-3, classic_momentum=False),
    "popular_nesterov_separate_exclusions": dict(
        weight_decay_rate=1e-3, classic_momentum=False, nesterov=True, eeta=0.01,
        exclude_from_weight_decay=["bias"], exclude_from_layer_adaptation=["layer_norm"]),
}


def _lars_reference(lr, momentum=0.9, weight_decay_rate=0.0, eeta=0.001, nesterov=False,
                    classic_momentum=True, exclude_from_weight_decay=None,
                    exclude_from_layer_adaptation=None):
    x = _initial_values()
    velocity = {p: np.zeros(s) for p, s in VARIABLES.items()}
    for grads in _gradients():
        for p in VARIABLES:
            decay, adapt = _decisions(p, exclude_from_weight_decay, exclude_from_layer_adaptation)
            x[p], velocity[p] = ref.lars_step(
                x[p], grads[p], velocity[p], lr, momentum, weight_decay_rate, eeta,
                nesterov=nesterov, classic_momentum=classic_momentum, adapt=adapt, decay=decay)
    return x


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("case", LARS_CASES)
def test_lars_matches_reference(flavour_name, case):
    flavour = FLAVOURS[flavour_name]()
    kwargs = LARS_CASES[case]
    # LARS' eeta-scaled steps are small (lr·eeta of the weights' norm): a large lr makes
    # them 1e-3 to 1e-2 of the weights, far above float32 rounding
    lr = 0.5
    got = _run(flavour, flavour.module.LARS(learning_rate=lr, **kwargs))
    want = _lars_reference(lr, **kwargs)
    for p in VARIABLES:
        ref.assert_update_close(got[p], want[p], _initial_values()[p], STEPS)
