"""Every bad input of docs/reliability.md's table, through the real command lines.

Each row must end with exit status 2, stderr's last line `error: ...` holding the row's
key words (what, where, what to do), no traceback, and nothing written that a later run
could take for a result: no checkpoint, no export, no finished data preparation, and a
trained model_dir's checkpoints untouched.

The command lines run through tests/preloaded_cli.py (import TensorFlow once, fork one
process per command line, two at a time); each is still `python -m <recipe> <flags>`
from its `__main__` block to its exit status.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

import reliability_cli as cli
import tiny_bert_data

pytestmark = pytest.mark.slow  # real command-line / multi-process runs

BERT = "recipes.bert.pretrain"
RESNET = "recipes.resnet.train"
LOG_FILE = "tensorflow.log"  # where TensorFlow's C++ log lines go (recipes/common/native_log.py)
TRAINED = "trained"  # the row runs in a copy of a model_dir trained for 2 steps
FRESH = "fresh"
WITHOUT_MODEL_DIR = "<no --model_dir>"  # in a row's arguments: the command line has none

RESNET_TINY_CONFIG = os.path.join(cli.REPO_ROOT, "configs", "resnet", "tiny_cpu.yaml")

# id: (program, where, arguments ({d}: the inputs directory), key words of the message)
CASES = {
    "missing-config-file": (BERT, FRESH, ["--config_file=/nonexistent/bert.yaml"],
                            ["config file '/nonexistent/bert.yaml' does not exist",
                             "check --config_file"]),
    "unreadable-config-file": (BERT, FRESH, ["--config_file={d}/a_directory.yaml"],
                               ["a_directory.yaml' cannot be read (Is a directory)",
                                "give a YAML file"]),
    "config-file-bad-yaml": (BERT, FRESH, ["--config_file={d}/broken.yaml"],
                             ["broken.yaml", "fix the YAML syntax"]),
    "unknown-key-in-file": (BERT, FRESH, ["--config_file={d}/unknown_key.yaml"],
                            ["unknown_key.yaml", "unknown config key 'train.stepz'",
                             "known keys under train"]),
    "another-programs-config": (BERT, FRESH, [f"--config_file={RESNET_TINY_CONFIG}"],
                                ["tiny_cpu.yaml: unknown config key 'data.",
                                 "keys are unknown here",
                                 "is it another program's config? --help_config lists this "
                                 "program's keys"]),
    "unknown-override": (BERT, FRESH, ["--params_override=train.stepz=3"],
                         ["--params_override", "unknown config key 'train.stepz'"]),
    # answered before TensorFlow loads (recipes.common.startup)
    "config-key-as-flag": (BERT, FRESH, ["--learning_rate=0.1"],
                           ["--learning_rate is not a flag of this program; config keys are "
                            "set with --params_override: "
                            "--params_override=optimizer.learning_rate=0.1"]),
    "wrong-type": (BERT, FRESH, ["--params_override=train.steps=two"],
                   ["config key 'train.steps' must be int"]),
    "batch-does-not-divide": (BERT, FRESH, ["--params_override=train.micro_batch_size=5"],
                              ["train.global_batch_size=16 is not divisible by "
                               "train.micro_batch_size=5, whatever the replicas",
                               "use train.micro_batch_size=4 or 8, or "
                               "train.global_batch_size=15 or 20"]),
    "missing-data-files": (BERT, FRESH, ["--params_override=data.train_files=/nonexistent/train-*"],
                           ["data.train_files: /nonexistent/train-* matches no TFRecord files",
                            "prepare_data"]),
    "corrupt-tfrecord": (BERT, FRESH, ["--params_override=data.train_files={d}/corrupt-*"],
                         ["corrupt TFRecord file {d}/corrupt-00000.tfrecord", "re-create it"]),
    # the first record of each configured glob's first file is read before the model is built
    "records-of-another-kind": (BERT, FRESH,
                                ["--params_override=data.train_files={d}/not_a_jpeg-*"],
                                ["data.train_files: {d}/not_a_jpeg-00000 holds a record that is "
                                 "not a BERT pretraining example of data.seq_length=16 and "
                                 "data.max_predictions_per_seq=3 (Feature: input_ids",
                                 "give TFRecords written by `python -m recipes.bert.prepare_data`"
                                 " with those lengths"]),
    # a glob of empty files: training would wait for a record forever (ResNet's did)
    "empty-tfrecord-files": (BERT, FRESH, ["--params_override=data.train_files={d}/empty/train-*"],
                             ["data.train_files: the 1 file(s) of {d}/empty/train-* hold no "
                              "record; give TFRecords written by `python -m "
                              "recipes.bert.prepare_data`"]),
    # files without their preparation's metadata.json: the first record's ids are checked
    "vocabulary-smaller-than-the-data": (
        BERT, FRESH, ["--params_override=data.train_files={d}/nometa/train-*,"
                      "data.eval_files={d}/nometa/heldout-*,data.vocab_file={d}/small_vocab.txt"],
        ["data.train_files: the first record of {d}/nometa/train-00000-of-00002.tfrecord holds "
         "piece id ", ", outside the 10 pieces of data.vocab_file={d}/small_vocab.txt: the "
         "files were made with another vocabulary; give theirs"]),
    "segment-ids-above-type-vocab-size": (
        BERT, FRESH, ["--params_override=model.type_vocab_size=1"],
        ["holds segment id 1, which model.type_vocab_size=1 has no embedding for; give "
         "model.type_vocab_size=2 or more (BERT: 2)"]),
    # a preparation's metadata.json counts the held-out sequences: found before the model
    # (the data.* values are those it was made from, tests/tiny_bert_data.py; the base
    # config's data.vocab_file is the vocab.txt it learned, which is its vocabulary)
    "eval-batch-above-the-held-out-sequences": (
        BERT, FRESH, ["--mode=train_and_eval", "--params_override=data.train_files='',"
                      "data.data_dir={d}/../prepared,data.corpus={d}/../corpus.txt,"
                      "data.vocab_size=200,data.dupe_factor=2,data.seed=0,"
                      "eval.global_batch_size=4096"],
        ["eval.global_batch_size=4096 is more than the ", " held-out sequences hold, so the "
         "evaluation reads no batch (it drops a last partial one: static shapes); lower "
         "eval.global_batch_size"]),
    # configured files are not counted: found by the evaluation, which reads no batch
    "eval-batch-above-the-held-out-files": (
        BERT, TRAINED, ["--mode=eval", "--params_override=eval.global_batch_size=4096"],
        ["eval.global_batch_size=4096 is more than the held-out files of ", " hold, so the "
         "evaluation reads no batch"]),
    "empty-corpus": (BERT, FRESH, ["--params_override=data.corpus={d}/empty_corpus,"
                                   "data.train_files=''"],
                     ["empty_corpus", "are empty", "one sentence per line"]),
    # a finished preparation of another corpus in data.data_dir: refused, not reused
    "data-dir-holds-another-preparation": (
        BERT, FRESH, ["--params_override=data.train_files='',data.data_dir={d}/../prepared"],
        ["/prepared holds a preparation of data.corpus='", "corpus.txt', but "
         "data.corpus='stdlib'; keep data.corpus='", "' or give another data.data_dir (a new "
         "preparation is written there)"]),
    # what a preparation would read, checked before the strategy line (they were after it)
    "misspelled-corpus": (
        BERT, FRESH, ["--params_override=data.corpus=stdlibb,data.train_files=''"],
        [f"data.corpus: {cli.REPO_ROOT}/stdlibb matches no files: did you mean 'stdlib' "
         "(the embedded corpus)? otherwise give a directory of .txt files or a glob"]),
    "missing-vocabulary-to-prepare-with": (
        BERT, FRESH, ["--params_override=data.vocab_file=/nonexistent/vocab.txt,"
                      "data.corpus=stdlib,data.train_files=''"],
        ["data.vocab_file: vocabulary file /nonexistent/vocab.txt does not exist: pass a "
         "vocab.txt with one WordPiece token per line, or omit it to learn one"]),
    "corpus-without-sentence-pairs": (BERT, FRESH,
                                      ["--params_override=data.corpus={d}/one_sentence_documents,"
                                       "data.train_files=''"],
                                      # two one-sentence documents still make a random-next
                                      # training pair (as Google's create_pretraining_data),
                                      # but leave nothing for the held-out split
                                      ["one_sentence_documents", "no held-out sentence pairs"]),
    "vocabulary-does-not-match-the-data": (
        BERT, TRAINED, ["--params_override=data.vocab_file={d}/bigger_vocab.txt"],
        ["data.vocab_file {d}/bigger_vocab.txt holds ", "were made with a vocabulary of ",
         "give that one ("]),
    "data-of-another-sequence-length": (
        BERT, FRESH, ["--params_override=data.seq_length=32"],
        ["data.train_files: ", "holds data prepared with seq_length=16, but "
         "data.seq_length=32; set data.seq_length=16 or give files prepared for it"]),
    "train-steps-below-the-checkpoint": (
        BERT, TRAINED, ["--params_override=train.steps=1,train.checkpoint_every=1,"
                                   "optimizer.warmup_steps=0"],
        ["holds a run trained to step 2, past train.steps=1: give train.steps=2 or more to "
         "train it further, --mode=eval or --mode=export to use it, or a new --model_dir"]),
    # Found before any work (was: after the data stage and the model build).
    "init-checkpoint-holds-no-checkpoint": (
        BERT, FRESH, ["--params_override=train.init_checkpoint={d}/no_phase_one"],
        ["train.init_checkpoint='{d}/no_phase_one' holds no checkpoint; give phase 1's "
         "model_dir or a checkpoint path such as <model_dir>/checkpoints/ckpt-7038"]),
    "model-dir-holds-another-optimizer": (
        BERT, TRAINED, ["--params_override=optimizer.name=lars"],
        ["optimizer.name was 'lamb' in the run in ", ", now 'lars': its checkpoint holds the "
         "state of another optimizer; keep optimizer.name='lamb' or use a new --model_dir"]),
    "model-dir-without-a-loss-scale": (
        BERT, TRAINED, ["--params_override=runtime.precision=mixed_float16"],
        ["runtime.precision was 'float32' in the run in ", ", now 'mixed_float16': its "
         "checkpoint holds no loss scale, which mixed_float16 restores; keep "
         "runtime.precision='float32' or use a new --model_dir"]),
    "model-dir-holds-another-model-shape": (BERT, TRAINED,
                                           ["--params_override=model.hidden_size=32"],
                                           ["model.hidden_size was 16 in the run in ",
                                            ", now 32: a run keeps its model.* keys from its "
                                            "first step to its last", "new --model_dir"]),
    # Corrupt float data (every masked-LM weight NaN): the run restores step 2, its loss is
    # NaN at step 3, it stops there and the checkpoint of step 2 stays as it was.
    "nan-in-training-data": (BERT, TRAINED,
                             ["--params_override=data.train_files={d}/nan/train-*,train.steps=4"],
                             ["loss became nan at step 3;", "last good checkpoint is",
                              "ckpt-2", "check the input data"]),
    "tpu-flag-without-tpu": (BERT, FRESH, ["--tpu=local"],
                             ["--tpu=local", "no usable TPU", "drop --tpu"]),
    "export-before-any-checkpoint": (BERT, FRESH, ["--mode=export"],
                                     ["no checkpoint in", "train first"]),
    # Config checks of the shared schema (recipes/common/schema.py), in both recipes.
    "checkpoint-every-zero": (BERT, FRESH, ["--params_override=train.checkpoint_every=0"],
                              ["train.checkpoint_every=0 must be positive"]),
    "resnet-checkpoint-every-zero": (RESNET, FRESH,
                                     ["--params_override=train.checkpoint_every=0"],
                                     ["train.checkpoint_every=0 must be positive"]),
    "resnet-batch-does-not-divide": (RESNET, FRESH,  # (files that exist: those are checked first)
                                     ["--params_override=train.micro_batch_size=5,"
                                      "data.train_file_pattern={d}/not_a_jpeg-*"],
                                     ["train.global_batch_size=16 is not divisible by "
                                      "train.micro_batch_size=5"]),
    "resnet-steps-not-a-multiple": (RESNET, FRESH, ["--params_override=train.steps=3"],
                                    ["train.steps=3 is not a multiple of "
                                     "train.checkpoint_every=2"]),
    # Keras calls back once per steps_per_execution updates (the fresh config: log_every 5,
    # checkpoint_every 2).
    "log-every-off-the-calls": (BERT, FRESH, ["--params_override=train.steps_per_execution=2"],
                                ["train.log_every=5 is not a multiple of "
                                 "train.steps_per_execution=2", "use train.log_every=4 or 6"]),
    "resnet-checkpoint-every-off-the-calls": (
        RESNET, FRESH, ["--params_override=train.steps_per_execution=3"],
        ["train.checkpoint_every=2 is not a multiple of train.steps_per_execution=3",
         "use train.checkpoint_every=3,"]),
    "old-key-name": (BERT, FRESH, ["--params_override=train.precision=float32"],
                     ["'train.precision' is now 'runtime.precision'"]),
    "resnet-old-key-name": (RESNET, FRESH,
                            ["--params_override=runtime.mixed_precision=mixed_bfloat16"],
                            ["'runtime.mixed_precision' is now 'runtime.precision'"]),
    # Found before any work (issue 14): a --model_dir that is a file, eval/export with no
    # checkpoint before any data preparation, a learning rate that is not a finite number.
    "model-dir-is-a-file": (BERT, FRESH, ["--model_dir={d}/a_file/run"],
                            ["{d}/a_file is a file, not a directory"]),
    # a run trained into an export: the next export replaced the directory, the run with it
    "model-dir-is-a-savedmodel": (RESNET, FRESH, ["--model_dir={d}/a_saved_model"],
                                  ["--model_dir={d}/a_saved_model is a SavedModel (an export: "
                                   "its saved_model.pb), which a run's files would be mixed "
                                   "into; give a directory of its own"]),
    "resnet-model-dir-is-a-file": (RESNET, FRESH, ["--model_dir={d}/a_file"],
                                   ["{d}/a_file is a file, not a directory"]),
    # Linux's /proc takes no new directory, for root too (root passes permission checks)
    "model-dir-cannot-be-written": (BERT, FRESH, ["--model_dir=/proc/lamb_tf_run"],
                                    ["--model_dir=/proc/lamb_tf_run: cannot write in /proc (",
                                     "); give a directory you can write"]),
    "export-dir-cannot-be-written": (
        RESNET, FRESH, ["--params_override=export.dir=/proc/lamb_tf_export"],
        ["export.dir=/proc/lamb_tf_export: cannot write in /proc ("]),
    "model-dir-of-another-program": (
        RESNET, TRAINED,
        ["--params_override=data.embedded_digits=true,data.train_file_pattern=''"],
        ["holds a run this program cannot resume: its config.yaml does not load as this "
         "program's (unknown config key 'data.corpus'); is it another program's run? Give a "
         "new --model_dir"]),
    # the same, with train.steps below the other run's step: the run is named, not its steps
    "model-dir-of-another-program-past-its-steps": (
        RESNET, TRAINED, ["--params_override=data.embedded_digits=true,"
                          "data.train_file_pattern='',train.steps=1,"
                          "train.checkpoint_every=1,optimizer.warmup_steps=0"],
        ["holds a run this program cannot resume: its config.yaml does not load as this "
         "program's (unknown config key 'data.corpus')"]),
    # The export replaces its directory: one of other files, or the run's own, is refused.
    "export-dir-holds-other-files": (
        BERT, TRAINED, ["--mode=export", "--params_override=export.dir={d}/notes"],
        ["export.dir={d}/notes: {d}/notes holds files that are not a SavedModel (a.txt, ...)",
         "give a new or empty directory, or an earlier export"]),
    # an earlier export with a user's file in it: the export deleted the file before
    "export-dir-an-earlier-export-holding-other-files": (
        BERT, TRAINED, ["--mode=export", "--params_override=export.dir={d}/export_with_notes"],
        ["export.dir={d}/export_with_notes: {d}/export_with_notes holds files that are not a "
         "SavedModel (a.txt, ...)"]),
    # an earlier export, but another run's: the export replaced it, silently
    "export-dir-another-runs-export": (
        BERT, TRAINED, ["--mode=export", "--params_override=export.dir={d}/other_run/export"],
        ["export.dir={d}/other_run/export: it is in {d}/other_run, another training run's "
         "directory, whose export this one would replace; give a directory of its own"]),
    "export-dir-is-the-model-dir": (
        BERT, TRAINED, ["--mode=export", "--params_override=export.dir={m}"],
        ["it holds --model_dir", "whose checkpoints the export would replace"]),
    # a fresh model_dir's checkpoints/ does not exist yet: found before any work all the same
    "export-dir-inside-the-runs-checkpoints": (
        BERT, FRESH, ["--params_override=export.dir={m}/checkpoints/export"],
        ["/checkpoints/export: it is inside ", "/checkpoints, which the run writes itself; "
         "give a directory of its own (by default export/ in --model_dir)"]),
    "model-heads-do-not-divide": (BERT, FRESH, ["--params_override=model.num_attention_heads=3"],
                                  ["model.hidden_size=16 is not a multiple of "
                                   "model.num_attention_heads=3"]),
    "resnet-model-norm-epsilon-negative": (RESNET, FRESH,
                                           ["--params_override=model.norm_epsilon=-1"],
                                           ["model.norm_epsilon=-1.0 must be positive"]),
    "optimizer-beta-out-of-range": (BERT, FRESH, ["--params_override=optimizer.beta_1=1.5"],
                                    ["optimizer.beta_1 must be in [0, 1), got 1.5"]),
    "exclusion-pattern-invalid": (
        BERT, FRESH, ["--params_override=optimizer.exclude_from_weight_decay=['(']"],
        ["optimizer.exclude_from_weight_decay holds an invalid regular expression '('"]),
    # found once the model is built: the variables' paths are known then
    "exclusion-patterns-match-nothing": (
        BERT, FRESH, ["--params_override=optimizer.exclude_from_weight_decay=[Layernorm]"],
        ["optimizer.exclude_from_weight_decay=['Layernorm'] matches no variable of the model, "
         "so it would exclude nothing (searched in paths such as ", "fix the patterns, or "
         "give [] to exclude nothing"]),
    "data-dir-cannot-be-written": (
        BERT, FRESH, ["--params_override=data.train_files='',data.data_dir=/proc/lamb_tf_data"],
        ["data.data_dir=/proc/lamb_tf_data: cannot write in /proc ("]),
    "eval-before-any-checkpoint-prepares-nothing": (
        BERT, FRESH, ["--mode=eval", "--params_override=data.train_files=''"],
        ["no checkpoint in", "train first"]),
    "resnet-eval-before-any-checkpoint-prepares-nothing": (
        RESNET, FRESH, ["--mode=eval", "--params_override=data.embedded_digits=true,"
                                       "data.train_file_pattern=''"],
        ["no checkpoint in", "train first"]),
    "learning-rate-nan": (BERT, FRESH, ["--params_override=optimizer.learning_rate=.nan"],
                          ["optimizer.learning_rate=nan must be a finite number >= 0"]),
    "learning-rate-negative": (BERT, FRESH, ["--params_override=optimizer.learning_rate=-0.01"],
                               ["optimizer.learning_rate=-0.01 must be a finite number >= 0"]),
    "end-learning-rate-above-peak": (
        BERT, FRESH, ["--params_override=optimizer.end_learning_rate=0.1"],
        ["optimizer.end_learning_rate=0.1 is above optimizer.learning_rate=0.01, the peak it "
         "decays from; give an end rate at most the peak"]),
    # Usage errors: absl's flag parsing, and the one flag without a default.
    "mode-bogus": (BERT, FRESH, ["--mode=bogus"],
                   ["flag --mode=bogus: value should be one of", "see --help"]),
    # absl's words were Python's: "invalid literal for int() with base 10: 'x'"
    "flag-value-of-another-type": (BERT, FRESH, ["--verbose=yes"],
                                   ["flag --verbose=yes: --verbose takes true or false",
                                    "see --help"]),
    # absl's words: "Unknown command line flag 'mdoel_dir'. Did you mean: model_dir ?"
    "flag-misspelt": (BERT, FRESH, ["--mdoel_dir=run"],
                      ["--mdoel_dir is not a flag of this program (did you mean --model_dir?)"]),
    "missing-model-dir": (BERT, FRESH, [WITHOUT_MODEL_DIR],
                          ["--model_dir is required", "(see --help)"]),
    # absl keeps the last value of a repeated flag: the first override would be dropped
    "params-override-given-twice": (BERT, FRESH, ["--params_override=train.steps=4",
                                                  "--params_override=train.log_every=1"],
                                    ["--params_override is given 2 times and only the last "
                                     "would count; give it once, joining the items with commas: "
                                     "--params_override=a.b=1,c.d=2"]),
    # Found while training a trained model_dir further (after the data stage and the
    # restore): the trained run's config.yaml and checkpoints stay as they were.
    "truncated-tfrecord-after-the-data-stage": (
        BERT, TRAINED, ["--params_override=data.train_files={d}/truncated/train-*,train.steps=4"],
        ["corrupt TFRecord file {d}/truncated/train-00001-of-00002.tfrecord",
         "(truncated record at ", "re-create it"]),
    # libjpeg prints `Not a JPEG file: starts with 0x74 0x68` per record it fails on: those
    # lines go to <model_dir>/tensorflow.log, the console keeps the one error line.
    "resnet-record-not-a-jpeg": (RESNET, FRESH,
                                 ["--params_override=data.train_file_pattern={d}/not_a_jpeg-*"],
                                 ["corrupt record 0 (0-based) in {d}/not_a_jpeg-00000",
                                  "the image is not a JPEG"]),
    # the first record's label 1 minus the offset 2 is -1: found before the model is built
    "resnet-labels-outside-the-classes": (
        RESNET, FRESH, ["--params_override=data.train_file_pattern={d}/later_not_a_jpeg-*,"
                        "data.label_offset=2"],
        ["the first record of {d}/later_not_a_jpeg-00000: image/class/label minus "
         "data.label_offset is outside [0, data.num_classes) (a record gives -1); check "
         "data.label_offset"]),
    # the first record is a JPEG (the check before the model is built passes), the next
    # ones are not
    "resnet-later-record-not-a-jpeg": (
        RESNET, FRESH, ["--params_override=data.train_file_pattern={d}/later_not_a_jpeg-*"],
        ["corrupt record 1 (0-based) in {d}/later_not_a_jpeg-00000",
         "the image is not a JPEG"]),
    # found with the config, before the digits are converted into the model_dir
    "resnet-digits-need-ten-classes": (
        RESNET, FRESH, ["--params_override=data.embedded_digits=true,"
                        "data.train_file_pattern='',data.num_classes=5"],
        ["data.embedded_digits needs data.num_classes=10 and data.label_offset=1, got 5 "
         "and 1"]),
    # the user's files with the digits left on: the digits were trained on, without a word
    "resnet-digits-with-file-patterns": (
        RESNET, FRESH, ["--params_override=data.embedded_digits=true"],
        ["data.train_file_pattern={d}/none-* is set, but data.embedded_digits=true trains and "
         "evaluates on the embedded digits and does not read it; set data.embedded_digits=false "
         "to use your files"]),
    "resnet-empty-tfrecord-files": (
        RESNET, FRESH, ["--params_override=data.train_file_pattern={d}/empty/train-*"],
        ["data.train_file_pattern='{d}/empty/train-*' holds no records: nothing to train "
         "on; give ImageNet-format TFRecords"]),
    "resnet-records-of-another-kind": (
        RESNET, FRESH, ["--params_override=data.train_file_pattern={d}/nometa/train-*"],
        ["data.train_file_pattern: the first record of {d}/nometa/train-00000-of-00002.tfrecord "
         "is not an ImageNet-format example (no image/encoded; it holds input_ids, "
         "input_mask, ", "give ImageNet-format TFRecords"]),
    "resnet-empty-glob": (RESNET, FRESH, ["--params_override=data.train_file_pattern={d}/none-*"],
                          ["data.train_file_pattern='{d}/none-*' matches no file"]),
    "resnet-corrupt-tfrecord": (RESNET, FRESH,
                                ["--params_override=data.train_file_pattern={d}/corrupt-*"],
                                ["{d}/corrupt-00000.tfrecord"]),
    "resnet-export-before-any-checkpoint": (RESNET, FRESH, ["--mode=export"],
                                            ["no checkpoint in", "train first"]),
}
CONFIG_ERRORS = {"unknown-key-in-file", "another-programs-config", "unknown-override", "wrong-type", "batch-does-not-divide",
                 "checkpoint-every-zero", "resnet-checkpoint-every-zero",
                 "resnet-batch-does-not-divide", "resnet-steps-not-a-multiple", "old-key-name",
                 "resnet-old-key-name", "learning-rate-nan", "log-every-off-the-calls",
                 "resnet-checkpoint-every-off-the-calls",
                 "learning-rate-negative",
                 "end-learning-rate-above-peak"}  # the whole config is checked before it is printed
TRAINING_STARTS = {"nan-in-training-data", "truncated-tfrecord-after-the-data-stage"}  # rows
# that get past the restore: TensorBoard event files are then written; checkpoints, export
# and config.yaml (and the config history config.<n>.yaml) must stay byte for byte.
TENSORBOARD = ("train", "train_scalars", "eval")
# Rows that get to an evaluation of a trained run (its model built: the exclusion report
# written again, the same text) and fail there, checkpoints and export untouched.
EVALUATION_STARTS = {"eval-batch-above-the-held-out-files"}
EVALUATION_WRITES = ("exclusions.txt", "eval")
# Rows on a new model_dir found only by reading the data (the records, while training; the
# sentence pairs, once the preparation has made them): the directory keeps the files of
# the work done until then (TensorBoard's, the unfinished preparation's directory,
# tensorflow.log); every other row leaves no --model_dir behind.
FOUND_IN_THE_DATA = {"resnet-later-record-not-a-jpeg"}
# Missing data files (configured, or a corpus to prepare) and a micro-batch that does not
# divide the global batch: found before
# the strategy is made (a TPU connected), so the console shows the error line alone, without
# the `strategy:` line. (A configured glob's first record is read after it: reading a record
# starts TensorFlow's runtime, after which no multi-worker strategy can be made.)
FOUND_BEFORE_THE_STRATEGY = {"missing-data-files", "resnet-empty-glob", "batch-does-not-divide",
                             "resnet-batch-does-not-divide", "empty-corpus",
                             "misspelled-corpus", "missing-vocabulary-to-prepare-with",
                             "data-dir-holds-another-preparation"}
# TF_CPP_MIN_LOG_LEVEL as a user has it: unset, so the recipes' start-up default applies.
USER_ENV = {name: value for name, value in cli.ENV.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
TPU_SECONDS = 60  # the `--tpu` row must fail within this wall time on a machine without TPU


def _write_inputs(d, bert_data):
    (d / "a_directory.yaml").mkdir()
    (d / "a_file").write_text("not a directory")
    (d / "notes").mkdir()
    (d / "notes" / "a.txt").write_text("a user's file, not an export")
    (d / "export_with_notes").mkdir()
    (d / "export_with_notes" / "saved_model.pb").write_bytes(b"")
    (d / "export_with_notes" / "a.txt").write_text("a user's file, put into an export")
    (d / "a_saved_model").mkdir()
    (d / "a_saved_model" / "saved_model.pb").write_bytes(b"")
    (d / "other_run" / "export").mkdir(parents=True)  # another run's earlier export
    (d / "other_run" / "export" / "saved_model.pb").write_bytes(b"")
    (d / "other_run" / "config.yaml").write_text("train: {}\n")
    (d / "broken.yaml").write_text("train: [1,\n")
    (d / "unknown_key.yaml").write_text("train:\n  stepz: 3\n")
    (d / "corrupt-00000.tfrecord").write_bytes(b"this is not a TFRecord file" * 4)
    _write_not_a_jpeg_records(str(d / "not_a_jpeg-00000"))
    _write_not_a_jpeg_records(str(d / "later_not_a_jpeg-00000"), first_a_jpeg=True)
    (d / "truncated").mkdir()
    train_files = sorted(glob.glob(bert_data.train_files))
    for path in train_files:  # the last file loses the end of its last record
        data = open(path, "rb").read()
        (d / "truncated" / os.path.basename(path)).write_bytes(
            data[:-7] if path == train_files[-1] else data)
    (d / "empty_corpus").mkdir()
    (d / "empty_corpus" / "a.txt").write_text("")
    (d / "one_sentence_documents").mkdir()
    (d / "one_sentence_documents" / "a.txt").write_text(
        "Only one sentence here.\n\nAnother document of one sentence.\n")
    _poison_masked_lm_weights(bert_data.train_files, str(d / "nan"))
    vocab = open(bert_data.vocab_file, encoding="utf-8").read().splitlines()
    (d / "bigger_vocab.txt").write_text("\n".join(vocab + [f"extra{i}" for i in range(8)]) + "\n")
    (d / "small_vocab.txt").write_text("\n".join(vocab[:10]) + "\n")
    (d / "empty").mkdir()
    (d / "empty" / "train-00000.tfrecord").write_bytes(b"")
    (d / "nometa").mkdir()  # the prepared TFRecords without their metadata.json
    for path in glob.glob(bert_data.train_files) + glob.glob(bert_data.eval_files):
        shutil.copy(path, d / "nometa")


def _write_not_a_jpeg_records(path, first_a_jpeg=False):
    """16 ImageNet-format records whose `image/encoded` is text, not a JPEG (but the first,
    with `first_a_jpeg`)."""
    def feature(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    jpeg = tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8)).numpy()
    with tf.io.TFRecordWriter(path) as writer:
        for index in range(16):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": feature(jpeg if first_a_jpeg and index == 0
                                         else b"this is not a JPEG image"),
                "image/format": feature(b"JPEG"),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
            })).SerializeToString())


def _poison_masked_lm_weights(pattern, output_dir):
    """Copies of the TFRecords with every masked-LM weight set to NaN."""
    os.makedirs(output_dir)
    for path in sorted(glob.glob(pattern)):
        with tf.io.TFRecordWriter(os.path.join(output_dir, os.path.basename(path))) as writer:
            for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
                example = tf.train.Example.FromString(record)
                weights = example.features.feature["masked_lm_weights"].float_list.value
                weights[:] = [float("nan")] * len(weights)
                writer.write(example.SerializeToString())


def _base_args(program, config_file, model_dir):
    if program == BERT:
        return [f"--config_file={config_file}", "--mode=train", f"--model_dir={model_dir}"]
    override = ("data.embedded_digits=false,data.train_file_pattern={d}/none-*,"
                "train.global_batch_size=16,train.micro_batch_size=8,train.steps=2,"
                "train.checkpoint_every=2,optimizer.warmup_steps=1")
    return ["--config_file=configs/resnet/tiny_cpu.yaml", "--mode=train",
            f"--params_override={override}", f"--model_dir={model_dir}"]


def _run_jobs(jobs, workdir):
    """Runs the jobs through tests/preloaded_cli.py; returns their results (dicts)."""
    jobs_path, results_path = os.path.join(workdir, "jobs.json"), os.path.join(workdir, "out.json")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f)
    subprocess.run([sys.executable, os.path.join(cli.REPO_ROOT, "tests", "preloaded_cli.py"),
                    jobs_path, results_path], cwd=cli.REPO_ROOT, env=USER_ENV, check=True,
                   timeout=sum(job["timeout"] for job in jobs), start_new_session=True)
    with open(results_path) as f:
        return json.load(f)


def _snapshot(directory, exclude=()):
    """{relative path: (size, mtime)} of every file under `directory` but those under its
    entries `exclude`."""
    found = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            if os.path.relpath(path, directory).split(os.sep)[0] in exclude:
                continue
            found[os.path.relpath(path, directory)] = (os.path.getsize(path),
                                                        os.stat(path).st_mtime_ns)
    return found


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Runs every row; returns {id: (returncode, seconds, stderr, model_dir, before)}."""
    root = tmp_path_factory.mktemp("bad_inputs")
    bert_data = tiny_bert_data.prepare(root)
    inputs = root / "inputs"
    inputs.mkdir()
    _write_inputs(inputs, bert_data)
    config = {
        "data": {"train_files": bert_data.train_files, "eval_files": bert_data.eval_files,
                 "vocab_file": bert_data.vocab_file, "seq_length": tiny_bert_data.SEQ_LENGTH,
                 "max_predictions_per_seq": tiny_bert_data.MAX_PREDICTIONS_PER_SEQ},
        "model": {"hidden_size": 16, "num_layers": 1, "num_attention_heads": 2,
                  "intermediate_size": 32, "max_sequence_length": 32},
        "optimizer": {"learning_rate": 0.01, "warmup_steps": 1},
        # k = 2: the accumulation's running sums are an XLA kernel, whose C++ log lines
        # test_tensorflow_log_lines_go_to_the_model_dir_not_the_console looks for
        "train": {"global_batch_size": 16, "micro_batch_size": 8, "steps": 2,
                  "checkpoint_every": 2},
        "eval": {"global_batch_size": 8, "steps": 1},
    }
    config_file = root / "tiny.yaml"
    config_file.write_text(yaml.safe_dump(config))

    def job(case_id, program, args, model_dir, timeout=240):
        return {"module": program, "args": args, "timeout": timeout,
                "stdout": str(root / f"{case_id}.out"), "stderr": str(root / f"{case_id}.err")}

    def args_of(case_id, model_dir):
        program, _, extra, _ = CASES[case_id]
        base = _base_args(program, config_file, model_dir)
        # The base's and the row's --params_override merged into one flag (a repeated flag
        # is refused), except in the row that repeats it on purpose; a row's key replaces
        # the base's (a key given twice is refused too).
        overrides = [a.split("=", 1)[1] for a in base + extra if a.startswith("--params_override=")]
        overrides = list({item.split("=", 1)[0]: item for override in overrides
                          for item in override.split(",")}.values())
        others = [a for a in base + extra if not a.startswith("--params_override=")]
        if case_id == "params-override-given-twice":
            others += [a for a in extra if a.startswith("--params_override=")]
        elif overrides:
            others.append("--params_override=" + ",".join(overrides))
        if case_id in CONFIG_ERRORS:  # --verbose prints a valid config: a bad one never
            others.append("--verbose")
        if WITHOUT_MODEL_DIR in others:
            others = [a for a in others
                      if a != WITHOUT_MODEL_DIR and not a.startswith("--model_dir=")]
        return [a.replace("{d}", str(inputs)).replace("{m}", model_dir) for a in others]

    # Phase 1: the rows on fresh model_dirs, and the 2-step run the other rows start from.
    trained_dir = str(root / "trained")
    # (it also writes the three exports: minutes on a loaded 2-core machine)
    jobs, ids = [job("train", BERT, _base_args(BERT, config_file, trained_dir), trained_dir,
                     timeout=600)], []
    for case_id, (program, where, _, _) in CASES.items():
        if where == FRESH:
            model_dir = str(root / case_id)
            jobs.append(job(case_id, program, args_of(case_id, model_dir), model_dir))
            ids.append(case_id)
    results = _run_jobs(jobs, str(root))
    assert results[0]["returncode"] == 0, cli.read(jobs[0]["stderr"])[-3000:]
    trained_run = (0, results[0]["seconds"], cli.read(jobs[0]["stderr"]), trained_dir, None,
                   str(inputs))
    # Phase 2: the rows on a copy of the trained model_dir.
    jobs2, ids2, before = [], [], {}
    for case_id, (program, where, _, _) in CASES.items():
        if where == TRAINED:
            model_dir = str(root / case_id)
            shutil.copytree(trained_dir, model_dir)
            before[case_id] = _snapshot(model_dir)
            jobs2.append(job(case_id, program, args_of(case_id, model_dir), model_dir))
            ids2.append(case_id)
    results2 = _run_jobs(jobs2, str(root))
    found = {}
    for case_id, result, job_ in zip(ids + ids2, results[1:] + results2, jobs[1:] + jobs2):
        found[case_id] = (result["returncode"], result["seconds"], cli.read(job_["stderr"]),
                          str(root / case_id), before.get(case_id), str(inputs))
    found[TRAINED] = trained_run
    return found


