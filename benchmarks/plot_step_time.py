"""Plot optimizer step time against parameter count, one line per contender, from the JSON
files of `benchmarks/optimizer_step.py` (one file per BERT size).

Usage:
  python benchmarks/plot_step_time.py step_small.json step_base.json --output step_time.png

Times are each run's medians; runs at different sizes are separate processes, so compare
contenders within one size (same run), and read the slope across sizes.
"""
import json
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)  # benchmarks.alternation, when run as a script

from benchmarks import alternation  # noqa: E402

MODES = ("graph", "jit_compile")


def load(paths):
    """{(contender, mode): [(parameters, median seconds)]}, sorted by parameters."""
    lines = {}
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        for row in report["rows"]:
            lines.setdefault((row["contender"], row["mode"]), []).append(
                (report["parameters"], row["median_s"]))
    return {key: sorted(points) for key, points in lines.items()}


def plot(lines, output):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(MODES), figsize=(12, 5), sharey=True)
    for axis, mode in zip(axes, MODES):
        for (contender, line_mode), points in sorted(lines.items()):
            if line_mode != mode:
                continue
            parameters, seconds = zip(*points)
            axis.plot([p / 1e6 for p in parameters], [s * 1e3 for s in seconds], marker="o",
                      label=contender)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_title(f"one update, {'no jit_compile' if mode == 'graph' else 'jit_compile=True'}")
        axis.set_xlabel("parameters (millions, BERT encoder shapes)")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("median step time (ms)")
    axes[-1].legend(fontsize=8)
    figure.tight_layout()
    # the format named, so that a path without an extension is written as given (matplotlib
    # would write a PNG to `<output>.png`)
    figure.savefig(output, dpi=100, format=os.path.splitext(output)[1][1:].lower() or "png")


def _format_problem(output):
    """One line if matplotlib cannot write an image of --output's extension, else None (no
    extension: a PNG, by that name)."""
    from matplotlib.backend_bases import FigureCanvasBase

    extension = os.path.splitext(output)[1][1:].lower()
    supported = FigureCanvasBase.get_supported_filetypes()
    if extension and extension not in supported:
        return (f"--output={output}: matplotlib writes no .{extension} image; use one of "
                + ", ".join(f".{name}" for name in sorted(supported)))
    return None


def main(argv=None):
    parser = alternation.argument_parser(__doc__)
    parser.add_argument("reports", nargs="+", help="JSON files of optimizer_step.py --json")
    parser.add_argument("--output", required=True, help="PNG file to write")
    args = parser.parse_args(argv)
    missing = [path for path in args.reports if not os.path.isfile(path)]
    if missing:
        parser.error(f"no such report: {', '.join(missing)}; run optimizer_step.py --json first")
    problem = (alternation.output_file_problem("--output", args.output)
               or _format_problem(args.output))
    if problem:
        parser.error(problem)
    try:
        lines = load(args.reports)
    except (ValueError, KeyError, TypeError) as error:  # not JSON, or not this script's rows
        parser.error(f"{' '.join(args.reports)}: not a report of optimizer_step.py --json "
                     f"({type(error).__name__}: {error})")
    plot(lines, args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
