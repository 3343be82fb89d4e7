"""One optimizer update of BERT-shaped variables: lamb_tf against its TensorFlow peers.

Every contender applies one update to variables with the shapes and Model Garden names of a
BERT encoder (`bert_encoder/transformer/layer_0/self_attention/query/kernel`, ...), so the
exclusion patterns (`layer_norm|LayerNorm`, `bias`) apply as in real pretraining. The update
runs in a `tf.function`, once without and once with `jit_compile=True`; all contenders and
both modes are alternated step by step in this one process (the order changes every
round, balanced: `alternation.round_order`), so a shared machine's drift hits every
contender alike. Speeds are given as ratios measured
side by side, never as absolute claims.

Contenders: `lamb_tf.LAMB` in both Keras flavours, Model Garden's LAMB
(`official.modeling.optimization.lamb.LAMB`), `keras.optimizers.Lamb`, Keras 3 `AdamW` (the
cost of a plain Adam step), and `lamb_tf.LARS` (tf_keras) against Model Garden's LARS. Also
timed, alternated with them: a memory pass in place (`c ← c · s` over one 256 MiB variable,
XLA-compiled: read and write, 8 bytes per element, written where it was read, as the
optimizers write their variables), giving the bandwidth of each round; each contender's
"floor" is the time to move its one-pass bytes at that bandwidth: 28 bytes per parameter
for LAMB, AdamW and the Keras Lamb (read x, g, m, v; write x, m, v), 20 for LARS (read x,
g, velocity; write x, velocity).

The speed over the Model Garden peer and the time over the floor are paired per round (the
peer's time, or the floor at that round's bandwidth, against the contender's time in the
same round); the table gives their median and 90% interval (`alternation.median_interval`),
and each target of docs/performance.md is judged on them (`alternation.verdict`). So is
"lamb_tf.LAMB faster than keras.optimizers.Lamb in both modes": each lamb_tf.LAMB flavour's
speed over the Keras Lamb (the Keras Lamb's time over lamb_tf's in the same round), per mode.

`--passes` instead prints, for each contender's step compiled with `jit_compile`, the loops
over memory of its XLA program and the bytes per parameter they read and write, counted
from the optimized HLO (benchmarks/hlo_passes.py), against the same one-pass bytes: what
the code XLA generates must move at least, before anything is timed.

Usage:
  python benchmarks/optimizer_step.py --size base --json /tmp/step_base.json
  python benchmarks/optimizer_step.py --size mini --passes   # no timing
  python benchmarks/optimizer_step.py --size tiny --steps 2 --warmup 1   # seconds, for CI
Prints a Markdown table (median and min–max over the timed steps, after warm-up; the paired
ratios' median and interval) and the verdicts, and writes every sample to the JSON file.
"""
import contextlib
import datetime
import json
import os
import platform
import statistics
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)  # benchmarks.alternation, when run as a script

from benchmarks import alternation, hlo_passes  # noqa: E402

# BERT encoder shapes (Devlin et al. 2019, Table 1 / Google's bert_config.json), without the
# pooler: vocabulary 30522, 512 positions, 2 token types.
SIZES = {
    # name: (hidden, layers, heads, intermediate, vocabulary, positions)
    "tiny": (32, 2, 2, 64, 128, 16),
    "mini": (256, 4, 4, 1024, 30522, 512),
    "small": (512, 4, 8, 2048, 30522, 512),
    "medium": (512, 8, 8, 2048, 30522, 512),
    "base": (768, 12, 12, 3072, 30522, 512),
    "large": (1024, 24, 16, 4096, 30522, 512),
}
TYPE_VOCABULARY = 2
LEARNING_RATE, WEIGHT_DECAY_RATE = 1e-3, 0.01
ONE_PASS_BYTES = {"lamb": 28, "lars": 20}
COPY_ELEMENTS = 64 * 1024 * 1024  # 256 MiB of float32
CONTENDERS = ("lamb_tf.LAMB (tf_keras)", "lamb_tf.LAMB (Keras 3)", "Model Garden LAMB",
              "keras.optimizers.Lamb", "keras.optimizers.AdamW", "lamb_tf.LARS (tf_keras)",
              "Model Garden LARS")
BASELINE = {"lamb": "Model Garden LAMB", "lars": "Model Garden LARS"}
MODES = ("graph", "jit_compile")


