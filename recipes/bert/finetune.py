r"""BERT fine-tuning, a task on the shared driver: sentence (pair) classification, SQuAD
v1.1 question answering, or the embedded task built from the pretraining run's held-out
documents.

  python -m recipes.bert.finetune --config_file=configs/bert/finetune_stdlib.yaml \
      --model_dir=/tmp/finetune --params_override=encoder.pretraining_dir=/tmp/bert_tiny

  python -m recipes.bert.finetune --config_file=configs/bert/finetune_squad_v1.yaml \
      --model_dir=/tmp/squad --params_override=encoder.pretraining_dir=RUN,\
  data.train_file=train-v1.1.json,data.eval_file=dev-v1.1.json

The encoder, its vocabulary and the sequence length come from a pretraining run's
`model_dir` (its `model_garden/` export and `config.yaml`); `encoder.init: none` trains the
same encoder from random weights instead. The driver (recipes/common/driver.py) does the
rest: optimizer (lamb, adamw, ...), gradient accumulation, checkpoints, evaluation,
results.json and the export, a SavedModel that answers raw strings
(recipes/bert/finetune_export.py).
"""

from recipes.common import startup  # noqa: F401  (before TensorFlow: legacy Keras, quiet C++)

import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
import yaml  # noqa: E402
from official.nlp.configs import encoders  # noqa: E402

from lamb_tf import exclusions  # noqa: E402
from recipes.bert import classification  # noqa: E402
from recipes.bert import ecosystem_export  # noqa: E402
from recipes.bert import finetune_export  # noqa: E402
from recipes.bert import squad  # noqa: E402
from recipes.bert import stdlib_classification  # noqa: E402
from recipes.bert.finetune_config import INITS, TASKS, BertFinetuneConfig  # noqa: E402
from recipes.common import task as task_lib  # noqa: E402
from recipes.common import config as config_lib  # noqa: E402
from recipes.common import driver  # noqa: E402
from recipes.common import flags as flags_lib  # noqa: E402
from recipes.common import export as export_lib  # noqa: E402
from recipes.common.errors import UserError  # noqa: E402


PREDICTIONS_FILE = "predictions.json"  # squad: {question id: answer} of the last evaluation


class PretrainingRun:
    """What fine-tuning takes from a pretraining model_dir: the Model Garden encoder export
    (checkpoint, encoder.yaml, vocab.txt) and the sequence length."""

    def __init__(self, model_dir):
        self.directory = os.path.join(model_dir, ecosystem_export.CHECKPOINT_SUBDIR)
        self.checkpoint = tf.train.latest_checkpoint(self.directory)
        if self.checkpoint is None:
            raise UserError(
                f"encoder.pretraining_dir: {self.directory} holds no encoder checkpoint; "
                f"pretrain first, or write it from the run's export with "
                f"python -m recipes.bert.ecosystem_export --model_dir={model_dir}"
            )
        self.encoder_config = encoders.EncoderConfig.from_yaml(
            os.path.join(self.directory, ecosystem_export.ENCODER_CONFIG_FILE))
        self.vocab_file = os.path.join(self.directory, "vocab.txt")
        with tf.io.gfile.GFile(os.path.join(model_dir, "config.yaml")) as f:
            data = yaml.safe_load(f)["data"]
        self.seq_length = int(data["seq_length"])
        # What the embedded task needs: the corpus, where it was prepared, the split's seed.
        self.corpus = "" if data.get("train_files") else data.get("corpus")
        self.data_seed = data.get("seed")
        self.data_dir = data.get("data_dir") or os.path.join(model_dir, "data")


