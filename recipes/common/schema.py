"""The config sections every recipe shares: train, optimizer, eval, runtime, export.

A recipe's schema (a dataclass, `Task.config_class`) holds these five as fields, with its
own defaults through `default_factory`, next to its own sections (data, model). Keys with
the same name mean the same thing in every recipe; `check` validates them all at once,
before the driver prints or writes anything. docs/ARCHITECTURE.md maps the task interface.
"""

import dataclasses
import math
from typing import Optional

from recipes.common.config import path_field
from recipes.common.errors import UserError

OPTIMIZERS = ("lamb", "lars", "adamw", "momentum")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
MAX_STEPS = 2**63 - 1  # the optimizer's step counter (`iterations`) is an int64

# Old key -> new key: an old key in a config file or override is one error naming the new.
RENAMED_KEYS = {
    "train.precision": "runtime.precision",
    "runtime.mixed_precision": "runtime.precision",
    "train.jit_compile": "runtime.jit_compile",
    "eval.batch_size": "eval.global_batch_size",
    "export.export_dir": "export.dir",
}


@dataclasses.dataclass
class TrainConfig:
    """Batch arithmetic, step counts, checkpoints, logging and the run's seed."""
    # Examples per optimizer update, over all replicas and micro-batches.
    global_batch_size: int = 2048
    # Examples per replica per forward/backward pass; accumulation steps
    # k = global_batch_size / (replicas * micro_batch_size).
    micro_batch_size: int = 256
    # Optimizer updates (not micro-batches) in the run.
    steps: int = 120
    # A checkpoint every this many updates; `steps` must be a multiple of it.
    checkpoint_every: int = 20
    # Write each checkpoint on a background thread (TensorFlow's async checkpoint, as Orbit's
    # `enable_async_checkpointing`): the step waits only for a copy of the variables.
    async_checkpoint: bool = False
    # Optimizer updates run in one tf.function call (Keras' steps_per_execution); Keras calls
    # back once per call: `checkpoint_every` and `log_every` must be multiples of it.
    steps_per_execution: int = 1
    # TensorBoard scalars (loss, metrics, learning rate, examples/s, what the training step
    # logs, trust ratios) and progress lines at the multiples of this many updates.
    log_every: int = 5
    # Seed of the run: initialisation, dropout, input shuffling and augmentation.
    seed: int = 1
    # Weights-only initialisation from another run (a model_dir or a checkpoint path),
    # used only when model_dir has no checkpoint; optimizer state and step start fresh.
    init_checkpoint: str = path_field("")


@dataclasses.dataclass
class OptimizerConfig:
    """`name` picks the update rule; a schedule of linear warmup then polynomial decay."""
    # lamb | lars (lamb_tf) | adamw (Model Garden's AdamWeightDecay, BERT's baseline) |
    # momentum (tf_keras SGD with momentum).
    name: str = "lamb"
    # Peak learning rate, reached at the end of the warmup.
    learning_rate: float = 0.02
    # Updates of linear warmup from 0 to `learning_rate`.
    warmup_steps: int = 5
    # Power of the polynomial decay to `end_learning_rate` at train.steps (1 = linear).
    decay_power: float = 1.0
    # Rate at train.steps, at most `learning_rate`.
    end_learning_rate: float = 0.0
    # true: the decay runs over all steps, warmup included (Google BERT); false: it starts
    # at the peak when the warmup ends (the LAMB authors' ResNet run, MLPerf LARS).
    decay_includes_warmup: bool = True
    # Weight decay rate (LAMB's lambda; L2 inside the update for LARS; the decoupled rate
    # of adamw and momentum).
    weight_decay_rate: float = 0.01
    # Regexes searched in variable paths; null = the recipe's default list, [] = none.
    exclude_from_weight_decay: Optional[list[str]] = None
    # LAMB/LARS: variables that keep trust ratio 1; null = same as weight decay.
    exclude_from_layer_adaptation: Optional[list[str]] = None
    # Clip the accumulated, all-reduced gradient to this global norm; null = no clipping.
    global_clipnorm: Optional[float] = 1.0
    # lamb, adamw: decay of the first moment m.
    beta_1: float = 0.9
    # lamb, adamw: decay of the second moment v.
    beta_2: float = 0.999
    # lamb, adamw: added to sqrt(v) in the denominator.
    epsilon: float = 1e-6
    # lamb only: false drops 1/(1 - beta^t) (paper appendix).
    bias_correction: bool = True
    # lars, momentum: the momentum coefficient.
    momentum: float = 0.9
    # lars, momentum: Nesterov momentum.
    nesterov: bool = False
    # lars only: the trust coefficient.
    eeta: float = 0.001
    # lars only: true, the learning rate inside the momentum buffer and the trust ratio from
    # the gradient; false, the rate after the momentum, the ratio from the momentum update.
    classic_momentum: bool = True