def bert_variables(hidden, layers, heads, intermediate, vocabulary, positions):
    """[(path, shape)] of a Model Garden `BertEncoderV2` (no pooler), in its order."""
    head = hidden // heads
    encoder = "bert_encoder"
    specs = [
        (f"{encoder}/word_embeddings/embeddings", (vocabulary, hidden)),
        (f"{encoder}/position_embedding/embeddings", (positions, hidden)),
        (f"{encoder}/type_embeddings/embeddings", (TYPE_VOCABULARY, hidden)),
        (f"{encoder}/embeddings/layer_norm/gamma", (hidden,)),
        (f"{encoder}/embeddings/layer_norm/beta", (hidden,)),
    ]
    for i in range(layers):
        layer = f"{encoder}/transformer/layer_{i}"
        for projection in ("query", "key", "value"):
            specs += [(f"{layer}/self_attention/{projection}/kernel", (hidden, heads, head)),
                      (f"{layer}/self_attention/{projection}/bias", (heads, head))]
        specs += [
            (f"{layer}/self_attention/attention_output/kernel", (heads, head, hidden)),
            (f"{layer}/self_attention/attention_output/bias", (hidden,)),
            (f"{layer}/self_attention_layer_norm/gamma", (hidden,)),
            (f"{layer}/self_attention_layer_norm/beta", (hidden,)),
            (f"{layer}/intermediate/kernel", (hidden, intermediate)),
            (f"{layer}/intermediate/bias", (intermediate,)),
            (f"{layer}/output/kernel", (intermediate, hidden)),
            (f"{layer}/output/bias", (hidden,)),
            (f"{layer}/output_layer_norm/gamma", (hidden,)),
            (f"{layer}/output_layer_norm/beta", (hidden,)),
        ]
    return specs


def initial_values(specs, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape, dtype=np.float32) * 0.02 for _, shape in specs]


def tf_keras_variables(specs, values):
    """tf.Variables named by full path, as tf_keras / Model Garden create them."""
    import tensorflow as tf

    return [tf.Variable(value, name=path) for (path, _), value in zip(specs, values)]


def keras3_variables(specs, values):
    """keras.Variables whose `.path` is the full Model Garden path."""
    import keras

    variables = []
    for (path, _), value in zip(specs, values):
        *scopes, name = path.split("/")
        with contextlib.ExitStack() as stack:
            for scope in scopes:
                stack.enter_context(keras.name_scope(scope))
            variables.append(keras.Variable(value, name=name))
    return variables


def build_contenders(names, specs):
    """{name: (family, optimizer, variables)} for the requested contender names."""
    import keras
    import tensorflow as tf  # noqa: F401  (TensorFlow before the optimizer modules)
    from official.modeling.optimization import lamb as garden_lamb
    from official.modeling.optimization import lars as garden_lars

    from lamb_tf import exclusions
    from lamb_tf import keras3_optimizers
    from lamb_tf import tf_keras_optimizers

    values = initial_values(specs, seed=0)
    # One variable set per Keras flavour, shared by that flavour's contenders (they update it
    # in turn; the values do not change the cost). Slots are each optimizer's own.
    tf_keras_set = tf_keras_variables(specs, values) if any(
        n in names for n in CONTENDERS if "tf_keras" in n or "Model Garden" in n) else None
    keras3_set = keras3_variables(specs, values) if any(
        n in names for n in CONTENDERS if "Keras 3" in n or n.startswith("keras.")) else None
    del values
    # the same arguments for every LAMB and LARS: BERT's exclusions (layer norms, biases)
    lamb = lars = dict(learning_rate=LEARNING_RATE, weight_decay_rate=WEIGHT_DECAY_RATE,
                       exclude_from_weight_decay=list(exclusions.BERT_EXCLUDE_PATTERNS))
    factories = {
        "lamb_tf.LAMB (tf_keras)": lambda: ("lamb", tf_keras_optimizers.LAMB(**lamb), tf_keras_set),
        "lamb_tf.LAMB (Keras 3)": lambda: ("lamb", keras3_optimizers.LAMB(**lamb), keras3_set),
        "Model Garden LAMB": lambda: ("lamb", garden_lamb.LAMB(**lamb), tf_keras_set),
        "keras.optimizers.Lamb": lambda: (
            "lamb", _keras_with_decay(keras.optimizers.Lamb, epsilon=1e-6), keras3_set),
        "keras.optimizers.AdamW": lambda: (
            "lamb", _keras_with_decay(keras.optimizers.AdamW, epsilon=1e-6), keras3_set),
        "lamb_tf.LARS (tf_keras)": lambda: ("lars", tf_keras_optimizers.LARS(**lars), tf_keras_set),
        "Model Garden LARS": lambda: ("lars", garden_lars.LARS(**lars), tf_keras_set),
    }
    return {name: factories[name]() for name in names}


