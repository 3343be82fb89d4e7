"""The study's table (markdown + JSON) and plot (PNG) from the runs' recorded outcomes."""
import dataclasses
import json
import math
import os
import statistics

from recipes.common import storage
from recipes.study import adapter
from recipes.study import plan as plan_lib

TABLE_MD, TABLE_JSON, PLOT_PNG = "study.md", "study.json", "study.png"


NOT_RUN = {"status": "not run"}  # a run the study has not finished (--report_only)


@dataclasses.dataclass(frozen=True)
class Metric:
    """The held-out metric learning rates are picked on (its name in results.json), and
    which way is better."""

    name: str
    lower_is_better: bool

    @classmethod
    def of(cls, name, mode="auto"):
        """`mode`: "min" (lower is better), "max", or "auto": as the name says
        (`adapter.mode_of`); a ValueError for a name that does not say."""
        mode = adapter.mode_of(name) if mode == "auto" else mode
        if mode is None:
            raise ValueError(f"which way {name} is better is not known from its name")
        return cls(name, mode == "min")

    def worse_by(self, value, reference):
        """How much worse `value` is than `reference` (negative: better)."""
        return value - reference if self.lower_is_better else reference - value


def _status(statuses, run):
    return statuses.get(run.name) or NOT_RUN


def _ok_results(statuses, runs):
    return [_status(statuses, r)["result"] for r in runs if _status(statuses, r)["status"] == "ok"]


def best_run(sweep, statuses, metric):
    """The sweep run with the best held-out `metric` (a `Metric`: the highest, or the lowest
    where lower is better), or None if none finished."""
    finished = [r for r in sweep if _status(statuses, r)["status"] == "ok"]
    best = min if metric.lower_is_better else max
    return best(finished, key=lambda r: statuses[r.name]["result"]["metric"], default=None)


def _row(line, optimizer, batch, chosen, seed_runs, sweep, statuses):
    results = _ok_results(statuses, seed_runs)
    metrics = [result["metric"] for result in results]
    noise = [result["noise_scale"] for result in results if result["noise_scale"] is not None]
    measurable = [value for value in noise if math.isfinite(value) and value > 0]
    return {
        "line": line,
        "optimizer": optimizer,
        "global_batch_size": batch,
        "steps": seed_runs[0].steps if seed_runs else sweep[0].steps,
        "warmup_steps": seed_runs[0].warmup_steps if seed_runs else sweep[0].warmup_steps,
        "learning_rate": chosen,
        "sweep": {
            f"{r.learning_rate:.6g}": (
                _status(statuses, r)["result"]["metric"]
                if _status(statuses, r)["status"] == "ok"
                else _status(statuses, r)["status"]
            )
            for r in sweep
        },
        "seeds": len(metrics),
        "diverged_seeds": sum(_status(statuses, r)["status"] == "diverged" for r in seed_runs),
        "unfinished_runs": sum(_status(statuses, r) is NOT_RUN for r in set(seed_runs + sweep)),
        "metric_values": metrics,
        "metric_mean": statistics.fmean(metrics) if metrics else None,
        "metric_std": statistics.stdev(metrics) if len(metrics) > 1 else None,
        "wall_time_seconds": (
            statistics.fmean(r["wall_time_seconds"] for r in results) if results else None
        ),
        # A negative estimate (|G|² or tr(Σ) still below its noise) is not a scale.
        "noise_scale": statistics.fmean(measurable) if measurable else None,
        "noise_scale_not_measurable": len(noise) - len(measurable),
    }


def summarize(settings, sweeps, untuned, statuses, metric):
    """One row per (line, batch size); a line is an optimizer, or one's untuned sqrt rule."""
    rows = []
    for (optimizer, batch), sweep in sweeps.items():
        best = best_run(sweep, statuses, metric)
        seeds = [] if best is None else [best] + plan_lib.seed_runs(best, settings.seeds)
        chosen = None if best is None else best.learning_rate
        rows.append(_row(optimizer, optimizer, batch, chosen, seeds, sweep, statuses))
    for (optimizer, batch), runs in untuned.items():
        line = f"{optimizer} (untuned sqrt rule)"
        rows.append(_row(line, optimizer, batch, runs[0].learning_rate, runs, runs[:1], statuses))
    return rows


def _fmt(value, digits=4):
    return "–" if value is None else f"{value:.{digits}f}"


