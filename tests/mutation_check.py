"""Do the tests catch the bugs they are named after? Plant each one and see.

Each mutation below is one deliberate, realistic one-line bug: `(file, exact old line, new
line)`. For each, this script copies the repository to a temporary directory, replaces the
line there (the old line must occur exactly once, or the script stops: the code changed
under it and the list needs updating), runs the test files listed for it with PYTHONPATH
pointing at the copy, and reports which tests fail. A mutation is caught when at least one
test fails and, for each pattern in `caught_by`, some failing test id matches it (that is
how "caught on both Keras flavours" is required). Before any mutation, the same test files
run on the unmodified copy and must all pass, so a failure is the mutation's doing.

    .venv/bin/python tests/mutation_check.py                  # every mutation (slow: ~30 min)
    .venv/bin/python tests/mutation_check.py --only accumulation_mean_divided_by_k_minus_1
    .venv/bin/python tests/mutation_check.py --list           # names, files, no test run

Exit status 0 when every mutation is caught, 1 otherwise (2 for a usage error or a
mutation that no longer applies). Not part of `pytest -q tests` (too slow); the fast check
that every mutation still applies to the current source is tests/test_mutation_check.py.
See docs/testing.md.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPIED = ("lamb_tf", "tests", "recipes", "configs", "benchmarks", "docs", "README.md", "setup.py")

Mutation = collections.namedtuple("Mutation", ["name", "bug", "path", "old", "new", "tests", "caught_by"])

BOTH = ("tf_keras", "keras3")

MUTATIONS = [
    # ---- the cross-replica step -------------------------------------------------------------
    Mutation(
        "keras3_all_reduce_averages", "Keras 3: the cross-replica step averages gradients instead "
        "of summing them (the gradient halves on 2 replicas)",
        "lamb_tf/keras3_optimizers.py",
        "        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)",
        "        grads_and_vars = [(g / tf.distribute.get_strategy().num_replicas_in_sync, v) "
        "for g, v in super()._all_reduce_sum_gradients(grads_and_vars)]",
        ["tests/test_distribution_and_xla.py"],
        [r"test_two_replicas_equal_one_device\[.*keras3"]),
    Mutation(
        "keras3_no_all_reduce", "Keras 3: the all-reduce sum is dropped (each replica applies "
        "its own gradient)",
        "lamb_tf/keras3_optimizers.py",
        "        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)",
        "        grads_and_vars = list(grads_and_vars)",
        ["tests/test_distribution_and_xla.py"],
        [r"test_two_replicas_equal_one_device\[.*keras3"]),
    Mutation(
        "tf_keras_accumulation_all_reduce_averages", "tf_keras GradientAccumulationModel: the "
        "cross-replica step averages gradients instead of summing them",
        "lamb_tf/accumulation.py",
        "            grads_and_vars = inner_optimizer.aggregate_gradients(grads_and_vars)",
        "            grads_and_vars = [(g / self.distribute_strategy.num_replicas_in_sync, v) "
        "for g, v in inner_optimizer.aggregate_gradients(grads_and_vars)]",
        ["tests/test_accumulation.py::test_two_replicas_with_accumulation_equal_one_device"],
        [r"test_two_replicas_with_accumulation_equal_one_device\[lamb\]",
         r"test_two_replicas_with_accumulation_equal_one_device\[lars\]"]),
    Mutation(
        "tf_keras_accumulation_no_all_reduce", "tf_keras GradientAccumulationModel: the "
        "all-reduce sum is dropped",
        "lamb_tf/accumulation.py",
        "            grads_and_vars = inner_optimizer.aggregate_gradients(grads_and_vars)",
        "            grads_and_vars = list(grads_and_vars)",
        ["tests/test_accumulation.py::test_two_replicas_with_accumulation_equal_one_device"],
        [r"test_two_replicas_with_accumulation_equal_one_device"]),
    # ---- gradient accumulation --------------------------------------------------------------
    Mutation(
        "accumulation_mean_divided_by_k_minus_1", "the accumulated gradient is divided by k-1 "
        "instead of k (both flavours use accumulate_gradients)",
        "lamb_tf/accumulation.py",
        "        share = loss / accumulation_steps if accumulation_steps > 1 else loss",
        "        share = loss / (accumulation_steps - 1) if accumulation_steps > 1 else loss",
        ["tests/test_accumulation.py::test_k_micro_batches_equal_one_batch",
         "tests/test_accumulation.py::test_jit_compiled_accumulation_equals_one_batch",
         "tests/test_accumulation.py::test_keras3_custom_loop_equals_one_batch"],
        [r"test_k_micro_batches_equal_one_batch\[lamb\]",
         r"test_jit_compiled_accumulation_equals_one_batch\[lamb\]",
         r"test_keras3_custom_loop_equals_one_batch\[lamb\]"]),
    # ---- the update rules (shared by both flavours) -----------------------------------------
    Mutation(
        "lars_weight_decay_removed", "LARS: weight decay is never added to the gradient",
        "lamb_tf/update_rules.py",
        "    g = g + weight_decay_rate * x if decay else g",
        "    g = g",
        ["tests/test_matches_numpy_reference.py"],
        [rf"test_lars_matches_reference\[{case}-{flavour}\]"
         for case in ("classic", "classic_nesterov_exclusions", "popular",
                      "popular_nesterov_separate_exclusions") for flavour in BOTH]),
    Mutation(
        "bias_correction_off", "LAMB: the first moment is never bias-corrected",
        "lamb_tf/update_rules.py",
        "    m_hat = m / _one_minus_power(beta_1, t, dtype) if bias_correction else m",
        "    m_hat = m",
        ["tests/test_matches_numpy_reference.py"],
        [rf"test_lamb_matches_reference\[.*{flavour}\]" for flavour in BOTH]),
    Mutation(
        "lamb_decay_outside_trust_ratio", "LAMB: the trust ratio is taken from ‖r‖ without λx "
        "(weight decay outside the ratio, as keras.optimizers.Lamb does)",
        "lamb_tf/update_rules.py",
        "    ratio = (trust_ratio(l2_norm(x), l2_norm(u), phi_bounds=phi_bounds) if adapt",
        "    ratio = (trust_ratio(l2_norm(x), l2_norm(r), phi_bounds=phi_bounds) if adapt",
        ["tests/test_matches_numpy_reference.py", "tests/test_keras_lamb_difference.py"],
        [rf"test_lamb_matches_reference\[.*{flavour}\]" for flavour in BOTH]),
    Mutation(
        "layer_norm_without_square_root", "the layer norm returns Σx² instead of √(Σx²)",
        "lamb_tf/update_rules.py",
        "    return tf.sqrt(tf.reduce_sum(tf.linalg.matvec(squares, tf.ones([columns], wide))))",
        "    return tf.reduce_sum(tf.linalg.matvec(squares, tf.ones([columns], wide)))",
        ["tests/test_update_rules.py", "tests/test_matches_numpy_reference.py"],
        [r"test_l2_norm_is_the_float64_norm_of_the_whole_layer",
         *(rf"test_lamb_matches_reference\[.*{flavour}\]" for flavour in BOTH)]),
    Mutation(
        "sparse_repeated_rows_overwrite", "sparse gradients: a repeated row overwrites instead of "
        "adding up (Keras 3 only: tf_keras' base class sums repeated rows before update_step)",
        "lamb_tf/update_rules.py",
        "        return tf.math.unsorted_segment_sum(g.values, g.indices, num_segments=shape[0])",
        "        return tf.tensor_scatter_nd_update(tf.zeros(shape, g.values.dtype), "
        "g.indices[:, None], g.values)",
        ["tests/test_sparse_gradients.py"],
        [r"test_lamb_sparse_equals_dense_reference\[keras3\]",
         r"test_lars_sparse_equals_dense_reference\[keras3\]"]),
    Mutation(
        "sparse_rows_placed_by_position", "sparse gradients: rows land at positions 0..n-1 "
        "instead of at their indices",
        "lamb_tf/update_rules.py",
        "        return tf.math.unsorted_segment_sum(g.values, g.indices, num_segments=shape[0])",
        "        return tf.math.unsorted_segment_sum(g.values, tf.range(tf.shape(g.indices)[0]), "
        "num_segments=shape[0])",
        ["tests/test_sparse_gradients.py"],
        [rf"test_lamb_sparse_equals_dense_reference\[{flavour}\]" for flavour in BOTH]
        + [rf"test_lars_sparse_equals_dense_reference\[{flavour}\]" for flavour in BOTH]),
    # ---- the step counter and bias correction in the adapters ------------------------------
    Mutation(
        "tf_keras_bias_correction_flag_ignored", "tf_keras LAMB: bias_correction=False is ignored",
        "lamb_tf/tf_keras_optimizers.py",
        "            decay, adapt, self.bias_correction, self.phi_bounds)",
        "            decay, adapt, True, self.phi_bounds)",
        ["tests/test_matches_numpy_reference.py"],
        [r"test_lamb_matches_reference\[no_bias_correction_phi_bounds-tf_keras\]"]),
    Mutation(
        "keras3_bias_correction_flag_ignored", "Keras 3 LAMB: bias_correction=False is ignored",
        "lamb_tf/keras3_optimizers.py",
        "            decay, adapt, self.bias_correction, self.phi_bounds)",
        "            decay, adapt, True, self.phi_bounds)",
        ["tests/test_matches_numpy_reference.py"],
        [r"test_lamb_matches_reference\[no_bias_correction_phi_bounds-keras3\]"]),
    Mutation(
        "tf_keras_step_counter_never_advances", "tf_keras: the applied-updates counter (LAMB's t) "
        "never advances",
        "lamb_tf/tf_keras_optimizers.py",
        "        self._applied_updates.assign_add(1)",
        "        pass",
        ["tests/test_matches_numpy_reference.py"],
        [r"test_lamb_matches_reference\[.*tf_keras\]"]),
    Mutation(
        "keras3_step_counter_ignored", "Keras 3 LAMB: t is always 1 (the step counter is ignored)",
        "lamb_tf/keras3_optimizers.py",
        "            self.applied_updates + 1, learning_rate,",
        "            1, learning_rate,",
        ["tests/test_matches_numpy_reference.py"],
        [r"test_lamb_matches_reference\[.*keras3\]"]),
    Mutation(
        "tf_keras_step_counter_not_saved", "tf_keras: the step counter is a plain variable outside "
        "the optimizer's variables, so it is 0 again after loading a .keras file",
        "lamb_tf/tf_keras_optimizers.py",
        '        self._applied_updates = self.add_variable(shape=[], dtype=tf.int64, name="applied_updates")',
        '        self._applied_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="applied_updates")',
        ["tests/test_optimizer_serialization.py::test_keras_file_save_load_continues_identically"],
        [r"test_keras_file_save_load_continues_identically\[LAMB_bias_correction_schedule-tf_keras\]"]),
    # ---- slot restore ----------------------------------------------------------------------
    Mutation(
        "tf_keras_v_slot_not_saved", "tf_keras LAMB: the v slots are plain variables outside the "
        "optimizer's variables, so they are zero again after loading a .keras file",
        "lamb_tf/tf_keras_optimizers.py",
        '        self._v = [self.add_variable_from_reference(v, "v") for v in var_list]',
        "        self._v = [tf.Variable(tf.zeros_like(v), trainable=False) for v in var_list]",
        ["tests/test_optimizer_serialization.py::test_keras_file_save_load_continues_identically"],
        [r"test_keras_file_save_load_continues_identically\[LAMB-tf_keras\]",
         r"test_keras_file_save_load_continues_identically\[LAMB_bias_correction_schedule-tf_keras\]"]),
    Mutation(
        "tf_keras_momentum_slot_not_saved", "tf_keras LARS: the momentum slots are plain variables "
        "outside the optimizer's variables, so they are zero again after loading a .keras file",
        "lamb_tf/tf_keras_optimizers.py",
        '        self._velocities = [self.add_variable_from_reference(v, "momentum") for v in var_list]',
        "        self._velocities = [tf.Variable(tf.zeros_like(v), trainable=False) for v in var_list]",
        ["tests/test_optimizer_serialization.py::test_keras_file_save_load_continues_identically"],
        [r"test_keras_file_save_load_continues_identically\[LARS-tf_keras\]"]),
    Mutation(
        "tf_keras_build_not_idempotent", "tf_keras: build() creates fresh (zero) slots every time "
        "it is called, e.g. after a restore",
        "lamb_tf/tf_keras_optimizers.py",
        '        if getattr(self, "_built", False):',
        "        if False:",
        ["tests/test_optimizer_serialization.py::test_checkpoint_restore_continues_identically"],
        [r"test_checkpoint_restore_continues_identically\[.*tf_keras\]"]),
    # ---- exclusions -------------------------------------------------------------------------
    Mutation(
        "exclusion_matches_leaf_name_only", "weight-decay exclusions matched on the variable's "
        "leaf name instead of its full path",
        "lamb_tf/exclusions.py",
        "        return not any(re.search(p, path) for p in self.weight_decay_patterns)",
        '        return not any(re.search(p, path.split("/")[-1]) for p in self.weight_decay_patterns)',
        ["tests/test_matches_numpy_reference.py", "tests/test_exclusions.py"],
        [rf"test_lamb_matches_reference\[decay_fallback_exclusions-{flavour}\]" for flavour in BOTH]),
    Mutation(
        "exclusion_anchored_match", "layer-adaptation exclusions use re.match (anchored at the "
        "start of the path) instead of re.search",
        "lamb_tf/exclusions.py",
        "        return not any(re.search(p, path) for p in self.layer_adaptation_patterns)",
        "        return not any(re.match(p, path) for p in self.layer_adaptation_patterns)",
        ["tests/test_matches_numpy_reference.py", "tests/test_exclusions.py"],
        [rf"test_lamb_matches_reference\[separate_exclusions-{flavour}\]" for flavour in BOTH]),
    # ---- Keras 3 clipping order ------------------------------------------------------------
    Mutation(
        "keras3_clips_per_replica", "Keras 3: gradients are clipped in each replica before the "
        "all-reduce (the base class' order) as well as after it",
        "lamb_tf/keras3_optimizers.py",
        "            return grads",
        "            return super()._clip_gradients(grads)",
        ["tests/test_distribution_and_xla.py"],
        [r"test_two_replicas_equal_one_device\[.*global_clipnorm.*keras3"]),
    Mutation(
        "keras3_no_clip_after_all_reduce", "Keras 3: the all-reduced gradient is never clipped",
        "lamb_tf/keras3_optimizers.py",
        "        grads = super()._clip_gradients([g for g, _ in grads_and_vars])",
        "        grads = [g for g, _ in grads_and_vars]",
        ["tests/test_distribution_and_xla.py"],
        # (2 replicas == 1 device cannot see it: neither run clips)
        [r"test_global_clipnorm_clips_the_summed_gradient\[keras3\]"]),
    # ---- the recipes (the finite check before a save, the masked-LM metric), a benchmark helper
    Mutation(
        "finite_check_names_the_next_variable", "the finite check before a save names the "
        "variable after the one holding a NaN or Inf (its names and flags out of step)",
        "recipes/common/callbacks.py",
        "    return next((variable.name for variable, ok in zip(floating, finite) if not ok), None)",
        "    return next((variable.name for variable, ok in zip(floating[1:], finite) if not ok), "
        "None)",
        ["tests/test_non_finite.py"],
        [r"test_the_finite_check_names_the_first_nan_or_inf_variable"]),
    Mutation(
        "finite_check_sum_passes_an_inf", "the finite check's first sum lets an Inf through "
        "(it looks for a NaN only)",
        "recipes/common/callbacks.py",
        "    if math.isfinite(float(total)):",
        "    if not math.isnan(float(total)):",
        ["tests/test_non_finite.py"],
        [r"test_the_finite_check_names_the_first_nan_or_inf_variable"]),
    Mutation(
        "training_scalars_one_step_late", "the training scalars (learning rate, examples/s, "
        "trust ratios) written a step after Keras' batch scalars: at a chunk's first step",
        "recipes/common/callbacks.py",
        "        if step % self._every:",
        "        if (step - 1) % self._every:",
        ["tests/test_recipe_training.py"],
        [r"test_training_scalars_fall_on_the_steps_of_keras_batch_scalars\[2-2\]",
         r"test_training_scalars_hold_the_learning_rate_and_the_optimizers_trust_ratios"]),
    Mutation(
        "log_every_off_the_calls_accepted", "the config check lets log_every fall between "
        "Keras' calls of steps_per_execution updates (its scalars silently skipped)",
        "recipes/common/schema.py",
        '    for key in ("checkpoint_every", "log_every"):',
        '    for key in ("checkpoint_every",):',
        ["tests/test_recipe_config.py"],
        [r"test_steps_off_a_chunk_or_a_call_are_refused_with_the_nearest_multiples\[train1"]),
    Mutation(
        "trust_ratios_read_back_out_of_order", "the trust-ratio report puts each dtype's "
        "stacked read-back on the paths in reverse order",
        "lamb_tf/layerwise.py",
        "            for index, value in zip(indices, stacked.numpy()):",
        "            for index, value in zip(indices[::-1], stacked.numpy()):",
        ["tests/test_update_rules.py"],
        [r"test_trust_ratios_of_variables_of_several_dtypes_keep_their_paths",
         r"test_optimizers_report_last_trust_ratios"]),
    Mutation(
        "masked_lm_metric_casts_its_labels", "the masked-LM cross-entropy metric casts its "
        "labels to float first, as Keras' own metric does: a second cross-entropy each step",
        "recipes/bert/model.py",
        "            y_true, y_pred, from_logits=True)",
        "            tf.cast(y_true, self.dtype), y_pred, from_logits=True)",
        ["tests/test_bert_masked_lm_metric.py"],
        [r"test_the_training_step_gives_the_loss_and_the_metric_one_cross_entropy"]),
    Mutation(
        "hlo_passes_reads_one_operand", "the count of an XLA program's passes over memory "
        "reads only the first operand of each loop",
        "benchmarks/hlo_passes.py",
        "        read = sum(type_bytes(types[operand]) for operand in operands)",
        "        read = sum(type_bytes(types[operand]) for operand in operands[:1])",
        ["tests/test_hlo_passes.py"],
        [r"test_passes_are_the_entry_loops_with_their_operands_and_outputs"]),
    # ---- asynchronous checkpoints --------------------------------------------------------------
    Mutation(
        "async_checkpoint_message_before_the_write", "train.async_checkpoint: a diverged run "
        "names the last checkpoint without waiting for the write in flight",
        "recipes/common/callbacks.py",
        "        self._manager.sync()  # an asynchronous write in flight lands first",
        "        pass",
        ["tests/test_async_checkpoint.py"],
        [r"test_a_diverged_run_names_its_last_asynchronous_checkpoint_once_written"]),
    # ---- schedules, scaling, arguments, Model Garden (a mutation search, 2026-12-05) -------
    Mutation(
        "schedule_not_clipped_before_its_start", "a schedule with start_step gives negative "
        "rates before its start (above the peak without a warmup)",
        "lamb_tf/schedules.py",
        "    t = tf.clip_by_value(t, 0.0, float(total_steps))  # before the start: 0; past the end: T",
        "    t = tf.minimum(t, float(total_steps))",
        ["tests/test_schedules.py"],
        [r"test_steps_before_start_step_take_the_rate_of_the_schedules_step_0\[tf_keras",
         r"test_steps_before_start_step_take_the_rate_of_the_schedules_step_0\[keras3"]),
    Mutation(
        "schedule_config_without_start_step", "the schedule's config loses start_step (a "
        "resumed phase 2 forgets its offset)",
        "lamb_tf/schedules.py",
        "            \"start_step\": self.start_step,",
        "",
        ["tests/test_schedules.py"],
        [r"test_config_round_trip_keeps_every_argument"]),
    Mutation(
        "warmup_fraction_truncated", "warmup_fraction × total_steps truncated instead of "
        "rounded to the nearest step",
        "lamb_tf/schedules.py",
        "            resolved_warmup = int(math.floor(round(warmup_fraction * total_steps, 9) "
        "+ 0.5))",
        "            resolved_warmup = int(warmup_fraction * total_steps)",
        ["tests/test_schedules.py"],
        [r"test_warmup_fraction_rounds_to_the_nearest_step"]),
    Mutation(
        "untuned_recipe_ignores_power", "the untuned LAMB recipe's schedule ignores its power",
        "lamb_tf/scaling.py",
        "            power=power,",
        "",
        ["tests/test_scaling.py"],
        [r"test_untuned_lamb_schedule_takes_the_decay_power"]),
    Mutation(
        "equal_phi_bounds_refused", "phi_bounds with gamma_l == gamma_u refused",
        "lamb_tf/arguments.py",
        "    if gamma_l > gamma_u:",
        "    if gamma_l >= gamma_u:",
        ["tests/test_optimizer_arguments.py"],
        [r"test_valid_edge_values_are_accepted\[tf_keras",
         r"test_valid_edge_values_are_accepted\[keras3"]),
    Mutation(
        "bool_taken_as_a_number", "True/False taken as 1.0/0.0 for a real-number argument",
        "lamb_tf/arguments.py",
        "    value = _scalar_as_number(value)",
        "    value = int(value) if isinstance(value, bool) else _scalar_as_number(value)",
        ["tests/test_optimizer_arguments.py"],
        [r"test_bad_argument_raises_naming_argument_and_value\[.*epsilon must be a real"]),
    Mutation(
        "noise_scale_decay_1_accepted", "a noise-scale decay of 1 accepted (NaN forever)",
        "lamb_tf/noise_scale.py",
        "        self.decay = arguments.beta(\"decay\", decay)  # a decay rate in [0, 1), as β₁ "
        "and β₂",
        "        self.decay = arguments.unit_interval(\"decay\", decay)",
        ["tests/test_gradient_noise_scale.py"],
        [r"test_a_decay_outside_0_to_1_is_refused\[1.0\]"]),
    Mutation(
        "method_exclusions_keep_adaptation", "exclude_from_weight_decay(var_names=...) with "
        "the default adaptation list: the named variables keep their trust ratio",
        "lamb_tf/exclusions.py",
        "                          self.exclude_from_layer_adaptation)",
        "                          self.layer_adaptation_patterns)",
        ["tests/test_exclude_from_weight_decay_method.py"],
        [r"test_without_adaptation_patterns_the_method_excludes_from_both\[tf_keras",
         r"test_without_adaptation_patterns_the_method_excludes_from_both\[keras3"]),
    Mutation(
        "keras3_config_of_variable_rate_stale", "Keras 3: the config of a variable rate holds "
        "the rate given at construction, not the variable's value",
        "lamb_tf/keras3_optimizers.py",
        "            config[\"learning_rate\"] = float(self._learning_rate_variable.numpy())",
        "            pass",
        ["tests/test_learning_rate_forms.py"],
        [r"test_the_config_of_a_variable_rate_holds_its_value_now\[keras3"]),
    Mutation(
        "keras3_schedule_after_variable_rate_kept_variable", "Keras 3: a schedule set on an "
        "optimizer with a variable rate leaves the variable in place (AttributeError)",
        "lamb_tf/keras3_optimizers.py",
        "                object.__setattr__(self, \"_learning_rate_variable\", None)",
        "                pass",
        ["tests/test_learning_rate_forms.py"],
        [r"test_a_schedule_set_after_a_variable_rate_replaces_it\[keras3"]),
    Mutation(
        "model_garden_validation_data_only_for_eval", "the launcher checks the validation "
        "data only for --mode=eval (train_and_eval crashed in Model Garden's trainer)",
        "lamb_tf/model_garden.py",
        "             (\"validation_data\", \"eval\" in mode or \"validate\" in mode))",
        "             (\"validation_data\", mode == \"eval\"))",
        ["tests/test_model_garden.py"],
        [r"test_a_mode_that_evaluates_needs_the_validation_data\[train_and_eval"]),
    Mutation(
        "model_garden_partly_registered", "is_registered() true when one table still holds "
        "Model Garden's class",
        "lamb_tf/model_garden.py",
        "    return all(table[optimizer_type] is optimizer_class",
        "    return any(table[optimizer_type] is optimizer_class",
        ["tests/test_model_garden.py"],
        [r"test_is_registered_only_when_every_table_builds_ours"]),
    Mutation(
        "model_garden_input_path_not_split", "the launcher checks a comma-separated "
        "input_path as one glob (refusing what Model Garden reads)",
        "lamb_tf/model_garden_launcher.py",
        "        paths = paths.split(\",\") if isinstance(paths, str) else paths or []",
        "        paths = [paths] if isinstance(paths, str) else paths or []",
        ["tests/test_model_garden.py"],
        [r"test_launcher_checks_every_glob_of_an_input_path"]),
    # ---- the study and the shared config (a mutation search, 2026-12-05) ---------------------
    Mutation(
        "study_picks_the_worst_learning_rate", "the study's chosen learning rate is the "
        "sweep's lowest metric",
        "recipes/study/report.py",
        "    best = min if metric.lower_is_better else max",
        "    best = max if metric.lower_is_better else min",
        ["tests/test_batch_study.py"],
        [r"test_the_best_learning_rate_is_the_one_with_the_highest_metric"]),
    Mutation(
        "study_picks_the_highest_loss", "a loss metric's chosen learning rate is the one of "
        "the highest loss (the study's behaviour before 2026-12-06)",
        "recipes/study/report.py",
        "    best = min if metric.lower_is_better else max",
        "    best = max",
        ["tests/test_batch_study.py"],
        [r"test_the_best_learning_rate_of_a_loss_is_the_one_with_the_lowest\[loss\]"]),
    Mutation(
        "study_steps_floored", "the study's steps per run floored instead of rounded",
        "recipes/study/plan.py",
        "    return max(1, round(settings.epochs * settings.train_examples / batch_size))",
        "    return max(1, int(settings.epochs * settings.train_examples / batch_size))",
        ["tests/test_batch_study.py"],
        [r"test_steps_round_the_epochs_to_the_nearest_step"]),
    Mutation(
        "study_untuned_learning_rate_unchecked", "--untuned names an optimizer without a "
        "--base_lr: a KeyError traceback instead of one line",
        "recipes/study/plan.py",
        "    for optimizer in settings.optimizers + settings.untuned:",
        "    for optimizer in settings.optimizers:",
        ["tests/test_batch_study.py"],
        [r"test_impossible_settings_are_one_line_errors"]),
    Mutation(
        "study_batch_sizes_unsorted", "--batch_sizes kept in the given order (the default base "
        "batch is then the first, not the smallest)",
        "recipes/study/flags.py",
        "    batch_sizes = tuple(sorted(set(args.batch_sizes)))",
        "    batch_sizes = tuple(dict.fromkeys(args.batch_sizes))",
        ["tests/test_batch_study.py"],
        [r"test_batch_sizes_are_sorted_and_the_base_batch_is_the_smallest"]),
    Mutation(
        "study_stopped_process_time_dropped", "a run the study stopped and ran again counts "
        "only its last process's seconds",
        "recipes/study/runner.py",
        "              \"process_seconds\": round(seconds + sum(stopped), 1),  # every process's",
        "              \"process_seconds\": round(seconds, 1),",
        ["tests/test_batch_study.py"],
        [r"test_killed_study_resumes_without_rerunning_finished_runs"]),
    Mutation(
        "keras3_learning_rate_assign_undone", "Keras 3: `learning_rate` of a variable rate is "
        "the base's copy, so `learning_rate.assign(x)` is undone by the next step",
        "lamb_tf/keras3_optimizers.py",
        "            return self._learning_rate_variable",
        "            return self._get_current_learning_rate()",
        ["tests/test_learning_rate_forms.py"],
        [r"test_assigning_to_the_learning_rate_of_a_variable_rate_sets_the_rate\[keras3-LAMB\]",
         r"test_assigning_to_the_learning_rate_of_a_variable_rate_sets_the_rate\[keras3-LARS\]"]),
    Mutation(
        "unknown_keyword_left_to_the_base", "a misspelt keyword reaches the base class, whose "
        "message names no argument",
        "lamb_tf/layerwise.py",
        "        arguments.refuse_unknown_keywords(name, keras_kwargs, "
        "arguments.keyword_names(type(self)),",
        "        (lambda *_: None)(name, keras_kwargs, arguments.keyword_names(type(self)),",
        ["tests/test_optimizer_arguments.py"],
        [r"test_a_misspelt_keyword_names_the_argument_meant\[LAMB-tf_keras\]",
         r"test_a_misspelt_keyword_names_the_argument_meant\[LAMB-keras3\]"]),
    Mutation(
        "stop_wrapped_in_a_system_error_missed", "a Ctrl-C or SIGTERM that reaches Python as a "
        "SystemError (raised while C code ran) ends in a traceback and exit 1",
        "recipes/common/errors.py",
        "        error = error.__cause__ or error.__context__",
        "        error = None",
        ["tests/test_stopping_signals.py"],
        [r"test_a_signal_that_reaches_python_as_a_system_error_is_still_a_stop\[SIGTERM",
         r"test_a_signal_that_reaches_python_as_a_system_error_is_still_a_stop\[SIGINT"]),
    Mutation(
        "study_first_error_line", "a failed run is reported by the first error line of its "
        "log (an earlier attempt's)",
        "recipes/study/runner.py",
        "    return (errors or lines or [\"(no output)\"])[-1]",
        "    return (errors or lines or [\"(no output)\"])[0]",
        ["tests/test_batch_study.py"],
        [r"test_a_failed_run_is_reported_by_the_last_error_line_of_its_log"]),
    Mutation(
        "config_infinite_learning_rate_accepted", "optimizer.learning_rate=.inf accepted",
        "recipes/common/schema.py",
        "        if not (math.isfinite(value) and value >= 0):",
        "        if not value >= 0:",
        ["tests/test_recipe_config.py"],
        [r"test_shared_values_past_their_bound_are_refused"]),
    Mutation(
        "config_constant_rate_refused", "an end learning rate equal to the peak refused",
        "recipes/common/schema.py",
        "    if optimizer.end_learning_rate > optimizer.learning_rate:  # a decay that would rise",
        "    if optimizer.end_learning_rate >= optimizer.learning_rate:",
        ["tests/test_recipe_config.py"],
        [r"test_shared_values_at_their_bound_are_accepted"]),
    Mutation(
        "config_bool_taken_as_an_int", "train.seed=true taken as seed 1",
        "recipes/common/config.py",
        "        and not (field_type is not bool and isinstance(value, bool))",
        "        and True",
        ["tests/test_recipe_config.py"],
        [r"test_a_bool_for_a_number_key_is_refused_not_taken_as_1"]),
    Mutation(
        "config_history_overwritten", "the third changed resume's config.yaml history "
        "fails (config.<n>.yaml numbered once, not until free)",
        "recipes/common/config.py",
        "            while tf.io.gfile.exists(os.path.join(model_dir, f\"config.{n}.yaml\")):",
        "            if tf.io.gfile.exists(os.path.join(model_dir, f\"config.{n}.yaml\")):",
        ["tests/test_recipe_config.py"],
        [r"test_each_changed_config_is_kept_and_an_unchanged_one_is_not"]),
    Mutation(
        "bert_eval_batch_of_all_held_out_refused", "an eval batch of exactly the held-out "
        "sequences refused as reading no batch",
        "recipes/bert/pretrain.py",
        "        if mode in driver.EVAL_MODES and held_out is not None and held_out < batch:",
        "        if mode in driver.EVAL_MODES and held_out is not None and held_out <= batch:",
        ["tests/test_bert_config_checks.py"],
        [r"test_an_eval_batch_of_all_the_held_out_sequences_is_one_batch_not_none\[8"]),
    Mutation(
        "config_yaml_written_in_place", "config.yaml (every atomic text write: "
        "storage.write_text) written in place instead of beside itself and renamed (a write "
        "stopped half way leaves it truncated)",
        "recipes/common/storage.py",
        "    temporary = path + \".tmp\"",
        "    temporary = path",
        ["tests/test_recipe_config.py"],
        [r"test_a_config_write_that_fails_half_way_leaves_config_yaml_whole"]),
    # ---- found on 2026-12-06 by a search of the recipes' data and task code -----------------
    Mutation(
        "masking_random_ids_skip_reserved", "the random replacement of a masked token is "
        "never a reserved id (Google draws over the whole vocabulary)",
        "recipes/bert/masking.py",
        "            tf.shape(flat_ids), seed=id_seed, minval=0, maxval=self.vocab_size, "
        "dtype=flat_ids.dtype",
        "            tf.shape(flat_ids), seed=id_seed, minval=5, maxval=self.vocab_size, "
        "dtype=flat_ids.dtype",
        ["tests/test_bert_data.py"],
        [r"test_random_replacements_are_drawn_over_the_whole_vocabulary"]),
    Mutation(
        "masking_every_call_the_same_draws", "every call of a masker draws with the same seed "
        "(the batches of a chunk masked alike)",
        "recipes/bert/masking.py",
        "        self._num_calls += 1",
        "        self._num_calls += 0",
        ["tests/test_bert_data.py"],
        [r"test_masking_is_reproducible_from_the_seed"]),
    Mutation(
        "next_sentence_labels_inverted", "next-sentence labels inverted against Google's and "
        "Model Garden's (0: B follows A)",
        "recipes/bert/sentence_pairs.py",
        "IS_NEXT, IS_RANDOM = 0, 1  # `next_sentence_labels` values, as in Google's BERT.",
        "IS_RANDOM, IS_NEXT = 0, 1  # `next_sentence_labels` values, as in Google's BERT.",
        ["tests/test_bert_data.py"],
        [r"test_sentence_pairs_next_is_consecutive_and_labels_are_balanced"]),
    Mutation(
        "chunk_records_not_shuffled", "a chunk's sentence pairs written in document order",
        "recipes/bert/chunk_records.py",
        "        rng.shuffle(pairs)  # Google shuffles all pairs; here within the chunk.",
        "        pass  # Google shuffles all pairs; here within the chunk.",
        ["tests/test_bert_chunk_records.py"],
        [r"test_a_chunks_pairs_are_shuffled_not_left_in_document_order"]),
    Mutation(
        "held_out_duplicated", "the held-out pairs repeated dupe_factor times as the "
        "training ones",
        "recipes/bert/chunk_records.py",
        "        dupe_factor = settings.dupe_factor if split == chunks.TRAIN else 1",
        "        dupe_factor = settings.dupe_factor",
        ["tests/test_bert_chunk_records.py"],
        [r"test_dupe_factor_repeats_the_training_pairs_only"]),
    Mutation(
        "vocabulary_pad_not_first", "a learned vocabulary puts [UNK] before [PAD] (padding "
        "is id 0)",
        "recipes/bert/vocabulary.py",
        "RESERVED_TOKENS = (PAD, UNK, CLS, SEP, MASK)",
        "RESERVED_TOKENS = (UNK, PAD, CLS, SEP, MASK)",
        ["tests/test_bert_text_and_vocabulary.py"],
        [r"test_a_learned_vocabulary_starts_with_the_reserved_tokens_pad_first"]),
    Mutation(
        "squad_end_is_start", "SQuAD's end targets are its start targets",
        "recipes/bert/squad.py",
        "        arrays[\"end_positions\"] = np.array([f.end_position for f in features], "
        "np.int32)",
        "        arrays[\"end_positions\"] = np.array([f.start_position for f in features], "
        "np.int32)",
        ["tests/test_squad.py"],
        [r"test_squad_end_position_is_the_answers_last_piece"]),
    Mutation(
        "resumed_skip_ignores_replicas", "a resumed BERT run with 2 replicas per pipeline "
        "skips one batch a step instead of two",
        "recipes/bert/input.py",
        "        dataset = dataset.skip(steps_to_skip * replicas)",
        "        dataset = dataset.skip(steps_to_skip)",
        ["tests/test_chunk_input_position.py"],
        [r"test_bert_resumed_with_two_replicas_per_pipeline_skips_two_batches_a_step"]),
    Mutation(
        "resnet_eval_steps_floored", "ResNet's evaluation leaves out the examples of an odd "
        "share per pipeline",
        "recipes/resnet/input.py",
        "    per_pipeline_examples = math.ceil(num_examples / num_pipelines)",
        "    per_pipeline_examples = num_examples // num_pipelines",
        ["tests/test_resnet_input.py"],
        [r"test_eval_steps_round_an_odd_share_up_per_pipeline"]),
    Mutation(
        "newest_checkpoint_index_not_checked", "a newest checkpoint without its .index is "
        "taken as there (a run then starts again from step 0)",
        "recipes/common/checkpoints.py",
        "    if not tf.io.gfile.exists(index):",
        "    if False:",
        ["tests/test_damaged_checkpoints.py"],
        [r"test_a_newest_checkpoint_with_a_file_missing_is_named_not_skipped\[\.index"]),
    Mutation(
        "fewer_records_than_pipelines_accepted", "BERT with fewer records than input "
        "pipelines (records shared out): the last pipelines read none",
        "recipes/common/corrupt_data.py",
        "    if found < pipelines:",
        "    if found < 1:",
        ["tests/test_bert_data.py"],
        [r"test_fewer_records_than_pipelines_shared_out_one_by_one_are_refused"]),
    # ---- a search of the library's less-covered modules (2026-12-06) --------------------------
    Mutation(
        "keras3_t_counts_micro_batches", "Keras 3 LAMB with the optimizer's own "
        "gradient_accumulation_steps: t counts micro-batches, not applied updates",
        "lamb_tf/keras3_optimizers.py",
        "        return self.iterations",
        "        return self._iterations",
        ["tests/test_matches_numpy_reference.py::"
         "test_keras3_lamb_with_gradient_accumulation_steps_counts_t_in_applied_updates"],
        [r"test_keras3_lamb_with_gradient_accumulation_steps_counts_t_in_applied_updates"]),
    Mutation(
        "keras3_callable_rate_assigned_to_variable", "Keras 3: a callable set as the rate of "
        "an optimizer with a variable rate is assigned to the variable (an error)",
        "lamb_tf/keras3_optimizers.py",
        "            if callable(value):",
        "            if isinstance(value, self._SCHEDULE_CLASS):",
        ["tests/test_learning_rate_forms.py::"
         "test_a_callable_set_after_a_variable_rate_replaces_it"],
        [r"test_a_callable_set_after_a_variable_rate_replaces_it\[keras3-LAMB",
         r"test_a_callable_set_after_a_variable_rate_replaces_it\[keras3-LARS"]),
    Mutation(
        "keras3_accumulation_loss_logged_per_replica", "Keras 3 GradientAccumulationModel "
        "logs each replica's share of the loss (half the loss on 2 replicas)",
        "lamb_tf/keras3_accumulation.py",
        "                    metric.update_state(loss * replicas, sample_weight=examples)",
        "                    metric.update_state(loss, sample_weight=examples)",
        ["tests/test_keras3_gradient_accumulation.py::"
         "test_the_logged_loss_on_two_replicas_is_the_global_batch_mean"],
        [r"test_the_logged_loss_on_two_replicas_is_the_global_batch_mean"]),
    Mutation(
        "keras3_accumulation_config_loses_steps", "Keras 3 GradientAccumulationModel."
        "from_config ignores accumulation_steps (a loaded model accumulates 1)",
        "lamb_tf/keras3_accumulation.py",
        "        return cls(model, config[\"accumulation_steps\"])",
        "        return cls(model, config.get(\"steps\", 1))",
        ["tests/test_keras3_gradient_accumulation.py::"
         "test_config_round_trip_keeps_the_accumulation_steps"],
        [r"test_config_round_trip_keeps_the_accumulation_steps"]),
    Mutation(
        "method_exclusion_path_unescaped", "exclude_from_weight_decay(var_list=...) puts the "
        "path into its pattern unescaped (a '.' matches any character)",
        "lamb_tf/exclusions.py",
        "    parts = [re.escape(part) for part in path.split(\"/\")]",
        "    parts = path.split(\"/\")",
        ["tests/test_exclude_from_weight_decay_method.py"],
        [r"test_a_var_list_variable_is_matched_by_its_literal_path\[tf_keras",
         r"test_a_var_list_variable_is_matched_by_its_literal_path\[keras3"]),
    Mutation(
        "empty_adaptation_list_saved_as_none", "the config turns exclude_from_layer_adaptation=[] "
        "into None (a rebuilt optimizer falls back to the weight-decay list: no trust ratio there)",
        "lamb_tf/exclusions.py",
        "        as_list = lambda patterns: None if patterns is None else list(patterns)  "
        "# noqa: E731",
        "        as_list = lambda patterns: list(patterns) if patterns else None  # noqa: E731",
        ["tests/test_optimizer_serialization.py::"
         "test_config_keeps_an_empty_adaptation_list_apart_from_none"],
        [r"test_config_keeps_an_empty_adaptation_list_apart_from_none\[tf_keras",
         r"test_config_keeps_an_empty_adaptation_list_apart_from_none\[keras3"]),
    Mutation(
        "mixed_batch_config_without_phase_1_steps", "MixedBatchSchedule's config loses "
        "phase_1_steps (rebuilt, phase 2 starts at phase 1's total_steps)",
        "lamb_tf/schedules.py",
        "            \"phase_1_steps\": self.phase_1_steps,",
        "",
        ["tests/test_schedules.py"],
        [r"test_config_round_trip_keeps_a_phase_1_steps_that_is_not_phase_1s_length\[tf_keras",
         r"test_config_round_trip_keeps_a_phase_1_steps_that_is_not_phase_1s_length\[keras3"]),
    Mutation(
        "noise_scale_trace_overflow_folded_in", "a step whose tr(Sigma) estimate alone is "
        "non-finite is folded into the averages (the noise scale is inf from then on)",
        "lamb_tf/noise_scale.py",
        "        finite = tf.math.is_finite(gradient_squared) & tf.math.is_finite(trace)",
        "        finite = tf.math.is_finite(gradient_squared)",
        ["tests/test_gradient_noise_scale.py::"
         "test_a_step_whose_trace_estimate_alone_overflows_leaves_the_averages_unchanged"],
        [r"test_a_step_whose_trace_estimate_alone_overflows_leaves_the_averages_unchanged"]),
    Mutation(
        "model_garden_train_data_only_for_train", "the launcher checks the training data "
        "only for --mode=train (train_and_eval without it passes the check)",
        "lamb_tf/model_garden.py",
        "    reads = ((\"train_data\", \"train\" in mode),",
        "    reads = ((\"train_data\", mode == \"train\"),",
        ["tests/test_model_garden.py::test_a_mode_that_trains_needs_the_training_data"],
        [r"test_a_mode_that_trains_needs_the_training_data\[train_and_eval"]),
    Mutation(
        "model_garden_tfds_name_ignored", "the launcher asks for an input_path when the data "
        "is a TFDS dataset (tfds_name)",
        "lamb_tf/model_garden.py",
        "        if data is None or not (data.input_path or data.tfds_name):",
        "        if data is None or not data.input_path:",
        ["tests/test_model_garden.py::test_a_tfds_name_is_data_without_an_input_path"],
        [r"test_a_tfds_name_is_data_without_an_input_path"]),
    # ---- the recipes' driver and ResNet task (a mutation search, 2026-12-06) ---------------
    Mutation(
        "resnet_resume_skips_a_batch_per_step", "a ResNet run resumed mid-chunk with 2 replicas "
        "per input pipeline skips one batch per trained step, not one per replica",
        "recipes/resnet/train.py",
        "            skip_batches=steps_to_skip * replicas,",
        "            skip_batches=steps_to_skip,",
        ["tests/test_chunk_input_position.py::"
         "test_resnet_resumed_with_two_replicas_per_pipeline_skips_two_batches_a_step"],
        [r"test_resnet_resumed_with_two_replicas_per_pipeline_skips_two_batches_a_step"]),
    Mutation(
        "resnet_eval_loss_one_pipelines_slots", "ResNet's held-out loss counts one input "
        "pipeline's batch slots (divided by the number of hosts)",
        "recipes/resnet/train.py",
        "        results[\"loss\"] *= steps * pipeline_batch * pipelines / self.evaluated_examples",
        "        results[\"loss\"] *= steps * pipeline_batch / self.evaluated_examples",
        ["tests/test_resnet_eval.py::"
         "test_two_input_pipelines_scale_the_loss_by_every_pipelines_slots"],
        [r"test_two_input_pipelines_scale_the_loss_by_every_pipelines_slots"]),
    Mutation(
        "resnet_corrupt_eval_record_sought_in_training_files", "a corrupt held-out record is "
        "looked for in the training files",
        "recipes/resnet/train.py",
        "        pattern = self.data.train_pattern if split == \"train\" else "
        "self.data.eval_pattern",
        "        pattern = self.data.train_pattern",
        ["tests/test_resnet_eval.py::"
         "test_a_corrupt_held_out_record_is_named_from_the_held_out_files"],
        [r"test_a_corrupt_held_out_record_is_named_from_the_held_out_files"]),
    Mutation(
        "results_json_trained_further_keeps_the_old_training", "a run trained further keeps "
        "the first training's record in results.json",
        "recipes/common/driver.py",
        "        if not train_logs and tf.io.gfile.exists(path):  # --mode=eval: the training's "
        "stays",
        "        if tf.io.gfile.exists(path):  # --mode=eval: the training's stays",
        ["tests/test_recipe_training.py::"
         "test_results_json_is_the_newest_trainings_and_an_evaluation_only_adds_its_eval"],
        [r"test_results_json_is_the_newest_trainings_and_an_evaluation_only_adds_its_eval"]),
    Mutation(
        "infinite_eval_loss_accepted", "an infinite held-out loss is taken as a result",
        "recipes/common/driver.py",
        "        if not math.isfinite(results.get(\"loss\", 0.0)):",
        "        if math.isnan(results.get(\"loss\", 0.0)):",
        ["tests/test_non_finite.py::test_a_held_out_loss_that_is_not_finite_stops_the_run"],
        [r"test_a_held_out_loss_that_is_not_finite_stops_the_run\[inf",
         r"test_a_held_out_loss_that_is_not_finite_stops_the_run\[-inf"]),
    Mutation(
        "eval_batch_off_the_replicas_accepted", "an eval.global_batch_size that is no multiple "
        "of the replicas passes (3 on 2 replicas is evaluated as 2 a step)",
        "recipes/common/driver.py",
        "    if config.eval.global_batch_size % num_replicas:",
        "    if config.eval.global_batch_size < num_replicas:",
        ["tests/test_recipe_config.py::"
         "test_an_eval_batch_off_a_multiple_of_the_replicas_is_refused"],
        [r"test_an_eval_batch_off_a_multiple_of_the_replicas_is_refused\[3-2",
         r"test_an_eval_batch_off_a_multiple_of_the_replicas_is_refused\[6-4"]),
    Mutation(
        "resume_from_a_checkpoint_lacking_variables", "a resume from a checkpoint that lacks "
        "some of the model's variables leaves them freshly initialised",
        "recipes/common/checkpoints.py",
        "        manager.checkpoint.restore(path).assert_existing_objects_matched()",
        "        manager.checkpoint.restore(path).expect_partial()",
        ["tests/test_recipe_training.py::test_checkpoint_of_another_model_is_one_line"],
        [r"test_checkpoint_of_another_model_is_one_line\[more-layers"]),
    Mutation(
        "export_dir_above_the_run_passes", "an export.dir that is a parent of --model_dir "
        "passes the check before any work",
        "recipes/common/export.py",
        "        if run_dir == target or run_dir.startswith(target.rstrip(\"/\") + \"/\"):",
        "        if run_dir == target:",
        ["tests/test_interrupted_export.py::"
         "test_an_export_dir_is_refused_when_it_would_replace_the_run_or_other_files"],
        [r"test_an_export_dir_is_refused_when_it_would_replace_the_run_or_other_files\[runs-"]),
    Mutation(
        "empty_export_dir_refused", "an empty export.dir ends in an IndexError",
        "recipes/common/export.py",
        "    if others or (entries and \"saved_model.pb\" not in entries):",
        "    if others or \"saved_model.pb\" not in entries:",
        ["tests/test_interrupted_export.py::"
         "test_an_export_dir_is_refused_when_it_would_replace_the_run_or_other_files"],
        [r"test_an_export_dir_is_refused_when_it_would_replace_the_run_or_other_files\[empty"]),
    Mutation(
        "stopped_run_saves_non_finite_weights", "a SIGTERM right after the weights became NaN "
        "saves them as the newest checkpoint",
        "recipes/common/preemption.py",
        "    if first_non_finite(variables) is None and not latest.endswith(f\"-{step}\"):",
        "    if not latest.endswith(f\"-{step}\"):",
        ["tests/test_non_finite.py::test_a_stopped_runs_save_skips_weights_that_are_not_finite"],
        [r"test_a_stopped_runs_save_skips_weights_that_are_not_finite"]),
    Mutation(
        "tf_config_index_one_past_the_last_worker", "a TF_CONFIG task index equal to the "
        "number of workers is accepted",
        "recipes/common/strategy.py",
        '            0 <= index < len(members)):',
        '            0 <= index <= len(members)):',
        ["tests/test_strategy.py::test_a_tf_config_that_cannot_make_a_cluster_is_one_line"],
        [r"test_a_tf_config_that_cannot_make_a_cluster_is_one_line\[index-one-past"]),
    Mutation(
        "every_worker_exports_into_export_dir", "every worker of a multi-worker run exports "
        "into the shared export.dir",
        "recipes/common/driver.py",
        "        if self.config.export.dir and strategy_lib.is_chief(self.strategy):",
        "        if self.config.export.dir:",
        ["tests/test_strategy.py::"
         "test_only_the_chief_exports_into_export_dir_the_others_into_their_own_directory"],
        [r"test_only_the_chief_exports_into_export_dir_the_others_into_their_own_directory\[1"]),
    # ---- from the session of 2026-12-06 (second): stops while starting, paths, exports ----
    Mutation(
        "no_handler_while_starting", "Ctrl-C or SIGTERM while a program imports TensorFlow "
        "is left to Python (a KeyboardInterrupt traceback, a silent exit)",
        "recipes/common/errors.py",
        "            signal.signal(signum, _stopped_while_starting)",
        "            pass",
        ["tests/test_stopping_signals.py::"
         "test_stopped_while_tensorflow_loads_is_one_line_not_a_traceback"],
        [r"test_stopped_while_tensorflow_loads_is_one_line_not_a_traceback\[2-"]),
    Mutation(
        "starting_handler_kept_after_main_starts", "the handler of a program's first seconds "
        "stays once main runs (Ctrl-C then ends it at once, 'while starting')",
        "recipes/common/errors.py",
        "            _started()",
        "            pass",
        ["tests/test_stopping_signals.py::"
         "test_a_signal_once_main_runs_cleans_up_then_one_line"],
        [r"test_a_signal_once_main_runs_cleans_up_then_one_line\[SIGINT-.*after-the-first"]),
    Mutation(
        "paths_kept_relative", "a run saves its relative paths (fine-tuning's "
        "encoder.pretraining_dir, ResNet's file patterns) as given (the run cannot be "
        "evaluated from another directory)",
        "recipes/common/driver.py",
        "    config_lib.make_paths_absolute(config)",
        "    pass",
        ["tests/test_absolute_paths.py::test_the_saved_config_holds_absolute_paths"],
        [r"test_the_saved_config_holds_absolute_paths\[resnet\]"]),
    Mutation(
        "ecosystem_export_deletes_users_files", "the Model Garden and TF-Hub export replaces "
        "model_garden/ and hub/ whatever they hold",
        "recipes/bert/ecosystem_export.py",
        "    problem = replace_problem(output_dir)",
        "    problem = None",
        ["tests/test_ecosystem_export.py::"
         "test_an_earlier_export_is_replaced_and_other_files_are_refused_not_deleted"],
        [r"test_an_earlier_export_is_replaced_and_other_files_are_refused_not_deleted"]),
    Mutation(
        "squad_skipped_questions_not_named", "the training questions Model Garden's reader "
        "skips are not named",
        "recipes/bert/squad.py",
        "    skipped = [f'{place} (id \"{qid}\")' for qid, place in places.items() "
        "if qid not in kept]",
        "    skipped = []",
        ["tests/test_squad.py::test_a_training_answer_not_at_its_start_is_skipped_and_named_"
         "quietly"],
        [r"test_a_training_answer_not_at_its_start_is_skipped_and_named_quietly"]),
    Mutation(
        "export_reads_held_nothing", "a run that exports does not hold the directory of what "
        "its export reads (BERT's vocabulary)",
        "recipes/common/driver.py",
        '              if mode in modes] + (["export"] if exports(task.config, mode) else [])',
        "              if mode in modes]",
        ["tests/test_model_dir_in_use.py::"
         "test_a_run_holds_the_directories_of_the_files_its_mode_reads"],
        [r"test_a_run_holds_the_directories_of_the_files_its_mode_reads\[export"]),
    # ---- 2026-12-06, second session: audits of a library user and of a recipe author -------
    Mutation(
        "finetune_eval_steps_ignored", "fine-tuning evaluates the whole held-out set whatever "
        "eval.steps says",
        "recipes/bert/finetune.py",
        "        return self.network.predict(dataset.take(self.config.eval.steps or -1), "
        "verbose=0)",
        "        return self.network.predict(dataset, verbose=0)",
        ["tests/test_finetune.py::test_a_classification_evaluation_reads_eval_steps_batches_"
         "and_scores_those"],
        [r"test_a_classification_evaluation_reads_eval_steps_batches_and_scores_those\[2-8"]),
    Mutation(
        "made_directory_left_after_an_error", "a directory storage.exclusive_use made stays, "
        "empty, when the block ends in an exception (a stopped conversion's --output_dir)",
        "recipes/common/storage.py",
        "        made = _missing_directories(local_path(directory))",
        "        made = []",
        ["tests/test_model_dir_in_use.py::test_a_hold_that_ends_in_an_exception_removes_the_"
         "directories_it_made_if_empty"],
        [r"test_a_hold_that_ends_in_an_exception_removes_the_directories_it_made_if_empty"]),
    Mutation(
        "unbatched_training_elements_accepted", "training elements that are not batches of "
        "the plan reach the accumulation (an IndexError's traceback)",
        "recipes/common/task.py",
        "            _check_batches(task, pipeline, plan.per_replica_batch_size)",
        "            pass",
        ["tests/test_task_interface.py::test_training_elements_that_are_not_batches_of_the_"
         "plan_are_named"],
        [r"test_training_elements_that_are_not_batches_of_the_plan_are_named"]),
    Mutation(
        "excluded_variable_sharing_its_path_accepted", "exclude_from_weight_decay(var_list="
        "...) of a variable whose path another has excludes both, silently",
        "lamb_tf/layerwise.py",
        "            if identity in built and others:",
        "            if False:",
        ["tests/test_exclusions.py::test_a_variable_excluded_by_identity_is_not_one_of_"
         "several_sharing_its_path"],
        [r"test_a_variable_excluded_by_identity_is_not_one_of_several_sharing_its_path"]),
    Mutation(
        "check_of_records_reads_conversion_files", "convert --check='records/*' reads "
        "labels.txt and dataset_info.json as damaged TFRecords",
        "recipes/resnet/convert.py",
        "            if os.path.basename(path) not in (LABELS_FILE, INFO_FILE)]",
        "            ]",
        ["tests/test_resnet_convert.py::test_a_check_of_a_whole_output_dir_reads_its_records_"
         "not_labels_or_dataset_info"],
        [r"test_a_check_of_a_whole_output_dir_reads_its_records_not_labels_or_dataset_info"]),
    Mutation(
        "study_tabulates_runs_of_a_changed_config", "the study tabulates finished runs whose "
        "config changed since (an edited config file or recipe default), without a word",
        "recipes/study/adapter.py",
        "        if changes:",
        "        if False:",
        ["tests/test_batch_study.py::test_a_finished_run_whose_config_changed_since_is_named"],
        [r"test_a_finished_run_whose_config_changed_since_is_named"]),
    # ---- the fourth session of 2026-12-06: the study's answer, a recipe's Keras 3 model -----
    Mutation(
        "study_answer_without_tolerance", "the study's answer stops at the first batch whose "
        "figure is any worse than the smallest batch's, whatever --tolerance says",
        "recipes/study/report.py",
        "        slack = tolerance * abs(reference)",
        "        slack = 0.0",
        ["tests/test_batch_study.py::test_the_answer_is_the_largest_batch_up_to_which_the_"
         "figure_stays_within_the_tolerance"],
        [r"test_the_answer_is_the_largest_batch_up_to_which_the_figure_stays_within_the_"
         r"tolerance"]),
    Mutation(
        "study_answer_holds_a_batch_where_a_seed_diverged", "the study's answer counts a batch "
        "as held on the mean of the seeds that did not diverge",
        "recipes/study/report.py",
        "        if value is None or row[\"diverged_seeds\"]:",
        "        if value is None:",
        ["tests/test_batch_study.py::test_a_batch_where_a_seed_diverged_does_not_hold"],
        [r"test_a_batch_where_a_seed_diverged_does_not_hold"]),
    Mutation(
        "study_metric_mode_ignored", "--metric_mode is ignored: the metric's direction is "
        "always guessed from its name",
        "recipes/study/report.py",
        "        mode = adapter.mode_of(name) if mode == \"auto\" else mode",
        "        mode = adapter.mode_of(name)",
        ["tests/test_batch_study.py::test_the_answer_follows_the_metric_mode"],
        [r"test_the_answer_follows_the_metric_mode"]),
    Mutation(
        "study_error_metrics_read_as_higher_is_better", "a metric named mae, rmse or error is "
        "taken for higher-is-better (the study's behaviour before a recipe author's audit)",
        "recipes/study/adapter.py",
        "LOWER_IS_BETTER_WORDS = (\"loss\", \"entropy\", \"error\", \"mae\", \"mse\", \"rmse\", "
        "\"msle\", \"mape\",",
        "LOWER_IS_BETTER_WORDS = (\"loss\", \"entropy\",",
        ["tests/test_batch_study.py::test_which_way_a_metric_is_better_is_read_from_the_words_"
         "of_its_name"],
        [r"test_which_way_a_metric_is_better_is_read_from_the_words_of_its_name\[mae-min\]"]),
    Mutation(
        "config_key_flag_unnamed_without_an_early_check", "a recipe that gives "
        "startup.check_command_line no config class gets no --params_override hint for a "
        "config key given as a flag",
        "recipes/common/driver.py",
        "    startup.check_command_line(task_class.config_class, extra_flags)",
        "    startup.check_command_line(None, extra_flags)",
        ["tests/test_cli_help.py::test_a_config_key_given_as_a_flag_is_named_for_a_recipe_that_"
         "checks_no_config_early"],
        [r"test_a_config_key_given_as_a_flag_is_named_for_a_recipe_that_checks_no_config_early"]),
    Mutation(
        "keras3_model_reaches_the_accumulation_wrapper", "a recipe's Keras 3 model is not "
        "refused by the driver: the accumulation wrapper's TypeError traceback",
        "recipes/common/driver.py",
        "        if not isinstance(network, tf_keras.Model):  # a Keras 3 one: a TypeError's "
        "traceback",
        "        if False:",
        ["tests/test_task_interface.py::test_a_model_of_keras_3_is_named_not_a_type_error_"
         "traceback"],
        [r"test_a_model_of_keras_3_is_named_not_a_type_error_traceback"]),
    # ---- 2026-12-07, second session: an audit of fine-tuning and of the library's API -----
    Mutation(
        "squad_export_offsets_of_normalized_text", "the SQuAD export slices the context at "
        "tensorflow-text's offsets, which count bytes of the text it lower-cased and stripped "
        "of accents",
        "recipes/bert/finetune_export.py",
        "    normalized_ends = tf.math.cumsum(tf.cast(tf.strings.length(normalized(chars)), "
        "tf.int64),",
        "    normalized_ends = tf.math.cumsum(tf.cast(tf.strings.length(chars), tf.int64),",
        ["tests/test_finetune_export.py::test_answers_of_accented_contexts_are_whole_"
         "characters_of_the_context"],
        [r"test_answers_of_accented_contexts_are_whole_characters_of_the_context"]),
    Mutation(
        "legacy_optimizer_aggregates_twice", "with a tf_keras legacy optimizer the accumulation "
        "wrapper all-reduces the gradients, then apply_gradients again",
        "lamb_tf/accumulation.py",
        "            {\"experimental_aggregate_gradients\": False} if legacy",
        "            {\"experimental_aggregate_gradients\": True} if legacy",
        ["tests/test_accumulation.py::test_a_legacy_optimizer_on_two_replicas_equals_one_"
         "device"],
        [r"test_a_legacy_optimizer_on_two_replicas_equals_one_device"]),
    Mutation(
        "negative_noise_scale_printed", "the progress line prints a negative noise-scale "
        "estimate as a number of examples",
        "recipes/common/callbacks.py",
        "    if name == noise_scale.NOISE_SCALE_LOG and not noise_scale.is_measured(value):",
        "    if name == noise_scale.NOISE_SCALE_LOG and not math.isfinite(value):",
        ["tests/test_progress_line.py"],
        [r"test_a_noise_scale_estimate_below_zero_reads_not_yet\[-1523"]),
    Mutation(
        "bert_eval_steps_beyond_the_files_silent", "BERT's eval.steps beyond the held-out "
        "files evaluates what they hold without a word",
        "recipes/bert/pretrain.py",
        "        if self.evaluated_sequences < steps * batch and not self.told_eval_steps:",
        "        if False:",
        ["tests/test_bert_recipe.py::test_eval_steps_beyond_the_held_out_files_evaluates_them_"
         "and_says_so"],
        [r"test_eval_steps_beyond_the_held_out_files_evaluates_them_and_says_so"]),
    # ---- found on 2026-12-07 by audits of the library, the study and the recipe guide ------
    Mutation(
        "sixteen_bit_norms_cast_back", "a 16-bit layer's norms cast back to its own dtype, "
        "and its trust ratio and step formed in it (a float16 norm beyond 65,504 is inf: a "
        "ratio of 0 or inf)",
        "lamb_tf/update_rules.py",
        "    return tf.sqrt(tf.reduce_sum(tf.linalg.matvec(squares, tf.ones([columns], wide))))",
        "    return tf.cast(tf.sqrt(tf.reduce_sum(tf.linalg.matvec(squares, tf.ones([columns], "
        "wide)))), x.dtype)",
        ["tests/test_update_rules.py"],
        [r"test_a_float16_layer_whose_norm_is_beyond_float16_still_steps\[keras3-LAMB\]",
         r"test_a_16_bit_update_whose_norm_is_beyond_float16_keeps_its_ratio"]),
    Mutation(
        "resnet_crops_keyed_after_the_skip", "ResNet's crops and flips keyed by the place "
        "counted after a resumed pipeline's skip (its examples get the chunk's first draws)",
        "recipes/resnet/input.py",
        "    dataset = dataset.enumerate().skip(skip_batches * per_replica_batch_size)",
        "    dataset = dataset.skip(skip_batches * per_replica_batch_size).enumerate()",
        ["tests/test_resnet_input.py"],
        [r"test_skipping_batches_resumes_the_same_crops_and_flips"]),
    Mutation(
        "training_data_that_ends_accepted", "a recipe's training data that ends before the "
        "last step stops the run without a word",
        "recipes/common/training.py",
        "        if int(model.optimizer.iterations.numpy()) < fit_end and not model.stop_training:",
        "        if False:",
        ["tests/test_task_interface.py"],
        [r"test_training_data_that_ends_unannounced_is_one_line_and_so_is_the_rerun"]),
    # ---- hyperparameters read at every step: λ (LAMB, LARS), LARS' μ and eeta ---------------
    Mutation(
        "variable_weight_decay_decided_at_build", "a variable λ's value at build decides which "
        "variables are decayed (0 then: none ever is; a callable λ fails)",
        "lamb_tf/exclusions.py",
        "        decaying = arguments.read_at_every_step(weight_decay_rate) or weight_decay_rate > 0",
        "        decaying = weight_decay_rate > 0",
        ["tests/test_peer_hyperparameter_forms.py"],
        [rf"test_{test}_read_at_every_step\[.*-{flavour}-.*-{form}\]"
         for test in ("lamb_weight_decay_rate_is", "lars_decay_momentum_and_eeta_are")
         for flavour in BOTH for form in ("variable", "callable")]),
    Mutation(
        "variable_hyperparameter_read_once", "a hyperparameter given as a variable is replaced "
        "by its value at construction (assigning it changes nothing)",
        "lamb_tf/arguments.py",
        "            check(name, float(value.numpy()))",
        "            return check(name, float(value.numpy()))",
        ["tests/test_peer_hyperparameter_forms.py"],
        [rf"test_{test}_read_at_every_step\[.*-{flavour}-.*-variable\]"
         for test in ("lamb_weight_decay_rate_is", "lars_decay_momentum_and_eeta_are")
         for flavour in BOTH]),
    Mutation(
        "keras3_var_list_pattern_keeps_model_names", "Keras 3: a var_list variable's pattern "
        "is its literal path, holding the model's name, which a `.keras` reload drops (the "
        "continued training decays and adapts the variable)",
        "lamb_tf/keras3_optimizers.py",
        "                                       optional_leading_parts=keras_path)",
        "                                       optional_leading_parts=False)",
        ["tests/test_exclude_from_weight_decay_method.py::test_a_keras3_var_list_exclusion_"
         "holds_in_the_training_continued_from_a_keras_file",
         "tests/test_exclusions.py::test_a_pattern_holding_a_keras3_sequential_models_name_"
         "says_why_it_stopped_matching"],
        [r"test_a_keras3_var_list_exclusion_holds_in_the_training_continued_from_a_keras_file",
         r"test_a_pattern_holding_a_keras3_sequential_models_name_says_why_it_stopped"]),
    Mutation(
        "keras3_var_list_pattern_drops_a_middle_part", "Keras 3: every part before a var_list "
        "variable's layer is optional on its own, so `outer/inner/d1/bias`'s pattern takes "
        "`outer/d1/bias` too (a middle part gone, the outer one kept: no reload gives that)",
        "lamb_tf/exclusions.py",
        '        pattern = f"(?:{pattern}{part}/)?"',
        '        pattern = f"{pattern}(?:{part}/)?"',
        ["tests/test_exclude_from_weight_decay_method.py::test_a_var_list_pattern_lets_only_"
         "keras3_model_names_go"],
        [r"test_a_var_list_pattern_lets_only_keras3_model_names_go\[keras3\]"]),
    Mutation(
        "var_list_pattern_matching_another_given_refused", "the build refuses a var_list "
        "variable whose pattern matches another variable given in var_list (both excluded "
        "anyway)",
        "lamb_tf/layerwise.py",
        "                      if id(variable) not in given and re.search(pattern, other)]",
        "                      if id(variable) != identity and re.search(pattern, other)]",
        ["tests/test_exclude_from_weight_decay_method.py::test_a_var_list_pattern_may_match_"
         "another_var_list_variable"],
        [rf"test_a_var_list_pattern_may_match_another_var_list_variable\[{flavour}\]"
         for flavour in BOTH]),
]


class MutationDoesNotApply(Exception):
    pass


def mutated_text(text, mutation):
    """`text` with the mutation's old line replaced; raises unless it occurs exactly once."""
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line == mutation.old]
    if len(hits) != 1:
        raise MutationDoesNotApply(
            f"{mutation.name}: the old line occurs {len(hits)} times in {mutation.path} "
            f"(needs exactly 1): {mutation.old.strip()!r}")
    if mutation.new == mutation.old:
        raise MutationDoesNotApply(f"{mutation.name}: the new line equals the old one")
    lines[hits[0]] = mutation.new
    return "\n".join(lines)