def _keras_with_decay(cls, **kwargs):
    """A Keras 3 optimizer with decoupled weight decay, biases and layer norms excluded."""
    optimizer = cls(learning_rate=LEARNING_RATE, weight_decay=WEIGHT_DECAY_RATE, **kwargs)
    # Keras 3 matches these against the variable's short name (`bias`, `gamma`, `beta`)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


def step_functions(optimizer, variables):
    """{mode: tf.function applying one update of `variables` from `gradients`}."""
    import tensorflow as tf

    def apply(gradients):
        optimizer.apply_gradients(zip(gradients, variables))

    return {"graph": tf.function(apply, jit_compile=False),
            "jit_compile": tf.function(apply, jit_compile=True)}


def copy_function():
    """The reference memory pass: `c ← c · s` in place over COPY_ELEMENTS float32,
    XLA-compiled: each element read once and written once (8 bytes), into the buffer it was
    read from, as an optimizer writes its variables and slots. (A copy into a separate buffer
    also pays a read of the destination's cache lines before they are written, so its
    bandwidth, counted at 8 bytes per element, comes out 1.3-1.5x lower and made the floor
    as much too lenient.)"""
    import tensorflow as tf

    buffer = tf.Variable(tf.ones([COPY_ELEMENTS]))

    @tf.function(jit_compile=True)
    def scale_in_place(scale):
        buffer.assign(buffer * scale)

    return lambda: scale_in_place(tf.constant(1.0))


def measure(contenders, modes, gradients, steps, warmup):
    """Alternate every (contender, mode) and the copy step by step; return the samples."""
    jobs = {("memory copy", "jit_compile"): copy_function()}
    for name, (_, optimizer, variables) in contenders.items():
        functions = step_functions(optimizer, variables)
        for mode in modes:
            jobs[(name, mode)] = (lambda f=functions[mode]: f(gradients))
    return alternation.alternate(
        alternation.timing(jobs), steps, warmup, after_round=lambda index, total: print(
            f"round {index + 1}/{total} done", file=sys.stderr, flush=True))


COPY_KEY = ("memory copy", "jit_compile")
# The targets of docs/performance.md's "The speed targets, measured": (contender family,
# mode) -> the least speed over the Model Garden peer, for lamb_tf's contenders.
SPEED_TARGETS = {("lamb", "graph"): 1.5, ("lamb", "jit_compile"): 1.3,
                 ("lars", "graph"): 1.3, ("lars", "jit_compile"): 1.0}
FLOOR_TARGET = 2.0  # "within 2x of the one-pass floor with XLA"
# "lamb_tf.LAMB faster than keras.optimizers.Lamb in both modes": each lamb_tf.LAMB flavour's
# speed over the Keras Lamb (its time over lamb_tf's in the same round), in each mode
KERAS_LAMB = "keras.optimizers.Lamb"
KERAS_LAMB_TARGET = 1.0


