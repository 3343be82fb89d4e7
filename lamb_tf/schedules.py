"""Learning-rate schedules for large-batch training, for both Keras flavours.

Two schedules, each one plain function of the step plus thin Keras classes:

* `warmup_polynomial_decay`: linear warmup from 0 to the peak, then polynomial decay to
  `end_learning_rate` (power 1 in BERT and the paper; 0.5 in NVIDIA's LAMB BERT; 2 in
  MLPerf's LARS ResNet-50).
* `MixedBatchSchedule`: the paper's 64k/32k mixed-batch run, where phase 2 warms up again
  from zero and decays again instead of continuing phase 1's decay.

Flavours. `TfKeras*` classes subclass `tf_keras.optimizers.schedules.LearningRateSchedule`
(for `lamb_tf` optimizers on tf_keras models such as Model Garden's); `Keras3*` classes
subclass `keras.optimizers.schedules.LearningRateSchedule` (TensorFlow backend). The short
names `WarmupPolynomialDecay` and `MixedBatchSchedule` are the flavour that matches the
active `tf.keras` (tf_keras when `TF_USE_LEGACY_KERAS` is set, as the recipes do, else
Keras 3), exactly like `lamb_tf.LAMB`.

Serialization. `get_config` stores nested schedules with their class (the flavour's own
`serialize`), so `from_config` rebuilds them; Model Garden's `PolynomialWarmUp` stores the
nested schedule without its class and cannot be rebuilt. Importing this module registers the
four classes with their flavour's serialization under the package `lamb_tf`, so loading
needs no `custom_objects` (the dicts below remain for code that passes them).
"""
import math

import keras
import tensorflow as tf
import tf_keras

from lamb_tf import arguments


def warmup_polynomial_decay(
    step,
    peak_learning_rate,
    total_steps,
    warmup_steps,
    end_learning_rate=0.0,
    power=1.0,
    decay_includes_warmup=True,
    start_step=0,
):
    """Learning rate at optimizer step `step`: linear warmup, then polynomial decay.

    With `t = step - start_step` clipped to `[0, total_steps]`, `W = warmup_steps`,
    `T = total_steps`, `o` the decay origin (0 if `decay_includes_warmup`, else `W`):

        lr(t) = peak * t / W                                   for t < W
        lr(t) = (peak - end) * (1 - (t - o) / (T - o))^power + end   for t >= W

    `decay_includes_warmup=True` is the convention of Google's BERT (and NVIDIA's and
    Model Garden's BERT configs): the decay counts from step 0 over all `T` steps and the
    warmup replaces its first `W` steps, so the rate at `t = W` is
    `peak * (1 - W/T)^power`, not `peak`. `False` starts the decay at the peak at `t = W`.
    Step 0 has rate 0 when there is a warmup (as in BERT: the first update only fills the
    optimizer's moments). Past `start_step + total_steps` the rate stays at
    `end_learning_rate`.

    Returns a float32 scalar tensor.
    """
    t = tf.cast(step, tf.float32) - float(start_step)  # steps since this schedule began
    t = tf.clip_by_value(t, 0.0, float(total_steps))  # before the start: 0; past the end: T
    decay_origin = 0.0 if decay_includes_warmup else float(warmup_steps)  # o
    progress = (t - decay_origin) / (float(total_steps) - decay_origin)  # (t - o) / (T - o)
    decay_lr = (peak_learning_rate - end_learning_rate) * (
        1.0 - progress
    ) ** power + end_learning_rate  # polynomial decay from peak to end
    if warmup_steps == 0:
        return decay_lr
    warmup_lr = peak_learning_rate * t / float(warmup_steps)  # linear ramp from 0
    return tf.where(t < warmup_steps, warmup_lr, decay_lr)