class BertFinetuneTask(task_lib.Task):
    config_class = BertFinetuneConfig
    export_subdir = "export"
    default_exclude_from_weight_decay = tuple(exclusions.BERT_EXCLUDE_PATTERNS)
    # A resumed run keeps its encoder and its task: the checkpoint holds their weights.
    fixed_on_resume = ("encoder.pretraining_dir", "encoder.init", "data.")

    def check_config(self):
        data, encoder = self.config.data, self.config.encoder
        if data.task not in TASKS:
            raise UserError(f"data.task={data.task!r} is not one of {', '.join(TASKS)}")
        if encoder.init not in INITS:
            raise UserError(f"encoder.init={encoder.init!r} is not one of {', '.join(INITS)}")
        if not encoder.pretraining_dir:
            raise UserError("encoder.pretraining_dir is empty: give a pretraining run's "
                            "model_dir (its encoder shape and vocabulary are used also with "
                            "encoder.init: none)")
        if data.task != "stdlib" and not (data.train_file and data.eval_file):
            raise UserError(f"data.task={data.task} needs data.train_file and data.eval_file")
        for key in ("seq_length",):
            if getattr(data, key) < 0:
                raise UserError(f"data.{key}={getattr(data, key)} must be at least 0")
        for key in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
            if getattr(data, key) <= 0:
                raise UserError(f"data.{key}={getattr(data, key)} must be positive")

    # ---- Data ---------------------------------------------------------------------------

    def prepare(self, model_dir, mode):
        data = self.config.data
        self.model_dir = model_dir
        self.run = PretrainingRun(self.config.encoder.pretraining_dir)
        self.seq_length = data.seq_length or self.run.seq_length
        if self.seq_length > self.run.seq_length:
            raise UserError(
                f"data.seq_length={self.seq_length} is longer than the pretraining run's "
                f"{self.run.seq_length}; use at most {self.run.seq_length} (0 = the run's)"
            )
        if data.task == "squad":
            self._prepare_squad(data)
        else:
            self._prepare_classification(data, model_dir)

    def _prepare_classification(self, data, model_dir):
        train_file, eval_file, labels = data.train_file, data.eval_file, data.labels
        if data.task == "stdlib":
            if self.run.corpus != "stdlib":
                raise UserError(
                    "data.task=stdlib needs a pretraining run on the embedded corpus "
                    f"(data.corpus: stdlib, no data.train_files); "
                    f"{self.config.encoder.pretraining_dir} used {self.run.corpus!r}"
                )
            train_file, eval_file, labels = stdlib_classification.write_task(
                os.path.join(model_dir, "data"), self.run.data_dir, self.run.data_seed,
                self.config.train.seed)
        train = classification.read_examples(train_file)
        evaluation = classification.read_examples(eval_file)
        self.labels = list(labels or sorted({e.label for e in train}))
        self.pairs = train[0].second is not None
        if (evaluation[0].second is not None) != self.pairs:
            raise UserError(f"{train_file} and {eval_file} differ: one has sentence pairs")
        packer = classification.TextPacker(self.run.vocab_file, self.seq_length)
        self.train_arrays = (
            {k: v.numpy() for k, v in classification.pack_examples(packer, train).items()},
            {"logits": np.array(classification.label_ids(train, self.labels, train_file))})
        self.eval_arrays = (
            {k: v.numpy() for k, v in classification.pack_examples(packer, evaluation).items()},
            {"logits": np.array(classification.label_ids(evaluation, self.labels, eval_file))})
        print(f"data: {data.task}, {len(train)} training and {len(evaluation)} held-out "
              f"examples, {len(self.labels)} labels", flush=True)

    def _prepare_squad(self, data):
        tokenizer = squad.make_tokenizer(self.run.vocab_file)
        convert = lambda examples, is_training: squad.convert_examples(
            examples, tokenizer, self.seq_length, is_training, data.doc_stride,
            data.max_query_length)
        train = squad.read_examples(data.train_file, is_training=True)
        arrays = squad.feature_arrays(convert(train, True), is_training=True)
        targets = {"start_logits": arrays.pop("start_positions"),
                   "end_logits": arrays.pop("end_positions")}
        self.train_arrays = (arrays, targets)
        self.eval_dataset_json = squad.read_dataset(data.eval_file)
        self.eval_examples = squad.read_examples(data.eval_file, is_training=False)
        self.eval_features = convert(self.eval_examples, False)
        self.eval_arrays = (squad.feature_arrays(self.eval_features, is_training=False), None)
        print(f"data: squad, {len(train)} training questions ({len(targets['start_logits'])} "
              f"windows) and {len(self.eval_examples)} held-out questions "
              f"({len(self.eval_features)} windows)", flush=True)

    # ---- Model --------------------------------------------------------------------------

    def build_encoder(self):
        """Model Garden's encoder from the run's encoder.yaml (fine-tuning dropout), with the
        pretrained weights unless encoder.init is none."""
        config = self.run.encoder_config
        config.bert_v2.dropout_rate = self.config.encoder.dropout_rate
        config.bert_v2.attention_dropout_rate = self.config.encoder.attention_dropout_rate
        encoder = ecosystem_export.create_weights(encoders.build_encoder(config), self.seq_length)
        if self.config.encoder.init == "pretrained":
            status = tf.train.Checkpoint(encoder=encoder).read(self.run.checkpoint)
            status.expect_partial().assert_existing_objects_matched()
            print(f"encoder: pretrained weights from {self.run.checkpoint}", flush=True)
        else:
            print("encoder: random weights (encoder.init: none)", flush=True)
        return encoder

    def build_model(self):
        encoder = self.build_encoder()
        initializer_range = self.run.encoder_config.bert_v2.initializer_range
        if self.config.data.task == "squad":
            self.network = squad.build_model(encoder, self.seq_length, initializer_range)
        else:
            self.network = classification.build_model(
                encoder, self.seq_length, len(self.labels), self.config.encoder.dropout_rate,
                initializer_range)
        return self.network

    def compile_arguments(self):
        cross_entropy = lambda: tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if self.config.data.task == "squad":
            # Model Garden's question_answering task: the mean of the start and end losses.
            return {"loss": {"start_logits": cross_entropy(), "end_logits": cross_entropy()},
                    "loss_weights": {"start_logits": 0.5, "end_logits": 0.5}}
        return {"loss": {"logits": cross_entropy()},
                "metrics": {"logits": [tf_keras.metrics.SparseCategoricalAccuracy(
                    name="accuracy")]}}

    def train_dataset(self, strategy, plan, first_step):
        features, targets = self.train_arrays
        size = len(next(iter(targets.values())))
        global_batch_size = self.config.train.global_batch_size

        def replica_dataset(input_context):
            dataset = tf.data.Dataset.from_tensor_slices((features, targets))
            dataset = dataset.shard(input_context.num_input_pipelines,
                                    input_context.input_pipeline_id)
            # Each chunk shuffles with its own seed: same first_step, same batches.
            dataset = dataset.repeat().shuffle(size, seed=self.config.train.seed + first_step)
            return dataset.batch(input_context.get_per_replica_batch_size(global_batch_size),
                                 drop_remainder=True)

        return strategy.distribute_datasets_from_function(replica_dataset)

    # ---- Evaluation ---------------------------------------------------------------------

    def predict(self):
        features, _ = self.eval_arrays
        dataset = tf.data.Dataset.from_tensor_slices(features).batch(
            self.config.eval.global_batch_size)
        return self.network.predict(dataset, verbose=0)

    def evaluate(self, model, strategy):
        outputs = self.predict()
        if self.config.data.task == "squad":
            self.predictions = squad.decode(
                self.eval_examples, self.eval_features, outputs["start_logits"],
                outputs["end_logits"], self.config.data.n_best_size,
                self.config.data.max_answer_length)
            # The answers the scores are computed on, as the official script reads them.
            tf.io.gfile.makedirs(self.model_dir)
            with tf.io.gfile.GFile(os.path.join(self.model_dir, PREDICTIONS_FILE), "w") as f:
                f.write(json.dumps(self.predictions, indent=1) + "\n")
            return squad.squad_scores(self.eval_dataset_json, self.predictions)
        labels = self.eval_arrays[1]["logits"]
        return {"accuracy": float(np.mean(np.argmax(outputs["logits"], -1) == labels))}

    def describe_evaluation(self, results):
        if self.config.data.task == "squad":
            return f"exact_match={results['exact_match']:.2f} f1={results['f1']:.2f}"
        return f"accuracy={results['accuracy']:.4f} (chance {1 / len(self.labels):.4f})"

    # ---- Export -------------------------------------------------------------------------

    def serving_module(self):
        if self.config.data.task == "squad":
            data = self.config.data
            return finetune_export.QuestionAnsweringServing(
                self.network, self.run.vocab_file, self.seq_length, data.max_query_length,
                data.n_best_size, data.max_answer_length, data.doc_stride)
        return finetune_export.ClassifierServing(self.network, self.run.vocab_file,
                                                 self.seq_length, self.labels, self.pairs)

    def export(self, export_dir):
        module = self.serving_module()
        return export_lib.export_saved_model(export_dir, module, signatures=module.signatures())


