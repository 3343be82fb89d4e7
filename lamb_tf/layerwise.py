"""What the LAMB and LARS classes of both Keras flavours share beyond the maths.

`LayerwiseMixin` checks the arguments LAMB and LARS share (learning rate, weight decay
rate, the two exclusion lists, the refused Keras keywords), turns the variables' full paths
into per-variable (decay, adapt) decisions once, at build time, logs the exclusion report,
and reads back the last trust ratios. The flavour modules supply the variable paths, the
flavour's schedule and variable classes, and create the variables with their own base
class. The optimizer-specific arguments live in `lamb_tf.hyperparameters`.
"""
import re

import tensorflow as tf

from lamb_tf import arguments
from lamb_tf import exclusions
from lamb_tf import hyperparameters
from lamb_tf import update_rules


def name_without_suffix(variable):
    """A tf.Variable's name without the `:0` suffix (tf_keras' full path)."""
    return re.sub(r":\d+$", "", variable.name)


def dense_gradient_for(gradient, variable, variable_path):
    """`gradient` dense (`update_rules.dense_gradient`) in the variable's dtype, or a
    ValueError naming the variable (`variable_path(variable)`, called only then) and both
    shapes when they cannot match (otherwise the error would surface inside the update's
    ops, or its XLA trace, naming neither)."""
    gradient = tf.convert_to_tensor(update_rules.dense_gradient(gradient, variable.shape))
    if not gradient.shape.is_compatible_with(variable.shape):
        raise ValueError(f"the gradient for {variable_path(variable)} has shape "
                         f"{gradient.shape}, not the variable's shape {variable.shape}: is it "
                         "paired with the right variable in apply_gradients?")
    return tf.cast(gradient, variable.dtype)


