r"""The LAMB and LARS update rules, once, as plain TensorFlow tensor functions.

No Keras here: the optimizer classes of both Keras flavours read their slots, call these
functions and assign the results. Every function works on one variable ("layer" i in the
paper) and returns new values; nothing is assigned in place.

LAMB, Algorithm 2 of You et al., "Large Batch Optimization for Deep Learning: Training BERT
in 76 minutes" (arXiv 1904.00962), for one layer with parameters x and gradient g:

.. math::

    m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g_t \\
    v_t &= \beta_2 v_{t-1} + (1 - \beta_2) g_t^2 \\
    \hat m_t &= m_t / (1 - \beta_1^t), \quad \hat v_t = v_t / (1 - \beta_2^t) \\
    r_t &= \hat m_t / (\sqrt{\hat v_t} + \epsilon) \\
    u_t &= r_t + \lambda x_t \\
    x_{t+1} &= x_t - \eta_t \, \frac{\phi(\lVert x_t \rVert)}{\lVert u_t \rVert} \, u_t

Symbols and arguments: eta = ``learning_rate`` (η_t), beta_1/beta_2 = β1/β2,
epsilon = ε (outside the square root, as in the paper), weight_decay_rate = λ,
t = the number of updates applied before this one, plus 1, phi = the identity or, with
``phi_bounds=(gamma_l, gamma_u)``, the paper's φ(z) = min(max(z, γ_l), γ_u).
The trust ratio φ(‖x‖)/‖u‖ is 1 when φ(‖x‖) or ‖u‖ is 0 (the paper leaves this case open;
every official implementation does this for ‖x‖ = 0 without bounds). With bounds,
φ(0) = γ_l: a layer of zeros gets γ_l/‖u‖, as the paper's φ gives.
Options per variable: ``decay=False`` drops λx
(exclusion from weight decay), ``adapt=False`` sets the trust ratio to 1 (exclusion from
layer adaptation: a plain Adam step), ``bias_correction=False`` uses m and v directly
(paper appendix; the authors' ResNet-50 code).

LARS, numerics of TF Model Garden's ``official/modeling/optimization/lars.py`` (You, Gitman,
Ginsburg 2017), for one layer with velocity buffer v, momentum μ and coefficient eeta:

.. math::

    g_t &\leftarrow g_t + \lambda x_t \\
    \text{classic:}\quad \rho &= \text{eeta}\,\lVert x_t\rVert / \lVert g_t\rVert, \quad
        v_t = \mu v_{t-1} + \eta_t \rho\, g_t, \quad
        x_{t+1} = x_t - (\mu v_t + \eta_t \rho\, g_t \text{ if nesterov else } v_t) \\
    \text{popular:}\quad v_t &= \mu v_{t-1} + g_t, \quad
        d_t = \mu v_t + g_t \text{ if nesterov else } v_t, \quad
        \rho = \text{eeta}\,\lVert x_t\rVert / \lVert d_t\rVert, \quad
        x_{t+1} = x_t - \eta_t \rho\, d_t

with the same zero-norm guard (ρ = 1) and the same ``decay``/``adapt`` switches.
"""
import tensorflow as tf


def trust_ratio(x_norm, u_norm, coefficient=1.0, phi_bounds=None):
    """The layer-wise trust ratio `coefficient · φ(‖x‖) / ‖u‖`, shared by LAMB and LARS.

    Args:
      x_norm: scalar tensor, ‖x‖ of the layer's parameters.
      u_norm: scalar tensor, ‖u‖ of the layer's update direction.
      coefficient: LARS' `eeta`; 1 for LAMB.
      phi_bounds: None for φ the identity, or `(gamma_l, gamma_u)` for
        φ(z) = min(max(z, gamma_l), gamma_u).

    Returns:
      A scalar tensor; exactly 1 when φ(‖x‖) or ‖u‖ is 0 (the layer would otherwise never
      move from zero, or the ratio would be undefined). Without bounds φ(‖x‖) = ‖x‖; with
      them φ(0) = γ_l, so a layer of zeros gets γ_l/‖u‖ (ratio 1 only if γ_l = 0).
    """
    # φ(‖x‖): the identity, or the paper's clip to [γ_l, γ_u]
    phi = (x_norm if phi_bounds is None
           else tf.clip_by_value(x_norm, phi_bounds[0], phi_bounds[1]))
    # φ(‖x‖) and ‖u‖ positive: the ratio is defined and meaningful
    defined = tf.logical_and(phi > 0, u_norm > 0)
    # divide by ‖u‖ only where it is positive, so no inf/nan is ever formed (XLA-safe)
    safe_u_norm = tf.where(defined, u_norm, tf.ones_like(u_norm))
    # coefficient · φ(‖x‖)/‖u‖, or 1 at a zero norm
    return tf.where(defined, coefficient * phi / safe_u_norm, tf.ones_like(u_norm))