# ---- Program ---------------------------------------------------------------------------

COMPARED_INITS = (("pretrained", "pretrained"), ("random_init", "none"))


def with_init(params_override, init):
    """`params_override` plus encoder.init=`init` (comma form, or a YAML/JSON mapping)."""
    text = params_override.strip()
    if not text or "=" in text:
        return f"{text},encoder.init={init}" if text else f"encoder.init={init}"
    updates = config_lib.parse_params_override(text)
    updates.setdefault("encoder", {})["init"] = init
    return json.dumps(updates)


def compare_inits(options):
    """Fine-tunes the pretrained encoder and a random one with the same config into
    <model_dir>/pretrained and <model_dir>/random_init; prints both held-out results."""
    task = driver.load_task(BertFinetuneTask, options)  # every config error before any work
    if task.config.encoder.init != "pretrained":
        raise UserError("--compare_with_random_init runs both inits itself; leave "
                        "encoder.init at pretrained")
    results = {}
    for name, init in COMPARED_INITS:
        print(f"==== fine-tuning the {name.replace('_', ' ')} encoder ====", flush=True)
        results[name] = driver.run(BertFinetuneTask, dataclasses.replace(
            options, model_dir=os.path.join(options.model_dir, name),
            params_override=with_init(options.params_override, init)))
    print("held-out results after the same fine-tuning budget:", flush=True)
    for name, values in results.items():
        line = " ".join(f"{metric}={value:.4f}" for metric, value in sorted(values.items()))
        print(f"  {name.replace('_', ' ') + ' encoder:':26s} {line}", flush=True)
    with tf.io.gfile.GFile(os.path.join(options.model_dir, "comparison.json"), "w") as f:
        f.write(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return results


COMPARE_FLAG = flags_lib.ExtraFlag(
    "compare_with_random_init",
    "Also fine-tune an encoder of the same shape from random weights, with the same "
    "config, and print both held-out results (runs in <model_dir>/pretrained and "
    "<model_dir>/random_init).")


def run(task_class, options):
    """The driver's `run`, or both inits with --compare_with_random_init."""
    if options.extra[COMPARE_FLAG.name]:
        return compare_inits(options)
    return driver.run(task_class, options)


if __name__ == "__main__":
    driver.main(BertFinetuneTask, extra_flags=(COMPARE_FLAG,), run_options=run)
