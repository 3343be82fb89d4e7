"""A process killed while writing a checkpoint leaves the previous checkpoint as the latest,
complete and loadable. (A kill during the export: tests/test_resume_after_kill.py, through
the BERT command line; a failing export keeps the previous one: test_recipe_training.py.)
"""

import glob
import os
import subprocess
import sys

import numpy as np
import pytest
import tf_keras

import reliability_cli as cli
from recipes.common import training

WIDTH = 1024  # a 4 MiB kernel plus two Adam slots: each save takes a moment to write

SAVER = f"""
import sys
import tf_keras
from recipes.common import training
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from test_atomic_outputs import build_model
model = build_model()
manager = training.make_checkpoint_manager(model, sys.argv[1], max_to_keep=2)
for number in range(1, 400):
    model.layers[0].kernel.assign(model.layers[0].kernel * 0 + number)
    model.optimizer.iterations.assign(number)
    manager.save(checkpoint_number=number)
    print("saved", number, flush=True)
"""


def build_model():
    model = tf_keras.Sequential([tf_keras.layers.Dense(WIDTH, use_bias=False)])
    model.build((None, WIDTH))
    model.compile(optimizer=tf_keras.optimizers.Adam(), loss="mse")
    training.build_optimizer_state(model)
    return model


@pytest.mark.slow  # a second process
def test_kill_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path):
    model_dir = str(tmp_path / "run")
    log_path = str(tmp_path / "saver.log")
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-c", SAVER, model_dir], cwd=cli.REPO_ROOT,
                                   env=cli.ENV, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    checkpoints = os.path.join(model_dir, training.CHECKPOINT_SUBDIR)

    def writing_a_later_checkpoint():
        # TF writes the shards under a `_temp` name and renames them when complete.
        return "saved 2" in cli.read(log_path) and bool(
            glob.glob(os.path.join(checkpoints, "*_temp*")))

    assert cli.kill_when(process, writing_a_later_checkpoint, timeout=120), cli.read(log_path)
    saved = [int(line.split()[1]) for line in cli.read(log_path).splitlines()
             if line.startswith("saved ")]
    restored = build_model()
    step = training.restore(training.make_checkpoint_manager(restored, model_dir))
    # The newest checkpoint is the last one the process finished (or the one it finished
    # between our look and the kill), and it is whole.
    assert step in (saved[-1], saved[-1] + 1)
    np.testing.assert_array_equal(restored.layers[0].kernel.numpy(), np.full((WIDTH, WIDTH), step))