def summarise(samples, contenders, parameters):
    """(bandwidth, rows): per contender and mode the median/min/max time, and its paired
    per-round ratios (`alternation.median_interval`): the speed over the Model Garden peer
    (the peer's time in the same round over the contender's) and the time over the
    one-pass floor (the floor at the bandwidth of the same round's memory pass)."""
    copies = samples[COPY_KEY]
    bandwidth = 2 * 4 * COPY_ELEMENTS / statistics.median(copies)  # read + written per s
    rows = []
    for (name, mode), values in samples.items():
        if name == "memory copy":
            continue
        family = contenders[name][0]
        per_byte = [copy / (2 * 4 * COPY_ELEMENTS) for copy in copies]  # s per byte, per round
        floors = [ONE_PASS_BYTES[family] * parameters * each for each in per_byte]
        baseline = samples.get((BASELINE[family], mode))
        row = {"contender": name, "mode": mode, "family": family,
               "median_s": statistics.median(values), "min_s": min(values),
               "max_s": max(values), "floor_s": ONE_PASS_BYTES[family] * parameters / bandwidth,
               "samples_s": values}
        row.update(_paired("speed_vs_model_garden", None if baseline is None else
                           [peer / own for peer, own in zip(baseline, values)]))
        row.update(_paired("times_floor", [own / floor for own, floor in zip(values, floors)]))
        keras_lamb = samples.get((KERAS_LAMB, mode))
        row.update(_paired("speed_vs_keras_lamb", None if keras_lamb is None or not
                           name.startswith("lamb_tf.LAMB") else
                           [peer / own for peer, own in zip(keras_lamb, values)]))
        row["verdict_speed_vs_keras_lamb"] = (
            None if row["speed_vs_keras_lamb_rounds"] is None else
            alternation.verdict(row["speed_vs_keras_lamb_rounds"], KERAS_LAMB_TARGET))
        row["target_speed_vs_model_garden"] = (
            SPEED_TARGETS.get((family, mode)) if name.startswith("lamb_tf.") else None)
        row["verdict_speed"] = _speed_verdict(row)
        row["verdict_floor"] = (
            alternation.verdict([1 / r for r in row["times_floor_rounds"]], 1 / FLOOR_TARGET)
            if mode == "jit_compile" and name.startswith("lamb_tf.") else None)
        rows.append(row)
    return bandwidth, rows


def _paired(key, ratios):
    """{key: median, key_low/key_high: its 90% interval, key_rounds: the ratios}."""
    if ratios is None:
        return {key: None, f"{key}_low": None, f"{key}_high": None, f"{key}_rounds": None}
    low, high, _ = alternation.median_interval(ratios)
    return {key: statistics.median(ratios), f"{key}_low": low, f"{key}_high": high,
            f"{key}_rounds": ratios}


def _speed_verdict(row):
    target = row["target_speed_vs_model_garden"]
    if target is None or row["speed_vs_model_garden_rounds"] is None:
        return None
    return alternation.verdict(row["speed_vs_model_garden_rounds"], target)


def markdown(rows, bandwidth):
    """The table (medians; the paired ratios' median and 90% interval), then the verdicts."""
    lines = [
        "| contender | mode | median (ms) | min–max (ms) | speed vs Model Garden "
        "(90% interval) | × one-pass floor (90% interval) |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['contender']} | {row['mode']} | {row['median_s'] * 1e3:.1f} "
            f"| {row['min_s'] * 1e3:.1f}–{row['max_s'] * 1e3:.1f} "
            f"| {_ratio_cell(row, 'speed_vs_model_garden')} "
            f"| {_ratio_cell(row, 'times_floor')} |")
    lines.append(f"\nmemory pass bandwidth (in place, read + write, same run): "
                 f"{bandwidth / 1e9:.1f} GB/s")
    lines.append("\nTargets, judged on the paired per-round ratios (docs/performance.md, "
                 "\"How a target is judged\"):")
    for row in rows:
        if row["verdict_speed"] is not None:
            lines.append(f"- {row['contender']}, {row['mode']}, speed vs Model Garden: "
                         + alternation.describe_ratios(row["speed_vs_model_garden_rounds"],
                                                       row["target_speed_vs_model_garden"]))
        if row["verdict_speed_vs_keras_lamb"] is not None:
            lines.append(f"- {row['contender']}, {row['mode']}, speed vs {KERAS_LAMB}: "
                         + alternation.describe_ratios(row["speed_vs_keras_lamb_rounds"],
                                                       KERAS_LAMB_TARGET))
        if row["verdict_floor"] is not None:
            low, high, coverage = alternation.median_interval(row["times_floor_rounds"])
            lines.append(f"- {row['contender']}, {row['mode']}, × one-pass floor: median "
                         f"{row['times_floor']:.2f}×, {low:.2f}–{high:.2f}× with {coverage:.0%} "
                         f"confidence: {row['verdict_floor']} (target ≤ {FLOOR_TARGET:.2f}×)")
    return "\n".join(lines)


def _ratio_cell(row, key):
    if row[key] is None:
        return "–"
    return f"{row[key]:.2f}× ({row[key + '_low']:.2f}–{row[key + '_high']:.2f}×)"


