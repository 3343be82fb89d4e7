"""Scaling rules and the untuned-LAMB recipe helper.

`untuned_lamb_recipe` applies two rules (lamb_tf/scaling.py): the learning rate 6.25e-4 at
batch 512 scaled by sqrt(batch / 512), and 3,125 warmup steps at every batch size, over
BERT-Large's budget of 512e6 examples. The tests check those rules with arithmetic written
out here, and the step counts against the one table a reader can open: Table 1 of
arXiv 1904.00962v1 (steps per batch size). The appendix table the rules come from could not
be re-read for this project, so no test claims to reproduce it.
"""
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


# arXiv 1904.00962v1, Table 1, LAMB rows: batch size -> iterations as printed there.
PAPER_TABLE_1_STEPS = {512: "1000k", 1024: "500k", 2048: "250k", 4096: "125k",
                       8192: "62k", 16384: "31k", 32768: "15.6k"}


def _as_printed(steps, printed):
    """`steps` in thousands with as many decimals as `printed` has (Table 1 cuts 62,500 to
    "62k")."""
    decimals = len(printed[:-1].partition(".")[2])
    return f"{steps / 1000:.{decimals}f}k" if decimals else f"{steps // 1000}k"


@pytest.mark.parametrize("batch", sorted(PAPER_TABLE_1_STEPS))
def test_untuned_lamb_steps_match_the_paper_table_1(batch):
    recipe = untuned_lamb_recipe(batch)
    assert recipe.total_steps == math.ceil(512e6 / batch)
    assert _as_printed(recipe.total_steps, PAPER_TABLE_1_STEPS[batch]) == PAPER_TABLE_1_STEPS[batch]


@pytest.mark.parametrize("batch", sorted(PAPER_TABLE_1_STEPS))
def test_untuned_lamb_recipe_applies_sqrt_scaling_and_a_fixed_warmup(batch):
    recipe = untuned_lamb_recipe(batch)
    doublings = math.log2(batch / 512)
    assert recipe.learning_rate == pytest.approx(6.25e-4 * 2 ** (doublings / 2), rel=1e-12)
    assert recipe.warmup_steps == 3125


def test_untuned_lamb_schedule_peaks_at_the_scaled_rate():
    recipe = untuned_lamb_recipe(32768)
    schedule = recipe.learning_rate_schedule()
    assert isinstance(schedule, schedules.WarmupPolynomialDecay)
    # BERT convention, power 1: lr(t) = 5e-3 * t / 3125 in warmup, 5e-3 * (1 - t/15625) after.
    steps = [0, 3124, 3125, 15625]
    expected = [0.0, 5e-3 * 3124 / 3125, 5e-3 * (1 - 3125 / 15625), 0.0]
    actual = [float(schedule(tf.constant(s))) for s in steps]
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-12)


def test_untuned_lamb_schedule_takes_the_decay_power():
    schedule = untuned_lamb_recipe(32768).learning_rate_schedule(power=2.0)
    assert schedule.power == 2.0
    # power 2 (MLPerf's): 5e-3 * (1 - t/15625)^2 after the warmup
    actual = float(schedule(tf.constant(9375)))
    assert actual == pytest.approx(5e-3 * (1 - 9375 / 15625) ** 2, rel=1e-6)


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


def test_a_base_rate_of_0_is_accepted_and_scales_to_0():
    """base_lr must be >= 0 (as every learning rate here), not > 0: 0 is at the bound."""
    assert scaled_learning_rate(0.0, 256, 1024, rule="sqrt") == 0.0
    assert scaled_learning_rate(0.0, 256, 1024, rule="linear") == 0.0
