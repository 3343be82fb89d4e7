"""Which variables get weight decay and layer adaptation: regex exclusions on full paths.

A pattern is a regular expression `re.search`-ed in the variable's full path, e.g.
`bert_encoder_v2/transformer/layer_0/output_layer_norm/gamma` (tf_keras: the variable name
without `:0`; Keras 3: `variable.path`), never only the short name (`gamma`), so patterns
that name a layer work in both flavours.

Convention of Model Garden's and TF Addons' LAMB/LARS, kept for drop-in compatibility:
`exclude_from_layer_adaptation=None` means "the same list as `exclude_from_weight_decay`".
An explicit empty list means "adapt every variable".
"""
import collections
import logging
import re

from lamb_tf import arguments

logger = logging.getLogger(__name__)

# Model Garden BERT names (BertEncoderV2 + BertPretrainerV2): `.../embeddings/layer_norm/gamma`,
# `.../self_attention_layer_norm/beta`, `.../output_layer_norm/gamma` and the masked-LM head's
# `transform/LayerNorm/gamma`; every `.../bias`. Source: Google BERT's LAMB/AdamW exclusions
# ["LayerNorm", "layer_norm", "bias"] (mlcommons language_model/tensorflow/bert/optimization.py).
BERT_EXCLUDE_PATTERNS = ("layer_norm|LayerNorm", "bias")

# Model Garden ResNet names: `.../batch_normalization_3/gamma`, the classifier head's `.../bias`.
# Source: MLPerf TF2 ResNet LARS `skip_list=['batch_normalization', 'bias', 'bn']`
# (Google's TF2 ResNet-50 submissions in the mlcommons training_results repositories).
RESNET_EXCLUDE_PATTERNS = ("batch_normalization", "bias")

ExclusionRow = collections.namedtuple("ExclusionRow", ["path", "shape", "decayed", "adapted"])


def validate_patterns(argument_name, patterns):
    """`patterns` as a tuple of compiled-checked strings, or None; clear error otherwise."""
    if patterns is None:
        return None
    if isinstance(patterns, (str, bytes)):
        raise TypeError(
            f"{argument_name} must be a list of regex patterns, got the string {patterns!r} "
            f"(a string would be read character by character). Use [{patterns!r}]."
        )
    try:
        patterns = tuple(patterns)
    except TypeError:
        raise TypeError(
            f"{argument_name} must be a list of regex patterns, got {patterns!r}."
        ) from None
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(
                f"{argument_name} must hold strings, got {pattern!r} ({type(pattern).__name__})."
            )
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(
                f"{argument_name} holds an invalid regular expression {pattern!r}: {error}."
            ) from None
    return patterns


class Exclusions:
    """The two exclusion lists of an optimizer and the decision for each variable path."""

    def __init__(self, exclude_from_weight_decay=None, exclude_from_layer_adaptation=None):
        self.exclude_from_weight_decay = validate_patterns(
            "exclude_from_weight_decay", exclude_from_weight_decay)
        self.exclude_from_layer_adaptation = validate_patterns(
            "exclude_from_layer_adaptation", exclude_from_layer_adaptation)

    def with_weight_decay_patterns(self, patterns):
        """A copy whose `exclude_from_weight_decay` list has `patterns` appended."""
        return Exclusions(list(self.weight_decay_patterns) + list(patterns),
                          self.exclude_from_layer_adaptation)

    @property
    def weight_decay_patterns(self):
        return self.exclude_from_weight_decay or ()

    @property
    def layer_adaptation_patterns(self):
        # None falls back to the weight-decay list (Model Garden / TF Addons convention)
        if self.exclude_from_layer_adaptation is None:
            return self.weight_decay_patterns
        return self.exclude_from_layer_adaptation

    def get_config(self):
        """The two arguments as given (None stays None, so the fallback survives a round trip)."""
        as_list = lambda patterns: None if patterns is None else list(patterns)  # noqa: E731
        return {
            "exclude_from_weight_decay": as_list(self.exclude_from_weight_decay),
            "exclude_from_layer_adaptation": as_list(self.exclude_from_layer_adaptation),
        }

    def decays(self, path):
        """Whether the variable at `path` is outside every weight-decay exclusion pattern."""
        return not any(re.search(p, path) for p in self.weight_decay_patterns)

    def adapts(self, path):
        """Whether the variable at `path` is outside every layer-adaptation exclusion pattern."""
        return not any(re.search(p, path) for p in self.layer_adaptation_patterns)

    def table(self, paths_and_shapes, weight_decay_rate):
        """One `ExclusionRow(path, shape, decayed, adapted)` per variable.

        `decayed` is what really happens: False for every variable when the rate is the
        number 0. A rate read at every step (a variable or a callable:
        `arguments.read_at_every_step`) decays every variable that no pattern excludes, by
        its value at each step (0 now, maybe not later), and never an excluded one.
        """
        # (a variable's value now is no decision: it may change after the build)
        decaying = arguments.read_at_every_step(weight_decay_rate) or weight_decay_rate > 0
        return [
            ExclusionRow(path, tuple(shape), decaying and self.decays(path), self.adapts(path))
            for path, shape in paths_and_shapes
        ]

    def log_report(self, optimizer_name, paths_and_shapes):
        """Log one line per pattern (variables and parameters matched); warn when none match."""
        lists = [("exclude_from_weight_decay", self.weight_decay_patterns)]
        if self.exclude_from_layer_adaptation is None:
            if self.weight_decay_patterns:
                logger.info("%s: exclude_from_layer_adaptation=None, so it uses the "
                            "exclude_from_weight_decay patterns.", optimizer_name)
        else:
            lists.append(("exclude_from_layer_adaptation", self.exclude_from_layer_adaptation))
        for argument_name, patterns in lists:
            for pattern in patterns:
                matched = [shape for path, shape in paths_and_shapes if re.search(pattern, path)]
                parameters = sum(_size(shape) for shape in matched)
                if not pattern:  # "bias,".split(",") holds one
                    logger.warning("%s: %s holds an empty pattern, which matches every "
                                   "variable (%d), so it excludes them all.",
                                   optimizer_name, argument_name, len(matched))
                elif matched:
                    logger.info("%s: %s pattern %r matches %d variables (%d parameters).",
                                optimizer_name, argument_name, pattern, len(matched), parameters)
                else:
                    logger.warning(
                        "%s: %s pattern %r matches NO variable, so it excludes nothing. "
                        "Variable paths look like %r; see optimizer.exclusion_table().%s",
                        optimizer_name, argument_name, pattern,
                        paths_and_shapes[0][0] if paths_and_shapes else "(no variables)",
                        _model_name_hint(pattern, [path for path, _ in paths_and_shapes]))