def parse_arguments(argv):
    parser = alternation.argument_parser(__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="base",
                        help="BERT encoder shape (default base; tiny runs in seconds)")
    parser.add_argument("--steps", type=int, default=9, help="timed steps per contender")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed steps first (tracing, XLA compilation)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="comma-separated subset of: " + ", ".join(CONTENDERS))
    parser.add_argument("--modes", default=",".join(MODES), help="graph, jit_compile or both")
    parser.add_argument("--json", help="write the samples and the table's numbers here")
    parser.add_argument("--passes", action="store_true",
                        help="print each contender's loops over memory with jit_compile "
                             "(from the optimized HLO) instead of timing")
    args = parser.parse_args(argv)
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [c for c in args.contenders if c not in CONTENDERS]
    if unknown or not args.contenders:
        parser.error(f"--contenders: unknown {unknown or 'empty list'}; choose from "
                     + ", ".join(CONTENDERS))
    if not args.modes or any(m not in MODES for m in args.modes):
        parser.error(f"--modes: {args.modes!r}; choose graph, jit_compile or both")
    if args.steps < 1:
        parser.error(f"--steps={args.steps} must be at least 1")
    if args.warmup < 1:  # the first call of each step traces it and compiles it
        parser.error(f"--warmup={args.warmup} must be at least 1: the first step of each "
                     "contender includes its tracing and XLA compilation")
    if args.passes and args.json:
        parser.error("--passes prints the compiled loops and writes no --json file; drop "
                     "--json, or drop --passes to time the steps")
    problem = alternation.output_file_problem("--json", args.json)
    if problem:  # before the measurement, which its write would otherwise lose
        parser.error(problem)
    return args


def print_passes(contenders, gradients, parameters, size, tensors):
    """Each contender's `jit_compile` step: its XLA program's loops over memory and the bytes
    per parameter they move (benchmarks/hlo_passes.py), against its one-pass bytes."""
    print(f"BERT-{size} shapes: {parameters / 1e6:.1f}M parameters in {tensors} tensors; each "
          "contender's update with jit_compile as one XLA program (optimized HLO), each array "
          "operand read once and each output written once, in bytes per parameter")
    print("| contender | loops | of them copies | read | written | total | × one-pass bytes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, (family, optimizer, variables) in contenders.items():
        step = step_functions(optimizer, variables)["jit_compile"]
        step(gradients)  # builds the optimizer's slots before the step is traced for its IR
        loops = hlo_passes.passes(step.experimental_get_compiler_ir(gradients)(
            stage="optimized_hlo"))
        read, written = hlo_passes.bytes_per_parameter(loops, parameters)
        copies = sum(1 for loop in loops if loop[1] == "copy")
        print(f"| {name} | {len(loops)} | {copies} | {read:.1f} | {written:.1f} | "
              f"{read + written:.1f} | {(read + written) / ONE_PASS_BYTES[family]:.2f}× |")


def main(argv=None):
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    # one tf.function per contender and mode, same Python code: TF's retracing warning is noise
    tf.get_logger().setLevel("ERROR")
    specs = bert_variables(*SIZES[args.size])
    parameters = sum(int(_product(shape)) for _, shape in specs)
    contenders = build_contenders(args.contenders, specs)
    gradients = [tf.constant(g) for g in initial_values(specs, seed=1)]
    if args.passes:
        print_passes(contenders, gradients, parameters, args.size, len(specs))
        return 0
    started = alternation.run_started()
    samples = measure(contenders, args.modes, gradients, args.steps, args.warmup)
    run = alternation.run_finished(started)
    bandwidth, rows = summarise(samples, contenders, parameters)
    print(f"BERT-{args.size} shapes: {parameters / 1e6:.1f}M parameters in {len(specs)} tensors; "
          f"{args.steps} timed steps after {args.warmup} warm-up, alternated in one process; "
          f"{os.cpu_count()} CPU cores, TensorFlow {tf.__version__}")
    print(markdown(rows, bandwidth))
    if args.json:
        report = {
            "size": args.size, "parameters": parameters, "tensors": len(specs),
            "steps": args.steps, "warmup": args.warmup, "copy_bandwidth_bytes_per_s": bandwidth,
            "memory_pass": "in place: c = c * s, 8 bytes per element",
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                        "tensorflow": tf.__version__},
            **run,  # git_commit, git_tree, load_average_start, load_average_end
            "rows": rows,
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def _product(shape):
    result = 1
    for dimension in shape:
        result *= dimension
    return result


if __name__ == "__main__":
    sys.exit(main())
