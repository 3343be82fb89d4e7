"""Model Garden integration: its optimizer factory builds lamb_tf's LAMB and LARS.

    import lamb_tf.model_garden
    lamb_tf.model_garden.register()   # explicit; importing this module changes nothing

After `register()`, every Model Garden experiment whose config says
`optimizer.type: lamb` (or `lars`) trains with `lamb_tf.tf_keras_optimizers.LAMB` (`LARS`).
Every field of Model Garden's `LAMBConfig` / `LARSConfig` (name, betas, epsilon,
weight_decay_rate, momentum, eeta, nesterov, classic_momentum, both exclusion lists,
clipnorm, clipvalue, global_clipnorm) is a keyword argument of ours with the same meaning,
so the factory passes them through unchanged.

From the command line, this module is a launcher for Model Garden's own drivers that calls
`register()` first (`nlp` runs `official/nlp/train.py`, `vision` runs
`official/vision/train.py`, with all of their flags), e.g. on the tiny experiment shipped
in `configs/model_garden/`:

    .venv/bin/python -m lamb_tf.model_garden nlp --experiment=bert/pretraining --mode=train \
        --model_dir=/tmp/mg_bert --config_file=configs/model_garden/bert_tiny_lamb.yaml

Before launching, it checks the few fields whose absence makes Model Garden crash deep in
its trainer (`missing_field`: a learning-rate `decay_steps`, a `warmup_steps`, the data's
`input_path`), and names a missing one in one line (exit status 2).

Why the tables are edited directly: Model Garden's `register_optimizer_cls` refuses keys it
already has, and `lamb`/`lars` are built in (`SHARED_OPTIMIZERS`). The factory looks the
type up in `LEGACY_OPTIMIZERS_CLS` (its default, `use_legacy_optimizer=True`, which is what
`official.core.base_task.Task.create_optimizer` uses) or `NEW_OPTIMIZERS_CLS`; both get our
classes themselves, so Model Garden's `isinstance(optimizer, table[type])` holds. Ours are
`tf_keras.optimizers.Optimizer` (the non-legacy base): the factory returns them from either
path and Model Garden's trainer runs them like its `adamw_experimental`. Legacy-only extras
cannot apply to them: differential privacy (`gradient_transformers`) and a custom
`gradient_aggregator` are refused by the constructor with one clear error. The factory's
`ema` config wraps the optimizer in Model Garden's legacy `ExponentialMovingAverage`, which
reads and sets the rate through the legacy `_get_hyper`/`_set_hyper`: ours provide them for
the learning rate (tests/test_model_garden_registration.py).
"""
import importlib
import sys

from lamb_tf import tf_keras_optimizers

# optimizer type in Model Garden's config -> our class
OPTIMIZER_CLASSES = {"lamb": tf_keras_optimizers.LAMB, "lars": tf_keras_optimizers.LARS}

# Model Garden's drivers, run by `python -m lamb_tf.model_garden <driver> ...`
DRIVERS = {"nlp": "official.nlp.train", "vision": "official.vision.train"}
# absl's help flags (as recipes.common.errors lists them; lamb_tf imports nothing of recipes/)
_HELP_FLAGS = {"--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml"}

_model_garden_classes = {}


def _factory_tables():
    from official.modeling.optimization import optimizer_factory

    return optimizer_factory.LEGACY_OPTIMIZERS_CLS, optimizer_factory.NEW_OPTIMIZERS_CLS


def register():
    """Makes Model Garden's `OptimizerFactory` build lamb_tf's LAMB/LARS for `lamb`/`lars`.

    Idempotent. Affects this process only; call it before the task builds its optimizer.
    """
    ours = set(OPTIMIZER_CLASSES.values())
    for table in _factory_tables():
        for optimizer_type, optimizer_class in OPTIMIZER_CLASSES.items():
            if table[optimizer_type] not in ours:
                _model_garden_classes.setdefault(optimizer_type, table[optimizer_type])
            table[optimizer_type] = optimizer_class


def unregister():
    """Gives `lamb`/`lars` back to Model Garden's own optimizers."""
    for table in _factory_tables():
        for optimizer_type, model_garden_class in _model_garden_classes.items():
            table[optimizer_type] = model_garden_class