class _WarmupPolynomialDecayMethods:
    """Flavour-independent body of `WarmupPolynomialDecay` (mixed into both flavours)."""

    def __init__(
        self,
        peak_learning_rate,
        total_steps,
        warmup_steps=None,
        warmup_fraction=None,
        end_learning_rate=0.0,
        power=1.0,
        decay_includes_warmup=True,
        start_step=0,
        name=None,
    ):
        """Linear warmup then polynomial decay; see `warmup_polynomial_decay`.

        Args:
          peak_learning_rate: rate reached at the end of the warmup.
          total_steps: length of the schedule in optimizer steps (`optimizer.iterations`).
          warmup_steps: warmup length in steps; or give `warmup_fraction` instead.
          warmup_fraction: warmup length as a fraction of `total_steps`, rounded to the
            nearest step, a half up (the paper states warmup as a ratio of the total
            iterations).
          end_learning_rate: rate at and after the last step.
          power: polynomial power (1 linear as in BERT/the paper, 0.5 NVIDIA, 2 MLPerf).
          decay_includes_warmup: True: decay counts from step 0 (BERT convention);
            False: decay starts at the peak when the warmup ends.
          start_step: the optimizer step at which this schedule's step 0 falls, for a
            run whose step counter continues from an earlier run (e.g. phase 2 of
            mixed-batch training resumed with phase 1's optimizer state).
          name: optional name scope.
        """
        super().__init__()
        arguments.finite_at_least("peak_learning_rate", peak_learning_rate, 0.0)
        arguments.integer_at_least("total_steps", total_steps, 1)
        arguments.finite_at_least("end_learning_rate", end_learning_rate, 0.0)
        arguments.finite_at_least("power", power, 0.0, strict=True)
        arguments.integer_at_least("start_step", start_step, 0)
        arguments.boolean("decay_includes_warmup", decay_includes_warmup)
        if (warmup_steps is None) == (warmup_fraction is None):
            raise ValueError(
                "give exactly one of warmup_steps and warmup_fraction, got "
                f"warmup_steps={warmup_steps!r}, warmup_fraction={warmup_fraction!r}"
            )
        if warmup_fraction is not None:
            arguments.finite_at_least("warmup_fraction", warmup_fraction, 0.0)
            if warmup_fraction >= 1.0:
                raise ValueError(f"warmup_fraction must be < 1, got {warmup_fraction!r}")
            # a half up, of the product as written in decimals (0.145 x 100 is 14.4999...)
            resolved_warmup = int(math.floor(round(warmup_fraction * total_steps, 9) + 0.5))
        else:
            arguments.integer_at_least("warmup_steps", warmup_steps, 0)
            resolved_warmup = warmup_steps
        if resolved_warmup >= total_steps:
            raise ValueError(
                f"warmup ({resolved_warmup} steps) must be shorter than total_steps "
                f"({total_steps}); lower the warmup or raise total_steps"
            )
        self.peak_learning_rate = peak_learning_rate
        self.total_steps = total_steps
        self.warmup_steps = resolved_warmup
        self._given_warmup_steps = warmup_steps
        self.warmup_fraction = warmup_fraction
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.decay_includes_warmup = decay_includes_warmup
        self.start_step = start_step
        self.name = name

    def __call__(self, step):
        with tf.name_scope(self.name or "WarmupPolynomialDecay"):
            return warmup_polynomial_decay(
                step,
                peak_learning_rate=self.peak_learning_rate,
                total_steps=self.total_steps,
                warmup_steps=self.warmup_steps,
                end_learning_rate=self.end_learning_rate,
                power=self.power,
                decay_includes_warmup=self.decay_includes_warmup,
                start_step=self.start_step,
            )

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self._given_warmup_steps,
            "warmup_fraction": self.warmup_fraction,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
            "decay_includes_warmup": self.decay_includes_warmup,
            "start_step": self.start_step,
            "name": self.name,
        }