def wide_dtype(dtype):
    """The dtype a layer's norms, trust ratio and scaled step are formed in: float32 for a
    16-bit layer (float16 ends at 65,504: a layer of 300×300 weights of 250 has ‖x‖ = 75,000,
    and a ratio ‖x‖/‖u‖ leaves its range where the step ratio·u does not), else its own."""
    return tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype


def scaled(scale, tensor):
    """`scale · tensor` formed in `scale`'s dtype (`wide_dtype`), returned in `tensor`'s.
    A no-op cast for a float32 or float64 layer."""
    return tf.cast(scale * tf.cast(tensor, scale.dtype), tensor.dtype)


def l2_norm(x):
    """‖x‖ = √(Σ x²) over a whole layer, as a scalar tensor in `wide_dtype(x.dtype)`.

    The squares are summed as a matrix-vector product, rows of the last dimension times a
    vector of ones, and the row sums then added: the same sum in another order (float
    rounding only). On CPU, XLA's `reduce_sum` of `tf.norm` ran at a fraction of the memory
    bandwidth while its matrix-vector product runs Eigen's vectorised kernel: measured here
    with XLA on 2 CPU cores (`benchmarks/update_anatomy.py`, docs/performance.md), 43.9 ms
    against 4.6 ms for BERT's 30522×768 word embedding and 1.99 against 1.36 ms for a
    768×3072 kernel.
    """
    columns = x.shape[-1] if x.shape.rank and x.shape[-1] else 1  # scalar, empty: one column
    # a 16-bit layer's squares summed in float32: Σx² overflows float16 (65,504) at ‖x‖ = 256,
    # and a bfloat16 sum (float32's range, 8 bits of mantissa) stops growing: 256 + 1 = 256
    wide = wide_dtype(x.dtype)
    # Σ_j x_ij² for every row i, then Σ_i
    squares = tf.reshape(tf.square(tf.cast(x, wide)), [-1, columns])
    return tf.sqrt(tf.reduce_sum(tf.linalg.matvec(squares, tf.ones([columns], wide))))


def dense_gradient(g, shape):
    """`g` as a dense tensor of `shape`; sums the rows of `tf.IndexedSlices` (embedding grads).

    LAMB and LARS decay every row's moments and take whole-layer norms, so a sparse gradient
    must give exactly the dense result: the maths runs once, on the densified gradient.
    """
    if isinstance(g, tf.IndexedSlices):
        # scatter-add the slices' rows into zeros; repeated indices add up as in the dense grad
        return tf.math.unsorted_segment_sum(g.values, g.indices, num_segments=shape[0])
    return g


def _in_dtype(value, dtype):
    """A hyperparameter as the update uses it: a Python number as it is (a constant of the
    traced update, converted to the dtype of the tensor it meets), a tensor (a variable's
    or a callable's value, read at every step) cast to `dtype`."""
    return tf.cast(value, dtype) if tf.is_tensor(value) else value


def _complement(beta, dtype):
    """1 − β in `dtype`: for a Python β formed in float64, for a tensor β (a variable's or a
    callable's value, read at every step) in β's own dtype (exact for β ≥ 0.5)."""
    if not tf.is_tensor(beta):
        return tf.constant(1.0 - beta, dtype)
    return tf.cast(1.0 - beta, dtype)


def _rate_and_complement(beta, dtype):
    """(β, 1 − β) for a layer of `dtype` (a Python β stays a Python float; `_complement`)."""
    return _in_dtype(beta, dtype), _complement(beta, dtype)


def _one_minus_power(beta, t, dtype):
    """1 - β^t as -expm1(t · log1p(-(1 - β))), formed in t's dtype, returned in `dtype`.

    Written out because `1 - tf.pow(β, t)` cancels: in float32, β2 = 0.999 is stored as
    0.99900001, which puts a 1e-5 relative error into 1 - β2^t for small t. Here 1 - β is
    formed in Python float64 (a tensor β: in its own dtype, `_complement`) and nothing
    cancels (XLA/TPU-friendly, no float64 tensors).
    """
    return tf.cast(-tf.math.expm1(t * tf.math.log1p(-_complement(beta, t.dtype))), dtype)


