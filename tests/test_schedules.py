"""Schedules: values against closed-form NumPy at the boundary steps, both flavours,
serialization round trips, the mixed-batch re-warmup with and without a step offset."""
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from lamb_tf import schedules

FLAVOURS = {
    "tf_keras": (
        schedules.TfKerasWarmupPolynomialDecay,
        schedules.TfKerasMixedBatchSchedule,
        tf_keras,
        schedules.TF_KERAS_CUSTOM_OBJECTS,
    ),
    "keras3": (
        schedules.Keras3WarmupPolynomialDecay,
        schedules.Keras3MixedBatchSchedule,
        keras,
        schedules.KERAS3_CUSTOM_OBJECTS,
    ),
}

PEAK, END, TOTAL, WARMUP = 0.01, 0.001, 100, 10


def lr_values(schedule, steps):
    return np.array([float(schedule(tf.constant(s, tf.int64))) for s in steps], np.float64)


# Expected values written out per step in float64 (peak 0.01, end 0.001, 100 steps,
# 10 warmup). Warmup: peak * t / 10. BERT convention: decay fraction t/100 from step 0.
# Decay from the warmup end: fraction (t - 10)/90.
BOUNDARY_STEPS = [0, 9, 10, 55, 100, 150]  # 0, warmup-1, warmup, mid-decay, last, past
CASES = {
    # (power, decay_includes_warmup): expected lr at BOUNDARY_STEPS
    (1.0, True): [0.0, 0.009, 0.009 * 0.9 + END, 0.009 * 0.45 + END, END, END],
    (0.5, True): [0.0, 0.009, 0.009 * 0.9**0.5 + END, 0.009 * 0.45**0.5 + END, END, END],
    (2.0, True): [0.0, 0.009, 0.009 * 0.9**2 + END, 0.009 * 0.45**2 + END, END, END],
    (1.0, False): [0.0, 0.009, PEAK, 0.009 * 0.5 + END, END, END],
    (2.0, False): [0.0, 0.009, PEAK, 0.009 * 0.5**2 + END, END, END],
}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("power,decay_includes_warmup", CASES)
def test_warmup_polynomial_decay_boundary_values(flavour, power, decay_includes_warmup):
    warmup_class = FLAVOURS[flavour][0]
    schedule = warmup_class(
        PEAK,
        TOTAL,
        warmup_steps=WARMUP,
        end_learning_rate=END,
        power=power,
        decay_includes_warmup=decay_includes_warmup,
    )
    expected = CASES[(power, decay_includes_warmup)]
    np.testing.assert_allclose(lr_values(schedule, BOUNDARY_STEPS), expected, rtol=1e-6)


def test_warmup_fraction_equals_steps_and_no_warmup_starts_at_peak():
    by_fraction = schedules.TfKerasWarmupPolynomialDecay(PEAK, TOTAL, warmup_fraction=0.1)
    by_steps = schedules.TfKerasWarmupPolynomialDecay(PEAK, TOTAL, warmup_steps=10)
    assert by_fraction.warmup_steps == 10
    steps = range(0, 120, 7)
    np.testing.assert_array_equal(lr_values(by_fraction, steps), lr_values(by_steps, steps))
    no_warmup = schedules.TfKerasWarmupPolynomialDecay(PEAK, TOTAL, warmup_steps=0)
    np.testing.assert_allclose(lr_values(no_warmup, [0, 50]), [PEAK, PEAK * 0.5], rtol=1e-6)


