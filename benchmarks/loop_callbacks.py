"""Host time spent inside each callback of the recipes' training loop, against the whole `fit`.

`recipes.common.training` runs `model.fit` with its own callbacks (checkpoint per chunk
after a finite check, float16 skipped steps, Keras' TensorBoard, the extra TensorBoard
scalars, the last logs, the progress line). Their hooks run on the host between two steps,
so every millisecond in them is a millisecond the step waits. This runs the loop's own
`fit` (one epoch per checkpoint chunk, a checkpoint after each) on the recipe's model and
data at k = 1, with every hook of every callback timed, `--rounds` times after one warm-up
round (tracing; the train graph is written to TensorBoard in it, once per run).

`--async_checkpoint` writes the checkpoints as `train.async_checkpoint: true` does, and
`--intra_op_threads 1` leaves one core free for the host's own work (the writer thread),
as an accelerator's host has while the accelerator steps.

Usage:
  python benchmarks/loop_callbacks.py --work_dir /tmp/loop_callbacks        # tiny BERT
  python benchmarks/loop_callbacks.py --work_dir /tmp/loop_callbacks --async_checkpoint
  python benchmarks/loop_callbacks.py --steps 2 --chunks 2 --rounds 1 --work_dir /tmp/c  # CI
Prints a Markdown table: milliseconds per round in each hook that took any, its share of
the `fit`, and per step; with --json, writes every round's times (and the commit measured
and the load average at the start and the end).
"""
import collections
import contextlib
import datetime
import io
import os
import statistics
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from benchmarks import alternation, recipe_flags, threads  # noqa: E402  (no TensorFlow)


def _parse_arguments(argv):
    parser = alternation.argument_parser(__doc__)
    recipe_flags.add_recipe_flags(
        parser, "loop_callbacks", json_help="write every round's times here",
        work_dir_help=recipe_flags.DATA_REUSED + ", and the checkpoints written")
    parser.add_argument("--steps", type=int, default=10, help="steps per checkpoint chunk")
    parser.add_argument("--chunks", type=int, default=3, help="checkpoint chunks per round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up")
    parser.add_argument("--log_every", type=int, default=5,
                        help="train.log_every: steps between TensorBoard scalar writes")
    parser.add_argument("--async_checkpoint", action="store_true",
                        help="train.async_checkpoint: checkpoints written on TensorFlow's "
                             "background thread")
    threads.add_flag(parser)
    return parser.parse_args(argv)


def _bad_arguments(args):
    """One line naming the first bad flag, or None."""
    for flag in ("steps", "chunks", "rounds", "log_every"):
        if getattr(args, flag) < 1:
            return f"--{flag}={getattr(args, flag)} must be at least 1"
    return threads.refusal(args) or alternation.output_file_problem("--json", args.json)


if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    recipe_flags.check_command_line(_parse_arguments, _bad_arguments)

from recipes.common import startup  # noqa: E402,F401  (legacy Keras, quiet C++)

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from benchmarks import recipe_throughput  # noqa: E402
from recipes.common import callbacks as callbacks_lib  # noqa: E402
from recipes.common import errors  # noqa: E402
from recipes.common import training  # noqa: E402

HOOKS = ("on_train_begin", "on_epoch_begin", "on_train_batch_begin", "on_train_batch_end",
         "on_epoch_end", "on_train_end")


def _time_every_hook(callbacks, spent):
    """Wraps each hook of each callback to add its seconds to `spent[(class name, hook)]`."""
    for callback in callbacks:
        for hook in HOOKS:
            def timed(*args, _hook=getattr(callback, hook),
                      _key=(type(callback).__name__, hook), **kwargs):
                started = time.perf_counter()
                try:
                    return _hook(*args, **kwargs)
                finally:
                    spent[_key] += time.perf_counter() - started
            setattr(callback, hook, timed)


