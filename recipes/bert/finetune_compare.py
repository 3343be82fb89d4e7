"""`--compare_with_random_init`: the same fine-tuning from the pretrained encoder and from
random weights, side by side (recipes/bert/finetune.py defines the flag)."""
import dataclasses
import json
import os

import tensorflow as tf
import tf_keras

from recipes.common import config as config_lib
from recipes.common import driver, storage
from recipes.bert import finetune_flags
from recipes.common.errors import UserError

# (subdirectory of --model_dir, encoder.init) of each run
COMPARED_INITS = tuple(zip(finetune_flags.COMPARED_RUNS, ("pretrained", "none")))


def with_init(params_override, init):
    """`params_override` plus encoder.init=`init` (comma form, or a YAML/JSON mapping)."""
    text = params_override.strip()
    if not text or "=" in text:
        return f"{text},encoder.init={init}" if text else f"encoder.init={init}"
    updates = config_lib.parse_params_override(text)
    updates.setdefault("encoder", {})["init"] = init
    return json.dumps(updates)


def compare_inits(task_class, options):
    """Fine-tunes the pretrained encoder and a random one with the same config into
    <model_dir>/pretrained and <model_dir>/random_init; prints both held-out results (into
    comparison.json; an evaluation of other held-out data: eval_<name>/comparison.json)."""
    # every config error before any work; without --config_file, a comparison's own runs
    # are the config (as a run's config.yaml is its own): --mode=eval needs no other flag
    first = os.path.join(options.model_dir, COMPARED_INITS[0][0])
    own = not options.config_files and tf.io.gfile.exists(os.path.join(first, "config.yaml"))
    task = driver.load_task(task_class, dataclasses.replace(options, model_dir=first)
                            if own else options, options.mode)
    if task.config.encoder.init != "pretrained":
        raise UserError("--compare_with_random_init runs both inits itself; leave "
                        "encoder.init at pretrained")
    if tf.io.gfile.exists(os.path.join(options.model_dir, "config.yaml")):
        raise UserError(
            f"--model_dir {options.model_dir} holds a run (its config.yaml); "
            "--compare_with_random_init writes its two runs into "
            f"{' and '.join(f'{name}/' for name, _ in COMPARED_INITS)} of a directory of their "
            "own: give a new --model_dir")
    results = {}
    for name, init in COMPARED_INITS:
        doing = {"eval": "evaluating", "export": "exporting"}.get(options.mode, "fine-tuning")
        print(f"==== {doing} the {name.replace('_', ' ')} encoder ====", flush=True)
        # a fresh Keras name scope: the second encoder's variables are named as the first's
        # (bert_encoder_v2/..., not bert_encoder_v2_1/...), in its exclusions and checkpoint
        tf_keras.backend.clear_session()
        results[name] = driver.run(task_class, dataclasses.replace(
            options, model_dir=os.path.join(options.model_dir, name),
            params_override=with_init(options.params_override, init)))
    if not all(results.values()):  # an export, or --mode=train: nothing evaluated
        return results
    print("held-out results after the same fine-tuning budget:", flush=True)
    for name, values in results.items():
        line = " ".join(f"{metric}={value:.4f}" for metric, value in sorted(values.items()))
        print(f"  {name.replace('_', ' ') + ' encoder:':26s} {line}", flush=True)
    held_out = driver.other_held_out(task, first, options.mode)  # (the runs checked it)
    into = os.path.join(options.model_dir, driver.held_out_subdir(held_out) if held_out else "")
    tf.io.gfile.makedirs(into)  # other held-out data: in eval_<name>/, as each run's results
    storage.write_text(os.path.join(into, "comparison.json"),  # whole, as each run's results
                       json.dumps(results, indent=2, sort_keys=True) + "\n")
    return results


def run(task_class, options):
    """The driver's `run`, or both inits with --compare_with_random_init."""
    if options.extra[finetune_flags.COMPARE_FLAG.name]:
        return compare_inits(task_class, options)
    check_not_a_comparison(options.model_dir)
    return driver.run(task_class, options)


def check_not_a_comparison(model_dir):
    """A UserError, before anything is read or written, when `model_dir` holds no run of its
    own but the runs --compare_with_random_init writes (one of them, if it stopped early) and
    the flag is not given: the driver would refuse it as a directory of other runs, or, for
    an evaluation without --config_file, find no config to load."""
    if not model_dir or tf.io.gfile.exists(os.path.join(model_dir, "config.yaml")):
        return
    runs = [f"{name}/" for name in finetune_flags.COMPARED_RUNS
            if tf.io.gfile.exists(os.path.join(model_dir, name, "config.yaml"))]
    if runs:
        flag = f"--{finetune_flags.COMPARE_FLAG.name}"
        raise UserError(
            f"--model_dir {model_dir} holds the runs of a comparison made with {flag} "
            f"({', '.join(runs)}), not a run of its own: add {flag} to go on with both (train, "
            "eval or export), or give one of those runs as --model_dir")
