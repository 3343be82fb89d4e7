"""Scaling rules and the paper's untuned-LAMB table (appendix, UNCONFIRMED but consistent)."""
import math

import numpy as np
import pytest
import tensorflow as tf

from lamb_tf import schedules
from lamb_tf.scaling import scaled_learning_rate, untuned_lamb_recipe


def test_sqrt_and_linear_rules():
    assert scaled_learning_rate(0.1, 256, 1024, rule="sqrt") == pytest.approx(0.2)
    assert scaled_learning_rate(0.1, 256, 1024, rule="linear") == pytest.approx(0.4)
    assert scaled_learning_rate(0.1, 1024, 256, rule="sqrt") == pytest.approx(0.05)
    assert scaled_learning_rate(0.1, 256, 256) == pytest.approx(0.1)


# The appendix table: batch -> (LR 5 / (2^e * 10^3), warmup ratio, steps from Table 1).
PAPER_TABLE = {
    512: (5 / (2**3.0 * 1e3), 1 / 320, 1_000_000),
    1024: (5 / (2**2.5 * 1e3), 1 / 160, 500_000),
    2048: (5 / (2**2.0 * 1e3), 1 / 80, 250_000),
    4096: (5 / (2**1.5 * 1e3), 1 / 40, 125_000),
    8192: (5 / (2**1.0 * 1e3), 1 / 20, 62_500),
    16384: (5 / (2**0.5 * 1e3), 1 / 10, 31_250),
    32768: (5 / (2**0.0 * 1e3), 1 / 5, 15_625),
}


@pytest.mark.parametrize("batch", sorted(PAPER_TABLE))
def test_untuned_lamb_recipe_reproduces_the_paper_table(batch):
    learning_rate, warmup_ratio, steps = PAPER_TABLE[batch]
    recipe = untuned_lamb_recipe(batch)
    assert recipe.learning_rate == pytest.approx(learning_rate, rel=1e-12)
    assert recipe.total_steps == steps
    assert recipe.warmup_steps == round(warmup_ratio * steps) == 3125


def test_untuned_lamb_schedule_peaks_at_the_scaled_rate():
    recipe = untuned_lamb_recipe(32768)
    schedule = recipe.learning_rate_schedule()
    assert isinstance(schedule, schedules.WarmupPolynomialDecay)
    # BERT convention, power 1: lr(t) = 5e-3 * t / 3125 in warmup, 5e-3 * (1 - t/15625) after.
    steps = [0, 3124, 3125, 15625]
    expected = [0.0, 5e-3 * 3124 / 3125, 5e-3 * (1 - 3125 / 15625), 0.0]
    actual = [float(schedule(tf.constant(s))) for s in steps]
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-12)


def test_untuned_lamb_rounds_steps_up_for_other_batches():
    recipe = untuned_lamb_recipe(3000)
    assert recipe.total_steps == math.ceil(512e6 / 3000)
    assert recipe.learning_rate == pytest.approx(6.25e-4 * math.sqrt(3000 / 512))
    with pytest.raises(ValueError, match="batch_size=163840"):
        untuned_lamb_recipe(163840)


@pytest.mark.parametrize(
    "args,error,fragment",
    [
        ((0.1, 0, 1024), ValueError, "base_batch"),
        ((0.1, 256, -8), ValueError, "batch"),
        ((0.1, 256.0, 1024), TypeError, "base_batch"),
        ((-0.1, 256, 1024), ValueError, "base_lr"),
        ((float("inf"), 256, 1024), ValueError, "base_lr"),
        (("0.1", 256, 1024), TypeError, "base_lr"),
    ],
)
def test_bad_scaling_inputs_name_the_argument(args, error, fragment):
    with pytest.raises(error, match=fragment):
        scaled_learning_rate(*args)


def test_unknown_rule_lists_the_rules():
    with pytest.raises(ValueError, match=r"rule must be one of \('sqrt', 'linear'\), got 'cubic'"):
        scaled_learning_rate(0.1, 256, 1024, rule="cubic")
