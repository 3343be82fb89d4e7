"""`--intra_op_threads`, for the benchmarks that time work sharing this machine's cores with
a host thread (checkpoint_write.py, loop_callbacks.py): the flag, its refusal, applying it."""

import sys


HELP = ("threads of one TensorFlow op (0: TensorFlow's default, one per core); 1 leaves a "
        "core of this machine free, as the host of an accelerator is while the accelerator "
        "steps")


def add_flag(parser):
    parser.add_argument("--intra_op_threads", type=int, default=0, help=HELP)


def refusal(args):
    """One line saying what is wrong with --intra_op_threads, or None."""
    if args.intra_op_threads < 0:
        return (f"--intra_op_threads={args.intra_op_threads} must be 0 (TensorFlow's default) "
                "or more")
    return None


def apply(args):
    """Sets TensorFlow's intra-op threads; call before TensorFlow runs its first op."""
    if args.intra_op_threads:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)


if __name__ == "__main__":  # run alone it would do nothing: say what to run instead
    print("error: benchmarks/threads.py is a module of the benchmark scripts, used by "
          "checkpoint_write.py and loop_callbacks.py; run one of those (--help lists its flags)",
          file=sys.stderr)
    sys.exit(2)
