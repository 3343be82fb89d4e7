"""The ResNet configs load strictly and hold the numbers their sources state.

Expected values are the sources' own numbers (the authors' run.sh, MLPerf's lars_util), and
epoch arithmetic uses ImageNet-1k's 1,281,167 training images.
"""

import glob
import os
import re

import pytest

from recipes.common.config import load_config
from recipes.resnet import convert
from recipes.resnet.config import DataConfig, ResNetConfig

CONFIG_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "resnet"
)
IMAGENET_TRAIN_IMAGES = 1281167


def load(name):
    return load_config(ResNetConfig, [os.path.join(CONFIG_DIR, name)])


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CONFIG_DIR, "*.yaml"))))
def test_every_config_loads_and_every_number_has_a_comment(path):
    config = load_config(ResNetConfig, [path])
    assert config.train.steps % config.train.checkpoint_every == 0
    assert config.train.checkpoint_every % config.train.steps_per_execution == 0
    with open(path) as f:
        for line in f:
            if re.match(r"^\s+\w+: -?[0-9.]+(e-?\d+)?\s*(#|$)", line):
                assert "#" in line, f"{os.path.basename(path)}: number without a source: {line}"


def test_lamb_32k_is_the_authors_run():
    config = load("resnet50_lamb_32k.yaml")
    assert (config.train.global_batch_size, config.train.steps) == (32768, 3519)
    assert round(config.train.steps * 32768 / IMAGENET_TRAIN_IMAGES) == 90
    assert (config.optimizer.learning_rate, config.optimizer.warmup_steps) == (0.04, 782)
    assert (config.optimizer.weight_decay_rate, config.optimizer.global_clipnorm) == (1.5, 1.0)
    assert config.optimizer.bias_correction is False and config.optimizer.decay_power == 1.0
    assert config.optimizer.exclude_from_weight_decay == ["batch_normalization"]
    assert config.optimizer.exclude_from_layer_adaptation == ["batch_normalization"]
    assert config.train.label_smoothing == 0.1 and config.model.depth == 50
    assert config.runtime.precision == "mixed_bfloat16"


def test_lars_32k_is_mlperf_large_batch():
    config = load("resnet50_lars_32k.yaml")
    assert config.optimizer.name == "lars" and config.optimizer.learning_rate == 31.2
    assert config.optimizer.warmup_steps == 25 * IMAGENET_TRAIN_IMAGES // 32768
    assert (config.optimizer.decay_power, config.optimizer.end_learning_rate) == (2.0, 0.0001)
    assert (config.optimizer.momentum, config.optimizer.weight_decay_rate) == (0.9, 0.0002)
    assert config.optimizer.exclude_from_weight_decay == ["batch_normalization", "bias"]
    assert config.optimizer.exclude_from_layer_adaptation == ["batch_normalization", "bias"]


def test_lamb_64k_and_16k():
    config = load("resnet50_lamb_64k.yaml")
    assert (config.train.global_batch_size, config.train.steps) == (65536, 1760)
    assert (config.optimizer.warmup_steps, config.optimizer.learning_rate) == (500, 0.04)
    config = load("resnet50_lamb_16k.yaml")
    assert config.train.global_batch_size == 16384
    assert config.train.steps == round(90 * IMAGENET_TRAIN_IMAGES / 16384)
    assert config.optimizer.learning_rate == pytest.approx(0.04 / 2**0.5, abs=1e-4)
    # the paper's untuned-LAMB rules: sqrt scaling (above), linear-epoch warmup (the same
    # warmup steps as the authors' 32k run)
    assert config.optimizer.warmup_steps == load("resnet50_lamb_32k.yaml").optimizer.warmup_steps


def test_default_label_offset_reads_imagenet_labels_1_to_1000():
    # The ImageNet TFRecord convention: image/class/label 1..1000, 0 = background; the
    # converter writes class index + 1, and the recipe subtracts the offset back.
    assert DataConfig().label_offset == 1
    assert ResNetConfig().data.label_offset == convert.LABEL_OFFSET == 1
