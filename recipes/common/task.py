"""The task interface: what a recipe gives the shared driver (`recipes/common/driver.py`).

A recipe is a `Task` subclass plus its config schema; the driver does everything else, once:
flags, loading and validating the config, the strategy and batch plan, seeds, the
per-worker directory, gradient accumulation, the optimizer (`optimizer.name`: lamb, lars,
adamw, momentum), compiling, restoring, checkpointed training, evaluation, export,
`results.json` and the one-line user errors. Model Garden's `base_task.Task` plus
`train_lib.run_experiment` is the same split, smaller.

The driver calls, in order (a method the task does not need keeps the default):

    task = TaskClass(config)            # config: a validated `config_class` instance
    task.mode = mode                    # the --mode it runs in (None: a study's check)
    task.check_config()                 # before anything is printed or written
    task.check_data(mode, model_dir)    # the data mode reads is there (nothing written
                                        # yet; a study checks every run's first)
    task.evaluation_dir = ...           # where the evaluation writes: model_dir, or its
                                        # eval_<name>/ for other held-out data
    task.prepare(model_dir, mode)       # find / prepare data (no model yet)
    with strategy.scope():
        network = task.build_model()    # the tf_keras model to train
        ... wrap for accumulation, compile with task.compile_arguments()
    task.train_replica_dataset(context, plan, seed, steps_to_skip)
                                        # per input pipeline and checkpoint chunk, joined
                                        # by `train_dataset` below
    task.evaluate(model, strategy)      # held-out metrics by name
    task.export_step = ...              # the step of the weights it exports
    task.export(export_dir)             # the SavedModel of `network`

A new recipe: a module `recipes/<name>/<program>.py` holding the `Task` subclass and

    if __name__ == "__main__":
        driver.main(MyTask)

and a schema whose shared sections are `recipes.common.schema`'s (see there).
docs/writing_a_recipe.md is a whole recipe in one file.
"""

import functools

import tensorflow as tf

from recipes.common.errors import UserError  # noqa: F401  (tasks raise it)


class Task:
    """One recipe on the shared driver. Subclass; set the class attributes."""

    # The config schema: a dataclass whose `train`, `optimizer`, `eval`, `runtime` and
    # `export` fields are the shared sections of recipes.common.schema (or subclasses).
    config_class = None
    # The export goes to <model_dir>/<export_subdir> when export.dir is "".
    export_subdir = "export"
    # Weight-decay exclusions when optimizer.exclude_from_weight_decay is null.
    default_exclude_from_weight_decay = ()
    # Config keys (or prefixes ending in ".") a resumed run may not change: the checkpoint
    # would not mean the same model or data any more. Other changes are printed.
    fixed_on_resume = ("model.",)
    # Keys of `fixed_on_resume` that name held-out data only (fine-tuning's data.eval_file):
    # --mode=eval may change them, to evaluate the run on other data (its results go to
    # <model_dir>/eval_<the file's name>/, `evaluation_dir`; the run's own results.json and
    # config.yaml stay as they were), and --mode=export, which reads no held-out data too.
    held_out_keys = ()
    # What a train.init_checkpoint that does not fit the model needs, for its error line.
    init_checkpoint_fits = ("both runs need the same model.* shape and vocabulary / number of "
                            "classes")
    # The --mode the driver runs the task in (train | eval | train_and_eval | export), set
    # before `check_config`; None outside the driver (a study's checks): check as for training.
    mode = None
    # Where the evaluation writes (its results.json, eval/ summaries and any file of the
    # task's own, as SQuAD's predictions.json): the process's model_dir, or for other
    # held-out data (`held_out_keys`) its eval_<name>/; set by the driver before `prepare`.
    evaluation_dir = None
    # The optimizer step of the weights `export` writes (the run's step when it exports);
    # set by the driver before it calls `export`.
    export_step = None

    def __init__(self, config):
        self.config = config

    def check_config(self):
        """Recipe-level checks across keys that the schema's types cannot express; raise
        `UserError` (one line). Runs before the config is printed or anything is written."""

    def check_data(self, mode, model_dir):
        """Checks, writing nothing, that the data `mode` reads is there (the files a
        configured glob names, say, or the corpus a preparation into `model_dir` would read,
        unless one finished there); raise `UserError` (one line). The driver calls it
        after the config checks, before the strategy is made (no TPU is connected, no
        line printed), and a study for each of its runs before the first starts, so a
        missing file is found before any directory is made. Data that `prepare` makes is
        not missing; `prepare` may check again."""

    def prepare(self, model_dir, mode):
        """Finds or prepares the data for `mode` (train | eval | train_and_eval | export);
        `model_dir` is this process's directory. Raise `UserError` for missing data."""

    def build_model(self):
        """The tf_keras model to train, built inside the strategy scope. The driver wraps it
        for gradient accumulation and compiles it; keep what `export` needs on `self`."""
        raise NotImplementedError

    def compile_arguments(self):
        """Keyword arguments for `Model.compile` besides the optimizer: `loss` and
        `metrics` and/or `weighted_metrics`."""
        raise NotImplementedError

    def train_replica_dataset(self, input_context, plan, seed, steps_to_skip):
        """Endless training batches of one input pipeline (`input_context`, as for
        `strategy.distribute_datasets_from_function`: one batch per local replica and
        optimizer step), shuffled with `seed`, without the batches of the first
        `steps_to_skip` optimizer steps. The same arguments must give the same batches
        (exact resume: see `train_dataset`). `plan` is the `lamb_tf.accumulation.BatchPlan`."""
        raise NotImplementedError

    def evaluate(self, model, strategy):
        """Runs the held-out evaluation of the compiled `model`; returns {metric: float}."""
        raise NotImplementedError

    def describe_evaluation(self, results):
        """The evaluation results as one line for the console."""
        return " ".join(f"{name}={value:.4f}" for name, value in sorted(results.items()))

    def export(self, export_dir):
        """Writes the serving SavedModel to `export_dir` (atomically:
        `recipes.common.export.export_saved_model`)."""
        raise NotImplementedError

    def explain_input_error(self, error, split):
        """A `UserError` naming the bad record or file behind a TF input error raised
        while reading `split` ("train" or "eval"), or None to let the error through."""
        return None

    def input_files(self, split):
        """The files `split` ("train" or "eval"; "export": what `export` reads, a vocabulary)
        reads, as listed when the run started (after `prepare`): a `NotFoundError` that
        names one of them is the driver's one line for a file that went missing mid-run,
        and the driver holds their directories while the run reads them (`held_inputs`).
        Empty: such an error goes through."""
        return ()


