"""The BERT pretraining config: schema dataclasses, one commented field per key.

`recipes.common.config.load_config(BertPretrainingConfig, files, override)` fills these from
YAML files and `--params_override`; an unknown key or a wrong type is a one-line error.
The defaults below are small CPU-sized values with BERT's dropout of 0.1; a key a config
leaves out takes its default (configs/bert/tiny_cpu.yaml sets what the main job needs, with
its reason for each value; the BERT-Large / Base configs set the paper's). The README lists
every key with the same words.
"""
import dataclasses

from recipes.common import schema
from recipes.common.config import path_field


@dataclasses.dataclass
class DataConfig:
    """Where the pretraining examples come from and their shape."""
    # Text to prepare when `train_files` is empty: "stdlib" (the embedded corpus built from
    # the Python standard library's docstrings) or a directory of .txt files.
    corpus: str = path_field("stdlib", names=("stdlib",))
    # Where prepared TFRecords and the vocabulary go; "" = <model_dir>/data. Preparation is
    # skipped when this directory already holds a finished preparation, which must have been
    # made from these data.* values (else a one-line error).
    data_dir: str = path_field("")
    # Glob of already prepared training TFRecords (Google BERT / Model Garden format).
    # "" = prepare them from `corpus`. When set, `eval_files` and `vocab_file` must be set too.
    # Globs are listed once when a run starts: the run reads the files they matched then.
    train_files: str = path_field("", comma_separated=True)
    # Glob of held-out TFRecords used by evaluation.
    eval_files: str = path_field("", comma_separated=True)
    # WordPiece vocabulary, one token per line; "" = learn one from the corpus.
    vocab_file: str = path_field("")
    # Size of the WordPiece vocabulary learned from the corpus (ignored with `vocab_file`).
    vocab_size: int = 2048
    # Tokens per example, [CLS] and [SEP]s included (BERT: 128 in phase 1, 512 in phase 2).
    seq_length: int = 64
    # Masked positions per example (BERT: 20 at length 128, 80 at length 512).
    max_predictions_per_seq: int = 10
    # How many times each document is used with a different masking (BERT's dupe_factor).
    dupe_factor: int = 5
    # Seed of data preparation (vocabulary learning, pairing, masking): same seed, same
    # files. The run's seed (initialisation, dropout, shuffling) is train.seed.
    seed: int = 12345


@dataclasses.dataclass
class ModelConfig:
    """Model Garden BertEncoderV2 + BertPretrainerV2; the vocabulary size comes from the
    vocabulary file, so it cannot disagree with the data."""
    # Width of every transformer layer (BERT-Base: 768).
    hidden_size: int = 128
    # Transformer layers (BERT-Base: 12).
    num_layers: int = 2
    # Attention heads per layer, dividing hidden_size (BERT-Base: 12).
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
class BertPretrainingConfig:
    """data and model are BERT's; the other sections are the shared ones
    (recipes/common/schema.py), with the defaults of the tiny CPU run."""
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimizer: schema.OptimizerConfig = dataclasses.field(default_factory=schema.OptimizerConfig)
    train: schema.TrainConfig = dataclasses.field(default_factory=schema.TrainConfig)
    eval: schema.EvalConfig = dataclasses.field(default_factory=schema.EvalConfig)
    runtime: schema.RuntimeConfig = dataclasses.field(default_factory=schema.RuntimeConfig)
    export: schema.ExportConfig = dataclasses.field(default_factory=schema.ExportConfig)
