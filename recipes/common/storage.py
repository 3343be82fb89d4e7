"""Where a recipe's input files live, which decides how their records are read.

Files on this machine's file system are read one record after another on the input
pipeline's own thread (a sequential `tf.data` interleave). Files on Cloud Storage (gs://)
or another remote file system are read by parallel workers, which keep several reads in
flight and so hide each read's latency (tf.data's performance guide, "Parallelizing data
extraction": https://www.tensorflow.org/guide/data_performance#parallelizing_data_extraction).
Both give the same records in the same order (the parallel reads are deterministic), so a
run may move between local and remote copies of its data and still resume exactly.

A local read has no latency to hide, and a parallel read hands every record from a worker
thread to the pipeline's; here, on 2 CPU cores, reading in turn started a checkpoint
chunk's pipeline 1.1-3.4x faster and took 10-12% less CPU per batch
(docs/performance.md, "Reading the files in turn").
"""


def all_local(paths):
    """True when every path is on this machine's file system: no URL scheme, or file://."""
    return all("://" not in path or path.startswith("file://") for path in map(str, paths))