def test_warmup_fraction_rounds_to_the_nearest_step():
    # a half rounds up: Python's round() takes it to the even step, and 0.05 of 10 steps
    # became no warmup at all
    for fraction, total, nearest in ((0.29, 100, 29), (0.0999, 1000, 100), (0.0004, 1000, 0),
                                     (0.05, 10, 1), (0.25, 10, 3), (0.15, 10, 2),
                                     # halves whose float product falls just below them
                                     (0.145, 100, 15), (0.285, 100, 29), (0.565, 100, 57),
                                     (0.575, 100, 58)):
        schedule = schedules.TfKerasWarmupPolynomialDecay(PEAK, total, warmup_fraction=fraction)
        assert schedule.warmup_steps == nearest, (fraction, total)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_steps_before_start_step_take_the_rate_of_the_schedules_step_0(flavour):
    """0 with a warmup, the peak without (never a negative rate or one above the peak)."""
    warmup_class = FLAVOURS[flavour][0]
    warmed = warmup_class(P2_PEAK, P2_TOTAL, warmup_steps=P2_WARMUP, start_step=100)
    np.testing.assert_array_equal(lr_values(warmed, [0, 50, 99, 100]), [0.0] * 4)
    unwarmed = warmup_class(P2_PEAK, P2_TOTAL, warmup_steps=0, start_step=100)
    np.testing.assert_allclose(lr_values(unwarmed, [0, 50, 99, 100]), [P2_PEAK] * 4, rtol=1e-6)


# Mixed-batch: phase 1 100 steps (peak 0.01, warmup 10), phase 2 40 steps (peak 0.004,
# warmup 8, power 1, decay over all 40 steps from phase 2's step 0).
P2_PEAK, P2_TOTAL, P2_WARMUP = 0.004, 40, 8
MIXED_STEPS = [0, 9, 10, 55, 99, 100, 107, 108, 120, 139, 140, 300]
MIXED_EXPECTED = [
    0.0,  # phase 1 step 0
    0.009,  # phase 1 warmup - 1
    0.009 * 0.9 + END,  # phase 1 warmup end
    0.009 * 0.45 + END,  # phase 1 mid-decay
    0.009 * 0.01 + END,  # phase 1 last step
    0.0,  # phase 2 re-warms up from zero
    P2_PEAK * 7 / 8,  # phase 2 warmup - 1
    P2_PEAK * (1 - 8 / 40),  # phase 2 warmup end
    P2_PEAK * (1 - 20 / 40),  # phase 2 mid-decay
    P2_PEAK * (1 - 39 / 40),  # phase 2 last step
    0.0,  # phase 2 end
    0.0,  # past the end
]


def _phases(warmup_class, phase_2_start_step=0):
    phase_1 = warmup_class(PEAK, TOTAL, warmup_steps=WARMUP, end_learning_rate=END)
    phase_2 = warmup_class(
        P2_PEAK, P2_TOTAL, warmup_steps=P2_WARMUP, start_step=phase_2_start_step
    )
    return phase_1, phase_2


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_mixed_batch_schedule_rewarms_up_in_phase_2(flavour):
    warmup_class, mixed_class, _, _ = FLAVOURS[flavour]
    schedule = mixed_class(*_phases(warmup_class))
    assert schedule.phase_1_steps == TOTAL
    actual = lr_values(schedule, MIXED_STEPS)
    np.testing.assert_allclose(actual, MIXED_EXPECTED, rtol=1e-5, atol=1e-9)


