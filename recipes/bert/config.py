"""The BERT pretraining config: schema dataclasses, one commented field per key.

`recipes.common.config.load_config(BertPretrainingConfig, files, override)` fills these from
YAML files and `--params_override`; an unknown key or a wrong type is a one-line error.
The defaults below are the embedded tiny CPU run's, except dropout (BERT's 0.1 here, 0 in
configs/bert/tiny_cpu.yaml, which sets every key with its reason); the BERT-Large / Base
configs override them. docs/bert.md lists every key with the same words.
"""
import dataclasses
from typing import Optional


@dataclasses.dataclass
class DataConfig:
    """Where the pretraining examples come from and their shape."""
    # Text to prepare when `train_files` is empty: "stdlib" (the embedded corpus built from
    # the Python standard library's docstrings) or a directory of .txt files.
    corpus: str = "stdlib"
    # Where prepared TFRecords and the vocabulary go; "" = <model_dir>/data. Preparation is
    # skipped when this directory already holds a finished preparation.
    data_dir: str = ""
    # Glob of already prepared training TFRecords (Google BERT / Model Garden format).
    # "" = prepare them from `corpus`. When set, `eval_files` and `vocab_file` must be set too.
    train_files: str = ""
    # Glob of held-out TFRecords used by evaluation.
    eval_files: str = ""
    # WordPiece vocabulary, one token per line; "" = learn one from the corpus.
    vocab_file: str = ""
    # Size of the WordPiece vocabulary learned from the corpus (ignored with `vocab_file`).
    vocab_size: int = 2048
    # Tokens per example, [CLS] and [SEP]s included (BERT: 128 in phase 1, 512 in phase 2).
    seq_length: int = 64
    # Masked positions per example (BERT: 20 at length 128, 80 at length 512).
    max_predictions_per_seq: int = 10
    # How many times each document is used with a different masking (BERT's dupe_factor).
    dupe_factor: int = 5
    # Seed of vocabulary learning, pairing and masking: same seed, same files.
    seed: int = 12345


@dataclasses.dataclass
class ModelConfig:
    """Model Garden BertEncoderV2 + BertPretrainerV2; the vocabulary size comes from the
    vocabulary file, so it cannot disagree with the data."""
    hidden_size: int = 128
    num_layers: int = 2
    num_attention_heads: int = 2
    # Width of the feed-forward block (BERT: 4 * hidden_size).
    intermediate_size: int = 512
    # Size of the position-embedding table. BERT builds phase 1 with 512 so that phase 2
    # (length 512) starts from a checkpoint with the full table; keep 512 for both phases.
    max_sequence_length: int = 512
    # Number of segment ids (2 for sentence A/B).
    type_vocab_size: int = 2
    # Dropout after attention outputs and feed-forward outputs (BERT: 0.1).
    dropout_rate: float = 0.1
    # Dropout on attention probabilities (BERT: 0.1).
    attention_dropout_rate: float = 0.1
    # Std of the truncated-normal initializer (BERT: 0.02).
    initializer_range: float = 0.02


@dataclasses.dataclass
class OptimizerConfig:
    """lamb_tf LAMB with linear warmup then polynomial decay."""
    # Peak learning rate, reached at the end of warmup.
    learning_rate: float = 0.02
    # Steps of linear warmup from 0 to `learning_rate`.
    warmup_steps: int = 5
    # Power of the polynomial decay from the peak to `end_learning_rate` at `train.steps`
    # (BERT and the paper: 1.0, i.e. linear; NVIDIA's LAMB recipe: 0.5).
    decay_power: float = 1.0
    end_learning_rate: float = 0.0
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    # LAMB's lambda: weight decay inside the trust ratio (Algorithm 2).
    weight_decay_rate: float = 0.01
    # Regexes searched in variable paths; null = lamb_tf.exclusions.BERT_EXCLUDE_PATTERNS
    # (layer norm and bias). [] = decay everything.
    exclude_from_weight_decay: Optional[list[str]] = None
    # Variables that take a plain Adam step (trust ratio 1); null = same as weight decay.
    exclude_from_layer_adaptation: Optional[list[str]] = None
    # Clip the accumulated, all-reduced gradient to this global norm; null = no clipping.
    global_clipnorm: Optional[float] = 1.0


@dataclasses.dataclass
class TrainConfig:
    """Batch arithmetic, step counts, checkpoints and the compiled step."""
    # Sequences per optimizer update, over all replicas and micro-batches.
    global_batch_size: int = 2048
    # Sequences per replica per forward/backward pass; the accumulation factor is
    # global_batch_size / (replicas * micro_batch_size).
    micro_batch_size: int = 256
    # Optimizer updates (not micro-batches) in this run.
    steps: int = 120
    # Write a checkpoint every this many updates (and at the end).
    checkpoint_every: int = 20
    # Micro-batches run inside one tf.function call (Keras' steps_per_execution).
    steps_per_execution: int = 1
    # Compile the step with XLA (true on TPU; slower than the plain TF kernels on CPU).
    jit_compile: bool = False
    # Keras dtype policy: "float32" or "mixed_bfloat16" (TPU).
    precision: str = "float32"
    # Weights-only initialisation (phase 2 of mixed-batch training starts from phase 1's
    # last checkpoint: a checkpoint path or a model_dir). Used only when model_dir has no
    # checkpoint of its own; the optimizer state, step and schedule start fresh.
    init_checkpoint: str = ""
    # Seed of initialisation, dropout and input shuffling.
    seed: int = 1
    # Write the TensorBoard scalars (loss, accuracies, learning rate, examples/s, gradient
    # norm, per-variable LAMB trust ratios) every this many updates.
    log_every: int = 5


@dataclasses.dataclass
class EvalConfig:
    """Held-out masked-LM / next-sentence evaluation."""
    # Sequences per evaluation batch (over all replicas).
    batch_size: int = 256
    # Batches to evaluate; 0 = the whole held-out set once.
    steps: int = 0


@dataclasses.dataclass
class ExportConfig:
    """The SavedModel written by --mode=export and at the end of training."""
    # Where to write it; "" = <model_dir>/export.
    export_dir: str = ""


@dataclasses.dataclass
class BertPretrainingConfig:
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)
