"""`train.steps_per_execution` > 1 with gradient accumulation.

Several optimizer steps inside one `tf.function` call (Keras wraps `train_step` in its own
`tf.while_loop`) around the accumulation's `tf.while_loop` crashed with Grappler's
`AlreadyExistsError ... ArithmeticOptimizer/AddOpsRewrite_add_12/tmp_var` at the main job's
size (docs/performance.md): the arithmetic optimizer folded a loop-carried gradient sum and
the gradient tape's `AddN` into one `AddN`, which the memory optimizer turned into a
temporary variable. That needs a graph whose estimated memory nears the device's, which no
test-sized model reaches; so one test pins the cause (no TensorFlow add in the loop body
takes a loop-carried float sum) and the others run both recipes' command lines, without and
with XLA: without XLA the runs end with the weights and optimizer state of the same run at
steps_per_execution = 1 (same data, same order); with XLA they finish and train. Every run:
2 micro-batches (k = 2), 4 steps, through tests/preloaded_cli.py (import once, fork per
command line).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

import reliability_cli as cli
import tiny_bert_data
from lamb_tf import accumulation
from recipes.resnet import convert
from recipes.resnet import digits

REPO_ROOT, ENV = cli.REPO_ROOT, cli.ENV
STEPS = 4


def _bert_job(config_file, model_dir, steps_per_execution, jit_compile):
    overrides = (f"train.steps_per_execution={steps_per_execution},"
                 f"train.log_every={steps_per_execution},"  # a multiple of it (schema.check)
                 f"runtime.jit_compile={str(jit_compile).lower()},export.enabled=false")
    return "recipes.bert.pretrain", [
        f"--config_file={config_file}", f"--model_dir={model_dir}", "--mode=train",
        f"--params_override={overrides}"]


def _resnet_job(data_dir, model_dir, steps_per_execution, jit_compile):
    overrides = {
        "data.embedded_digits": "false",
        "data.train_file_pattern": f"{data_dir}/train-*",
        "data.eval_file_pattern": f"{data_dir}/validation-*",
        "data.shuffle_buffer_size": "64",
        "train.global_batch_size": "8",
        "train.micro_batch_size": "4",  # k = 2
        "train.steps": str(STEPS),
        "train.checkpoint_every": str(STEPS),
        "train.steps_per_execution": str(steps_per_execution),
        "optimizer.warmup_steps": "1",
        "runtime.jit_compile": str(jit_compile).lower(),
        "export.enabled": "false",
    }
    return "recipes.resnet.train", [
        f"--config_file={os.path.join(REPO_ROOT, 'configs', 'resnet', 'tiny_cpu.yaml')}",
        f"--model_dir={model_dir}", "--mode=train",
        # TF's op determinism (which XLA refuses for MaxPoolGrad): kernels that sum in a
        # thread-dependent order agree bitwise between the two runs
        *([] if jit_compile else ["--deterministic"]),
        "--params_override=" + ",".join(f"{key}={value}" for key, value in overrides.items())]


def test_loop_carried_sums_are_no_input_of_a_tensorflow_add():
    variable = tf.Variable(tf.ones([4, 4]))

    def loss_fn(micro_batch):  # the variable used twice: the tape sums its gradient (AddN)
        return (tf.reduce_sum(tf.matmul(micro_batch, variable))
                + tf.reduce_sum(tf.matmul(micro_batch, variable, transpose_b=True)))

    @tf.function
    def step(batch):
        return accumulation.accumulate_gradients(loss_fn, [variable], batch, 2)

    graph = step.get_concrete_function(tf.TensorSpec([4, 4], tf.float32)).graph
    bodies = [f for f in graph.as_graph_def().library.function
              if f.signature.name.startswith("while_body")]
    assert len(bodies) == 1
    loop_inputs = {arg.name for arg in bodies[0].signature.input_arg}
    float_adds = [node for node in bodies[0].node_def
                  if node.op in ("Add", "AddV2", "AddN")
                  and node.attr["T"].type == tf.float32.as_datatype_enum]
    assert float_adds  # the tape's AddN and the loss's own add are there
    for node in float_adds:
        assert not loop_inputs & set(node.input), (node.name, list(node.input))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{(recipe, steps_per_execution, jit_compile): (model_dir, result dict)}."""
    root = tmp_path_factory.mktemp("steps_per_execution")
    (root / "bert_data").mkdir()
    bert_data = tiny_bert_data.prepare(root / "bert_data")
    config = tiny_bert_data.config(bert_data, micro_batch_size=8, steps=STEPS,
                                   checkpoint_every=STEPS, dropout_rate=0.0)
    bert_config = root / "bert.yaml"
    bert_config.write_text(yaml.safe_dump(config), encoding="utf-8")
    images, labels, names = digits.load_digits()
    digits_dir = root / "digits"
    convert.convert_arrays(images[:80], labels[:80], str(digits_dir), class_names=names,
                           validation_fraction=0.25, num_shards=2)
    keys, jobs = [], []
    for recipe, make_job, source in (("bert", _bert_job, bert_config),
                                     ("resnet", _resnet_job, digits_dir)):
        for steps_per_execution, jit_compile in ((1, False), (2, False), (2, True)):
            model_dir = root / f"{recipe}_spe{steps_per_execution}_jit{int(jit_compile)}"
            module, args = make_job(source, model_dir, steps_per_execution, jit_compile)
            keys.append((recipe, steps_per_execution, jit_compile, str(model_dir)))
            jobs.append({"module": module, "args": args, "stdout": f"{model_dir}.out",
                         "stderr": f"{model_dir}.err", "timeout": 600})
    jobs_path, results_path = root / "jobs.json", root / "results.json"
    jobs_path.write_text(json.dumps(jobs), encoding="utf-8")
    subprocess.run([sys.executable, os.path.join(REPO_ROOT, "tests", "preloaded_cli.py"),
                    str(jobs_path), str(results_path)], cwd=REPO_ROOT, env=ENV, check=True,
                   timeout=sum(job["timeout"] for job in jobs), start_new_session=True)
    results = json.loads(results_path.read_text(encoding="utf-8"))
    return {key[:3]: (key[3], result) for key, result in zip(keys, results)}


