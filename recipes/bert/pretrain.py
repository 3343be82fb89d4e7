r"""BERT pretraining with LAMB: the task the shared driver (recipes/common/driver.py) runs.

The embedded default (the project's main job; prepares the stdlib corpus, evaluates,
trains a tiny BERT at an effective batch of 2,048 through gradient accumulation, evaluates
again, exports):

  python -m recipes.bert.pretrain --config_file=configs/bert/tiny_cpu.yaml \
      --model_dir=/tmp/bert_tiny

BERT-Large at batch 32k on a TPU VM (see docs/bert.md for the 64k/32k pair):

  python -m recipes.bert.pretrain --config_file=configs/bert/bert_large_lamb_32k.yaml \
      --tpu=local --model_dir=gs://BUCKET/bert_large_32k \
      --params_override=data.train_files=gs://BUCKET/data/train-*,...

Modes and flags are the driver's: train (then export), eval, train_and_eval, export;
re-running the same command resumes from the newest checkpoint in --model_dir.
"""

from recipes.common import startup  # before TensorFlow: legacy Keras, quiet C++
from recipes.bert.config import BertPretrainingConfig

if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    startup.check_command_line(BertPretrainingConfig)

import tensorflow as tf  # noqa: E402

from lamb_tf import exclusions  # noqa: E402
from recipes.bert import data as data_lib  # noqa: E402
from recipes.bert import ecosystem_export  # noqa: E402
from recipes.bert import export as export_lib  # noqa: E402
from recipes.bert import input as input_lib  # noqa: E402
from recipes.bert import model as model_lib  # noqa: E402
from recipes.bert import vocabulary  # noqa: E402
from recipes.common import corrupt_data, driver, storage, task  # noqa: E402
from recipes.common.errors import UserError  # noqa: E402


