"""Pretraining TFRecords -> the `tf.data.Dataset` that `model.fit` consumes.

Reading is Model Garden's own `BertPretrainDataLoader` (`official.nlp.data.pretrain_dataloader`):
it parses the Google BERT feature names, casts int64 to int32 (TPUs want int32), shards per
host with `tf.distribute.InputContext`, shuffles files and records with the seed, repeats
for training and batches to the per-replica batch with `drop_remainder=True`, so every
shape is static. This module only picks the files (sorted, so the order is reproducible),
turns "no files" into a one-line error, hands the reader its local files' records from a
sequential interleave (`_BertPretrainDataLoaderReadingInTurn`: the same records in the same
order, a pipeline's start 1.4-3.4x faster; files on gs:// go through Model Garden's
parallel reads), and splits each batch into the Keras `(features, labels)` pair:

  features = {
      "input_word_ids":      int32 [batch, seq_length],
      "input_mask":          int32 [batch, seq_length],
      "input_type_ids":      int32 [batch, seq_length],
      "masked_lm_positions": int32 [batch, max_predictions_per_seq],
  }  # exactly the inputs of Model Garden's BertPretrainerV2
  labels = {
      "masked_lm_ids":        int32   [batch, max_predictions_per_seq],
      "masked_lm_weights":    float32 [batch, max_predictions_per_seq],
      "next_sentence_labels": int32   [batch, 1],
  }

There is no third (sample_weight) element: the masked-LM weights are per prediction, not
per example, so they travel in `labels` and the loss applies them (as Model Garden's
`MaskedLMTask.build_losses` does with `masked_lm_weights`).
"""

from typing import Optional

import tensorflow as tf
from official.common import dataset_fn
from official.core import input_reader
from official.nlp.data import pretrain_dataloader

from recipes.bert import model as model_lib
from recipes.common import corrupt_data
from recipes.common import storage
from recipes.common.errors import UserError

FEATURE_KEYS = ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")
LABEL_KEYS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
SHUFFLE_BUFFER_SIZE = 10_000  # Records; Model Garden's DataConfig default is 100.
# One file after another, the files in the seed's order: Model Garden's default (None)
# leaves the interleave's cycle to tf.data, which is one file here in TF 2.20 but is the
# runtime's choice. Not more: prepare_data orders every shard by document chunk, so files
# read in turn would fill the buffer from the same stretch of the corpus in each, and every
# checkpoint chunk's pipeline starts at the files' beginnings (docs/performance.md, "How
# many files the BERT reader reads at once").
FILES_READ_AT_ONCE = 1


def make_pretraining_dataset(files, **reader_arguments) -> tf.data.Dataset:
    """A dataset of `(features, labels)` batches read from the pretraining TFRecords
    (`read_pretraining_batches`, whose arguments it takes, each batch split as in the
    module docstring)."""
    return read_pretraining_batches(files, **reader_arguments).map(
        _features_and_labels, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )


