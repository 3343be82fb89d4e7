"""The preparation's two passes as Apache Beam pipelines (any runner, any number of workers).

Pass 1 (`summarize`): per input file, the `chunks.FileSummary` (sentences and documents per
split, words) and, when a vocabulary is to be learned, the word counts of its training
documents, summed by a Beam combine. The launcher (`prepare_data.py`) reads both back,
refuses bad input before anything is written, learns the vocabulary from the counts and
plans the chunks.

Pass 2 (`write_records`): per file, documents keyed by (split, chunk)
(`chunks.ChunkPlan.keyed_documents`); a GroupByKey gathers each chunk, whose records
(`chunk_records.ChunkProcessor`) are keyed by (split, shard); a second GroupByKey gathers each
shard, sorted by (chunk, index), into one TFRecord file. Every random draw is keyed on stable
ids, and grouped values are sorted before use, so any runner and any number of workers write
the same bytes as the single-process path.

Files go through Beam's `FileSystems` (local paths, or gs:// with `apache-beam[gcp]`). The
whole corpus is never in one process; one chunk (about `chunk_sentences` sentences) and one
shard (its records, sorted in memory: choose `num_shards` so a shard is ~100 MB) are.
"""

import json
import os
import tempfile
from typing import Dict, List, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options import pipeline_options as pipeline_options_module
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
import tensorflow as tf

from recipes.bert import chunk_records
from recipes.bert import chunks
from recipes.bert import preparation_files
from recipes.bert import text_files
from recipes.bert import vocabulary
from recipes.common.errors import UserError

_LOCAL_RUNNER = "FnApiRunner"  # What DirectRunner runs batch pipelines on, without Prism.


_BeamArgumentParser = (
    pipeline_options_module._BeamArgumentParser  # pylint: disable=protected-access
)


class _OneLineBeamParser(_BeamArgumentParser):
    """Beam's own parser (what PipelineOptions uses), which only warns on unknown options,
    with a value it refuses (`--direct_num_workers=two`, `--direct_running_mode=fast`) a
    one-line `UserError` naming the option and the value, not argparse's usage block of
    every Beam option and its exit."""

    def error(self, message):
        if message.startswith("ambiguous option: "):
            return super().error(message)  # ignored by Beam's parser, as it is here
        what = message.removeprefix("argument ")
        raise UserError(
            f"Beam option {what}; see Apache Beam's pipeline options"
            if what != message
            else f"Beam pipeline options: {message}; see Apache Beam's pipeline options"
        )


def pipeline_options(arguments: Sequence[str]) -> PipelineOptions:
    """PipelineOptions from command-line style arguments, checked: an option no Beam
    options class knows, a value a Beam option refuses, or an unknown runner, is a
    `UserError`. The runner defaults to the local FnApiRunner (`--direct_num_workers=N
    --direct_running_mode=multi_processing` for N local processes)."""
    parser = _OneLineBeamParser(allow_abbrev=False)
    for options_class in PipelineOptions.__subclasses__():
        options_class._add_argparse_args(parser)  # pylint: disable=protected-access
    _, unknown = parser.parse_known_args(list(arguments))
    if unknown:
        raise UserError(
            f"{unknown[0]}: neither a prepare_data flag nor a Beam pipeline option "
            "(see --help, and Beam's pipeline options)"
        )
    options = PipelineOptions(list(arguments))
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        standard.runner = _LOCAL_RUNNER
    name = runner_name(options)
    if "." not in name and name.lower().removesuffix("runner") not in {
        known.lower().removesuffix("runner") for known in StandardOptions.KNOWN_RUNNER_NAMES
    }:
        raise UserError(
            f"--runner={name}: not a Beam runner; use one of "
            f"{', '.join(sorted(set(StandardOptions.KNOWN_RUNNER_NAMES)))}"
        )
    return options


def runner_name(options: PipelineOptions) -> str:
    runner = options.view_as(StandardOptions).runner
    return runner if isinstance(runner, str) else type(runner).__name__


class _SummarizeFile(beam.DoFn):
    """(file index, path) -> a summary line, plus ('count', (word, n)) for learning."""

    def __init__(self, seed, heldout_fraction, lower_case, count_words):
        self._seed, self._heldout_fraction = seed, heldout_fraction
        self._lower_case, self._count_words = lower_case, count_words

    def process(self, element):
        file_index, path = element
        documents = chunks.TrainingSentences(
            text_files.read_file_documents(path), self._seed, file_index, self._heldout_fraction
        )
        try:  # One pass over the file: the summary, and the training sentences on the side.
            summary = chunks.summarize_file(
                file_index, documents, self._seed, self._heldout_fraction
            )
        except UserError as error:  # Reported by the launcher, before anything is written.
            yield json.dumps({"file_index": file_index, "error": str(error)})
            return
        yield json.dumps(
            {
                "file_index": file_index,
                "sentences": summary.sentences,
                "documents": summary.documents,
                "words": summary.words,
            }
        )
        if self._count_words:
            counts = vocabulary.count_words_in_batches(
                documents.training_sentences, self._lower_case
            )
            for item in counts.items():
                yield beam.pvalue.TaggedOutput("counts", item)


