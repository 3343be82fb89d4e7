"""Which variables get weight decay and a trust ratio: the console summary and the table.

One summary for every recipe and every `optimizer.name`: lamb_tf's LAMB and LARS report
their own decisions (`exclusion_table()`); for adamw and momentum the same rule
(`lamb_tf.exclusions.Exclusions`, on the path lamb_tf's tf_keras optimizers search) gives the
weight-decay column, and no variable has a trust ratio.
"""

import os

import tensorflow as tf

from lamb_tf import exclusions
from lamb_tf import layerwise
from recipes.common.errors import UserError

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
    # the path as lamb_tf's tf_keras optimizers search it (only a trailing `:N` dropped)
    paths_and_shapes = [(layerwise.name_without_suffix(v), tuple(v.shape)) for v in variables]
    return rule.table(paths_and_shapes, weight_decay_rate)


def check_configured_patterns(config, rows, layer_adaptation=True, refuse=True):
    """The console lines for `config`'s (the optimizer section's) own pattern lists: a
    pattern that matches no variable path in `rows` gets a line; a list of which no pattern
    matches is, with `refuse` (a run that trains), a UserError: it would exclude nothing (a
    misspelt name, such as BatchNorm for Keras' batch_normalization); else one more line (an
    evaluation or export of a run trained so). A null list (the recipe's default) is not
    checked: defaults are written for several naming conventions at once. A pattern matches
    a path as in the optimizers (`_matches`)."""
    paths = [row.path for row in rows]
    lists = [("exclude_from_weight_decay", config.exclude_from_weight_decay)]
    if layer_adaptation:
        lists.append(("exclude_from_layer_adaptation", config.exclude_from_layer_adaptation))
    lines = []
    for key, patterns in lists:
        unmatched = [p for p in patterns or () if not any(_matches(p, path) for path in paths)]
        if patterns and len(unmatched) == len(patterns):
            message = (f"optimizer.{key}={list(patterns)} matches no variable of the model, so "
                       f"it would exclude nothing (searched in paths such as "
                       f"{_some_paths(paths)})")
            if refuse:
                raise UserError(f"{message}; fix the patterns, or give [] to exclude nothing")
            lines.append(f"optimizer: {message}")
            continue
        lines += [f"optimizer: {key} pattern {pattern!r} matches no variable (the list's other "
                  "patterns do)" for pattern in unmatched]
    return lines


def _matches(pattern, path):
    """Whether `pattern` excludes the variable at `path`, decided by the optimizers' own rule
    (`lamb_tf.exclusions.Exclusions`), so a pattern means the same here as in them."""
    return not exclusions.Exclusions([pattern]).decays(path)


def _some_paths(paths):
    """Up to three paths of different layers, for a message."""
    chosen = {}
    for path in paths:
        chosen.setdefault(path.rsplit("/", 1)[0].rstrip("_0123456789"), path)
    return ", ".join(repr(path) for path in list(chosen.values())[:3]) or "(none)"

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