def read_pretraining_batches(
    files,
    *,
    seq_length: int,
    max_predictions_per_seq: int,
    batch_size: int,
    is_training: bool,
    input_context: Optional[tf.distribute.InputContext] = None,
    seed: Optional[int] = None,
) -> tf.data.Dataset:
    """A dataset of batches read from the pretraining TFRecords: dicts of the feature
    names of the module docstring, as Model Garden's reader gives them.

    Args:
      files: a glob (or comma-separated globs) of TFRecord files, e.g.
        `PreparedData.train_files`, or a list of files (a run's, listed once when it
        starts: recipes.bert.data).
      seq_length, max_predictions_per_seq: the values the files were written with.
      batch_size: the global batch of one element; with `input_context` each replica gets
        `batch_size / num_replicas_in_sync` (e.g. the micro-batch times the replicas).
      is_training: True: shuffled with `seed` (files, then a 10k-record buffer) and
        repeated forever. False: one pass, no shuffling, in a fixed order (files sorted by
        name). Either way each file is read to its end before the next
        (`FILES_READ_AT_ONCE`).
      input_context: from `strategy.distribute_datasets_from_function`; shards the files
        per input pipeline (host).
      seed: shuffling seed. Must be set when several input pipelines read for training, so
        that all hosts shuffle the file list the same way before taking their shard.

    Both modes drop the last partial batch (static shapes): an evaluation pass covers
    `floor(num_sequences / batch_size) * batch_size` sequences.

    Raises:
      UserError: `files` is a glob that matches no files.
      ValueError: `seed` is None while several input pipelines read training data.
    """
    files = list_files(files) if isinstance(files, str) else list(files)
    if (
        is_training
        and seed is None
        and input_context is not None
        and input_context.num_input_pipelines > 1
    ):
        raise ValueError(
            f"seed=None with {input_context.num_input_pipelines} input pipelines: "
            "give a seed so every host shuffles the file list the same way"
        )
    config = pretrain_dataloader.BertPretrainDataConfig(
        input_path=files,
        global_batch_size=batch_size,
        is_training=is_training,
        seq_length=seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        use_next_sentence_label=True,
        drop_remainder=True,
        deterministic=True,
        seed=seed,
        shuffle_buffer_size=SHUFFLE_BUFFER_SIZE,
        cycle_length=FILES_READ_AT_ONCE,
    )
    return _BertPretrainDataLoaderReadingInTurn(config).load(input_context)


