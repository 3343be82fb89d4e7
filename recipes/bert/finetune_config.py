"""The BERT fine-tuning config: schema dataclasses, one commented field per key.

Shared sections (train, optimizer, eval, runtime, export) are `recipes.common.schema`'s;
the defaults below are the embedded task on AdamW (learning rate 1e-4), what runs without
--config_file; configs/bert/finetune_stdlib.yaml sets every key of the embedded task with
its reason (LAMB at 0.01), configs/bert/finetune_squad_v1.yaml carries BERT's SQuAD recipe.
"""
import dataclasses
from typing import Optional

from recipes.common import schema
from recipes.common.config import path_field
from recipes.common.errors import UserError

TASKS = ("stdlib", "classification", "squad")
# The data keys each task reads (stdlib builds its files from encoder.pretraining_dir).
TASK_KEYS = {"stdlib": (), "classification": ("train_file", "eval_file", "labels"),
             "squad": ("train_file", "eval_file")}
INITS = ("pretrained", "none")


def files_read(task, mode):
    """The task file keys --mode `mode` reads (None: as training): evaluation reads the
    held-out file only, export neither (the labels and input kind are the run's)."""
    if task == "stdlib" or mode == "export":
        return ()
    return ("eval_file",) if mode == "eval" else ("train_file", "eval_file")


@dataclasses.dataclass
class EncoderConfig:
    """Where the encoder comes from."""
    # A pretraining run's model_dir. Its `model_garden/` export gives the encoder's shape
    # (encoder.yaml), the vocabulary (vocab.txt) and the weights; its config.yaml the
    # sequence length pretraining used.
    pretraining_dir: str = path_field("")
    # pretrained: start from the run's encoder weights; none: an encoder of the same shape
    # and vocabulary with random weights (the comparison without pretraining).
    init: str = "pretrained"
    # Dropout inside the encoder while fine-tuning (BERT: 0.1).
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1


@dataclasses.dataclass
class DataConfig:
    """The task and its files."""
    # stdlib: which standard-library module a passage of the pretraining run's held-out
    # documents comes from (built from pretraining_dir, nothing to give);
    # classification: `train_file` / `eval_file` in .tsv or .jsonl (sentence or
    # sentence1 + sentence2, label); squad: SQuAD v1.1 JSON files.
    task: str = "stdlib"
    train_file: str = path_field("")
    eval_file: str = path_field("")
    # classification: the label order (the model's class ids); null = the sorted labels of
    # the training file.
    labels: Optional[list[str]] = None
    # Pieces per input, [CLS] and [SEP]s included; 0 = the pretraining run's. At most the
    # pretraining run's (longer inputs would reach position embeddings it never trained).
    seq_length: int = 0
    # squad: windows over a long context start this many pieces apart (BERT: 128).
    doc_stride: int = 128
    # squad: questions are cut to this many pieces (BERT: 64).
    max_query_length: int = 64
    # squad: start and end candidates per window when decoding (BERT: 20).
    n_best_size: int = 20
    # squad: the longest answer, in pieces (BERT: 30).
    max_answer_length: int = 30


def _train():
    return schema.TrainConfig(global_batch_size=32, micro_batch_size=32, steps=300,
                              checkpoint_every=100, log_every=20)


def _optimizer():
    return schema.OptimizerConfig(name="adamw", learning_rate=1e-4, warmup_steps=30,
                                  weight_decay_rate=0.01)


def _eval():
    return schema.EvalConfig(global_batch_size=64)


@dataclasses.dataclass
class BertFinetuneConfig:
    encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: schema.TrainConfig = dataclasses.field(default_factory=_train)
    optimizer: schema.OptimizerConfig = dataclasses.field(default_factory=_optimizer)
    eval: schema.EvalConfig = dataclasses.field(default_factory=_eval)
    runtime: schema.RuntimeConfig = dataclasses.field(default_factory=schema.RuntimeConfig)
    export: schema.ExportConfig = dataclasses.field(default_factory=schema.ExportConfig)


def check(config, mode=None):
    """Raises `UserError` for the first key of a `BertFinetuneConfig` that cannot work, or
    task file that --mode `mode` reads (None: as training) and that is not there."""
    data, encoder = config.data, config.encoder
    if data.task not in TASKS:
        raise UserError(f"data.task={data.task!r} is not one of {', '.join(TASKS)}")
    if encoder.init not in INITS:
        raise UserError(f"encoder.init={encoder.init!r} is not one of {', '.join(INITS)}")
    if not encoder.pretraining_dir:
        raise UserError("encoder.pretraining_dir is empty: give a pretraining run's "
                        "model_dir (its encoder shape and vocabulary are used also with "
                        "encoder.init: none)")
    check_task_keys(data)
    labels = list(data.labels or ())
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated or len(labels) == 1:
        raise UserError(f"data.labels={labels} " + (
            f"holds {repeated[0]!r} twice; give each label once, in class-id order" if repeated
            else "holds one label; a classification needs at least 2 (or leave data.labels "
            "unset: the training file's labels)"))
    if data.task != "stdlib" and not (data.train_file and data.eval_file):
        raise UserError(f"data.task={data.task} needs data.train_file and data.eval_file")
    check_task_files(data, files_read(data.task, mode))
    if data.seq_length < 0:
        raise UserError(f"data.seq_length={data.seq_length} must be at least 0")
    for key in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
        if getattr(data, key) <= 0:
            raise UserError(f"data.{key}={getattr(data, key)} must be positive")
    schema.check_rates("encoder", encoder, ("dropout_rate", "attention_dropout_rate"))


def check_task_keys(data):
    """A UserError for a data key (a file, the labels) that `data.task` does not read: the
    run would silently train on something else."""
    for key in ("train_file", "eval_file", "labels"):
        if getattr(data, key) and key not in TASK_KEYS[data.task]:
            readers = " or ".join(task for task, keys in TASK_KEYS.items() if key in keys)
            why = ("the stdlib task builds its own files from encoder.pretraining_dir"
                   if data.task == "stdlib" else "SQuAD answers are spans, not labels")
            raise UserError(
                f"data.{key} is set, but data.task={data.task} does not read it ({why}); "
                f"set data.task={readers} to use it (docs/finetune.md), or leave data.{key} "
                "unset")


def check_task_files(data, keys=("train_file", "eval_file")):
    """A UserError naming the key (of `keys`) of a task file that does not exist or cannot
    be one."""
    # Imported here: the schema loads without TensorFlow (startup.check_command_line).
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from recipes.bert import classification  # pylint: disable=import-outside-toplevel

    for key in keys if data.task != "stdlib" else ():
        path = getattr(data, key)
        if data.task == "classification":
            problem = classification.file_problem(path)
        elif not tf.io.gfile.exists(path):
            problem = "does not exist; check the path (a SQuAD v1.1 JSON file)"
        elif tf.io.gfile.isdir(path):
            problem = "is a directory; give a SQuAD v1.1 JSON file"
        else:
            problem = None
        if problem:
            raise UserError(f"data.{key}={path} {problem}")