def _time_rounds(loop, dataset, args):
    """([seconds of each timed round's fit], {(callback, hook): [its seconds in each]})."""
    spent = collections.defaultdict(float)
    _time_every_hook(loop.callbacks, spent)
    steps = args.chunks * args.steps
    fit_s, hooks_s = [], collections.defaultdict(list)
    for round_index in range(args.rounds + 1):
        spent.clear()
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # the progress lines
            loop.fit_chunks(dataset, round_index * steps, (round_index + 1) * steps, args.steps)
        if round_index:  # round 0: tracing, the train graph written
            fit_s.append(time.perf_counter() - started)
            for key in set(spent) | set(hooks_s):
                hooks_s[key].append(spent.get(key, 0.0))
    return fit_s, hooks_s


def main(argv=None):
    args = _parse_arguments(argv)
    problem = _bad_arguments(args)
    if problem:  # one line and exit status 2, through recipe_throughput.exit_status
        raise errors.UserError(problem)
    threads.apply(args)
    task_class, _, config = recipe_throughput.load_recipe_config(args)
    config.train.global_batch_size = config.train.micro_batch_size  # k = 1
    config.train.steps = max(config.train.steps, (args.rounds + 1) * args.chunks * args.steps)
    recipe_throughput.make_work_dir(args.work_dir)
    run_start = alternation.run_started()
    _, _, _, model, dataset = recipe_throughput.build_recipe(task_class, config, args.work_dir)
    model_dir = tempfile.mkdtemp(dir=args.work_dir)
    history = tf_keras.callbacks.History()
    history.last_logs = {}
    loop = training.ChunkLoop(
        model, training.make_checkpoint_manager(model, model_dir), history, model_dir,
        config.train.global_batch_size, args.log_every,
        [callbacks_lib.ProgressLine(config.train.steps, args.log_every)],
        async_checkpoint=args.async_checkpoint)
    loop.preemption = tf_keras.callbacks.Callback()  # no SIGTERM handling here
    fit_s, hooks_s = _time_rounds(loop, dataset, args)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "recipe": args.recipe, "batch": config.train.micro_batch_size, "steps": args.steps,
        "chunks": args.chunks, "rounds": args.rounds, "log_every": args.log_every,
        "async_checkpoint": args.async_checkpoint, "intra_op_threads": args.intra_op_threads,
        "cpu_count": os.cpu_count(), "tensorflow": tf.__version__, "fit_s": fit_s,
        "hooks_s": {f"{name}.{hook}": values for (name, hook), values in hooks_s.items()},
        **alternation.run_finished(run_start),  # git_commit, git_tree, load averages
    }
    _print_table(args, config, fit_s, hooks_s)
    recipe_throughput.write_json(args.json, report)
    return 0


def _print_table(args, config, fit_s, hooks_s):
    """The header line, the fit's time and one row per hook that took a millisecond or more."""
    steps = args.chunks * args.steps
    fit = statistics.median(fit_s)
    print(f"{args.recipe} recipe's training loop, batch {config.train.micro_batch_size} "
          f"(k = 1), {args.chunks} chunks of {args.steps} steps per round, log_every "
          f"{args.log_every}, {'asynchronous' if args.async_checkpoint else 'synchronous'} "
          f"checkpoints, intra-op threads {args.intra_op_threads or 'default'}; "
          f"{args.rounds} timed rounds after 1 warm-up; {os.cpu_count()} "
          f"CPU cores, TensorFlow {tf.__version__}; load average {os.getloadavg()[0]:.1f}")
    print(f"fit: {fit:.2f} s per round (median), {fit / steps * 1e3:.0f} ms per step")
    print("| callback hook | ms per round (median) | share of the fit | ms per step |")
    print("| --- | ---: | ---: | ---: |")
    total = 0.0
    for (name, hook), values in sorted(hooks_s.items(), key=lambda item: -sum(item[1])):
        median = statistics.median(values)
        total += median
        if median >= 1e-3:
            print(f"| {name}.{hook} | {median * 1e3:.1f} | {median / fit:.1%} "
                  f"| {median / steps * 1e3:.2f} |")
    print(f"| all hooks | {total * 1e3:.1f} | {total / fit:.1%} | {total / steps * 1e3:.2f} |")


if __name__ == "__main__":
    sys.exit(recipe_throughput.exit_status(main))