@pytest.mark.parametrize("case_id", list(CASES))
def test_bad_input_gives_one_line_and_writes_nothing(outcomes, case_id):
    returncode, seconds, stderr, model_dir, before, inputs = outcomes[case_id]
    _, where, _, key_words = CASES[case_id]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert returncode == 2, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert lines and lines[-1].startswith("error: "), stderr[-3000:]
    if case_id not in CONFIG_ERRORS:  # (those run with --verbose: TF's log on the console)
        assert lines == [lines[-1]], stderr[-3000:]  # nothing but the one line
    assert [line for line in lines if line.startswith("error: ")] == [lines[-1]]
    for words in key_words:
        assert words.replace("{d}", inputs) in lines[-1], lines[-1]
    if case_id == "tpu-flag-without-tpu":
        assert seconds < TPU_SECONDS
    # Nothing a later run could take for a result.
    if where == TRAINED:  # checkpoints, export and config.yaml of the trained run untouched
        written = (LOG_FILE, *(TENSORBOARD if case_id in TRAINING_STARTS else ()),
                   *(EVALUATION_WRITES if case_id in EVALUATION_STARTS else ()))
        assert _snapshot(model_dir, exclude=written) == {
            path: stat for path, stat in before.items() if path.split(os.sep)[0] not in written}
        if case_id in TRAINING_STARTS:
            values = cli.checkpoint_values(model_dir)
            assert all(np.isfinite(v).all() for v in values.values() if v.dtype.kind == "f")
        return
    if case_id not in FOUND_IN_THE_DATA:  # a new --model_dir is not left behind
        assert not os.path.exists(model_dir), os.listdir(model_dir)
    for output in ("export", "saved_model", os.path.join("data", "metadata.json")):
        assert not os.path.exists(os.path.join(model_dir, output)), output
    checkpoints = os.path.join(model_dir, "checkpoints")
    assert not os.path.exists(checkpoints) or not os.listdir(checkpoints)
    tfrecords = [name for _, _, files in os.walk(model_dir) for name in files
                 if ".tfrecord" in name or name.startswith(("train-", "validation-"))]
    assert not tfrecords, tfrecords


