"""Each variable's LAMB or LARS update as one XLA kernel that writes its variables in place.

The maths is `lamb_tf.update_rules`; this module only decides how it runs. Without XLA,
every TensorFlow op of the update is a full pass over the layer's memory (a dozen per
variable), and each result is a fresh buffer that the assignments then swap in. Here the
update of one variable (its moments, its norms, its trust ratio and the new parameters) is
compiled by XLA on its own, with the variables as the kernel's inputs and outputs, so XLA
fuses the element-wise maths into a few loops and updates the buffers in place, also when
the surrounding training step is not compiled. Inside a step that is compiled already
(`jit_compile=True`, TPU) the function is inlined into the step's XLA program.

Calling a compiled kernel has a fixed cost (about 50 µs more than a dozen small
TensorFlow ops here), so variables of fewer than `SMALLEST_COMPILED` elements (biases,
layer norms, tiny models' weights) run the same function as plain TensorFlow ops; inside a
compiled step both are part of the step's XLA program anyway.

`benchmarks/optimizer_step.py` and `benchmarks/update_anatomy.py` measure the effect;
docs/performance.md has the numbers.
"""
import functools

import tensorflow as tf

from lamb_tf import update_rules

# Below this many elements a variable's update runs as plain TensorFlow ops: one update per
# variable in a graph step, by size (docs/performance.md, "Small variables"), was faster as
# ops up to 32,768 elements and faster as a kernel from 131,072.
SMALLEST_COMPILED = 65_536


class _InPlaceUpdate:
    """One update function, run as an XLA kernel or, for small variables, as plain ops."""

    def __init__(self, update, smallest_compiled, compiled):
        self._compiled = {}  # {(shape, dtype): the update as a tf.function with jit_compile}
        self._uncompiled = update
        # None: the module's SMALLEST_COMPILED, read when the optimizer builds its slots
        self._smallest_compiled = (SMALLEST_COMPILED if smallest_compiled is None
                                   else smallest_compiled)
        self._compiles = compiled  # False: no XLA kernel at all (tf_keras' jit_compile=False)

    def _by_size(self, variable):
        """The compiled update for a variable of at least `smallest_compiled` elements."""
        elements = variable.shape.num_elements()
        if not self._compiles or (elements is not None and elements < self._smallest_compiled):
            return self._uncompiled
        # One function per shape and dtype, each traced once: a single shared one would be
        # traced per shape all the same, and an eager loop over a model's many shapes would
        # then log TensorFlow's "triggered tf.function retracing" warning at the user. TF
        # counts the traces of all functions of one code object together: each function
        # gets a `functools.partial` (which has none) so that its count is its own.
        key = (tuple(variable.shape), variable.dtype)
        if key not in self._compiled:
            self._compiled[key] = tf.function(functools.partial(self._uncompiled),
                                              jit_compile=True)
        return self._compiled[key]

    def tracing_count(self):
        """How many compiled traces this update made (one per shape and dtype it ran)."""
        return sum(f.experimental_get_tracing_count() for f in self._compiled.values())


class LambUpdate(_InPlaceUpdate):
    """`update_rules.lamb_step` for one variable, assigned in place: one per optimizer.

    Each optimizer holds its own instance (made in `build`), so the compiled traces, which
    reference that optimizer's variables, live and die with it. Variables of fewer than
    `smallest_compiled` elements, and every variable if not `compiled`, run as plain
    TensorFlow ops.
    """

    def __init__(self, smallest_compiled=None, compiled=True):
        super().__init__(_lamb_update, smallest_compiled, compiled)

    def __call__(self, variable, gradient, m, v, trust_ratio, t, eta, beta_1, beta_2,
                 epsilon, weight_decay_rate, decay, adapt, bias_correction, phi_bounds):
        """`variable`, `m`, `v` and `trust_ratio` (a scalar) are tf.Variables; `gradient` a
        dense tensor; `t` and `eta` scalars (tensors, Keras variables or numbers); the betas
        and `weight_decay_rate` Python floats or scalar tensors (arguments of the trace: one
        trace for every value); the rest Python values, as in `update_rules.lamb_step`."""
        m, v, trust_ratio = (_on_device_of(variable, slot) for slot in (m, v, trust_ratio))
        update = self._by_size(variable)
        update(variable, gradient, m, v, trust_ratio, tf.convert_to_tensor(t),
               tf.convert_to_tensor(eta), beta_1, beta_2, epsilon, weight_decay_rate, decay,
               adapt, bias_correction, phi_bounds)


class LarsUpdate(_InPlaceUpdate):
    """`update_rules.lars_step` for one variable, assigned in place: one per optimizer."""

    def __init__(self, smallest_compiled=None, compiled=True):
        super().__init__(_lars_update, smallest_compiled, compiled)

    def __call__(self, variable, gradient, velocity, trust_ratio, eta, momentum,
                 weight_decay_rate, eeta, nesterov, classic_momentum, decay, adapt):
        """`variable`, `velocity`, `trust_ratio` are tf.Variables; `eta` a scalar; `momentum`,
        `weight_decay_rate` and `eeta` Python floats or scalar tensors (arguments of the
        trace, as LAMB's betas); the rest as in `update_rules.lars_step`."""
        velocity, trust_ratio = (_on_device_of(variable, slot) for slot in (velocity, trust_ratio))
        update = self._by_size(variable)
        update(variable, gradient, velocity, trust_ratio, tf.convert_to_tensor(eta), momentum,
               weight_decay_rate, eeta, nesterov, classic_momentum, decay, adapt)


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


def _reported(ratio, dtype):
    """The trust ratio as its report variable (the parameter's dtype) holds it: a 16-bit
    one at most its dtype's largest number, not inf, which the recipes' check of finite
    variables would take for a diverged run (the update itself used the float32 ratio)."""
    return tf.cast(tf.minimum(ratio, tf.cast(dtype.max, ratio.dtype)), dtype)


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
    trust_ratio.assign(_reported(ratio, trust_ratio.dtype))
    variable.assign(x_next)


def _lars_update(variable, gradient, velocity, trust_ratio, eta, momentum, weight_decay_rate,
                 eeta, nesterov, classic_momentum, decay, adapt):
    x_next, velocity_next, ratio = update_rules.lars_step(
        tf.convert_to_tensor(variable), gradient, tf.convert_to_tensor(velocity), eta,
        momentum, weight_decay_rate, eeta, nesterov=nesterov,
        classic_momentum=classic_momentum, decay=decay, adapt=adapt)
    velocity.assign(velocity_next)
    trust_ratio.assign(_reported(ratio, trust_ratio.dtype))
    variable.assign(x_next)