@dataclasses.dataclass
class EvalConfig:
    """Held-out evaluation."""
    # Examples per evaluation batch, over all replicas.
    global_batch_size: int = 256
    # Batches to evaluate; 0 = the whole held-out set once.
    steps: int = 0


@dataclasses.dataclass
class RuntimeConfig:
    """How the step is computed (not what it computes)."""
    # Keras dtype policy: float32 | mixed_bfloat16 (TPU) | mixed_float16 (GPU, loss scaling).
    precision: str = "float32"
    # Compile the training step with XLA (true on TPU; slower than TF's kernels on CPU).
    jit_compile: bool = False


@dataclasses.dataclass
class ExportConfig:
    """The SavedModel written after training and by --mode=export."""
    # Export after training (--mode=export always exports).
    enabled: bool = True
    # Where; "" = <model_dir>/<the recipe's export directory name>.
    dir: str = path_field("")


# The train section's counts that must be above 0 (`check`).
POSITIVE_TRAIN_KEYS = ("global_batch_size", "micro_batch_size", "steps", "checkpoint_every",
                       "steps_per_execution", "log_every")


def check(config):
    """Validates the shared sections of `config`; raises one-line `UserError`s."""
    train, optimizer = config.train, config.optimizer
    check_positive("train", train, POSITIVE_TRAIN_KEYS)
    if train.steps > MAX_STEPS:
        raise UserError(f"train.steps={train.steps} is more than the optimizer's step counter "
                        f"(an int64) holds; give at most {MAX_STEPS:,}")
    check_steps(train.steps, train.checkpoint_every)
    _check_callback_steps(train)
    _check_micro_batch(train)
    if not 0 <= train.seed < 2**32:
        raise UserError(f"train.seed={train.seed} must be from 0 to 2**32 - 1 (TensorFlow's and "
                        "NumPy's seeds)")
    if config.eval.global_batch_size <= 0:
        raise UserError(f"eval.global_batch_size={config.eval.global_batch_size} must be "
                        "positive: the examples of one evaluation step")
    if config.eval.steps < 0:
        raise UserError(f"eval.steps={config.eval.steps} must be at least 0 (0 = the whole "
                        "held-out set)")
    if config.runtime.precision not in PRECISIONS:
        raise UserError(
            f"runtime.precision={config.runtime.precision!r} is not one of "
            f"{', '.join(PRECISIONS)}"
        )
    _check_optimizer(optimizer, train.steps)


def check_positive(section, config, keys):
    """A UserError for the first of `keys` of `config` (the section named `section`) that
    is not a finite number above 0."""
    for key in keys:
        value = getattr(config, key)
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"{section}.{key}={value} must be positive")


def check_rates(section, config, keys):
    """A UserError for the first of `keys` (dropout rates) not in [0, 1)."""
    for key in keys:
        value = getattr(config, key)
        if not 0 <= value < 1:
            raise UserError(f"{section}.{key}={value} must be at least 0 and below 1")


def check_steps(steps, checkpoint_every):
    """`train.steps` must be a whole number of checkpoint chunks."""
    if steps % checkpoint_every:
        raise UserError(
            f"train.steps={steps} is not a multiple of train.checkpoint_every="
            f"{checkpoint_every}; use {_nearest_multiples('train.steps', steps, checkpoint_every)}"
            ", or another checkpoint_every"
        )