@pytest.mark.parametrize("case_id", sorted(FOUND_BEFORE_THE_STRATEGY))
def test_data_and_micro_batch_errors_are_found_before_the_strategy_is_made(outcomes, case_id):
    assert cli.read(outcomes[case_id][3] + ".out") == ""


def test_the_command_lines_temporary_files_go_to_the_tests_own_directory(outcomes):
    """AutoGraph's modules of the forked command lines (which end in os._exit, skipping the
    clean-up at exit) are in the TMPDIR that tests/conftest.py removes, not left in /tmp."""
    scratch = os.environ.get("TMPDIR", "")
    assert os.path.basename(scratch).startswith("lamb_tf_tests_"), scratch
    assert glob.glob(os.path.join(scratch, "__autograph_generated_file*.py"))


def test_an_export_dir_of_other_files_keeps_them(outcomes):
    inputs = outcomes["export-dir-holds-other-files"][5]
    assert os.listdir(os.path.join(inputs, "notes")) == ["a.txt"]


@pytest.mark.parametrize("case_id", sorted(CONFIG_ERRORS))
def test_a_bad_config_is_not_printed(outcomes, case_id):
    model_dir = outcomes[case_id][3]
    assert "resolved config" not in cli.read(model_dir + ".out")


def test_tensorflow_log_lines_go_to_the_model_dir_not_the_console(outcomes):
    """XLA's and absl's C++ lines (the first compiled update kernel) and libjpeg's are
    written to <model_dir>/tensorflow.log; the console of a good run has no stderr line,
    nor that of the check of a glob's first record."""
    _, _, stderr, trained_dir, _, _ = outcomes[TRAINED]
    assert stderr.strip() == "", stderr[-3000:]
    log = cli.read(os.path.join(trained_dir, LOG_FILE))
    assert "Compiled cluster using XLA" in log and "absl::InitializeLog()" in log, log[-3000:]
    _, _, stderr, model_dir, _, _ = outcomes["resnet-later-record-not-a-jpeg"]
    assert "Not a JPEG file" not in stderr
    assert "Not a JPEG file: starts with 0x74 0x68" in cli.read(os.path.join(model_dir, LOG_FILE))
    assert "Not a JPEG file" not in outcomes["resnet-record-not-a-jpeg"][2]


