"""Where the time of one XLA-compiled LAMB update of one variable goes.

`lamb_tf.compiled_updates.LambUpdate` runs each variable's update as one XLA kernel. This
script times, on one variable of a given shape, alternated step by step in one process:

  memory pass      read x, g, m, v and write x, m, v with one add each: the 28 bytes per
                   parameter every Adam-like update must move, as XLA moves them
  norm ‖x‖         `update_rules.l2_norm(x)`, as the update takes it (a LAMB update takes
                   two: ‖x‖ and ‖u‖)
  tf.norm(x)       the same norm as one `reduce_sum`, for comparison
  LAMB, no ratio   `LambUpdate` with adapt=False: the same maths without the norms and the
                   trust ratio (a plain AdamW step)
  LAMB             `LambUpdate`: the whole update

and prints each against the memory pass. The gap between "LAMB, no ratio" and "LAMB" is
what the layer-wise trust ratio costs; "norm ‖x‖" shows what one reduction costs on its own.

`--passes` instead prints, for each job, the loops over memory of its XLA program and the
bytes per parameter they read and write, counted from the optimized HLO
(benchmarks/hlo_passes.py): how far above the 28-byte floor the code XLA generates for the
update is before anything is timed.

`--by_size` instead times, for each size, one graph step (a `tf.function` without XLA)
updating several variables of that size, once with each update as its XLA kernel and once
as plain TensorFlow ops, alternated: where `compiled_updates.SMALLEST_COMPILED` comes from.

Usage:
  python benchmarks/update_anatomy.py --shape 30522,768   # BERT's word embedding
  python benchmarks/update_anatomy.py --by_size 256,4096,32768,131072,1048576
  python benchmarks/update_anatomy.py --shape 30522,768 --passes   # no timing
  python benchmarks/update_anatomy.py --shape 8,8 --steps 2 --warmup 1   # seconds, for CI
"""
import os
import statistics
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)  # benchmarks.alternation, when run as a script

from benchmarks import alternation, hlo_passes  # noqa: E402

JOBS = ("memory pass", "norm ‖x‖", "tf.norm(x)", "LAMB, no ratio", "LAMB")
# `compiled_updates.LambUpdate`'s arguments besides the variables: BERT's pretraining values
LAMB_ARGUMENTS = dict(t=1, eta=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                      weight_decay_rate=0.01, decay=True, adapt=True, bias_correction=True,
                      phi_bounds=None)


def make_jobs(shape):
    """{name: () -> None}, each running one XLA kernel on its own variables of `shape`."""
    import tensorflow as tf

    from lamb_tf import compiled_updates
    from lamb_tf import update_rules

    gradient = tf.random.stateless_normal(shape, seed=[0, 1]) * 1e-3

    def variables():
        return [tf.Variable(tf.random.stateless_normal(shape, seed=[0, i]) * 0.02)
                for i in range(3)] + [tf.Variable(0.0)]

    @tf.function(jit_compile=True)
    def memory_pass(x, m, v):
        m.assign(m + gradient)
        v.assign(v + gradient)
        x.assign(x + gradient)

    @tf.function(jit_compile=True)
    def norm(x, result):
        result.assign(update_rules.l2_norm(x))

    @tf.function(jit_compile=True)
    def reduce_sum_norm(x, result):
        result.assign(tf.norm(x))

    jobs = {}
    x, m, v, scalar = variables()
    jobs["memory pass"] = lambda: memory_pass(x, m, v)
    jobs["norm ‖x‖"] = lambda: norm(x, scalar)
    jobs["tf.norm(x)"] = lambda: reduce_sum_norm(x, scalar)
    for name, adapt in (("LAMB, no ratio", False), ("LAMB", True)):
        update, state = compiled_updates.LambUpdate(), variables()
        jobs[name] = (lambda update=update, state=state, adapt=adapt: update(
            state[0], gradient, *state[1:], **{**LAMB_ARGUMENTS, "adapt": adapt}))
    return jobs


def by_size_jobs(elements, count):
    """{"XLA kernel" | "plain ops": one graph step updating `count` variables of `elements`}."""
    import tensorflow as tf

    from lamb_tf import compiled_updates

    gradient = tf.random.stateless_normal([elements], seed=[0, 1]) * 1e-3
    jobs = {}
    for name, smallest in (("XLA kernel", 0), ("plain ops", sys.maxsize)):
        update = compiled_updates.LambUpdate(smallest_compiled=smallest)
        states = [[tf.Variable(tf.random.stateless_normal([elements], seed=[i, j]) * 0.02)
                   for j in range(3)] + [tf.Variable(0.0)] for i in range(count)]

        @tf.function
        def step(update=update, states=states):
            for x, m, v, ratio in states:
                update(x, gradient, m, v, ratio, **LAMB_ARGUMENTS)

        jobs[name] = step
    return jobs


def measure(jobs, steps, warmup):
    """{name: [seconds]} of `steps` timed calls each, alternated, after `warmup` rounds."""
    return alternation.alternate(alternation.timing(jobs), steps, warmup)


