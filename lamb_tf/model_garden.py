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

    python -m lamb_tf.model_garden nlp --experiment=bert/pretraining --mode=train \
        --model_dir=/tmp/mg_bert --config_file=configs/model_garden/bert_tiny_lamb.yaml

Before launching, it checks the few fields whose absence makes Model Garden crash deep in
its trainer (`REQUIRED_FIELDS`), and names a missing one in one line (exit status 2).

Why the tables are edited directly: Model Garden's `register_optimizer_cls` refuses keys it
already has, and `lamb`/`lars` are built in (`SHARED_OPTIMIZERS`). The factory looks the
type up in `LEGACY_OPTIMIZERS_CLS` (its default, `use_legacy_optimizer=True`, which is what
`official.core.base_task.Task.create_optimizer` uses) or `NEW_OPTIMIZERS_CLS`; both get our
classes themselves, so Model Garden's `isinstance(optimizer, table[type])` holds. Ours are
`tf_keras.optimizers.Optimizer` (the non-legacy base): the factory returns them from either
path and Model Garden's trainer runs them like its `adamw_experimental`. Legacy-only extras
cannot apply to them: differential privacy (`gradient_transformers`) and a custom
`gradient_aggregator` are refused by the constructor with one clear error; the factory's
`ema` config wraps the optimizer in Model Garden's legacy `ExponentialMovingAverage`, which
is untested with ours.
"""
import importlib
import sys

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


def main():
    """`python -m lamb_tf.model_garden {nlp|vision} <Model Garden flags>`."""
    if len(sys.argv) < 2 or sys.argv[1] not in DRIVERS:
        print(f"usage: python -m lamb_tf.model_garden {{{'|'.join(DRIVERS)}}} "
              "--experiment=... --mode=train --model_dir=... [--params_override=...]; "
              f"got {sys.argv[1:2] or 'no driver'}", file=sys.stderr)
        sys.exit(2)
    driver = importlib.import_module(DRIVERS[sys.argv.pop(1)])
    from absl import app
    from absl import flags
    from official.common import flags as tfm_flags

    # what the driver's own `if __name__ == "__main__"` block does
    tfm_flags.define_flags()
    flags.mark_flags_as_required(["experiment", "mode", "model_dir"])
    register()
    app.run(driver.main)


if __name__ == "__main__":
    main()