def lamb_step(x, g, m, v, t, eta, beta_1, beta_2, epsilon, weight_decay_rate, *,
              decay=True, adapt=True, bias_correction=True, phi_bounds=None):
    """One LAMB update (Algorithm 2) of one variable.

    Args:
      x, g, m, v: the parameters, the gradient and the first/second moments, same shape.
      t: scalar, 1-based count of this update (applied updates before it + 1).
      eta: scalar learning rate η_t.
      beta_1, beta_2, epsilon, weight_decay_rate: β1, β2, ε, λ; the betas and λ Python
        floats or scalar float tensors (a variable's or callable's value at this step).
      decay: add λx to the update direction (False: excluded from weight decay, or λ the
        number 0; a tensor λ is added as it is, also when its value is 0).
      adapt: scale by the trust ratio (False: excluded from layer adaptation, ratio 1).
      bias_correction: divide m, v by (1 - β^t).
      phi_bounds: None or `(gamma_l, gamma_u)`, see `trust_ratio`.

    Returns:
      `(x_next, m_next, v_next, ratio)`, ratio being the trust ratio used (1 if not adapted).
    """
    dtype = x.dtype
    t = tf.cast(t, wide_dtype(dtype))  # a 16-bit t is exact only to 2,048 (bfloat16: 256)
    # β and 1 - β: Python floats, or tensors read at this step (`_rate_and_complement`)
    rate_1, complement_1 = _rate_and_complement(beta_1, m.dtype)
    rate_2, complement_2 = _rate_and_complement(beta_2, v.dtype)
    # λ: a Python float, or a tensor read at this step, in the layer's dtype
    weight_decay_rate = _in_dtype(weight_decay_rate, dtype)
    # m_t = β1 m_{t-1} + (1 - β1) g_t
    m = rate_1 * m + complement_1 * g
    # v_t = β2 v_{t-1} + (1 - β2) g_t²
    v = rate_2 * v + complement_2 * tf.square(g)
    # m̂_t = m_t / (1 - β1^t)
    m_hat = m / _one_minus_power(beta_1, t, dtype) if bias_correction else m
    # v̂_t = v_t / (1 - β2^t)
    v_hat = v / _one_minus_power(beta_2, t, dtype) if bias_correction else v
    # r_t = m̂_t / (√v̂_t + ε)
    r = m_hat / (tf.sqrt(v_hat) + epsilon)
    # u_t = r_t + λ x_t
    u = r + weight_decay_rate * x if decay else r
    # φ(‖x_t‖) / ‖u_t‖, or 1 for a variable excluded from layer adaptation
    ratio = (trust_ratio(l2_norm(x), l2_norm(u), phi_bounds=phi_bounds) if adapt
             else tf.ones([], wide_dtype(dtype)))
    # x_{t+1} = x_t - η_t · ratio · u_t
    x = x - scaled(tf.cast(eta, ratio.dtype) * ratio, u)
    return x, m, v, ratio


def lars_step(x, g, velocity, eta, momentum, weight_decay_rate, eeta, *,
              nesterov=False, classic_momentum=True, decay=True, adapt=True):
    """One LARS update of one variable, with Model Garden's numerics.

    Args:
      x, g, velocity: the parameters, the gradient and the momentum buffer, same shape.
      eta: scalar learning rate η_t.
      momentum, weight_decay_rate, eeta: μ, λ and the trust coefficient, each a Python
        float or a scalar float tensor (a variable's or callable's value at this step).
      nesterov: Nesterov momentum.
      classic_momentum: True: the trust ratio uses ‖g + λx‖ and the learning rate goes into
        the momentum buffer; False ("popular" momentum): the ratio uses the momentum update
        and the learning rate is applied after the momentum.
      decay: add λx to the gradient (False: excluded from weight decay, or λ the number 0;
        a tensor λ is added as it is, also when its value is 0).
      adapt: scale by the trust ratio (False: excluded from layer adaptation, ratio 1).

    Returns:
      `(x_next, velocity_next, ratio)`.
    """
    eta = tf.cast(eta, wide_dtype(x.dtype))
    # μ and λ in the layer's dtype, eeta in the trust ratio's: Python floats as they are,
    # tensors read at this step cast
    momentum = _in_dtype(momentum, velocity.dtype)
    weight_decay_rate = _in_dtype(weight_decay_rate, x.dtype)
    eeta = _in_dtype(eeta, eta.dtype)
    # g_t ← g_t + λ x_t (L2 weight decay enters the gradient)
    g = g + weight_decay_rate * x if decay else g
    if classic_momentum:
        # ρ = eeta · ‖x_t‖ / ‖g_t‖
        ratio = (trust_ratio(l2_norm(x), l2_norm(g), coefficient=eeta) if adapt
                 else tf.ones([], eta.dtype))
        # η_t ρ g_t
        scaled_g = scaled(eta * ratio, g)
        # v_t = μ v_{t-1} + η_t ρ g_t
        velocity = momentum * velocity + scaled_g
        # step: μ v_t + η_t ρ g_t (Nesterov) or v_t
        step = momentum * velocity + scaled_g if nesterov else velocity
    else:
        # v_t = μ v_{t-1} + g_t
        velocity = momentum * velocity + g
        # d_t = μ v_t + g_t (Nesterov) or v_t
        direction = momentum * velocity + g if nesterov else velocity
        # ρ = eeta · ‖x_t‖ / ‖d_t‖
        ratio = (trust_ratio(l2_norm(x), l2_norm(direction), coefficient=eeta) if adapt
                 else tf.ones([], eta.dtype))
        # step: η_t ρ d_t
        step = scaled(eta * ratio, direction)
    # x_{t+1} = x_t - step
    x = x - step
    return x, velocity, ratio
