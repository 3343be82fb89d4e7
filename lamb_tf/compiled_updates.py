"""Each variable's LAMB or LARS update as one XLA kernel that writes its variables in place.

The maths is `lamb_tf.update_rules`; this module only decides how it runs. Without XLA,
every TensorFlow op of the update is a full pass over the layer's memory (a dozen per
variable), and each result is a fresh buffer that the assignments then swap in. Here the
update of one variable (its moments, its norms, its trust ratio and the new parameters) is
compiled by XLA on its own, with the variables as the kernel's inputs and outputs, so XLA
fuses the element-wise maths into a few loops and updates the buffers in place, also when
the surrounding training step is not compiled. Inside a step that is compiled already
(`jit_compile=True`, TPU) the function is inlined into the step's XLA program.

`benchmarks/optimizer_step.py` measures the effect; docs/performance.md has the numbers.
"""
import tensorflow as tf

from lamb_tf import update_rules


class LambUpdate:
    """`update_rules.lamb_step` for one variable, assigned in place: one per optimizer.

    Each optimizer holds its own instance (made in `build`), so the compiled traces, which
    reference that optimizer's variables, live and die with it.
    """

    def __init__(self):
        self._compiled = tf.function(_lamb_update, jit_compile=True)

    def __call__(self, variable, gradient, m, v, trust_ratio, t, eta, beta_1, beta_2,
                 epsilon, weight_decay_rate, decay, adapt, bias_correction, phi_bounds):
        """`variable`, `m`, `v` and `trust_ratio` (a scalar) are tf.Variables; `gradient` a
        dense tensor; `t` and `eta` scalars (tensors, Keras variables or numbers); the rest
        Python values, as in `update_rules.lamb_step`."""
        m, v, trust_ratio = (_on_device_of(variable, slot) for slot in (m, v, trust_ratio))
        self._compiled(variable, gradient, m, v, trust_ratio, tf.convert_to_tensor(t),
                       tf.convert_to_tensor(eta), beta_1, beta_2, epsilon, weight_decay_rate,
                       decay, adapt, bias_correction, phi_bounds)


class LarsUpdate:
    """`update_rules.lars_step` for one variable, assigned in place: one per optimizer."""

    def __init__(self):
        self._compiled = tf.function(_lars_update, jit_compile=True)

    def __call__(self, variable, gradient, velocity, trust_ratio, eta, momentum,
                 weight_decay_rate, eeta, nesterov, classic_momentum, decay, adapt):
        """`variable`, `velocity`, `trust_ratio` are tf.Variables; `eta` a scalar; the rest
        as in `update_rules.lars_step`."""
        velocity, trust_ratio = (_on_device_of(variable, slot) for slot in (velocity, trust_ratio))
        self._compiled(variable, gradient, velocity, trust_ratio, tf.convert_to_tensor(eta),
                       momentum, weight_decay_rate, eeta, nesterov, classic_momentum, decay,
                       adapt)


def _on_device_of(variable, slot):
    """`slot`'s copy on `variable`'s device.

    Under a `tf.distribute` strategy the optimizer's update runs once per device with that
    device's copy of the parameters, while the slots are the mirrored containers. A traced
    function must get the per-device copy: the trace is reused for every device's call.
    """
    copies = tf.distribute.get_strategy().experimental_local_results(slot)
    if len(copies) == 1:
        return copies[0]
    for copy in copies:
        if copy.device == variable.device:
            return copy
    raise ValueError(f"no copy of {slot.name} on {variable.device}, where {variable.name} is")


# Compiled with tf.function(jit_compile=True): one trace and one XLA kernel per variable
# shape, dtype and Python option set, cached.
def _lamb_update(variable, gradient, m, v, trust_ratio, t, eta, beta_1, beta_2, epsilon,
                 weight_decay_rate, decay, adapt, bias_correction, phi_bounds):
    x_next, m_next, v_next, ratio = update_rules.lamb_step(
        tf.convert_to_tensor(variable), gradient, tf.convert_to_tensor(m),
        tf.convert_to_tensor(v), t, eta, beta_1, beta_2, epsilon, weight_decay_rate,
        decay=decay, adapt=adapt, bias_correction=bias_correction, phi_bounds=phi_bounds)
    m.assign(m_next)
    v.assign(v_next)
    trust_ratio.assign(tf.cast(ratio, trust_ratio.dtype))
    variable.assign(x_next)


def _lars_update(variable, gradient, velocity, trust_ratio, eta, momentum, weight_decay_rate,
                 eeta, nesterov, classic_momentum, decay, adapt):
    x_next, velocity_next, ratio = update_rules.lars_step(
        tf.convert_to_tensor(variable), gradient, tf.convert_to_tensor(velocity), eta,
        momentum, weight_decay_rate, eeta, nesterov=nesterov,
        classic_momentum=classic_momentum, decay=decay, adapt=adapt)
    velocity.assign(velocity_next)
    trust_ratio.assign(tf.cast(ratio, trust_ratio.dtype))
    variable.assign(x_next)
