"""What the LAMB and LARS classes of both Keras flavours share beyond the maths.

`LayerwiseMixin` turns the variables' full paths into per-variable (decay, adapt) decisions
once, at build time, logs the exclusion report, and reads back the last trust ratios. The
flavour modules supply the paths and create the variables with their own base class.
"""


class LayerwiseMixin:
    """Per-variable exclusion decisions and trust-ratio read-out, for both Keras flavours.

    The class using it sets `self.weight_decay_rate` and `self._exclusions` (an
    `exclusions.Exclusions`) in `__init__`
    and calls `self._decide(paths_and_shapes)` in `build`.
    """

    def _decide(self, paths_and_shapes):
        """Store (decay, adapt) per variable index, decided once from the full path; log."""
        self._paths_and_shapes = list(paths_and_shapes)
        rows = self._exclusions.table(self._paths_and_shapes, self.weight_decay_rate)
        self._decisions = [(row.decayed, row.adapted) for row in rows]
        self._exclusions.log_report(self.name, self._paths_and_shapes)

    def trust_ratios(self):
        """{variable path: trust ratio of the last applied update} (0 before the first one).

        Costs one scalar assignment per variable and step, and a read only when called.
        """
        self._require_built()
        return {path: float(ratio.numpy())
                for (path, _), ratio in zip(self._paths_and_shapes, self._trust_ratio_variables)}

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

    def _layerwise_config(self):
        """The arguments shared by LAMB and LARS, for `get_config`."""
        return {"weight_decay_rate": self.weight_decay_rate, **self._exclusions.get_config()}
