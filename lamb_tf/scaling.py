"""Learning-rate scaling rules for large batches, and the paper's untuned-LAMB recipe.

Sources (see docs/large_batch.md):
* sqrt scaling: arXiv 1904.00962 Introduction, large batches allow learning rates "of the
  order square root of the minibatch size" (arXiv 1904.00962v5); the paper scales
  LAMB's rate with sqrt(batch) without re-tuning.
* linear scaling: Goyal et al. 2017 ("Accurate, Large Minibatch SGD"), the usual rule for
  momentum SGD (e.g. Model Garden's ResNet-50: 0.1 per 256 examples).
* The untuned-LAMB numbers come from the paper's appendix table ("square root LR scaling
  and linear-epoch warmup"). Its values were not checked against the paper's text here
  (only Table 1's batch sizes and step counts were, in tests/test_scaling.py); they are
  internally consistent: the rate grows by sqrt(2) per doubling and the warmup is 3,125
  iterations at every batch size.
"""
import dataclasses
import math

from lamb_tf import arguments
from lamb_tf import schedules

# Untuned LAMB, appendix table of arXiv 1904.00962 v5 [UNCONFIRMED, internally consistent]:
UNTUNED_LAMB_BASE_BATCH = 512  # smallest batch in the table
UNTUNED_LAMB_BASE_LEARNING_RATE = 5 / (2**3 * 10**3)  # 6.25e-4 at batch 512; 5e-3 at 32k
UNTUNED_LAMB_WARMUP_STEPS = 3125  # 1e6/320 = 500k/160 = ... = 15625/5 (caption: 0.2 x 15625)
# BERT-Large's example budget: 1,000k steps at batch 512 (Table 1, confirmed in v1), so the
# steps at batch b are 512e6 / b (15,625 at 32k, also in Table 1 and the table caption).
UNTUNED_LAMB_TOTAL_EXAMPLES = 512 * 1_000_000

SCALING_RULES = ("sqrt", "linear")


def scaled_learning_rate(base_lr, base_batch, batch, rule="sqrt"):
    """The learning rate for `batch`, scaled from `base_lr` tuned at `base_batch`.

    `rule="sqrt"`: `base_lr * sqrt(batch / base_batch)` (the paper's rule for LAMB).
    `rule="linear"`: `base_lr * batch / base_batch` (Goyal et al.; momentum SGD).
    """
    arguments.finite_at_least("base_lr", base_lr, 0)
    arguments.positive_int("base_batch", base_batch)
    arguments.positive_int("batch", batch)
    if rule == "sqrt":
        return base_lr * math.sqrt(batch / base_batch)  # lr grows with sqrt(batch)
    if rule == "linear":
        return base_lr * batch / base_batch  # lr grows with batch
    raise ValueError(f"rule must be one of {SCALING_RULES}, got {rule!r}")


@dataclasses.dataclass(frozen=True)
class UntunedLambRecipe:
    """The paper's untuned LAMB settings for one batch size (BERT pretraining budget)."""

    batch_size: int
    learning_rate: float  # peak rate, sqrt-scaled from 6.25e-4 at batch 512
    warmup_steps: int  # 3,125 at every batch size
    total_steps: int  # 512e6 examples / batch_size, rounded up

    def learning_rate_schedule(self, power=1.0):
        """Linear warmup then polynomial decay to 0 (power 1, the paper's BERT schedule
        [UNCONFIRMED in the paper; it is Google BERT's]), the active Keras flavour."""
        return schedules.WarmupPolynomialDecay(
            peak_learning_rate=self.learning_rate,
            total_steps=self.total_steps,
            warmup_steps=self.warmup_steps,
            power=power,
        )


def untuned_lamb_recipe(batch_size):
    """The paper's untuned LAMB settings at `batch_size`: sqrt LR scaling, fixed warmup.

    The table covers 512 to 32k (batch 32k: lr 5e-3, 3,125 warmup of 15,625 steps); other
    sizes apply the same two rules. The warmup must stay shorter than the run, which
    holds for batches below 163,840 (512e6 / 3,125).
    """
    arguments.positive_int("batch_size", batch_size)
    total_steps = -(-UNTUNED_LAMB_TOTAL_EXAMPLES // batch_size)  # ceil: no fewer examples
    if total_steps <= UNTUNED_LAMB_WARMUP_STEPS:
        raise ValueError(
            f"batch_size={batch_size} leaves {total_steps} steps, not more than the "
            f"{UNTUNED_LAMB_WARMUP_STEPS} warmup steps; use a batch below "
            f"{UNTUNED_LAMB_TOTAL_EXAMPLES // UNTUNED_LAMB_WARMUP_STEPS}"
        )
    return UntunedLambRecipe(
        batch_size=batch_size,
        learning_rate=scaled_learning_rate(
            UNTUNED_LAMB_BASE_LEARNING_RATE, UNTUNED_LAMB_BASE_BATCH, batch_size, rule="sqrt"
        ),
        warmup_steps=UNTUNED_LAMB_WARMUP_STEPS,
        total_steps=total_steps,
    )