# The README's bad-input table: each row's first cell -> the rows of CASES it shows.
README_ROWS = {
    "missing config file": ["missing-config-file"],
    "unreadable config file": ["unreadable-config-file"],
    "config file that is not YAML": ["config-file-bad-yaml"],
    "unknown key in a config file": ["unknown-key-in-file"],
    "another program's config": ["another-programs-config"],
    "unknown override": ["unknown-override"],
    "a config key given as a flag (answered before TensorFlow loads)": ["config-key-as-flag"],
    "wrong type": ["wrong-type"],
    "batch arithmetic that does not divide": ["batch-does-not-divide"],
    "missing data files / empty glob": ["missing-data-files", "resnet-empty-glob"],
    "corrupt TFRecord": ["corrupt-tfrecord"],
    "TFRecords of another kind (ResNet's given to BERT, BERT's to ResNet)":
        ["records-of-another-kind", "resnet-records-of-another-kind"],
    "a glob of empty TFRecord files (training would wait for a record forever)":
        ["empty-tfrecord-files", "resnet-empty-tfrecord-files"],
    "a truncated TFRecord, found while training a trained `model_dir` further (its "
    "`config.yaml` stays as it was)": ["truncated-tfrecord-after-the-data-stage"],
    "a ResNet record whose image is not a JPEG (the first record of each glob is read "
    "before the model is built; libjpeg's own lines of a later one, found while training, go to "
    "`<model_dir>/tensorflow.log`)": ["resnet-record-not-a-jpeg",
                                      "resnet-later-record-not-a-jpeg"],
    "empty text corpus": ["empty-corpus"],
    "corpus too small for a held-out split (two one-sentence documents)":
        ["corpus-without-sentence-pairs"],
    "a vocabulary or a sequence length other than the data's (files beside their "
    "preparation's `metadata.json`, in each directory of `data.train_files` and "
    "`data.eval_files`)": ["vocabulary-does-not-match-the-data",
                                       "data-of-another-sequence-length"],
    "a vocabulary smaller than the data's, or a `model.type_vocab_size` below its segments "
    "(files without a `metadata.json`: their first record is read)":
        ["vocabulary-smaller-than-the-data", "segment-ids-above-type-vocab-size"],
    "an evaluation batch larger than the held-out set":
        ["eval-batch-above-the-held-out-sequences", "eval-batch-above-the-held-out-files"],
    "`model_dir` holds another model shape": ["model-dir-holds-another-model-shape"],
    "`model_dir` holds another program's run": ["model-dir-of-another-program"],
    "NaN in the training data": ["nan-in-training-data"],
    "`--tpu` without a TPU (bounded: measured 4 s)": ["tpu-flag-without-tpu"],
    "export before any checkpoint": ["export-before-any-checkpoint"],
    "eval before any checkpoint (nothing is prepared first)":
        ["eval-before-any-checkpoint-prepares-nothing"],  # "the same line": no message
    "`--model_dir` is a file, or under one, or a SavedModel": ["model-dir-is-a-file",
                                                               "model-dir-is-a-savedmodel"],
    "`--model_dir`, `export.dir` or `data.data_dir` where nothing can be written":
        ["model-dir-cannot-be-written", "export-dir-cannot-be-written",
         "data-dir-cannot-be-written"],
    "an `export.dir` that holds other files, another run's export, or the run itself":
        ["export-dir-holds-other-files", "export-dir-an-earlier-export-holding-other-files",
         "export-dir-another-runs-export", "export-dir-is-the-model-dir",
         "export-dir-inside-the-runs-checkpoints"],
    "model values Model Garden cannot build": ["model-heads-do-not-divide",
                                               "resnet-model-norm-epsilon-negative"],
    "an optimizer value the optimizers or the schedule refuse": [
        "optimizer-beta-out-of-range", "exclusion-pattern-invalid",
        "exclusion-patterns-match-nothing"],
    "a bad flag value": ["mode-bogus", "flag-value-of-another-type"],
    "a misspelt flag": ["flag-misspelt"],
    "no `--model_dir`": ["missing-model-dir"],
    "`--params_override` given twice": ["params-override-given-twice"],
    "a checkpoint interval of 0, steps not a multiple of it":
        ["checkpoint-every-zero", "resnet-steps-not-a-multiple"],
    "checkpoints or scalars off Keras' calls of `steps_per_execution` updates":
        ["log-every-off-the-calls"],
    "an old key name": ["old-key-name"],
    "a learning rate that is negative or not a finite number":
        ["learning-rate-negative", "learning-rate-nan"],
}