def check_applies(mutation, root=REPO_ROOT):
    """Raises MutationDoesNotApply unless the mutation applies to the source under `root`."""
    path = os.path.join(root, mutation.path)
    if not os.path.isfile(path):
        raise MutationDoesNotApply(f"{mutation.name}: {mutation.path} does not exist")
    with open(path, encoding="utf-8") as f:
        mutated_text(f.read(), mutation)
    for test in mutation.tests:
        if not os.path.isfile(os.path.join(root, test.split("::")[0])):
            raise MutationDoesNotApply(f"{mutation.name}: test file {test} does not exist")


def copy_repository(destination):
    for name in COPIED:
        source = os.path.join(REPO_ROOT, name)
        target = os.path.join(destination, name)
        if os.path.isdir(source):
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)


def run_tests(root, tests, timeout):
    """Runs pytest on `tests` in `root`; returns (failing test ids, seconds, timed out)."""
    env = dict(os.environ, PYTHONPATH=root, PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=no", "-rfE",
               *tests]
    start = time.time()
    try:
        result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], time.time() - start, True
    failing = [re.split(r" - ", line.split(" ", 1)[1])[0]
               for line in result.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    if result.returncode not in (0, 1) and not failing:
        # collection error or crash: every selected test counts as failing
        failing = [f"{test} (pytest exit {result.returncode})" for test in tests]
    return failing, time.time() - start, False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this mutation (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="do not first run the selected tests on the unmodified copy")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds per pytest run (default 1800)")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MUTATIONS}
    unknown = [name for name in args.only if name not in by_name]
    if unknown:
        print(f"error: unknown mutation {unknown[0]!r}; --list shows the names", file=sys.stderr)
        return 2
    selected = [by_name[name] for name in args.only] or MUTATIONS
    try:
        for mutation in selected:
            check_applies(mutation)
    except MutationDoesNotApply as error:
        print(f"error: {error}; update tests/mutation_check.py", file=sys.stderr)
        return 2
    if args.list:
        for m in selected:
            print(f"{m.name}\n    {m.bug}\n    {m.path}; tests: {' '.join(m.tests)}")
        return 0

    with tempfile.TemporaryDirectory(prefix="lamb_tf_mutation_") as root:
        copy_repository(root)
        if not args.skip_baseline:
            tests = {t for m in selected for t in m.tests}
            # a test id inside a file that runs whole anyway is run once
            tests = sorted(t for t in tests if "::" not in t or t.split("::")[0] not in tests)
            failing, seconds, timed_out = run_tests(root, tests, args.timeout)
            if failing or timed_out:
                print(f"error: the unmodified copy already fails ({seconds:.0f} s): "
                      f"{', '.join(failing) or 'timeout'}", file=sys.stderr)
                return 2
            print(f"baseline: {' '.join(tests)} pass on the unmodified copy ({seconds:.0f} s)",
                  flush=True)
        missed = []
        for mutation in selected:
            path = os.path.join(root, mutation.path)
            with open(path, encoding="utf-8") as f:
                original = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(mutated_text(original, mutation))
            try:
                failing, seconds, timed_out = run_tests(root, mutation.tests, args.timeout)
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(original)
            unmatched = [p for p in mutation.caught_by if not any(re.search(p, t) for t in failing)]
            caught = (failing or timed_out) and not unmatched
            print(f"{'CAUGHT' if caught else 'MISSED'} {mutation.name} ({seconds:.0f} s): "
                  f"{mutation.bug}", flush=True)
            if timed_out:
                print(f"    pytest timed out after {args.timeout:.0f} s")
            for test in failing:
                print(f"    caught by {test}")
            for pattern in unmatched:
                print(f"    no failing test matches the required {pattern!r}")
            if not caught:
                missed.append(mutation.name)
    print(f"{len(selected) - len(missed)} of {len(selected)} mutations caught"
          + (f"; missed: {', '.join(missed)}" if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
