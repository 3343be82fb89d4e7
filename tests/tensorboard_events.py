"""Reading back what a run wrote for TensorBoard: one log directory (e.g. <model_dir>/train,
<model_dir>/train_scalars, <model_dir>/eval) at a time, its event files in name order."""
import os

import tensorflow as tf


def events(log_dir):
    """Every event (summaries, graph, ...) of the event files directly in `log_dir`."""
    for path in sorted(tf.io.gfile.glob(os.path.join(log_dir, "events.*"))):
        yield from tf.compat.v1.train.summary_iterator(path)


def scalars(log_dir):
    """[(step, tag, value), ...] of every summary value in `log_dir`, in the order written;
    `value` is the float of its tensor (as `tf.summary.scalar` writes it)."""
    return [(event.step, value.tag, float(tf.make_ndarray(value.tensor)))
            for event in events(log_dir) for value in event.summary.value]