def _stderr_tail(model_dir):
    return cli.read(f"{model_dir}.err")[-3000:]


def _finished_pair(runs, recipe, jit_compile):
    """Checkpoint values of the run at steps_per_execution 1 (without XLA) and of the run at
    2 (`jit_compile` as given): both finished, same keys, both at step STEPS."""
    one_dir, one = runs[(recipe, 1, False)]
    two_dir, two = runs[(recipe, 2, jit_compile)]
    assert one["returncode"] == 0, _stderr_tail(one_dir)
    assert two["returncode"] == 0, _stderr_tail(two_dir)
    assert "× 2 accumulation step(s)" in cli.read(f"{two_dir}.out")
    one_values, two_values = cli.checkpoint_values(one_dir), cli.checkpoint_values(two_dir)
    assert one_values.keys() == two_values.keys()
    assert sum(key.startswith("model/") for key in one_values) > 20
    iterations = [key for key in one_values if key.startswith("optimizer/_iterations/")]
    assert iterations and all(two_values[key] == one_values[key] == STEPS for key in iterations)
    return one_values, two_values


@pytest.mark.slow  # six real command-line runs (the fixture)
@pytest.mark.parametrize("recipe", ["bert", "resnet"])
def test_two_steps_per_execution_with_accumulation_equal_one(runs, recipe):
    one_values, two_values = _finished_pair(runs, recipe, False)
    for key, value in one_values.items():
        np.testing.assert_allclose(two_values[key], value, rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.slow  # six real command-line runs (the fixture)
@pytest.mark.parametrize("recipe", ["bert", "resnet"])
def test_two_steps_per_execution_with_accumulation_and_xla_train(runs, recipe):
    """With XLA the pair is checked for finishing and training, not for equality: XLA rounds
    differently from the graph run, and without op determinism (which XLA has not for
    ResNet's MaxPoolGrad) kernels sum in a thread-dependent order."""
    _, two_values = _finished_pair(runs, recipe, True)
    assert all(np.isfinite(value).all() for value in two_values.values())
    slots = [key for key in two_values if key.startswith("optimizer/_variables/")]
    assert slots and any(np.abs(two_values[key]).max() > 0 for key in slots)
