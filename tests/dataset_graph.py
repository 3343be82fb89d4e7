"""What a `tf.data` pipeline is made of: the ops of its graph."""
import tensorflow as tf


def interleave_ops(dataset):
    """The names of the interleave ops in `dataset`'s graph, e.g. {"InterleaveDataset"} for
    a sequential interleave, {"ParallelInterleaveDatasetV4"} for a parallel one."""
    graph = tf.compat.v1.GraphDef()
    # tf.data has no public way to read a dataset's graph
    graph.ParseFromString(dataset._as_serialized_graph().numpy())  # pylint: disable=W0212
    return {node.op for node in graph.node if "Interleave" in node.op}