class LayerwiseMixin:
    """Shared arguments, per-variable exclusion decisions and trust-ratio read-out.

    The flavour class sets `_SCHEDULE_CLASS` and `_VARIABLE_CLASSES` (the learning-rate
    forms its base class takes) and `_KERAS3_ONLY_KEYWORDS`, defines
    `_variable_path(variable)`, calls `_check_layerwise_arguments` before its base class'
    `__init__`, `_set_checked` after it, and `_decide(paths_and_shapes, var_list)` in
    `build`.
    """

    _SCHEDULE_CLASS = None
    _VARIABLE_CLASSES = ()
    _KERAS3_ONLY_KEYWORDS = {}  # tf_keras: {Keras 3 keyword its base refuses: what to do}
    _BASE_KEYWORDS = ()  # the keywords the flavour's base class takes
    _UNKNOWN_KEYWORD_ERROR = TypeError  # what the flavour's base class raises for another

    def _check_layerwise_arguments(self, name, learning_rate, weight_decay_rate,
                                   exclude_from_weight_decay, exclude_from_layer_adaptation,
                                   keras_kwargs):
        """(learning_rate, keras_kwargs, checked attributes) after every shared check."""
        if not isinstance(name, str):  # (tf_keras' base takes any: its messages use it)
            raise TypeError(f"name must be a string, got {name!r}")
        for keyword, instead in self._KERAS3_ONLY_KEYWORDS.items():
            if keyword in keras_kwargs:  # (checked, then refused by the base class, before)
                raise TypeError(f"{name} got {keyword}=: a keyword of Keras 3's optimizers, "
                                f"which tf_keras' do not take; {instead}")
        keras_kwargs = arguments.refuse_keywords(name, dict(keras_kwargs))
        arguments.refuse_unknown_keywords(name, keras_kwargs, arguments.keyword_names(type(self)),
                                          self._BASE_KEYWORDS, self._UNKNOWN_KEYWORD_ERROR)
        keras_kwargs = arguments.base_keywords(keras_kwargs)
        learning_rate = arguments.learning_rate(learning_rate, self._SCHEDULE_CLASS,
                                                self._VARIABLE_CLASSES)
        checked = {
            # a number, or a variable or callable read at every step (`hyperparameters.read_now`)
            "weight_decay_rate": arguments.non_negative_read_at_every_step(
                "weight_decay_rate", weight_decay_rate),
            # validated before the base class creates any variable
            "_exclusions": exclusions.Exclusions(exclude_from_weight_decay,
                                                 exclude_from_layer_adaptation),
        }
        return learning_rate, keras_kwargs, checked

    @staticmethod
    def _dense_gradients(grads, variables):
        """`grads` with every `tf.IndexedSlices` made dense (`update_rules.dense_gradient`:
        a repeated row's copies summed), for the flavours to call before their base class
        clips (`clipvalue`, `clipnorm`, `global_clipnorm`): clipped as slices, each copy of
        a repeated row would be clipped apart and the norms taken over unsummed rows. Given
        as they are when the two lists differ in length (the base class then says why)."""
        grads = list(grads)
        variables = list(variables)
        if len(grads) != len(variables):
            return grads
        return [update_rules.dense_gradient(g, v.shape) for g, v in zip(grads, variables)]

    def _set_checked(self, checked):
        for attribute, value in checked.items():
            setattr(self, attribute, value)

    def __setattr__(self, name, value):
        # a hyperparameter set after construction: checked as the constructor checks it,
        # and refused once built (the per-variable decisions and a traced step hold it)
        checks = {"weight_decay_rate": arguments.non_negative_read_at_every_step,
                  **getattr(self, "_OWN_ARGUMENTS", {})}
        if name in checks:
            if hasattr(self, "_paths_and_shapes"):
                raise AttributeError(
                    f"{self.name}.{name} cannot change once the optimizer is built: its "
                    f"per-variable decisions and any traced step use it; give {name}= to "
                    "the constructor of a new optimizer")
            value = checks[name](name, value)
            if hasattr(value, "assign"):  # a variable hyperparameter (λ, LAMB's betas, ...)
                # kept out of Keras 3's optimizer variables (a `.keras` file's list must be
                # that of the optimizer `from_config` rebuilds, with a number), but in its
                # checkpoints, as the peers' `_set_hyper` tracks it: a restore puts it back
                object.__setattr__(self, name, value)
                self._track_trackable(value, name=f"{name}_variable", overwrite=True)
                return
        super().__setattr__(name, value)

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Keras' method, here the same as extending the constructor's list.

        `var_names` are regexes searched in each variable's full path (Keras searches the
        short name); each variable of `var_list` adds a pattern matching its literal path
        (`exclusions.path_pattern`). In Keras 3 a prefix of the parts of that path before the
        layer's name may be absent: Keras 3 puts a model's name in front of the paths of the
        variables it builds (`sequential/d1/bias`) and leaves it out once the model is loaded
        from a `.keras` file or built from its config (`d1/bias`), and the exclusion has to
        hold in the training continued from there. They join `exclude_from_weight_decay`,
        so `get_config` keeps them, the exclusion report and `exclusion_table()` show them,
        and with `exclude_from_layer_adaptation=None` they are not adapted either. Call it
        before `build`, as Keras requires. A variable of `var_list` whose pattern matches
        another variable of the ones built, one not given in `var_list` itself (two tf_keras
        layers of one name share a path), is refused at `build`: the exclusion, by path,
        would take that one too.
        """
        if hasattr(self, "_paths_and_shapes"):
            raise ValueError(f"{self.name}.exclude_from_weight_decay() must be called before the "
                             "optimizer is built; or pass exclude_from_weight_decay=[...] to "
                             "the constructor.")
        patterns = list(exclusions.validate_patterns("var_names", var_names) or ())
        excluded = [(self._variable_path(v), self._var_list_pattern(v), id(v))
                    for v in var_list or ()]
        self._exclusions = self._exclusions.with_weight_decay_patterns(
            patterns + [pattern for _, pattern, _ in excluded])
        self._excluded_variables = getattr(self, "_excluded_variables", []) + excluded

    def _var_list_pattern(self, variable):
        """The pattern `exclude_from_weight_decay(var_list=...)` adds for `variable`: its
        literal path (the Keras 3 flavour lets the parts before the layer go)."""
        return exclusions.path_pattern(self._variable_path(variable))

    def _decide(self, paths_and_shapes, var_list=()):
        """Store (decay, adapt) per variable index, decided once from the full path; log.
        A ValueError for a variable given to `exclude_from_weight_decay(var_list=...)` whose
        pattern matches another of `var_list` too, one not given there itself: the
        exclusion, by path, would take it as well (taking another given one does no harm)."""
        self._paths_and_shapes = list(paths_and_shapes)
        built = {id(variable) for variable in var_list}
        excluded_variables = getattr(self, "_excluded_variables", ())
        given = {identity for _, _, identity in excluded_variables}
        for path, pattern, identity in excluded_variables:
            others = [other for (other, _), variable in zip(self._paths_and_shapes, var_list)
                      if id(variable) not in given and re.search(pattern, other)]
            if identity in built and others:
                raise ValueError(self._shared_exclusion_message(path, pattern, others))
        rows = self._exclusions.table(self._paths_and_shapes, self.weight_decay_rate)
        self._decisions = [(row.decayed, row.adapted) for row in rows]
        self._exclusions.log_report(self.name, self._paths_and_shapes)

    def _shared_exclusion_message(self, path, pattern, others):
        """Why a `var_list` exclusion of the variable at `path` is refused: `pattern` matches
        the `others` (paths of variables not given in var_list) too."""
        start = f"{self.name}.exclude_from_weight_decay(var_list=...) names the variable {path!r}"
        if path in others:
            sharing = [other for other, _ in self._paths_and_shapes].count(path)
            return (f"{start}, and {sharing} variables of the model have that "
                    "path: an exclusion is by path and would take them all; give the layers "
                    "distinct names (tf_keras names a variable after its layer only, not the "
                    "model holding it)")
        return (f"{start}, whose pattern {pattern!r} (the parts before the layer may be absent, "
                "outermost first: Keras 3 leaves a model's name out of its variables' paths "
                f"once the model is loaded or built from its config) matches {others[0]!r} too "
                f"({len(others)} variables not in var_list in all): an exclusion is by path and "
                "would take them all; give the layers distinct names, or give var_names=[...] "
                "a pattern of your own")

    def trust_ratios(self):
        """{variable path: trust ratio of the last applied update} (0 before the first one).

        Costs one scalar assignment per variable and step. A call reads them back stacked,
        in one device-to-host copy per dtype instead of one per variable (each copy waits
        for the device: a round trip to an accelerator).
        """
        self._require_built()
        indices_by_dtype = {}
        for index, ratio in enumerate(self._trust_ratio_variables):
            indices_by_dtype.setdefault(ratio.dtype, []).append(index)
        values = [0.0] * len(self._trust_ratio_variables)
        for indices in indices_by_dtype.values():
            stacked = tf.stack([tf.convert_to_tensor(self._trust_ratio_variables[index])
                                for index in indices])
            for index, value in zip(indices, stacked.numpy()):
                values[index] = float(value)
        return {path: value for (path, _), value in zip(self._paths_and_shapes, values)}

    def exclusion_table(self):
        """One `ExclusionRow(path, shape, decayed, adapted)` per variable (after `build`).

        `exclusions.format_table(optimizer.exclusion_table())` prints it.
        """
        self._require_built()
        return self._exclusions.table(self._paths_and_shapes, self.weight_decay_rate)

    def _require_built(self):
        if not hasattr(self, "_paths_and_shapes"):
            raise ValueError(f"{self.name} is not built yet: call "
                             "optimizer.build(model.trainable_variables) first.")

    def get_config(self):
        config = super().get_config()
        # the base's decoupled weight decay is refused; ours is weight_decay_rate
        config.pop("weight_decay", None)
        config["weight_decay_rate"] = hyperparameters.serialized(self.weight_decay_rate)
        config.update(self._exclusions.get_config())
        return config
