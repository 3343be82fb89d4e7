"""Where a recipe's input files live, which decides how their records are read.

Files on this machine's file system are read one record after another on the input
pipeline's own thread (a sequential `tf.data` interleave). Files on Cloud Storage (gs://)
or another remote file system are read by parallel workers, which keep several reads in
flight and so hide each read's latency (tf.data's performance guide, "Parallelizing data
extraction": https://www.tensorflow.org/guide/data_performance#parallelizing_data_extraction).
Both give the same records in the same order (the parallel reads are deterministic), so a
run may move between local and remote copies of its data and still resume exactly.

A local read has little latency to hide, and a parallel read hands every record from a
worker thread to the pipeline's. Here (2 CPU cores, local disk) reading in turn started a
checkpoint chunk's pipeline 1.4-3.4x (BERT) and 1.06-1.17x (ResNet) faster, and the
parallel read cost a batch 1.04-1.24x and 1.06-1.13x the CPU time (docs/performance.md,
"Reading the files in turn").
"""


def all_local(paths):
    """True when every path is on this machine's file system: no URL scheme, or file://."""
    return all("://" not in path or path.startswith("file://") for path in map(str, paths))
