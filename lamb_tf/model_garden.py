"""Model Garden integration: its optimizer factory builds lamb_tf's LAMB and LARS.

    import lamb_tf.model_garden
    lamb_tf.model_garden.register()   # explicit; importing this module changes nothing

After `register()`, every Model Garden experiment whose config says
`optimizer.type: lamb` (or `lars`) trains with `lamb_tf.tf_keras_optimizers.LAMB` (`LARS`).
Every field of Model Garden's `LAMBConfig` / `LARSConfig` (name, betas, epsilon,
weight_decay_rate, momentum, eeta, nesterov, classic_momentum, both exclusion lists,
clipnorm, clipvalue, global_clipnorm) is a keyword argument of ours with the same meaning,
so the factory passes them through unchanged.

From the command line, `python -m lamb_tf.model_garden nlp|vision ...` runs Model Garden's
own drivers with `register()` called first: `lamb_tf.model_garden_launcher`.

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
from lamb_tf import tf_keras_optimizers

# optimizer type in Model Garden's config -> our class
OPTIMIZER_CLASSES = {"lamb": tf_keras_optimizers.LAMB, "lars": tf_keras_optimizers.LARS}

# Model Garden's drivers, run by `python -m lamb_tf.model_garden <driver> ...`
DRIVERS = {"nlp": "official.nlp.train", "vision": "official.vision.train"}
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
    for data_name in data_read_by(mode):
        data = getattr(params.task, data_name, None)
        if data is None or not (data.input_path or data.tfds_name):
            return f"task.{data_name}.input_path"
    return None


def data_read_by(mode):
    """The task's data configs Model Garden's driver reads in `mode` (its `run_experiment`:
    training data for every mode with "train", validation data for every mode that
    evaluates or validates)."""
    reads = (("train_data", "train" in mode),
             ("validation_data", "eval" in mode or "validate" in mode))
    return [data_name for data_name, read in reads if read]


if __name__ == "__main__":  # python -m lamb_tf.model_garden
    from lamb_tf import model_garden_launcher

    model_garden_launcher.main()