def parse_arguments(argv):
    parser = alternation.argument_parser(__doc__)
    parser.add_argument("--shape", default="30522,768",
                        help="the variable's shape, comma-separated (default: BERT's word "
                             "embedding)")
    parser.add_argument("--by_size", default="",
                        help="comma-separated element counts: XLA kernel against plain ops "
                             "per size instead of the anatomy of --shape")
    parser.add_argument("--variables", type=int, default=0,
                        help="--by_size: variables per step (default: up to 64, fewer for "
                             "large sizes)")
    parser.add_argument("--passes", action="store_true",
                        help="print each job's loops over memory (from its optimized HLO) "
                             "instead of timing the jobs")
    parser.add_argument("--steps", type=int, default=9, help="timed calls per job")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    args = parser.parse_args(argv)
    try:
        args.shape = [int(d) for d in args.shape.split(",")]
    except ValueError:
        parser.error(f"--shape {args.shape!r}: give positive integers separated by commas")
    if not args.shape or min(args.shape) < 1:
        parser.error(f"--shape {args.shape!r}: give positive integers separated by commas")
    try:
        args.by_size = [int(n) for n in args.by_size.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--by_size {args.by_size!r}: give positive integers separated by commas")
    if args.by_size and min(args.by_size) < 1:
        parser.error(f"--by_size {args.by_size!r}: give positive integers separated by commas")
    if args.steps < 1 or args.warmup < 0 or args.variables < 0:
        parser.error("--steps must be >= 1, --warmup and --variables >= 0")
    if args.passes and args.by_size:  # --by_size times plain ops, which have no XLA program
        parser.error("--passes counts the loops of --shape's compiled jobs and --by_size times "
                     "sizes instead: give one of them")
    return args


def print_by_size(sizes, variables, steps, warmup):
    print(f"one LAMB update per variable in a graph step, {steps} timed steps after {warmup} "
          f"warm-up, alternated in one process; {os.cpu_count()} CPU cores; load average "
          f"{os.getloadavg()[0]:.1f}")
    print("| elements | variables per step | XLA kernel (µs per variable) "
          "| plain ops (µs per variable) | plain ÷ kernel |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for elements in sizes:
        # enough variables to time small sizes, and no more than ~50 MB of them at large ones
        count = variables or max(2, min(64, 2**22 // elements))
        samples = measure(by_size_jobs(elements, count), steps, warmup)
        kernel, plain = (statistics.median(samples[name]) / count * 1e6
                         for name in ("XLA kernel", "plain ops"))
        print(f"| {elements:,} | {count} | {kernel:.0f} | {plain:.0f} | {plain / kernel:.2f} |",
              flush=True)


def print_passes(shape, parameters):
    """Each job of `make_jobs(shape)` compiled as one XLA program: its loops over memory and
    the bytes per parameter they move (benchmarks/hlo_passes.py)."""
    import tensorflow as tf

    def optimized_hlo(job):
        # called without arguments: the jobs' own default arguments stay out of the trace
        program = tf.function(lambda: job(), jit_compile=True)  # pylint: disable=unnecessary-lambda
        return program.experimental_get_compiler_ir()(stage="optimized_hlo")

    found = {}
    for name, job in make_jobs(shape).items():
        hlo = optimized_hlo(job)
        # a hundredth of the variable's bytes: the scalar arithmetic is left out
        found[name] = hlo_passes.passes(hlo, smallest_bytes=4 * parameters / 100)
    print(f"one variable of shape {shape} ({parameters:,} float32 parameters): the loops over "
          "memory of each job's XLA program (optimized HLO), each array operand read once "
          "and each output written once, in bytes per parameter")
    print("| job | loops | read | written | total | × 28-byte floor |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, loops in found.items():
        read, written = hlo_passes.bytes_per_parameter(loops, parameters)
        print(f"| {name} | {len(loops)} | {read:.1f} | {written:.1f} | {read + written:.1f} | "
              f"{(read + written) / 28:.2f}× |")
    print("\nLAMB's loops, in program order:")
    print("| instruction | op | read | written |")
    print("| --- | --- | ---: | ---: |")
    for name, op, read, written in found["LAMB"]:
        print(f"| {name} | {op} | {read / parameters:.1f} | {written / parameters:.1f} |")


def main(argv=None):
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.by_size:
        print_by_size(args.by_size, args.variables, args.steps, args.warmup)
        return 0
    parameters = 1
    for dimension in args.shape:
        parameters *= dimension
    if args.passes:
        print_passes(args.shape, parameters)
        return 0
    samples = measure(make_jobs(args.shape), args.steps, args.warmup)
    reference = statistics.median(samples["memory pass"])
    print(f"one variable of shape {args.shape} ({parameters:,} parameters), each job one XLA "
          f"kernel; {args.steps} timed calls after {args.warmup} warm-up, alternated in one "
          f"process; {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f}")
    print("| job | median (ms) | min–max (ms) | × memory pass |")
    print("| --- | ---: | ---: | ---: |")
    for name in JOBS:
        median = statistics.median(samples[name])
        print(f"| {name} | {median * 1e3:.2f} | {min(samples[name]) * 1e3:.2f}–"
              f"{max(samples[name]) * 1e3:.2f} | {median / reference:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
