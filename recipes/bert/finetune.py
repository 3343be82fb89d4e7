r"""BERT fine-tuning, a task on the shared driver: sentence (pair) classification, SQuAD
v1.1 question answering, or the embedded task built from the pretraining run's held-out
documents.

  python -m recipes.bert.finetune --config_file=configs/bert/finetune_stdlib.yaml \
      --model_dir=/tmp/finetune --params_override=encoder.pretraining_dir=/tmp/bert_tiny

  python -m recipes.bert.finetune --config_file=configs/bert/finetune_squad_v1.yaml \
      --model_dir=/tmp/squad \
      --params_override=encoder.pretraining_dir=RUN,data.train_file=TRAIN,data.eval_file=DEV

The encoder, its vocabulary and the sequence length come from a pretraining run's
`model_dir` (its `model_garden/` export and `config.yaml`); `encoder.init: none` trains the
same encoder from random weights instead. The driver (recipes/common/driver.py) does the
rest: optimizer (lamb, adamw, ...), gradient accumulation, checkpoints, evaluation,
results.json and the export, a SavedModel that answers raw strings
(recipes/bert/finetune_export.py).
"""

from recipes.common import startup  # before TensorFlow: legacy Keras, quiet C++
from recipes.bert import finetune_flags
from recipes.bert.finetune_config import BertFinetuneConfig

if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    startup.check_command_line(BertFinetuneConfig, (finetune_flags.COMPARE_FLAG,))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from lamb_tf import exclusions  # noqa: E402
from recipes.bert import classification, finetune_compare, finetune_config  # noqa: E402
from recipes.bert import finetune_data, finetune_export, squad  # noqa: E402
from recipes.common import driver, export as export_lib, task as task_lib  # noqa: E402
from recipes.common.errors import UserError  # noqa: E402,F401  (raised by the checks)


class BertFinetuneTask(task_lib.Task):
    config_class = BertFinetuneConfig
    default_exclude_from_weight_decay = tuple(exclusions.BERT_EXCLUDE_PATTERNS)
    init_checkpoint_fits = ("give a fine-tuning run of this task and its labels (the pretrained "
                            "encoder comes from encoder.pretraining_dir)")
    held_out_keys = ("data.eval_file",)  # evaluated on another file: docs/finetune.md

    @property
    def fixed_on_resume(self):
        """The encoder and task (the checkpoint holds their weights); stdlib's split seed."""
        kept = ("encoder.pretraining_dir", "encoder.init", "data.")
        return kept + (("train.seed",) if self.config.data.task == "stdlib" else ())

    def check_config(self):
        """Keys, the task files `self.mode` reads (whole) and the pretraining run, first."""
        finetune_config.check(self.config, self.mode)
        data = self.config.data
        self.examples, self.questions = finetune_data.read_task_files(data, self.mode)
        self.run = finetune_data.PretrainingRun(self.config.encoder.pretraining_dir)
        self.seq_length = finetune_data.check_task_run(data, self.run)

    def check_data(self, mode, model_dir):  # the run's labels and input kind; init_checkpoint
        self.examples, self.starts_from_export = finetune_data.check_data(
            self.config, mode, model_dir, self.examples, self.run)

    # ---- Data ---------------------------------------------------------------------------

    def prepare(self, model_dir, mode):
        data = self.config.data
        if data.task == "squad":
            self.data = finetune_data.prepare_squad(data, self.run, self.seq_length,
                                                     self.questions, mode)
        else:
            self.data = finetune_data.prepare_classification(
                data, self.run, self.seq_length, model_dir, self.config.train.seed,
                self.examples, mode)
            self.labels = self.data.labels

    # ---- Model --------------------------------------------------------------------------

    def build_model(self):
        encoder = self.run.build_encoder(self.seq_length, self.config.encoder,
                                         self.starts_from_export)
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

    def train_replica_dataset(self, input_context, plan, seed, steps_to_skip):
        return finetune_data.train_replica_dataset(
            input_context, finetune_data.train_examples(self.data),
            self.config.train.global_batch_size, seed, steps_to_skip)

    # ---- Evaluation ---------------------------------------------------------------------

    def predict(self):
        """The outputs of the first eval.steps batches of the held-out set (0: all)."""
        features, _ = self.data.eval_arrays
        dataset = tf.data.Dataset.from_tensor_slices(features).batch(
            self.config.eval.global_batch_size)
        return self.network.predict(dataset.take(self.config.eval.steps or -1), verbose=0)

    def evaluate(self, model, strategy):
        outputs = self.predict()
        if self.config.data.task == "squad":
            self.predictions, questions = squad.decode_evaluated(
                self.data.eval_examples, self.data.eval_features, outputs["start_logits"],
                outputs["end_logits"], self.data.eval_dataset_json,
                self.config.data.n_best_size, self.config.data.max_answer_length)
            squad.write_predictions(self.evaluation_dir, self.predictions)
            return squad.squad_scores(questions, self.predictions)
        logits = outputs["logits"]
        labels = self.data.eval_arrays[1]["logits"][:len(logits)]
        return {"accuracy": float(np.mean(np.argmax(logits, -1) == labels))}

    def describe_evaluation(self, results):
        if self.config.data.task == "squad":
            return squad.describe_scores(results, len(self.predictions),
                                         len(self.data.eval_examples))
        return f"accuracy={results['accuracy']:.4f} (chance {1 / len(self.labels):.4f})"

    def serving_module(self):
        if self.config.data.task == "squad":
            data = self.config.data
            return finetune_export.QuestionAnsweringServing(
                self.network, self.run.vocab_file, self.seq_length, data.max_query_length,
                data.n_best_size, data.max_answer_length, data.doc_stride)
        return finetune_export.ClassifierServing(self.network, self.run.vocab_file,
                                                 self.seq_length, self.labels, self.data.pairs)

    def export(self, export_dir):
        module = self.serving_module()
        return export_lib.export_saved_model(export_dir, module, signatures=module.signatures())


if __name__ == "__main__":
    driver.main(BertFinetuneTask, extra_flags=(finetune_flags.COMPARE_FLAG,),
                run_options=finetune_compare.run)
