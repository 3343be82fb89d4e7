"""Plot optimizer step time against parameter count, one line per contender, from the JSON
files of `benchmarks/optimizer_step.py` (one file per BERT size).

Usage:
  python benchmarks/plot_step_time.py step_small.json step_base.json --output step_time.png

Times are each run's medians; runs at different sizes are separate processes, so compare
contenders within one size (same run), and read the slope across sizes.
"""
import json
import math
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)  # benchmarks.alternation, when run as a script

from benchmarks import alternation  # noqa: E402

MODES = ("graph", "jit_compile")


def load(paths):
    """{(contender, mode): [(parameters, median seconds)]}, sorted by parameters; a
    ValueError naming the first file that is not a report of optimizer_step.py --json."""
    lines = {}
    for path in paths:
        try:
            with open(path) as f:
                report = json.load(f)
            parameters, rows = _checked(report)
        except (ValueError, UnicodeDecodeError) as error:  # (JSONDecodeError: a ValueError)
            raise ValueError(f"{path}: not a report of optimizer_step.py --json "
                             f"({type(error).__name__}: {error})") from None
        for row in rows:
            lines.setdefault((row["contender"], row["mode"]), []).append(
                (parameters, row["median_s"]))
    return {key: sorted(points) for key, points in lines.items()}


def _checked(report):
    """(parameters, rows) of one report, or a ValueError saying what is wrong in it."""
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
        raise ValueError("no list of rows")
    parameters = report.get("parameters")
    if not _positive_number(parameters):
        raise ValueError(f"parameters={parameters!r} is no positive number")
    if not report["rows"]:
        raise ValueError("no rows: nothing to plot")
    for row in report["rows"]:
        if not (isinstance(row, dict) and isinstance(row.get("contender"), str)
                and row.get("mode") in MODES and _positive_number(row.get("median_s"))):
            raise ValueError(f"a row without a contender, a mode of {', '.join(MODES)} and a "
                             f"positive median_s: {row!r}"[:300])
    return parameters, report["rows"]


def _positive_number(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


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
        if axis.get_lines():  # a legend where there are lines (a report may time one mode)
            axis.legend(fontsize=8)
    axes[0].set_ylabel("median step time (ms)")
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
    except ValueError as error:  # not JSON, or not this script's rows: the file named
        parser.error(str(error).replace("\n", " "))
    plot(lines, args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