class BertPretraining(task.Task):
    """Masked-LM + next-sentence pretraining of Model Garden's BertEncoderV2."""

    config_class = BertPretrainingConfig
    export_subdir = "export"
    default_exclude_from_weight_decay = exclusions.BERT_EXCLUDE_PATTERNS
    listed_files = None  # the configured files, listed by check_data
    told_eval_steps = False  # that eval.steps read more than the held-out files hold

    def check_config(self):
        data, model = self.config.data, self.config.model
        model_lib.check_model_config(model)
        data_lib.check_data_config(data)
        if data.seq_length > model.max_sequence_length:
            raise UserError(
                f"data.seq_length={data.seq_length} exceeds model.max_sequence_length="
                f"{model.max_sequence_length}; raise model.max_sequence_length (BERT: 512)")
        if data.data_dir and not data.train_files and not data_lib.finished_preparation(
                data.data_dir):  # the preparation will write there
            storage.check_writable(f"data.data_dir={data.data_dir}", data.data_dir)

    def check_data(self, mode, model_dir):
        if driver.exports(self.config, mode):  # (and where the export writes besides export/)
            ecosystem_export.check_replace(model_dir)
        self.listed_files = data_lib.list_data_files(self.config.data)
        if self.listed_files is None:  # a corpus to prepare, unless prepared already
            data_lib.check_corpus(self.config.data, model_dir, mode in driver.TRAIN_MODES)

    def prepare(self, model_dir, mode):
        self.model_dir = model_dir
        # (a reused preparation's every data.* input is compared with the config only to train)
        self.data = data_lib.locate_or_prepare_data(self.config.data, model_dir,
                                                    self.listed_files, mode in driver.TRAIN_MODES)
        self.vocab_size = len(vocabulary.read_vocabulary(self.data.vocab_file))
        if self.config.data.train_files:
            data_lib.check_first_records(self.config.data, self.data, self.vocab_size,
                                         self.config.model.type_vocab_size,
                                         mode in driver.EVAL_MODES)
        held_out, batch = self.data.eval_sequences, self.config.eval.global_batch_size
        if mode in driver.EVAL_MODES and held_out is not None and held_out < batch:
            raise UserError(self._no_eval_batch(f"the {held_out} held-out sequences"))

    def build_model(self):
        self.encoder, pretrainer = model_lib.build_pretrainer(self.config.model, self.vocab_size)
        return model_lib.build_training_model(
            pretrainer, self.config.data.seq_length, self.config.data.max_predictions_per_seq
        )

    def compile_arguments(self):
        return {"loss": model_lib.losses(), "weighted_metrics": model_lib.weighted_metrics()}

    def train_replica_dataset(self, input_context, plan, seed, steps_to_skip):
        return input_lib.make_train_replica_dataset(
            self.config, self.data.train_files, input_context, seed, steps_to_skip
        )

    def evaluate(self, model, strategy):
        dataset = input_lib.make_eval_dataset(strategy, self.config, self.data.eval_files)
        self.evaluated_step = int(model.optimizer.iterations.numpy())
        steps, batch = self.config.eval.steps, self.config.eval.global_batch_size
        results = model.evaluate(dataset, steps=steps or None, return_dict=True, verbose=0)
        if "masked_lm_accuracy" not in results:  # no batch: Keras returns no metric
            raise UserError(self._no_eval_batch(f"the held-out files of {self.data.eval_pattern}"))
        self.evaluated_sequences = model_lib.sequences_counted(model)
        if self.evaluated_sequences < steps * batch and not self.told_eval_steps:
            self.told_eval_steps = True  # (once: train_and_eval evaluates twice)
            print(f"eval.steps={steps} is more than the held-out files hold ({steps * batch:,} "
                  f"sequences): evaluated their {self.evaluated_sequences:,}", flush=True)
        return results

    def _no_eval_batch(self, held_out):
        fix = ("give --mode=train, or prepare with a held-out fraction above 0"
               if self.data.eval_sequences == 0 else "lower eval.global_batch_size")
        return (f"eval.global_batch_size={self.config.eval.global_batch_size} is more than "
                f"{held_out} hold, so the evaluation reads no batch (it drops a last partial "
                f"one: static shapes); {fix}")

    def describe_evaluation(self, results):
        # Each number under its results.json key. masked_lm_cross_entropy: per masked token
        # (Google's BERT's masked_lm_loss); results.json's masked_lm_loss is Keras' training
        # loss term, over batch x max_predictions_per_seq (recipes/bert/model.py).
        return (
            f"masked_lm_accuracy={results['masked_lm_accuracy']:.4f} "
            f"masked_lm_cross_entropy={results['masked_lm_cross_entropy']:.4f} "
            f"next_sentence_accuracy={results['next_sentence_accuracy']:.4f} "
            f"({self.evaluated_sequences:,} sequences, step {self.evaluated_step})"
        )

    def export(self, export_dir):
        export_lib.export_encoder(export_dir, self.encoder, self.data.vocab_file,
                                  self.config.data.seq_length)
        ecosystem_export.export_for_ecosystem(  # model_garden/ and hub/ (docs/finetune.md)
            self.model_dir, self.encoder, self.config.model, self.data.vocab_file,
            self.config.data.seq_length, step=self.export_step)

    def input_files(self, split):
        return {"train": self.data.train_files, "eval": self.data.eval_files,
                "export": (self.data.vocab_file,)}[split]  # (the export serves its vocabulary)

    def explain_input_error(self, error, split):
        pattern = self.data.train_pattern if split == "train" else self.data.eval_pattern
        if isinstance(error, tf.errors.DataLossError):
            return UserError(corrupt_data.describe_corrupt_data(pattern, error))
        if "ParseExample" in str(getattr(error, "message", error)):  # a record of another kind
            return UserError(data_lib.describe_unparsable_record(
                f"data.{split}_files", pattern, self.config.data, error))
        return None


if __name__ == "__main__":
    driver.main(BertPretraining)