def _sweep_end(row):
    """"top" or "bottom" when the chosen learning rate is the highest or lowest of a sweep
    of three or more rates: a better rate may lie beyond, and the row may understate what
    the batch reaches (a sweep of two brackets nothing: every choice would be at an end);
    else None."""
    rates = sorted(float(rate) for rate in row["sweep"])
    if row["learning_rate"] is None or len(rates) < 3 or "untuned" in row["line"]:
        return None
    if row["learning_rate"] == rates[-1]:
        return "top"
    return "bottom" if row["learning_rate"] == rates[0] else None


def _chosen(row):
    """The chosen learning rate as the table writes it, marked at an end of its sweep."""
    if row["learning_rate"] is None:
        return "–"
    end = _sweep_end(row)
    return f"{row['learning_rate']:.6g}" + (f" ({end} of sweep)" if end else "")


def _no_figure(row):
    """Why a row has no held-out figure."""
    return "not run yet" if row["unfinished_runs"] else "diverged at every LR"


def _largest_batch(rows, metric, tolerance):
    """(the answer for one line's `rows`, ascending batch; its caveats), as
    `largest_batches` writes them."""
    reference, first = rows[0]["metric_mean"], rows[0]["global_batch_size"]
    if reference is None:
        return f"nothing to compare with: batch {first:,} {_no_figure(rows[0])}", []
    if reference == 0:
        return f"nothing to compare with: batch {first:,}'s figure is 0 (no fraction of it)", []
    caveats = []
    if _sweep_end(rows[0]):
        caveats.append(f"batch {first:,}'s LR is the {_sweep_end(rows[0])} of its sweep: a "
                       "better one may improve the reference")
    held = first
    for row in rows[1:]:
        batch, value = row["global_batch_size"], row["metric_mean"]
        if value is None or row["diverged_seeds"]:
            why = (_no_figure(row) if value is None else
                   f"{row['diverged_seeds']} of {row['diverged_seeds'] + row['seeds']} seeds "
                   "diverged")
            return f"{held:,} (at {batch:,}: {why})", caveats
        worse = metric.worse_by(value, reference)
        slack = tolerance * abs(reference)
        if worse > slack and not math.isclose(worse, slack, rel_tol=1e-9):  # (1% is within)
            if _sweep_end(row):
                caveats.append(f"batch {batch:,}'s LR is the {_sweep_end(row)} of its sweep: "
                               "a better one may hold it")
            by = f"{worse / abs(reference):.2%}"
            return f"{held:,} (at {batch:,}: {value:.4f}, {by} worse)", caveats
        held = batch
    return f"{held:,}, the largest studied", caveats


def largest_batches(rows, metric, tolerance):
    """How large the batch can go, for each line: the largest batch up to which every
    batch's held-out figure (mean over seeds; no seed diverged) stays within `tolerance`, a
    fraction of the line's own figure at its smallest batch. Lines of text, each line's
    caveats indented under it."""
    if len({row["global_batch_size"] for row in rows}) < 2:
        return ["Largest batch: one batch size studied, nothing to compare"]
    better = "lower" if metric.lower_is_better else "higher"
    answers = [f"Largest batch within {tolerance * 100:g}% of the smallest batch's held-out "
               f"{metric.name} ({better} is better):"]
    for line in dict.fromkeys(row["line"] for row in rows):
        own = sorted((row for row in rows if row["line"] == line),
                     key=lambda row: row["global_batch_size"])
        answer, caveats = _largest_batch(own, metric, tolerance)
        if any(row["unfinished_runs"] and row["metric_mean"] is not None for row in own):
            caveats.append("some of its runs have not finished: figures of those run so far")
        answers += [f"- {line}: {answer}"] + [f"  - {caveat}" for caveat in caveats]
    return answers