def chunk_input_position(first_step, checkpoint_every):
    """`(seed_offset, steps_to_skip)` for the input pipeline of the chunk from `first_step`.

    Each checkpoint chunk shuffles with `train.seed + seed_offset`, where `seed_offset` is
    the chunk's regular start (the multiple of `checkpoint_every` at or below `first_step`),
    and skips the `steps_to_skip` steps of its chunk that a run stopped mid-chunk (SIGTERM)
    has already trained. So the batch of a step never depends on where the run started, and
    no pipeline re-reads what earlier chunks consumed: resuming late in a long run starts
    as fast as the first chunk.
    """
    seed_offset = first_step - first_step % checkpoint_every
    return seed_offset, first_step - seed_offset


def checkpoint_chunks(first_step, end_step, checkpoint_every):
    """(start, end) of the checkpoint chunks from `first_step` to `end_step`: after a
    checkpoint saved on SIGTERM the first one ends at the next multiple of
    `checkpoint_every`."""
    start = first_step
    while start < end_step:
        end = min(end_step, (start // checkpoint_every + 1) * checkpoint_every)
        yield start, end
        start = end


def _check_batches(task, pipeline, batch_size):
    """A UserError for a `train_replica_dataset` known to end (a missing .repeat() trained
    part of the run and exited 0), or whose elements are not batches of `batch_size` (by
    their static shape; an unbatched one was an IndexError's traceback in the
    accumulation)."""
    shapes = [spec.shape for spec in tf.nest.flatten(pipeline.element_spec)
              if isinstance(spec, tf.TensorSpec)]
    batches = int(pipeline.cardinality())  # -1: endless; -2: not known before reading
    if batches >= 0:
        raise UserError(
            f"{type(task).__name__}.train_replica_dataset gives {batches} batches, then ends: "
            "training reads it endlessly (a run trains train.steps steps, whatever the data's "
            "size); put .repeat() before its .batch(...)")
    wrong = [shape for shape in shapes if shape.rank == 0 or shape[0] not in (None, batch_size)]
    if wrong:
        raise UserError(
            f"{type(task).__name__}.train_replica_dataset gives elements of shape "
            f"{wrong[0].as_list()}, not batches of plan.per_replica_batch_size={batch_size}: "
            "end it with .batch(plan.per_replica_batch_size, drop_remainder=True)")


def train_dataset(task, strategy, plan, first_step, end_step):
    """The distributed dataset of one `fit` over the checkpoint chunks from step
    `first_step` to `end_step`: each chunk's own pipeline (`task.train_replica_dataset` at
    `chunk_input_position`) cut to the chunk's steps (but the last, which goes on), joined
    and prefetched. One iterator runs through every chunk, the next chunk's pipeline starts
    while the previous chunk's last steps train, and the batches are those of a pipeline
    made afresh at each chunk: a run resumed from any checkpoint reads the same ones.
    (tf.data's own iterator checkpoint cannot do this here: TF 2.20 saves no `tf.distribute`
    strategy's iterator; docs/reliability.md.)"""
    config = task.config.train
    chunks = list(checkpoint_chunks(first_step, end_step, config.checkpoint_every))

    def replica_dataset(context):
        replicas = context.num_replicas_in_sync // context.num_input_pipelines
        pipelines = []
        for start, end in chunks:
            seed_offset, steps_to_skip = chunk_input_position(start, config.checkpoint_every)
            pipeline = task.train_replica_dataset(context, plan, config.seed + seed_offset,
                                                  steps_to_skip)
            _check_batches(task, pipeline, plan.per_replica_batch_size)
            pipelines.append(pipeline.take(
                (end - start) * replicas if end < end_step else -1))  # -1: endless
        # Endless, as each chunk's pipeline: one exactly as long as its `fit` trained the
        # BERT recipe to other weights on the same batches (cause not traced).
        return functools.reduce(tf.data.Dataset.concatenate, pipelines).prefetch(
            tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(replica_dataset)