def summarize(
    files: Sequence[str],
    work_dir: str,
    *,
    seed: int,
    heldout_fraction: float,
    lower_case: bool,
    count_words: bool,
    options: PipelineOptions,
) -> Tuple[List[dict], Dict[str, int]]:
    """Runs pass 1; returns the per-file summary dicts and the summed word counts."""
    with beam.Pipeline(options=options) as pipeline:
        outputs = (
            pipeline
            | "Files" >> beam.Create(list(enumerate(files)))
            | "SpreadFiles" >> beam.Reshuffle()
            | "Summarize"
            >> beam.ParDo(
                _SummarizeFile(seed, heldout_fraction, lower_case, count_words)
            ).with_outputs("counts", main="summaries")
        )
        _ = outputs.summaries | "WriteSummaries" >> beam.io.WriteToText(
            f"{work_dir}/summaries", shard_name_template="", num_shards=1
        )
        _ = (
            outputs.counts
            | "SumCounts" >> beam.CombinePerKey(sum)
            | "CountLines" >> beam.Map(json.dumps)
            | "WriteCounts"
            >> beam.io.WriteToText(f"{work_dir}/counts", shard_name_template="", num_shards=1)
        )
    summaries = [json.loads(line) for line in _read_lines(f"{work_dir}/summaries")]
    counts = dict(json.loads(line) for line in _read_lines(f"{work_dir}/counts"))
    return summaries, counts


def _read_lines(path) -> List[str]:
    with FileSystems.open(path) as lines:
        return [line.decode("utf-8") for line in lines.read().splitlines() if line]


class _KeyDocuments(beam.DoFn):
    def __init__(self, plan, seed, heldout_fraction):
        self._plan, self._seed, self._heldout_fraction = plan, seed, heldout_fraction

    def process(self, element):
        file_index, path = element
        yield from self._plan.keyed_documents(
            file_index,
            text_files.read_file_documents(path),
            self._seed,
            self._heldout_fraction,
        )


class _ChunkRecords(beam.DoFn):
    """((split, chunk), [(document id, document)]) -> ((split, shard), ((chunk, i), record))."""

    def __init__(self, settings: chunk_records.RecordSettings):
        self._settings = settings
        self._processor = None

    def setup(self):
        self._processor = chunk_records.ChunkProcessor(self._settings)

    def process(self, element):
        (split, chunk), keyed_documents = element
        documents = [document for _, document in sorted(keyed_documents)]
        for shard, index, record in self._processor.records(split, chunk, documents):
            yield (split, shard), ((chunk, index), record)


class _WriteShard(beam.DoFn):
    """((split, shard), records) -> one TFRecord file, written as `<final name>.tmp`."""

    def __init__(self, paths: Dict[Tuple[str, int], str]):
        self._paths = paths

    def process(self, element):
        key, keyed_records = element
        records = sorted(record for record in keyed_records if record is not None)
        path = self._paths[key] + preparation_files.TEMPORARY_SUFFIX
        if "://" not in path:
            _write_tfrecords(path, records)
            num_records = len(records)
        else:  # TensorFlow may lack the file system: write locally, copy with Beam's.
            with tempfile.TemporaryDirectory() as local:
                _write_tfrecords(os.path.join(local, "shard"), records)
                FileSystems.copy([os.path.join(local, "shard")], [path])
            num_records = len(records)
        yield json.dumps({"split": key[0], "shard": key[1], "records": num_records})


def _write_tfrecords(path, keyed_records):
    with tf.io.TFRecordWriter(path) as writer:
        for _, record in keyed_records:
            writer.write(record)


def write_records(
    files: Sequence[str],
    work_dir: str,
    *,
    plan: chunks.ChunkPlan,
    settings: chunk_records.RecordSettings,
    shard_paths: Dict[Tuple[str, int], str],
    heldout_fraction: float,
    options: PipelineOptions,
) -> Dict[str, int]:
    """Runs pass 2: writes every shard as `path.tmp`; returns the records per split."""
    with beam.Pipeline(options=options) as pipeline:
        records = (
            pipeline
            | "Files" >> beam.Create(list(enumerate(files)))
            | "SpreadFiles" >> beam.Reshuffle()
            | "KeyDocuments" >> beam.ParDo(_KeyDocuments(plan, settings.seed, heldout_fraction))
            | "GroupChunks" >> beam.GroupByKey()
            | "ChunkRecords" >> beam.ParDo(_ChunkRecords(settings))
        )
        # One None per shard, so that shards without records are written (empty) too.
        every_shard = pipeline | "EveryShard" >> beam.Create(
            [(key, None) for key in sorted(shard_paths)]
        )
        _ = (
            (records, every_shard)
            | "AllShards" >> beam.Flatten()
            | "GroupShards" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(_WriteShard(shard_paths))
            | "WriteCounts"
            >> beam.io.WriteToText(f"{work_dir}/shards", shard_name_template="", num_shards=1)
        )
    totals = {split: 0 for split in chunks.SPLITS}
    for line in _read_lines(f"{work_dir}/shards"):
        written = json.loads(line)
        totals[written["split"]] += written["records"]
    return totals