def path_pattern(path, optional_leading_parts=False):
    """The pattern of `exclude_from_weight_decay(var_list=...)` for a variable at `path`: its
    literal path, `^d1/bias$`. With `optional_leading_parts` (Keras 3's paths), a prefix of
    the parts before the last two (layer and variable) may be absent: `sequential/d1/bias`
    gives `^(?:sequential/)?d1/bias$` and `outer/inner/d1/bias` gives
    `^(?:(?:outer/)?inner/)?d1/bias$`, since Keras 3 puts the names of the models that build
    a variable in front of its path and leaves them out, outermost first, once a model is
    loaded from a `.keras` file or built from its config (`d1/bias`, or `inner/d1/bias` for
    a subclassed model's). A middle part cannot go while one before it stays (no
    `outer/d1/bias`). The path cannot tell a model's name from a custom layer's, so a
    custom layer's is optional too: `block/d1/kernel` matches a top-level `d1/kernel`. The
    optimizer's build refuses a pattern that would match a variable not given in var_list."""
    parts = [re.escape(part) for part in path.split("/")]
    leading = parts[:-2] if optional_leading_parts else []
    pattern = ""
    for part in leading:  # each group holds the ones before it: only a prefix may go
        pattern = f"(?:{pattern}{part}/)?"
    return "^" + pattern + "/".join(parts[len(leading):]) + "$"


def _model_name_hint(pattern, paths):
    """A sentence for a pattern that matches once its first path part is dropped: Keras 3
    names a Sequential model's variables `<model>/<layer>/...` when the model builds them
    itself (at construction after an `Input`, or at its first call), and `<layer>/...` once
    it is loaded or built from its config, so a pattern a user writes with the model's name
    stops matching (a `var_list` exclusion's does not: `path_pattern`)."""
    anchor, rest = ("^", pattern[1:]) if pattern.startswith("^") else ("", pattern)
    first, slash, shorter = rest.partition("/")
    if not slash or not shorter or not re.fullmatch(r"[\w.-]+", first):
        return ""
    try:
        if not any(re.search(anchor + shorter, path) for path in paths):
            return ""
    except re.error:  # the rest alone is no regex (a group opened in the first part)
        return ""
    return (f" Without its first part, {anchor + shorter!r} would match: Keras 3 leaves a "
            "Sequential model's name out of its variables' paths once the model is loaded or "
            "built from its config; write patterns without it.")


def format_table(rows):
    """The rows of `Exclusions.table` as aligned text, for logs and the docs."""
    width = max([len("variable")] + [len(row.path) for row in rows])
    lines = [f"{'variable':<{width}}  {'shape':<16} decayed  adapted"]
    for row in rows:
        lines.append(f"{row.path:<{width}}  {str(row.shape):<16} {str(row.decayed):<8} {row.adapted}")
    return "\n".join(lines)


def _size(shape):
    size = 1
    for dim in shape:
        size *= int(dim)
    return size
