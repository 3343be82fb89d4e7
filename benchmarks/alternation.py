"""Side-by-side measurement on a shared, drifting machine: every contender once per round.

Absolute times here drift by 2-3x between runs while ratios measured side by side hold, so
every benchmark times its contenders in rounds: each contender once per round, the order
rotated by one place every round (for two contenders: flipped), so that drift and "who ran
just before" hit every contender alike. The first rounds (tracing, compilation, caches) are
warm-up and are not kept.
"""
import functools
import time


def alternate(jobs, rounds, warmup=1, after_round=None):
    """{key: [what jobs[key]() returned, one per timed round]}.

    jobs: {key: a callable taking no argument, returning its measurement (seconds, or
    whatever the benchmark measures)}. Runs warmup + rounds rounds; after_round(index, total)
    is called after each (for progress lines)."""
    keys = list(jobs)
    samples = {key: [] for key in keys}
    total = warmup + rounds
    for round_index in range(total):
        shift = round_index % len(keys)
        for key in keys[shift:] + keys[:shift]:
            measurement = jobs[key]()
            if round_index >= warmup:
                samples[key].append(measurement)
        if after_round is not None:
            after_round(round_index, total)
    return samples


def seconds(function, *args, **kwargs):
    """How long function(*args, **kwargs) took, in seconds (wall clock)."""
    start = time.perf_counter()
    function(*args, **kwargs)
    return time.perf_counter() - start


def timing(jobs):
    """{key: a callable returning how long jobs[key]() took}: for `alternate`, when the
    measurement is the wall time of the call itself."""
    return {key: functools.partial(seconds, job) for key, job in jobs.items()}