class _BertPretrainDataLoaderReadingInTurn(pretrain_dataloader.BertPretrainDataLoader):
    """Model Garden's BERT pretraining reader, its files' records read by a sequential
    interleave instead of its parallel one; the same records in the same order.

    Model Garden reads several files (`official.core.input_reader`'s
    `_shard_files_then_read`) with `interleave(cycle_length, num_parallel_calls=cycle_length)`:
    at one file at a time (`FILES_READ_AT_ONCE`) a background thread hands every record
    across to the shuffle buffer, whose 10,000 records each checkpoint chunk's pipeline
    fills afresh (recipes.common.task.train_dataset). Read in turn on the buffer's own
    thread, a pipeline's start (iterator and first batch) took 99 instead of 322 ms here
    (median of 15 alternated rounds; 1.4-3.4x faster with 96% confidence) and a batch 18.7
    instead of 21.3 ms of CPU (docs/performance.md, "Reading the files in turn"). The files
    are Model Garden's (`match_files`), shuffled, sharded and repeated as it does, and the
    records go to its own `InputReader.read` (its `dataset` argument), which shuffles,
    decodes, parses and batches them as before. Where Model Garden reads without an
    interleave (one file, or fewer files than input pipelines), and where its parallel
    reads hide the latency of remote files (gs://: `recipes.common.storage`), its own
    `load` reads. Written here because Model Garden's reader takes no setting for its
    interleave's parallelism."""

    def _check_every_pipeline_reads_a_record(self, files, shares_files, input_context):
        """Each pipeline's share of the files holds a record; or, where records are shared
        out instead (fewer files than pipelines), there is one for every pipeline."""
        if not shares_files:
            corrupt_data.check_every_pipeline_reads_a_record(
                "data.train_files", files, input_context)
            return
        pipelines = input_context.num_input_pipelines
        corrupt_data.check_pipeline_reads_a_record(
            "data.train_files",
            [path.decode() for path in self._files_of_pipeline(
                files, pipelines, input_context).as_numpy_iterator()],
            input_context)

    def load(self, input_context: Optional[tf.distribute.InputContext] = None):
        params = self._params
        files = input_reader.match_files(params.input_path)
        pipelines = input_context.num_input_pipelines if input_context else 1
        shares_files = len(files) >= max(2, pipelines)  # as Model Garden's `_read_data_source`
        if params.is_training and params.sharding and pipelines > 1:
            self._check_every_pipeline_reads_a_record(files, shares_files, input_context)
        if not shares_files or not storage.all_local(files):
            # Model Garden's `_read_files_then_shard`, or its parallel reads of remote files.
            return super().load(input_context)
        records = self._files_of_pipeline(files, pipelines, input_context)
        if params.is_training:
            records = records.repeat()
        read_file = dataset_fn.pick_dataset_fn(params.file_type)  # as Model Garden's `load`
        records = records.interleave(read_file, cycle_length=params.cycle_length)
        reader = input_reader.InputReader(
            params=params,
            dataset_fn=read_file,
            decoder_fn=self._decode,
            parser_fn=self._parse,
        )
        batches = reader.read(input_context, dataset=records)
        if params.is_training:  # endless, as Model Garden's parallel interleave says
            batches = batches.apply(
                tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
        return batches

    def _files_of_pipeline(self, files, pipelines, input_context):
        """This pipeline's files, in its order, as Model Garden's `_shard_files_then_read`
        gives them: shuffled with the seed every host shares, then shared out."""
        records = tf.data.Dataset.from_tensor_slices(files)
        if self._params.is_training:
            records = records.shuffle(
                len(files), seed=self._params.seed, reshuffle_each_iteration=True)
        if self._params.sharding and pipelines > 1:
            records = records.shard(pipelines, input_context.input_pipeline_id)
        return records


def list_files(file_pattern, setting="pretraining data"):
    """The sorted files of comma-separated globs (local or gs://), or a UserError that
    begins with `setting`."""
    files = sorted(
        {
            path
            for pattern in file_pattern.split(",")
            if pattern.strip()
            for path in tf.io.gfile.glob(pattern.strip())
        }
    )
    if not files:
        shards = "heldout" if "eval" in setting else "train"  # prepare_data's two kinds
        raise UserError(
            f"{setting}: {file_pattern} matches no TFRecord files: run "
            "`python -m recipes.bert.prepare_data --output_dir=DIR` and point the "
            f"config at DIR/{shards}-*.tfrecord"
        )
    directories = [path for path in files if tf.io.gfile.isdir(path)]
    if directories:
        raise UserError(
            f"{setting}: {file_pattern} names the directory {directories[0]}: give a "
            f"glob of its files, such as {directories[0].rstrip('/')}/train-*.tfrecord"
        )
    return files


def _features_and_labels(batch):
    return ({key: batch[key] for key in FEATURE_KEYS}, {key: batch[key] for key in LABEL_KEYS})


# Plain tensor ops, no Python control flow on tensors, so AutoGraph has nothing to convert:
# skipping it, and one map instead of two, builds a checkpoint chunk's pipeline in 83
# instead of 96 ms here (recipes.common.task.train_dataset builds one per chunk;
# docs/performance.md).
@tf.autograph.experimental.do_not_convert
def _keras_batch(batch):
    """A reader's batch as Keras' `(inputs, targets, sample_weights)` (one map, not two)."""
    return model_lib.keras_targets(*_features_and_labels(batch))


def make_train_replica_dataset(config, files, input_context, seed, steps_to_skip):
    """Endless training batches of Keras `(inputs, targets)` for the model of
    recipes.bert.model from one input pipeline (one per host), records and files shuffled
    with `seed`, without the batches of the first `steps_to_skip` optimizer steps (the
    `Task.train_replica_dataset` of recipes.bert.pretrain). The skipped batches are
    skipped before they are split."""
    dataset = read_pretraining_batches(
        files,
        seq_length=config.data.seq_length,
        max_predictions_per_seq=config.data.max_predictions_per_seq,
        batch_size=config.train.global_batch_size,  # the reader divides it by the replicas
        is_training=True,
        input_context=input_context,
        seed=seed,
    )
    if steps_to_skip:
        replicas = input_context.num_replicas_in_sync // input_context.num_input_pipelines
        dataset = dataset.skip(steps_to_skip * replicas)
    return dataset.map(_keras_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def make_eval_dataset(strategy, config, files):
    """The held-out files once, as global batches of eval.global_batch_size (one pipeline
    per host)."""

    def replica_dataset(input_context):
        return read_pretraining_batches(
            files,
            seq_length=config.data.seq_length,
            max_predictions_per_seq=config.data.max_predictions_per_seq,
            batch_size=config.eval.global_batch_size,
            is_training=False,
            input_context=input_context,
        ).map(_keras_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    return strategy.distribute_datasets_from_function(replica_dataset)