def legend(metric):
    """What the table's columns mean, written under it in study.md."""
    better = "lowest" if metric.lower_is_better else "highest"
    return (
        f"Chosen peak LR: the rate of the sweep with the {better} held-out {metric.name} on the "
        "first seed (the first given, on a tie); marked at the top or bottom of a sweep of "
        "three rates or more, where a better rate may lie beyond it: the row may then "
        "understate what the batch reaches. The held-out figure is the mean over the seeds run "
        "at that rate. Training time: the recipe's own, from its start to its end (its "
        "results.json), without the process's start-up (TensorFlow's import, some seconds), and "
        "of its last process only where a stopped study resumed it; the header's total "
        "counts whole processes, those a stopped study ended too. Noise scale: the gradient "
        "noise scale B_simple in examples, at the end of the runs, mean over seeds "
        "(McCandlish et al., arXiv 1812.06162): the batch beyond which a larger one buys little per example; – "
        "when an update is one micro-batch on one replica (nothing to estimate it from), not "
        "measurable when the estimate is negative (the noise outweighs the gradient).\n")


def markdown(rows, metric):
    named = metric.name  # its direction said but for a name that says "higher" itself
    if metric.lower_is_better or adapter.mode_of(metric.name) != "max":
        named += ", lower is better" if metric.lower_is_better else ", higher is better"
    lines = [
        f"| line | global batch | steps | warmup | chosen peak LR | held-out {named} "
        "(mean ± std over seeds) | LR sweep (first seed) | training time per run (s) "
        "| noise scale |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    for row in rows:
        sweep = ", ".join(
            f"{lr}: {value if isinstance(value, str) else f'{value:.4f}'}"
            for lr, value in row["sweep"].items()
        )
        if row["metric_mean"] is None:
            held_out = _no_figure(row)
        else:
            spread = "" if row["metric_std"] is None else f" ± {row['metric_std']:.4f}"
            diverged = f", {row['diverged_seeds']} diverged" if row["diverged_seeds"] else ""
            count = row["unfinished_runs"]
            unfinished = f", {count} run{'s' * (count != 1)} not finished" if count else ""
            held_out = (
                f"{row['metric_mean']:.4f}{spread} (n={row['seeds']}{diverged}{unfinished})"
            )
        noise = "–" if row["noise_scale"] is None else f"{row['noise_scale']:,.0f}"
        if row.get("noise_scale_not_measurable"):  # (older study.json files lack it)
            count = row["noise_scale_not_measurable"]
            noise = ("not measurable" if row["noise_scale"] is None
                     else f"{noise} ({count} not measurable)")
        lines.append(
            f"| {row['line']} | {row['global_batch_size']:,} | {row['steps']} "
            f"| {row['warmup_steps']} | {_chosen(row)} | {held_out} | {sweep} "
            f"| {_fmt(row['wall_time_seconds'], 1)} | {noise} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows, metric, path):
    """Metric against batch size, one line per line; each line's median measured noise
    scale as a dotted vertical line of its colour."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, 4.5))
    for index, line in enumerate(dict.fromkeys(row["line"] for row in rows)):
        points = [r for r in rows if r["line"] == line and r["metric_mean"] is not None]
        color = f"C{index}"
        style = "--" if "untuned" in line else "-"
        axes.errorbar(
            [r["global_batch_size"] for r in points],
            [r["metric_mean"] for r in points],
            yerr=[r["metric_std"] or 0.0 for r in points],
            fmt="o" + style,
            color=color,
            capsize=3,
            label=line,
        )
        noise = [r["noise_scale"] for r in rows if r["line"] == line and r["noise_scale"]]
        if noise and statistics.median(noise) > 0:
            axes.axvline(
                statistics.median(noise),
                color=color,
                linestyle=":",
                label=f"{line}: noise scale ≈ {statistics.median(noise):,.0f}",
            )
    axes.set_xscale("log", base=2)
    axes.set_xlabel("global batch size (examples per update; equal epochs)")
    better = "lower" if metric.lower_is_better else "higher"
    axes.set_ylabel(f"held-out {metric.name} ({better} is better)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def write(study_dir, rows, metric, tolerance, header):
    """Writes study.md, study.json and study.png into `study_dir`; returns their paths."""
    paths = [os.path.join(study_dir, name) for name in (TABLE_MD, TABLE_JSON, PLOT_PNG)]
    answer = "".join(line + "\n" for line in largest_batches(rows, metric, tolerance))
    storage.write_text(paths[0], header + "\n\n" + (answer + "\n" if answer else "")
                       + markdown(rows, metric) + "\n" + legend(metric))
    storage.write_text(paths[1], json.dumps(
        {"metric": metric.name, "lower_is_better": metric.lower_is_better,
         "tolerance": tolerance, "rows": rows}, indent=2))
    plot(rows, metric, paths[2])
    return paths