def _readme_table():
    """[(first cell, [code spans of the message cell])] of the README's bad-input table."""
    with open(os.path.join(cli.REPO_ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    table = text[text.index("Bad input gives one line on stderr"):]
    table = table[table.index("| case |"):]
    table = table[:table.index("\n\n")]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        spans = [(double or single).strip()
                 for double, single in re.findall(r"``(.+?)``|`([^`]+)`", cells[2])]
        rows.append((cells[0], spans))
    return rows


def test_readme_table_shows_the_lines_printed(outcomes):
    """Every message of the README's table is the line its case prints (the parts between
    `...` in that order; <d> and <model_dir> stand for the test's directories)."""
    rows = _readme_table()
    assert [case for case, _ in rows] == list(README_ROWS)
    for case, spans in rows:
        printed = []
        for case_id in README_ROWS[case]:
            _, _, stderr, model_dir, _, inputs = outcomes[case_id]
            printed.append((stderr.strip().splitlines()[-1].removeprefix("error: "),
                            inputs, model_dir))
        for span in spans:
            assert any(_shows(span, *line) for line in printed), (case, span, printed)


def _shows(span, line, inputs, model_dir):
    span = span.replace("<d>", inputs).replace("<model_dir>", model_dir)
    position = 0
    for part in span.split("..."):
        found = line.find(part.strip(), position)
        if found < 0:
            return False
        position = found + len(part.strip())
    return True