def test_phase_2_as_a_separate_run_with_restarted_or_continued_step_counter():
    phase_2_steps = MIXED_STEPS[5:]
    phase_2_expected = MIXED_EXPECTED[5:]
    # Counter restarts at 0 in the phase-2 run: phase 2's schedule alone.
    _, restarted = _phases(schedules.TfKerasWarmupPolynomialDecay)
    restarted_steps = [s - TOTAL for s in phase_2_steps]
    np.testing.assert_allclose(
        lr_values(restarted, restarted_steps), phase_2_expected, rtol=1e-5, atol=1e-9
    )
    # Counter continues from phase 1's checkpoint: phase 2 offset by phase 1's steps.
    _, continued = _phases(schedules.TfKerasWarmupPolynomialDecay, phase_2_start_step=TOTAL)
    actual = lr_values(continued, phase_2_steps)
    np.testing.assert_allclose(actual, phase_2_expected, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_config_round_trip_rebuilds_nested_schedules(flavour):
    warmup_class, mixed_class, keras_module, custom_objects = FLAVOURS[flavour]
    phase_1, phase_2 = _phases(warmup_class)
    phase_1 = warmup_class(PEAK, TOTAL, warmup_fraction=0.1, power=0.5, end_learning_rate=END)
    schedule = mixed_class(phase_1, phase_2, name="mixed")
    config = json.loads(json.dumps(schedule.get_config()))  # JSON-safe
    assert config["phase_1"]["class_name"] == warmup_class.__name__
    rebuilt = mixed_class.from_config(config)
    assert isinstance(rebuilt.phase_2, warmup_class)
    assert rebuilt.get_config() == schedule.get_config()
    np.testing.assert_array_equal(
        lr_values(rebuilt, MIXED_STEPS), lr_values(schedule, MIXED_STEPS)
    )
    # Through the flavour's optimizer config, as model saving does.
    optimizer = keras_module.optimizers.SGD(learning_rate=schedule)
    restored = keras_module.optimizers.SGD.from_config(
        optimizer.get_config(), custom_objects=custom_objects
    )
    assert isinstance(restored._learning_rate, mixed_class)
    np.testing.assert_array_equal(
        lr_values(restored._learning_rate, MIXED_STEPS), lr_values(schedule, MIXED_STEPS)
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_config_round_trip_keeps_a_phase_1_steps_that_is_not_phase_1s_length(flavour):
    """phase_1_steps=80 with a phase 1 of 100 steps (phase 1 cut short): the rebuilt
    schedule switches to phase 2 at step 80, not at phase 1's own total_steps."""
    warmup_class, mixed_class, _, _ = FLAVOURS[flavour]
    schedule = mixed_class(*_phases(warmup_class), phase_1_steps=80)
    rebuilt = mixed_class.from_config(json.loads(json.dumps(schedule.get_config())))
    assert rebuilt.phase_1_steps == 80
    # step 79: phase 1's decay, (PEAK - END) * (1 - 79/100) + END; step 80: phase 2 warms
    # up again from 0; step 84: phase 2's step 4 of its 8 warmup steps, P2_PEAK * 4/8
    expected = [0.009 * 0.21 + END, 0.0, P2_PEAK * 4 / 8]
    np.testing.assert_allclose(lr_values(rebuilt, [79, 80, 84]), expected, rtol=1e-5,
                               atol=1e-9)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_config_round_trip_keeps_every_argument(flavour):
    """Every argument away from its default: the config holds each one as given, and the
    rebuilt schedule gives the rates written out by hand (not the original's rates: a key
    missing from the config would be missing on both sides)."""
    warmup_class = FLAVOURS[flavour][0]
    given = dict(peak_learning_rate=P2_PEAK, total_steps=P2_TOTAL, warmup_steps=P2_WARMUP,
                 warmup_fraction=None, end_learning_rate=END, power=2.0,
                 decay_includes_warmup=False, start_step=100, name="phase_2")
    config = json.loads(json.dumps(warmup_class(**given).get_config()))
    assert config == given
    rebuilt = warmup_class.from_config(config)
    assert rebuilt.name == "phase_2"
    # t = step - 100; warmup 0.004 * t / 8; then decay from the peak at t = 8 over the
    # remaining 32 steps, power 2, to 0.001
    steps = [99, 104, 108, 124, 140, 200]
    expected = [0.0, P2_PEAK * 4 / 8, P2_PEAK, (P2_PEAK - END) * (1 - 16 / 32) ** 2 + END,
                END, END]
    np.testing.assert_allclose(lr_values(rebuilt, steps), expected, rtol=1e-6)
    by_fraction = dict(given, warmup_steps=None, warmup_fraction=0.25)
    config = json.loads(json.dumps(warmup_class(**by_fraction).get_config()))
    assert config == by_fraction
    assert warmup_class.from_config(config).warmup_steps == 10


def test_schedule_drives_tf_keras_optimizer_once_per_update():
    schedule = schedules.TfKerasWarmupPolynomialDecay(PEAK, TOTAL, warmup_steps=WARMUP)
    optimizer = tf_keras.optimizers.SGD(learning_rate=schedule)
    variable = tf.Variable([1.0])
    for _ in range(3):
        optimizer.apply_gradients([(tf.constant([1.0]), variable)])
    # SGD with gradient 1: x = 1 - lr(0) - lr(1) - lr(2) = 1 - 0.001 * (0 + 1 + 2).
    np.testing.assert_allclose(variable.numpy(), [1.0 - 0.003], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs,error,fragment",
    [
        (dict(peak_learning_rate=-1.0), ValueError, "peak_learning_rate"),
        (dict(peak_learning_rate=float("nan")), ValueError, "peak_learning_rate"),
        (dict(total_steps=0), ValueError, "total_steps"),
        (dict(total_steps=10.5), TypeError, "total_steps"),
        (dict(warmup_steps=100), ValueError, "shorter than total_steps"),
        (dict(warmup_steps=5, warmup_fraction=0.1), ValueError, "exactly one"),
        (dict(warmup_steps=None), ValueError, "exactly one"),
        (dict(warmup_steps=None, warmup_fraction=1.0), ValueError, "warmup_fraction"),
        (dict(power=0.0), ValueError, "power"),
        (dict(end_learning_rate=-0.1), ValueError, "end_learning_rate"),
        (dict(start_step=-1), ValueError, "start_step"),
        (dict(decay_includes_warmup="yes"), TypeError, "decay_includes_warmup"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, error, fragment):
    arguments = dict(peak_learning_rate=PEAK, total_steps=TOTAL, warmup_steps=WARMUP)
    arguments.update(kwargs)
    with pytest.raises(error, match=fragment):
        schedules.TfKerasWarmupPolynomialDecay(**arguments)


def test_mixed_batch_rejects_the_other_flavours_schedule():
    tf_keras_phase, _ = _phases(schedules.TfKerasWarmupPolynomialDecay)
    keras3_phase, _ = _phases(schedules.Keras3WarmupPolynomialDecay)
    with pytest.raises(TypeError) as raised:
        schedules.Keras3MixedBatchSchedule(tf_keras_phase, keras3_phase)
    # the class and the flavour, not `<... object at 0x...>`
    assert str(raised.value) == (
        "phase_1 must be a keras.optimizers.schedules.LearningRateSchedule, got a "
        "lamb_tf.schedules.TfKerasWarmupPolynomialDecay; it is one of the other Keras flavour "
        "(tf_keras or Keras 3): build both phases and this schedule in one flavour, the "
        "optimizer's")
    with pytest.raises(TypeError, match="^phase_2 must be a .*, got a builtins.float$"):
        schedules.TfKerasMixedBatchSchedule(tf_keras_phase, 0.1)


def test_short_names_follow_the_active_tf_keras(monkeypatch):
    """The short names follow `lamb_tf`'s own flavour choice (tested with the optimizers):
    Keras 3 in this process; tf_keras when `lamb_tf` resolves to the tf_keras optimizers."""
    import lamb_tf
    from lamb_tf import tf_keras_optimizers

    assert "TF_USE_LEGACY_KERAS" not in os.environ
    assert schedules.WarmupPolynomialDecay is schedules.Keras3WarmupPolynomialDecay
    assert schedules.MixedBatchSchedule is schedules.Keras3MixedBatchSchedule
    monkeypatch.setattr(lamb_tf, "_active_flavour_module", lambda: tf_keras_optimizers)
    assert schedules.WarmupPolynomialDecay is schedules.TfKerasWarmupPolynomialDecay
    assert schedules.MixedBatchSchedule is schedules.TfKerasMixedBatchSchedule