def _check_callback_steps(train):
    """Keras runs `steps_per_execution` updates per call and calls back only after a call,
    so the scalars and progress lines at the multiples of `log_every` are written only where
    a call ends. A chunk of `checkpoint_every` updates that is no multiple of the call ends
    with a shorter call, which moves every later call's end off those multiples."""
    per_call = train.steps_per_execution
    for key in ("checkpoint_every", "log_every"):
        value = getattr(train, key)
        if value % per_call:
            raise UserError(
                f"train.{key}={value} is not a multiple of train.steps_per_execution="
                f"{per_call} (Keras calls back once per {per_call} updates); use "
                f"{_nearest_multiples('train.' + key, value, per_call)}, or another "
                "steps_per_execution"
            )


def _check_micro_batch(train):
    """The micro-batch divides the global batch whatever the replicas (global = replicas x
    micro-batch x accumulation steps), checked here, before a TPU is connected; whether the
    replicas divide it too is known once the strategy is made (`driver.plan_batch`)."""
    batch, micro = train.global_batch_size, train.micro_batch_size
    if batch % micro:
        # (imported only here: the study's planner reads this module without TensorFlow)
        from lamb_tf import accumulation  # pylint: disable=import-outside-toplevel

        micros = " or ".join(map(str, accumulation.micro_batch_choices(batch, micro)))
        raise UserError(
            f"train.global_batch_size={batch} is not divisible by train.micro_batch_size="
            f"{micro}, whatever the replicas (global = replicas x micro-batch x accumulation "
            f"steps); use train.micro_batch_size={micros}, or "
            f"{_nearest_multiples('train.global_batch_size', batch, micro)}")


def _nearest_multiples(key, value, divisor):
    """`key=4 or 6`: the multiples of `divisor` either side of `value` (one if below it)."""
    lower = value - value % divisor
    upper = lower + divisor
    return f"{key}={lower} or {upper}" if lower else f"{key}={upper}"


def _check_optimizer(optimizer, steps):
    if optimizer.name not in OPTIMIZERS:
        raise UserError(
            f"optimizer.name={optimizer.name!r} is not one of {', '.join(OPTIMIZERS)}"
        )
    if not 0 <= optimizer.warmup_steps < steps:
        raise UserError(
            f"optimizer.warmup_steps={optimizer.warmup_steps} must be at least 0 and less "
            f"than train.steps={steps}"
        )
    for key in ("learning_rate", "end_learning_rate", "weight_decay_rate"):
        value = getattr(optimizer, key)
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"optimizer.{key}={value} must be a finite number >= 0")
    if optimizer.end_learning_rate > optimizer.learning_rate:  # a decay that would rise
        raise UserError(
            f"optimizer.end_learning_rate={optimizer.end_learning_rate} is above "
            f"optimizer.learning_rate={optimizer.learning_rate}, the peak it decays from; "
            "give an end rate at most the peak (0: decay to zero)")
    # The library's own checks of these arguments (the optimizers and the schedule make them
    # too, but only once the data is prepared and the model built), before any work
    from lamb_tf import arguments, exclusions

    checks = {"beta_1": arguments.beta, "beta_2": arguments.beta, "epsilon": arguments.positive,
              "momentum": arguments.unit_interval, "eeta": arguments.positive,
              "decay_power": arguments.positive,
              "exclude_from_weight_decay": exclusions.validate_patterns,
              "exclude_from_layer_adaptation": exclusions.validate_patterns}
    for key, check in checks.items():
        try:
            check(f"optimizer.{key}", getattr(optimizer, key))
        except (ValueError, TypeError) as error:
            raise UserError(str(error).rstrip(".")) from None
    if optimizer.global_clipnorm is not None and not 0 < optimizer.global_clipnorm < math.inf:
        raise UserError(
            f"optimizer.global_clipnorm={optimizer.global_clipnorm} must be a positive number; "
            "write null for no clipping"
        )
