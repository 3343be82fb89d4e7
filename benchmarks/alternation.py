"""Side-by-side measurement on a shared, drifting machine: every contender once per round.

Absolute times here drift by 2-3x between runs while ratios measured side by side hold, so
every benchmark times its contenders in rounds: each contender once per round, in an order
that changes every round (`round_order`, a Williams design: over a cycle of rounds each
contender runs right after every other equally often; two contenders flip every round),
so that drift and "who ran just before" hit every contender alike. The first rounds
(tracing, compilation, caches) are warm-up and are not kept.

A target ("at least as fast as ...") is then judged on the rounds' paired ratios, each
round's contenders against each other (`median_interval`, `verdict`): on this machine one
round's ratio can land 10-20% either side of the next, so a median alone says little.
"""
import functools
import math
import os
import statistics
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def alternate(jobs, rounds, warmup=1, after_round=None):
    """{key: [what jobs[key]() returned, one per timed round]}.

    jobs: {key: a callable taking no argument, returning its measurement (seconds, or
    whatever the benchmark measures)}. Runs warmup + rounds rounds; after_round(index, total)
    is called after each (for progress lines)."""
    keys = list(jobs)
    samples = {key: [] for key in keys}
    total = warmup + rounds
    for round_index in range(total):
        for key in round_order(keys, round_index):
            measurement = jobs[key]()
            if round_index >= warmup:
                samples[key].append(measurement)
        if after_round is not None:
            after_round(round_index, total)
    return samples


