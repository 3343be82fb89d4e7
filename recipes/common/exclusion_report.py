"""Which variables get weight decay and a trust ratio: the console summary and the table.

One summary for every recipe and every `optimizer.name`: lamb_tf's LAMB and LARS report
their own decisions (`exclusion_table()`); for adamw and momentum the same regex rule
(`re.search` in the variable path) gives the weight-decay column, and no variable has a
trust ratio.
"""

import os

import tensorflow as tf

from lamb_tf import exclusions

EXCLUSIONS_FILE = "exclusions.txt"


def has_trust_ratio(optimizer):
    """Whether `optimizer` (or the one a LossScaleOptimizer wraps) scales each variable's
    update by a trust ratio: lamb_tf's LAMB and LARS, which report their own decisions."""
    return callable(getattr(_unwrapped(optimizer), "exclusion_table", None))


def _unwrapped(optimizer):
    return getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's


def exclusion_rows(optimizer, variables, decay_patterns, weight_decay_rate):
    """One `lamb_tf.exclusions.ExclusionRow` per trainable variable (optimizer built)."""
    if has_trust_ratio(optimizer):
        return _unwrapped(optimizer).exclusion_table()
    rule = exclusions.Exclusions(decay_patterns, [".*"])  # ".*": nothing is layer-adapted
    paths_and_shapes = [(v.name.split(":")[0], tuple(v.shape)) for v in variables]
    return rule.table(paths_and_shapes, weight_decay_rate)


def summary(rows, layer_adaptation=True):
    """Two lines: variables and parameters excluded from weight decay / layer adaptation;
    without `layer_adaptation` (an optimizer with no trust ratio), the second says so."""
    total = sum(_size(row.shape) for row in rows)
    lines = []
    for label, chosen in (("weight decay", "decayed"), ("layer adaptation", "adapted")):
        if chosen == "adapted" and not layer_adaptation:
            lines.append("optimizer: no layer adaptation (no trust ratio in this optimizer)")
            continue
        excluded = [row for row in rows if not getattr(row, chosen)]
        parameters = sum(_size(row.shape) for row in excluded)
        examples = ", ".join(row.path for row in excluded[:3])
        lines.append(
            f"optimizer: {len(excluded)} of {len(rows)} variables ({parameters:,} of {total:,} "
            f"parameters) excluded from {label}, e.g. {examples or 'none'}"
        )
    return "\n".join(lines)


def write(model_dir, rows, layer_adaptation=True):
    """`model_dir/exclusions.txt`: the summary, a blank line, the full table."""
    with tf.io.gfile.GFile(os.path.join(model_dir, EXCLUSIONS_FILE), "w") as f:
        f.write(summary(rows, layer_adaptation) + "\n\n" + exclusions.format_table(rows) + "\n")


def _size(shape):
    size = 1
    for dimension in shape:
        size *= int(dimension)
    return size