def is_registered():
    """Whether Model Garden's factory currently builds lamb_tf's optimizers."""
    return all(table[optimizer_type] is optimizer_class
               for table in _factory_tables()
               for optimizer_type, optimizer_class in OPTIMIZER_CLASSES.items())


# learning-rate / warmup fields Model Garden's trainer subtracts or divides by, so None
# crashes deep inside `create_trainer` (e.g. bert/pretraining's polynomial decay_steps)
_STEP_FIELDS = ("decay_steps", "warmup_steps")


def missing_field(params, mode):
    """The dotted name of the first field whose absence makes Model Garden crash, or None.

    Checked: the active learning-rate and warmup configs' step counts, and an input for the
    data the mode reads (`input_path` or `tfds_name`; `dummy` is Model Garden's synthetic
    data where the task supports it).
    """
    optimization = params.trainer.optimizer_config
    for section in ("learning_rate", "warmup"):
        one_of = getattr(optimization, section)
        chosen = getattr(one_of, one_of.type) if one_of.type else None
        for field in _STEP_FIELDS:
            if chosen is not None and hasattr(chosen, field) and getattr(chosen, field) is None:
                return f"trainer.optimizer_config.{section}.{one_of.type}.{field}"
    reads = [("train_data", "train" in mode),
             ("validation_data", "eval" in mode or "validate" in mode)]
    for data_name, needed in reads:
        data = getattr(params.task, data_name, None)
        if needed and (data is None or not (data.input_path or data.tfds_name)):
            return f"task.{data_name}.input_path"
    return None


def _check_then(driver_main):
    """`driver_main`, run only after the flags and the experiment config pass the checks."""
    from absl import flags
    from official.core import train_utils

    def checked_main(argv):
        flags_obj = flags.FLAGS
        for flag in ("experiment", "mode", "model_dir"):
            if not getattr(flags_obj, flag):
                _usage_error(f"--{flag} is required")
        try:
            params = train_utils.parse_configuration(flags_obj, lock_return=False, print_return=False)
        except (KeyError, ValueError, TypeError, AttributeError) as error:
            _usage_error(f"the experiment config is invalid: {error}")
        missing = missing_field(params, flags_obj.mode)
        if missing:
            _usage_error(f"{missing} is not set, and Model Garden's trainer crashes without it: "
                         "set it in --config_file or --params_override "
                         "(e.g. configs/model_garden/bert_tiny_lamb.yaml)")
        return driver_main(argv)

    return checked_main


def _usage_error(message):
    print(f"lamb_tf.model_garden: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    """`python -m lamb_tf.model_garden {nlp|vision} <Model Garden flags>`."""
    usage = (f"usage: python -m lamb_tf.model_garden {{{'|'.join(DRIVERS)}}} "
             "--experiment=... --mode=train --model_dir=... [--config_file=...] "
             "[--params_override=...]")
    if set(sys.argv[1:2]) & _HELP_FLAGS:  # before a driver: this launcher's own usage
        print(f"{usage}\nModel Garden's own trainer ({', '.join(DRIVERS.values())}) with "
              "lamb_tf's LAMB and LARS as its 'lamb' and 'lars' optimizers; its flags: "
              f"python -m lamb_tf.model_garden {next(iter(DRIVERS))} --helpfull")
        sys.exit(0)
    if len(sys.argv) < 2 or sys.argv[1] not in DRIVERS:
        print(f"{usage}; got {sys.argv[1:2] or 'no driver'}", file=sys.stderr)
        sys.exit(2)
    driver = importlib.import_module(DRIVERS[sys.argv.pop(1)])
    from absl import app
    from official.common import flags as tfm_flags

    # what the driver's own `if __name__ == "__main__"` block does, with the required
    # flags checked by `_check_then` (one line, status 2) instead of absl's
    tfm_flags.define_flags()
    register()
    try:
        app.run(_check_then(driver.main))
    except SystemExit as finished:
        # absl prints --help/--helpfull and exits with status 1; asked-for help is a success
        if finished.code == 1 and set(sys.argv[1:]) & _HELP_FLAGS:
            sys.exit(0)
        raise


if __name__ == "__main__":
    main()