def round_order(keys, round_index):
    """The order `alternate` runs `keys` in, in round `round_index`: the rows of a Williams
    design (E. J. Williams, "Experimental designs balanced for the estimation of residual
    effects of treatments", Australian Journal of Scientific Research A 2, 1949), in turn.
    Over a whole cycle (len(keys) rounds for an even number of keys, twice that for an odd
    one) every key runs first and last equally often and right after every other key
    equally often, so a cost one contender leaves to the next (caches, the allocator, a
    pause) is spread over all the others. (A rotation by one place keeps the cyclic order:
    each contender would always run right after the same one.) Two keys flip every round.

    Row r of the design for n keys: the base order 0, 1, n-1, 2, n-2, 3, ... with r added
    to every place (mod n); for odd n, rows n..2n-1 are rows 0..n-1 reversed."""
    keys = list(keys)
    n = len(keys)
    if n < 2:
        return keys
    base = [0]
    for step in range(1, n):  # 1, n-1, 2, n-2, ...: every difference between neighbours once
        base.append((step + 1) // 2 if step % 2 else n - step // 2)
    cycle = n if n % 2 == 0 else 2 * n
    row = round_index % cycle
    order = [keys[(place + row) % n] for place in base]
    return order[::-1] if row >= n else order


def seconds(function, *args, **kwargs):
    """How long function(*args, **kwargs) took, in seconds (wall clock)."""
    start = time.perf_counter()
    function(*args, **kwargs)
    return time.perf_counter() - start


def timing(jobs):
    """{key: a callable returning how long jobs[key]() took}: for `alternate`, when the
    measurement is the wall time of the call itself."""
    return {key: functools.partial(seconds, job) for key, job in jobs.items()}


def median_interval(values, confidence=0.9):
    """(low, high, coverage): an interval for the median of what `values` sample, from
    their order statistics alone (no assumption about their distribution): the j-th
    smallest and the j-th largest value, for the largest j whose coverage is at least
    `confidence`. Taking the rounds as independent draws (the alternation is there to make
    them so), each value lies below the true median with probability 1/2, so the interval
    misses it only when fewer than j of the n values lie on one side of it:
    coverage = 1 - 2 P(Binomial(n, 1/2) < j) (any nonparametric statistics text, e.g.
    Hollander, Wolfe and Chicken, "Nonparametric Statistical Methods", the sign test's
    confidence interval). With too few values for `confidence` it is the min-max with the
    coverage it has (3 values: 75%; 5 are the fewest for 90%)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median_interval of no values")

    def coverage(j):
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(j)) / 2.0 ** n

    j = 1
    while 2 * (j + 1) <= n + 1 and coverage(j + 1) >= confidence:
        j += 1
    return ordered[j - 1], ordered[n - j], coverage(j)


def verdict(ratios, target, confidence=0.9):
    """"met", "missed", "not settled" or "too few rounds": whether the paired `ratios`
    (higher is better) reach `target`, judged on their `median_interval`: met when its low
    end is at least `target`, missed when its high end is below it, not settled when it
    straddles `target` (the noise is larger than the gap), too few rounds when no interval
    of these values reaches `confidence` (fewer than 5 for 90%)."""
    return _verdict(*median_interval(ratios, confidence), target, confidence)


def _verdict(low, high, coverage, target, confidence):
    if coverage < confidence:
        return "too few rounds"
    if low >= target:
        return "met"
    return "missed" if high < target else "not settled"


def describe_ratios(ratios, target=1.0, confidence=0.9):
    """'median 0.91×, 0.86–0.97× with 97% confidence: missed (target 1.00×)': paired
    ratios as the benchmarks print them."""
    low, high, coverage = median_interval(ratios, confidence)
    return (f"median {statistics.median(ratios):.2f}×, {low:.2f}–{high:.2f}× with "
            f"{coverage:.0%} confidence: {_verdict(low, high, coverage, target, confidence)} "
            f"(target {target:.2f}×)")


def source_commit(directory=REPO_ROOT):
    """{"git_commit": HEAD of the git checkout `directory` is in (`git rev-parse HEAD`), or
    "unknown" outside git or without git; "git_tree": "clean", "dirty" (tracked files
    changed since that commit: the figures are not quite that commit's) or "unknown"}."""
    def git(*arguments):
        try:
            result = subprocess.run(["git", "-C", directory, *arguments], capture_output=True,
                                    text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return {"git_commit": "unknown", "git_tree": "unknown"}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit,
            "git_tree": "unknown" if status is None else "dirty" if status else "clean"}


def run_started(directory=REPO_ROOT):
    """What a script's --json names its run by, taken as the run starts (after its flags are
    checked): the commit of the checkout it runs from (`source_commit`) and the load average
    (1, 5, 15 minutes). Pass it to `run_finished` when the measurements are done."""
    return {**source_commit(directory), "load_average_start": list(os.getloadavg())}


def run_finished(started):
    """`started` (from `run_started`) with the load average at the end of the run: the
    fields every benchmark's --json carries, so that a figure quoted from it can name the
    commit measured and the load the machine was under."""
    return {**started, "load_average_end": list(os.getloadavg())}


def argument_parser(doc):
    """The argparse parser of a benchmark script, `--help` showing the first line of `doc`
    (its docstring): the recipes' conventions (`recipes.common.argparse_parser`: a mistake
    is one line and exit status 2, flags named in full, `--helpfull` as `--help`)."""
    from recipes.common import argparse_parser

    return argparse_parser.OneLineParser(description=doc.splitlines()[0])


def output_file_problem(flag, path):
    """One line (`<flag>=<path>: <what>; <what to do>`) if the file a script writes at the end
    (`--json`, `--output`) could not be written there, else None (also when no path was
    given): a directory, a directory that does not exist, or one this process cannot write
    in (`recipes.common.storage.local_directory_problem`, which makes and removes one).
    Every script checks its output paths with it before it measures, so that a run's
    results are never lost to its last write."""
    if not path:
        return None
    if os.path.isdir(path) or path.endswith(os.sep):
        return f"{flag}={path} names a directory; give the path of a file to write"
    from recipes.common import storage  # pylint: disable=import-outside-toplevel

    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"{flag}={path}: its directory does not exist; create it or choose another"
    problem = storage.local_directory_problem(directory)  # (made and removed there)
    if problem:
        return f"{flag}={path}: {problem}; choose a directory you can write"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{flag}={path}: the file is read-only; choose another path"
    return None


if __name__ == "__main__":  # run alone it would do nothing: say what to run instead
    print("error: benchmarks/alternation.py is a module of the benchmark scripts, used by "
          "optimizer_step.py, recipe_throughput.py and the other benchmark scripts; "
          "run one of those (--help lists its flags)", file=sys.stderr)
    sys.exit(2)
