"""What a checkpoint costs the training steps: synchronous against `train.async_checkpoint`.

BERT-shaped variables (Model Garden's names and shapes, benchmarks/optimizer_step.py) with
`lamb_tf.LAMB`'s slots are saved the way the recipes save them (a `CheckpointManager`,
numbered by step), followed by `--steps` LAMB updates of those variables, the stand-in for
the next chunk's training steps. Three jobs, alternated round by round in this one process
(benchmarks/alternation.py):

- `steps only`: the updates, no checkpoint;
- `synchronous save, then the steps`: `save` returns once the files are written;
- `asynchronous save, then the steps`: TensorFlow's async checkpoint (what
  `train.async_checkpoint: true` asks for): `save` copies the variables and returns, the
  write runs on TensorFlow's thread while the updates run.

"Cost over the steps" is a job's median time minus that of `steps only`: what the checkpoint
added to the steps. "In `save`" is the time the calling thread spent inside `save`. The
first two rounds are not timed: the asynchronous writer's first save sets it up and its
second traces its copy function.

The updates and the writer share this machine's cores; `--intra_op_threads 1` leaves one of
them free for the writer, as the host of an accelerator is free while the accelerator steps.

Usage:
  python benchmarks/checkpoint_write.py --size base --work_dir /tmp/checkpoint_write
  python benchmarks/checkpoint_write.py --size tiny --rounds 1 --steps 1 --work_dir /tmp/c  # CI
"""
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)  # benchmarks.alternation, when run as a script

from benchmarks import alternation, optimizer_step, threads  # noqa: E402
from recipes.common import storage  # noqa: E402

WARMUP_ROUNDS = 2  # the asynchronous writer's set-up, then the tracing of its copy function
JOBS = ("steps only", "synchronous save, then the steps", "asynchronous save, then the steps")


def _parse_arguments(argv):
    parser = alternation.argument_parser(__doc__)
    parser.add_argument("--size", choices=sorted(optimizer_step.SIZES), default="mini",
                        help="BERT encoder shape (default mini; base writes 1.3 GB per save)")
    parser.add_argument("--steps", type=int, default=5,
                        help="LAMB updates after each save (the next chunk's steps)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds after 2 warm-up")
    parser.add_argument("--work_dir", required=True,
                        help="where the checkpoints are written (a new directory inside it, "
                             "deleted at the end)")
    threads.add_flag(parser)
    return parser.parse_args(argv)


def _refusal(args):
    for flag in ("steps", "rounds"):
        if getattr(args, flag) < 1:
            return f"--{flag}={getattr(args, flag)} must be at least 1"
    threads_refusal = threads.refusal(args)
    if threads_refusal:
        return threads_refusal
    parent = os.path.dirname(os.path.abspath(args.work_dir))
    if not os.path.isdir(parent):
        return f"--work_dir {args.work_dir}: its parent directory does not exist; create it first"
    problem = storage.local_directory_problem(args.work_dir)  # a file, or not to be written
    if problem:
        return f"--work_dir={args.work_dir}: {problem}; choose a directory you can write"
    return None


def _jobs(tf, size, steps, directory):
    """{job name: a callable returning (seconds, seconds inside `save`)}."""
    from lamb_tf.tf_keras_optimizers import LAMB

    specs = optimizer_step.bert_variables(*optimizer_step.SIZES[size])
    variables = optimizer_step.tf_keras_variables(
        specs, optimizer_step.initial_values(specs, seed=0))
    gradients = [tf.constant(g) for g in optimizer_step.initial_values(specs, seed=1)]
    optimizer = LAMB(1e-3, weight_decay_rate=0.01)
    optimizer.build(variables)
    update = optimizer_step.step_functions(optimizer, variables)["graph"]
    update(gradients)  # traced before any timing

    def run_steps():
        for _ in range(steps):
            update(gradients)
        optimizer.iterations.numpy()  # the last update has run

    checkpoint = tf.train.Checkpoint(model=tf.Module(), optimizer=optimizer)
    checkpoint.model.weights = variables
    managers = {
        name: tf.train.CheckpointManager(checkpoint, os.path.join(directory, name), max_to_keep=1)
        for name in ("synchronous", "asynchronous")}
    asynchronous = tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
    counter = [0]

    def job(manager_name, options):
        def run():
            counter[0] += 1
            started = time.perf_counter()
            if manager_name:
                managers[manager_name].save(checkpoint_number=counter[0], options=options)
            saved = time.perf_counter()
            run_steps()
            if manager_name:
                managers[manager_name].sync()  # this job's write is part of its time
            return time.perf_counter() - started, saved - started
        return run

    parameters = sum(int(tf.size(v)) for v in variables)
    return {JOBS[0]: job(None, None), JOBS[1]: job("synchronous", None),
            JOBS[2]: job("asynchronous", asynchronous)}, parameters, len(variables)


def main(argv=None):
    args = _parse_arguments(sys.argv[1:] if argv is None else argv)
    refusal = _refusal(args)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    threads.apply(args)
    try:
        os.makedirs(args.work_dir, exist_ok=True)
    except OSError as error:
        print(f"error: --work_dir={args.work_dir}: cannot create it ({error.strerror}); "
              "choose a directory you can write", file=sys.stderr)
        return 2
    directory = tempfile.mkdtemp(dir=args.work_dir)
    try:
        jobs, parameters, tensors = _jobs(tf, args.size, args.steps, directory)
        samples = alternation.alternate(jobs, args.rounds, warmup=WARMUP_ROUNDS)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    total = {name: statistics.median(s[0] for s in values) for name, values in samples.items()}
    in_save = {name: statistics.median(s[1] for s in values) for name, values in samples.items()}
    print(f"BERT-{args.size} shapes with LAMB's slots: {parameters:,} parameters in "
          f"{tensors} tensors, {parameters * 3 * 4 / 1e6:.1f} MB per checkpoint; {args.steps} "
          f"LAMB update(s) after each save; {args.rounds} timed rounds after {WARMUP_ROUNDS} "
          f"warm-up, alternated in one process; intra-op threads "
          f"{args.intra_op_threads or 'default'}; {os.cpu_count()} CPU cores, TensorFlow "
          f"{tf.__version__}; load average {os.getloadavg()[0]:.1f}")
    print("| job | median (ms) | min–max (ms) | in `save` (ms) | cost over the steps (ms) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in JOBS:
        times = [s[0] for s in samples[name]]
        cost = "–" if name == JOBS[0] else f"{(total[name] - total[JOBS[0]]) * 1e3:.0f}"
        print(f"| {name} | {total[name] * 1e3:.0f} | {min(times) * 1e3:.0f}–"
              f"{max(times) * 1e3:.0f} | {in_save[name] * 1e3:.1f} | {cost} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
