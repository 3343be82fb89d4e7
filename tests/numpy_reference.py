"""Independent float64 NumPy LAMB and LARS, written from the paper, for equivalence tests.

Nothing here imports lamb_tf or TensorFlow. Tests run the optimizer under test and these
functions side by side and compare (relative error < 1e-5 for float32 variables).

LAMB: Algorithm 2 of You et al., arXiv 1904.00962 (see docs/optimizers.md):
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    m_hat = m / (1 - b1^t);  v_hat = v / (1 - b2^t)             (t = 1 on the first update)
    r = m_hat / (sqrt(v_hat) + eps);  u = r + wd x
    x <- x - lr * phi(||x||) / ||u|| * u,  ratio 1 if phi(||x||) == 0 or ||u|| == 0
    (phi(z) = z, or clip(z, gamma_l, gamma_u) with phi_bounds: then phi(0) = gamma_l)
LARS: TF Model Garden's `official/modeling/optimization/lars.py` numerics:
    g <- g + wd x
    classic:  ratio = eeta ||x|| / ||g||;  v = mu v + lr ratio g;  x <- x - (mu v + lr ratio g if nesterov else v)
    popular:  v = mu v + g;  d = mu v + g if nesterov else v;  ratio = eeta ||x|| / ||d||;  x <- x - lr ratio d

Usage:
    x, m, v = lamb_step(x, g, m, v, t, lr, 0.9, 0.999, 1e-6, 0.01)
    x, velocity = lars_step(x, g, velocity, lr, 0.9, 1e-4, 0.001)
"""
import numpy as np


def trust_ratio(x, u, coefficient=1.0, phi_bounds=None):
    """coefficient * phi(||x||) / ||u|| over the whole tensor; 1.0 if phi(||x||) or ||u|| is 0
    (the paper's phi(z) = min(max(z, gamma_l), gamma_u), so phi(0) = gamma_l with bounds)."""
    x_norm = np.sqrt(np.sum(np.asarray(x, np.float64) ** 2))
    u_norm = np.sqrt(np.sum(np.asarray(u, np.float64) ** 2))
    phi = x_norm if phi_bounds is None else min(max(x_norm, phi_bounds[0]), phi_bounds[1])
    if phi == 0.0 or u_norm == 0.0:
        return 1.0
    return coefficient * phi / u_norm


def lamb_step(x, g, m, v, t, lr, beta_1, beta_2, epsilon, weight_decay_rate, adapt=True,
              decay=True, bias_correction=True, phi_bounds=None, return_trust_ratio=False):
    """One LAMB update of one layer. Returns (x, m, v), plus the ratio if asked."""
    x, g, m, v = (np.asarray(a, np.float64) for a in (x, g, m, v))
    m = beta_1 * m + (1.0 - beta_1) * g
    v = beta_2 * v + (1.0 - beta_2) * g * g
    if bias_correction:
        m_hat, v_hat = m / (1.0 - beta_1 ** t), v / (1.0 - beta_2 ** t)
    else:
        m_hat, v_hat = m, v
    u = m_hat / (np.sqrt(v_hat) + epsilon)
    if decay:
        u = u + weight_decay_rate * x
    ratio = trust_ratio(x, u, phi_bounds=phi_bounds) if adapt else 1.0
    x = x - lr * ratio * u
    return (x, m, v, ratio) if return_trust_ratio else (x, m, v)


def lars_step(x, g, velocity, lr, momentum, weight_decay_rate, eeta, nesterov=False,
              classic_momentum=True, adapt=True, decay=True, return_trust_ratio=False):
    """One LARS update of one layer. Returns (x, velocity), plus the ratio if asked."""
    x, g, velocity = (np.asarray(a, np.float64) for a in (x, g, velocity))
    if decay:
        g = g + weight_decay_rate * x
    if classic_momentum:
        ratio = trust_ratio(x, g, coefficient=eeta) if adapt else 1.0
        velocity = momentum * velocity + lr * ratio * g
        x = x - (momentum * velocity + lr * ratio * g if nesterov else velocity)
    else:
        velocity = momentum * velocity + g
        d = momentum * velocity + g if nesterov else velocity
        ratio = trust_ratio(x, d, coefficient=eeta) if adapt else 1.0
        x = x - lr * ratio * d
    return (x, velocity, ratio) if return_trust_ratio else (x, velocity)


def relative_error(actual, expected):
    """max |actual - expected| / max(|expected|, tiny), over the whole array."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    scale = max(np.max(np.abs(expected)), 1e-30)
    return float(np.max(np.abs(actual - expected)) / scale)


def assert_update_close(actual, expected, initial, steps, rtol=1e-5):
    """The update `actual - initial` equals `expected - initial` to `rtol` of the update's
    size, plus what storing x in float32 accounts for (`steps` roundings of eps·|x|).

    For LARS-sized updates (1e-4 to 1e-2 of the weights) a comparison of the weights at
    1e-5 would let the update be off by 0.1% to 10%; this one cannot. It also fails when the
    update is not 100 times larger than that rounding, where no comparison can see it.
    """
    actual, expected, initial = (np.asarray(a, np.float64) for a in (actual, expected, initial))
    rounding = steps * np.finfo(np.float32).eps * max(np.max(np.abs(expected)), np.max(np.abs(initial)))
    size = np.max(np.abs(expected - initial))
    assert size > 100 * rounding, (
        f"the update ({size:.2e}) is within 100x float32 rounding ({rounding:.2e}): too small to compare")
    error = np.max(np.abs(actual - expected))
    assert error <= rtol * size + rounding, (
        f"update off by {error:.2e}: more than {rtol} x its size {size:.2e} + float32 rounding {rounding:.2e}")