class _MixedBatchScheduleMethods:
    """Flavour-independent body of `MixedBatchSchedule` (mixed into both flavours).

    Subclasses set `_schedules_module` (the flavour's `optimizers.schedules`, which has
    `serialize`/`deserialize`) and `_own_classes()` (this flavour's `custom_objects`).
    """

    def __init__(self, phase_1, phase_2, phase_1_steps=None, name=None):
        """The paper's mixed-batch schedule: phase 2 re-warms up from zero.

        Optimizer steps `[0, phase_1_steps)` follow `phase_1(step)`; later steps follow
        `phase_2(step - phase_1_steps)`, so phase 2 starts its own warmup from 0.

        Args:
          phase_1, phase_2: schedules of this flavour (typically `WarmupPolynomialDecay`
            with each phase's own peak, warmup and length).
          phase_1_steps: optimizer steps in phase 1; defaults to `phase_1.total_steps`.
          name: optional name scope.

        Phase 2 as a separate run: if the optimizer's step counter restarts at 0 (fresh
        optimizer state), give that run `phase_2` alone; if it continues from phase 1's
        checkpoint, give it this whole schedule (or `phase_2` built with
        `start_step=phase_1_steps`).
        """
        super().__init__()
        for argument, schedule in (("phase_1", phase_1), ("phase_2", phase_2)):
            if not isinstance(schedule, self._schedules_module.LearningRateSchedule):
                other = ("; it is one of the other Keras flavour (tf_keras or Keras 3): build "
                         "both phases and this schedule in one flavour, the optimizer's"
                         if hasattr(schedule, "get_config") and callable(schedule) else "")
                raise TypeError(
                    f"{argument} must be a {self._schedules_module.__name__}."
                    f"LearningRateSchedule, got a {type(schedule).__module__}."
                    f"{type(schedule).__name__}{other}"
                )
        if phase_1_steps is None:
            phase_1_steps = getattr(phase_1, "total_steps", None)
            if phase_1_steps is None:
                raise ValueError("phase_1_steps is required when phase_1 has no total_steps")
        arguments.integer_at_least("phase_1_steps", phase_1_steps, 1)
        self.phase_1 = phase_1
        self.phase_2 = phase_2
        self.phase_1_steps = phase_1_steps
        self.name = name

    def __call__(self, step):
        with tf.name_scope(self.name or "MixedBatchSchedule"):
            step = tf.convert_to_tensor(step)
            phase_1_lr = tf.cast(self.phase_1(step), tf.float32)  # phase 1 on its own clock
            phase_2_step = step - self.phase_1_steps  # phase 2's clock restarts at 0
            phase_2_lr = tf.cast(self.phase_2(phase_2_step), tf.float32)
            return tf.where(step < self.phase_1_steps, phase_1_lr, phase_2_lr)

    def get_config(self):
        return {
            "phase_1": self._schedules_module.serialize(self.phase_1),
            "phase_2": self._schedules_module.serialize(self.phase_2),
            "phase_1_steps": self.phase_1_steps,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for phase in ("phase_1", "phase_2"):
            config[phase] = cls._schedules_module.deserialize(
                config[phase], custom_objects=cls._own_classes()
            )
        return cls(**config)


@tf_keras.saving.register_keras_serializable(package="lamb_tf")
class TfKerasWarmupPolynomialDecay(
    _WarmupPolynomialDecayMethods, tf_keras.optimizers.schedules.LearningRateSchedule
):
    __doc__ = _WarmupPolynomialDecayMethods.__init__.__doc__


@tf_keras.saving.register_keras_serializable(package="lamb_tf")
class TfKerasMixedBatchSchedule(
    _MixedBatchScheduleMethods, tf_keras.optimizers.schedules.LearningRateSchedule
):
    __doc__ = _MixedBatchScheduleMethods.__init__.__doc__
    _schedules_module = tf_keras.optimizers.schedules

    @staticmethod
    def _own_classes():
        return TF_KERAS_CUSTOM_OBJECTS


@keras.saving.register_keras_serializable(package="lamb_tf")
class Keras3WarmupPolynomialDecay(
    _WarmupPolynomialDecayMethods, keras.optimizers.schedules.LearningRateSchedule
):
    __doc__ = _WarmupPolynomialDecayMethods.__init__.__doc__


@keras.saving.register_keras_serializable(package="lamb_tf")
class Keras3MixedBatchSchedule(
    _MixedBatchScheduleMethods, keras.optimizers.schedules.LearningRateSchedule
):
    __doc__ = _MixedBatchScheduleMethods.__init__.__doc__
    _schedules_module = keras.optimizers.schedules

    @staticmethod
    def _own_classes():
        return KERAS3_CUSTOM_OBJECTS


# `custom_objects` for loading optimizers or models that use these schedules: both
# flavours' schedule deserializers only find their built-in classes unless given these
# (`Optimizer.from_config(config, custom_objects=...)`, `load_model(..., custom_objects=...)`).
# Nested schedules inside `MixedBatchSchedule` are rebuilt without them.
TF_KERAS_CUSTOM_OBJECTS = {
    "TfKerasWarmupPolynomialDecay": TfKerasWarmupPolynomialDecay,
    "TfKerasMixedBatchSchedule": TfKerasMixedBatchSchedule,
}
KERAS3_CUSTOM_OBJECTS = {
    "Keras3WarmupPolynomialDecay": Keras3WarmupPolynomialDecay,
    "Keras3MixedBatchSchedule": Keras3MixedBatchSchedule,
}

_ACTIVE_FLAVOUR_NAMES = {
    "WarmupPolynomialDecay": (TfKerasWarmupPolynomialDecay, Keras3WarmupPolynomialDecay),
    "MixedBatchSchedule": (TfKerasMixedBatchSchedule, Keras3MixedBatchSchedule),
}


def __getattr__(name):
    """`WarmupPolynomialDecay`/`MixedBatchSchedule`: the flavour of the active `tf.keras`,
    chosen the same way as `lamb_tf.LAMB`, on first access (PEP 562)."""
    if name in _ACTIVE_FLAVOUR_NAMES:
        import lamb_tf

        tf_keras_class, keras3_class = _ACTIVE_FLAVOUR_NAMES[name]
        legacy = lamb_tf._active_flavour_module().__name__ == "lamb_tf.tf_keras_optimizers"
        return tf_keras_class if legacy else keras3_class
    raise AttributeError(f"module 'lamb_tf.schedules' has no attribute {name!r}")
