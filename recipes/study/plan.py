"""The study's grid: which recipe runs a batch-size study needs, and their settings.

Every batch size trains the same number of epochs, so a batch B takes
steps = round(epochs x train_examples / B). The peak learning rate of optimizer o at batch
B follows the rule from the base learning rate at the base batch:

* `sqrt` (the LAMB paper's rule, arXiv 1904.00962 section 4): lr = base x sqrt(B / base),
  with the same number of warmup updates at every batch size;
* `linear` (Goyal et al., arXiv 1706.02677): lr = base x B / base, with the warmup covering
  the same number of examples at every batch size (warmup updates x base / B, at least 1).

Each cell (optimizer, batch) sweeps the rule's learning rate times each multiplier with the
first seed; the best is then rerun with the other seeds. An "untuned" optimizer also gets a
line at the square-root rule's own learning rate (multiplier 1, every seed, no sweep).
"""
import dataclasses
import difflib
import math

from recipes.common.schema import MAX_STEPS, OPTIMIZERS


@dataclasses.dataclass(frozen=True)
class Run:
    """One recipe run of the study (its name is its model directory's)."""

    optimizer: str
    global_batch_size: int
    micro_batch_size: int
    steps: int
    warmup_steps: int
    learning_rate: float
    seed: int

    @property
    def name(self):
        return (
            f"{self.optimizer}_b{self.global_batch_size}_lr{self.learning_rate:.6g}"
            f"_w{self.warmup_steps}_s{self.seed}"
        )


@dataclasses.dataclass(frozen=True)
class StudySettings:
    batch_sizes: tuple  # global batch sizes, ascending
    optimizers: tuple  # optimizer.name values to sweep
    base_learning_rates: dict  # optimizer -> peak learning rate at base_batch_size
    base_batch_size: int
    lr_rule: str  # "sqrt" | "linear"
    lr_multipliers: tuple  # the sweep around the rule's learning rate
    warmup_steps: int  # at the base batch (sqrt: at every batch)
    epochs: float
    train_examples: int
    micro_batch_size: int
    seeds: tuple  # the first one sweeps
    untuned: tuple = ()  # optimizers that also get the untuned sqrt-rule line


class PlanError(ValueError):
    """A study setting that cannot work; one line."""


def steps_for(settings, batch_size):
    return max(1, round(settings.epochs * settings.train_examples / batch_size))


def rule_learning_rate(settings, optimizer, batch_size, rule):
    power = 0.5 if rule == "sqrt" else 1.0
    ratio = batch_size / settings.base_batch_size
    return float(f"{settings.base_learning_rates[optimizer] * ratio**power:.6g}")


def warmup_for(settings, batch_size, rule):
    """The sqrt rule's `--warmup_steps` updates at every batch; the linear rule's warmup
    over the same examples at every batch, at least one update (none with 0)."""
    if rule == "sqrt" or settings.warmup_steps == 0:
        return settings.warmup_steps
    return max(1, round(settings.warmup_steps * settings.base_batch_size / batch_size))


def _run(settings, optimizer, batch_size, rule, multiplier, seed):
    learning_rate = rule_learning_rate(settings, optimizer, batch_size, rule) * multiplier
    return Run(
        optimizer=optimizer,
        global_batch_size=batch_size,
        micro_batch_size=settings.micro_batch_size,
        steps=steps_for(settings, batch_size),
        warmup_steps=warmup_for(settings, batch_size, rule),
        learning_rate=float(f"{learning_rate:.6g}"),
        seed=seed,
    )


def sweep_runs(settings):
    """{(optimizer, batch): [runs of the learning-rate sweep, first seed]}."""
    return {
        (optimizer, batch): [
            _run(settings, optimizer, batch, settings.lr_rule, multiplier, settings.seeds[0])
            for multiplier in settings.lr_multipliers
        ]
        for optimizer in settings.optimizers
        for batch in settings.batch_sizes
    }


def untuned_runs(settings):
    """{(optimizer, batch): [the sqrt rule's own learning rate, every seed]}."""
    return {
        (optimizer, batch): [
            _run(settings, optimizer, batch, "sqrt", 1.0, seed) for seed in settings.seeds
        ]
        for optimizer in settings.untuned
        for batch in settings.batch_sizes
    }


def seed_runs(best_run, seeds):
    """The reruns of a cell's best sweep run with the other seeds."""
    return [dataclasses.replace(best_run, seed=seed) for seed in seeds[1:]]


def check(settings):
    """Raises `PlanError` for settings no run could satisfy, before anything runs."""
    for flag, names in (("--optimizers", settings.optimizers), ("--untuned", settings.untuned),
                        ("--base_lr", tuple(settings.base_learning_rates))):
        for name in names:
            if name not in OPTIMIZERS:
                close = difflib.get_close_matches(name, OPTIMIZERS, n=1)
                raise PlanError(
                    f"{flag}: {name!r} is not an optimizer of the recipes (optimizer.name: "
                    f"{', '.join(OPTIMIZERS)})" + (f"; did you mean {close[0]}?" if close else ""))
    for optimizer in settings.optimizers + settings.untuned:
        if optimizer not in settings.base_learning_rates:
            raise PlanError(
                f"--base_lr has no learning rate for optimizer {optimizer!r}; add "
                f"{optimizer}=LR (its peak learning rate at batch {settings.base_batch_size})"
            )
    for batch in settings.batch_sizes:
        if batch % settings.micro_batch_size:
            raise PlanError(
                f"--batch_sizes: {batch} is not a multiple of --micro_batch_size="
                f"{settings.micro_batch_size}; pick batch sizes that are"
            )
        steps = steps_for(settings, batch)
        if steps > MAX_STEPS:
            raise PlanError(
                f"--epochs={settings.epochs:g} of --train_examples={settings.train_examples:,}"
                f" is {steps:.3g} steps at batch {batch}, more than a step counter (an int64) "
                "holds; give a budget of epochs a run can finish")
        rules = {settings.lr_rule} | ({"sqrt"} if settings.untuned else set())
        for rule in rules:
            warmup = warmup_for(settings, batch, rule)
            if warmup >= steps:
                raise PlanError(
                    f"batch {batch} trains only {steps} step{'s' * (steps != 1)} in "
                    f"{settings.epochs:g} epochs, not more than its {warmup} warmup "
                    f"step{'s' * (warmup != 1)}; "
                    f"lower --warmup_steps, raise --epochs, or leave batch {batch} out of "
                    "--batch_sizes"
                )
    for runs in [*sweep_runs(settings).values(), *untuned_runs(settings).values()]:
        for run in runs:
            if not (math.isfinite(run.learning_rate) and run.learning_rate > 0):
                raise PlanError(
                    f"{run.optimizer} at batch {run.global_batch_size} gets learning rate "
                    f"{run.learning_rate:g} "
                    f"(--base_lr x the {settings.lr_rule} rule x --lr_multipliers); lower "
                    "--base_lr or --lr_multipliers"
                )
    if len(set(settings.seeds)) != len(settings.seeds):
        raise PlanError(f"--seeds={','.join(map(str, settings.seeds))} repeats a seed")
