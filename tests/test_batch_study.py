"""The batch-size study tool (recipes.study): grid arithmetic, resume, parallel runs, table
and plot. Most tests run it against tests/study_fake_recipe.py (a CLI with the recipes'
flags that writes results.json at once); the slow one runs the real ResNet recipe."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import types

import pytest

from conftest import REPO_ROOT
from recipes.common import config as config_lib
from recipes.common import driver
from recipes.common.errors import UserError
from recipes.study import adapter, cli, flags, plan, report, runner

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
TINY_GRID = [
    "--recipe=resnet",
    f"--config_file={os.path.join(REPO_ROOT, 'configs', 'resnet', 'tiny_cpu.yaml')}",
    "--batch_sizes=8,32",
    "--optimizers=lamb,momentum",
    "--base_lr=lamb=0.1,momentum=0.1",
    "--lr_multipliers=1,4",  # 0.1 (best) and 0.4 (diverges) at batch 8
    "--warmup_steps=1",
    "--epochs=1",
    "--train_examples=64",
    "--micro_batch_size=8",
    "--seeds=1,2,3",
]


def settings(**changes):
    values = dict(
        batch_sizes=(64, 256, 1024), optimizers=("lamb",), base_learning_rates={"lamb": 0.01},
        base_batch_size=64, lr_rule="sqrt", lr_multipliers=(0.5, 1.0, 2.0), warmup_steps=5,
        epochs=8, train_examples=4000, micro_batch_size=32, seeds=(1, 2, 3), untuned=(),
    )
    values.update(changes)
    return plan.StudySettings(**values)


def test_equal_epochs_and_the_sqrt_rule_keep_the_warmup():
    study = settings()
    sweeps = plan.sweep_runs(study)
    runs = {batch: sweeps[("lamb", batch)] for batch in study.batch_sizes}
    assert [r.steps for r in runs[64]] == [500] * 3  # 8 x 4000 / 64
    assert runs[1024][0].steps == 31  # round(31.25)
    assert [r.learning_rate for r in runs[256]] == [0.01, 0.02, 0.04]  # 0.01 x sqrt(4) x m
    assert {r.warmup_steps for rs in runs.values() for r in rs} == {5}
    assert {r.seed for rs in runs.values() for r in rs} == {1}


def test_steps_round_the_epochs_to_the_nearest_step():
    # 8 epochs of 4000 examples at batch 768: 41.67 steps, rounded up here (down: 31.25)
    assert plan.steps_for(settings(), 768) == 42
    assert plan.steps_for(settings(), 1024) == 31


def test_linear_rule_keeps_at_least_one_warmup_step():
    # 5 warmup steps at batch 64 are 0.31 at batch 1024: one step, not none
    run = plan.sweep_runs(settings(lr_rule="linear"))[("lamb", 1024)][0]
    assert run.warmup_steps == 1


def test_linear_rule_without_warmup_has_none():
    # max(1, ...) gave every run one warmup update, at rate 0: an update lost
    for rule in ("linear", "sqrt"):
        runs = plan.sweep_runs(settings(lr_rule=rule, warmup_steps=0))
        assert {run.warmup_steps for sweep in runs.values() for run in sweep} == {0}, rule


def test_linear_rule_keeps_the_warmup_examples():
    study = settings(lr_rule="linear", warmup_steps=40)
    run = plan.sweep_runs(study)[("lamb", 256)][1]
    assert (run.learning_rate, run.warmup_steps) == (0.04, 10)


def test_untuned_line_runs_the_sqrt_rule_with_every_seed():
    study = settings(lr_rule="linear", untuned=("lamb",))
    runs = plan.untuned_runs(study)[("lamb", 1024)]
    assert [(r.learning_rate, r.seed) for r in runs] == [(0.04, 1), (0.04, 2), (0.04, 3)]


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(base_learning_rates={}), "--base_lr has no learning rate for optimizer 'lamb'"),
        (dict(micro_batch_size=48), "64 is not a multiple of --micro_batch_size=48"),
        (dict(warmup_steps=40), "batch 1024 trains only 31 steps in 8 epochs, not more than "
                                "its 40 warmup steps; lower --warmup_steps, raise --epochs, or "
                                "leave batch 1024 out of --batch_sizes$"),
        (dict(seeds=(1, 1)), "repeats a seed"),
        (dict(warmup_steps=31), "batch 1024 trains only 31 steps"),  # warmup == steps
        # the untuned line runs the sqrt rule's warmup, whatever --lr_rule
        (dict(lr_rule="linear", untuned=("lamb",), warmup_steps=31),
         "batch 1024 trains only 31 steps"),
        (dict(untuned=("lars",)), "--base_lr has no learning rate for optimizer 'lars'"),
    ],
)
def test_impossible_settings_are_one_line_errors(changes, message):
    with pytest.raises(plan.PlanError, match=message.replace("(", r"\(")):
        plan.check(settings(**changes))


def test_overrides_set_the_shared_schema_keys():
    run = plan.Run("lars", 512, 32, 60, 5, 0.25, 2)
    assert adapter.override_string(run, "data.seed=3").split(",") == [
        "data.seed=3", "optimizer.name=lars", "optimizer.learning_rate=0.25",
        "optimizer.warmup_steps=5", "train.global_batch_size=512",
        "train.micro_batch_size=32", "train.steps=60", "train.checkpoint_every=60",
        "train.seed=2", "export.enabled=false",
    ]


def test_a_negative_noise_scale_estimate_is_not_averaged_into_the_table():
    """B_simple's estimate is negative while |G|² or tr(Σ) is below its noise: a cell's
    noise scale is the mean of its positive estimates, and the table says how many were
    not measurable."""
    from recipes.study import report

    grid = settings(batch_sizes=(64, 256), lr_multipliers=(1.0,))
    sweeps = plan.sweep_runs(grid)
    noise_by_batch = {64: [-275.0, 100.0, 300.0], 256: [-5.0, float("nan"), -1.0]}
    statuses = {}
    for (_, batch), (run,) in sweeps.items():
        for seed_run, noise in zip([run, *plan.seed_runs(run, grid.seeds)],
                                   noise_by_batch[batch]):
            statuses[seed_run.name] = {"status": "ok", "process_seconds": 1.0, "result": {
                "metric": 0.5, "steps": run.steps, "wall_time_seconds": 1.0,
                "noise_scale": noise}}
    rows = report.summarize(grid, sweeps, {}, statuses, report.Metric.of("accuracy"))
    assert [row["noise_scale"] for row in rows] == [200.0, None]
    table = report.markdown(rows, report.Metric.of("accuracy")).splitlines()
    assert table[2].endswith("| 200 (1 not measurable) |")
    assert table[3].endswith("| not measurable |")


def _ok(metric):
    return {"status": "ok", "process_seconds": 1.0, "result": {
        "metric": metric, "steps": 1, "wall_time_seconds": 1.0, "noise_scale": None}}


def test_the_best_learning_rate_is_the_one_with_the_highest_metric():
    from recipes.study import report

    sweep = plan.sweep_runs(settings(batch_sizes=(64,)))[("lamb", 64)]  # 0.005, 0.01, 0.02
    statuses = {sweep[0].name: _ok(0.4), sweep[1].name: _ok(0.7),
                sweep[2].name: {"status": "diverged"}}
    assert report.best_run(sweep, statuses, report.Metric.of("top_1_accuracy")) is sweep[1]
    statuses[sweep[2].name] = _ok(0.9)
    assert report.best_run(sweep, statuses, report.Metric.of("top_1_accuracy")) is sweep[2]


@pytest.mark.parametrize("metric", ["loss", "masked_lm_loss", "masked_lm_cross_entropy",
                                    "next_sentence_loss"])
def test_the_best_learning_rate_of_a_loss_is_the_one_with_the_lowest(metric):
    """The study picked the highest value of every metric: with a loss, the worst rate."""
    from recipes.study import report

    sweep = plan.sweep_runs(settings(batch_sizes=(64,)))[("lamb", 64)]  # 0.005, 0.01, 0.02
    statuses = {sweep[0].name: _ok(0.93), sweep[1].name: _ok(2.5),
                sweep[2].name: {"status": "diverged"}}
    loss = report.Metric.of(metric)
    assert report.best_run(sweep, statuses, loss) is sweep[0]
    table = report.markdown(report.summarize(settings(batch_sizes=(64,)), {("lamb", 64): sweep},
                                             {}, statuses, loss), loss)
    assert f"held-out {metric}, lower is better (mean" in table


def _figure_row(line, batch, mean, sweep=None, chosen=0.1, unfinished=0, seeds=3, diverged=0):
    return {"line": line, "global_batch_size": batch, "metric_mean": mean,
            "learning_rate": chosen, "sweep": sweep or {"0.1": mean},
            "unfinished_runs": unfinished, "seeds": seeds, "diverged_seeds": diverged}


def test_the_answer_is_the_largest_batch_up_to_which_the_figure_stays_within_the_tolerance():
    """A study answered "how large can my batch go?" only by a table to read."""
    rows = [
        _figure_row("lamb", 64, 0.80), _figure_row("lamb", 256, 0.795),  # 0.625% worse
        _figure_row("lamb", 1024, 0.70), _figure_row("lamb", 4096, 0.80),  # 12.5% worse
        _figure_row("adamw", 256, 0.6), _figure_row("adamw", 64, 0.5),  # better: held
        _figure_row("momentum", 64, None),  # diverged at every rate
        _figure_row("lars", 64, 0.8), _figure_row("lars", 256, None, unfinished=2),
    ]
    answer = report.largest_batches(rows, report.Metric.of("accuracy"), 0.01)
    assert answer == [
        "Largest batch within 1% of the smallest batch's held-out accuracy (higher is better):",
        "- lamb: 256 (at 1,024: 0.7000, 12.50% worse)",
        "- adamw: 256, the largest studied",
        "- momentum: nothing to compare with: batch 64 diverged at every LR",
        "- lars: 64 (at 256: not run yet)",
    ]
    assert report.largest_batches(rows, report.Metric.of("accuracy"), 0.2)[1] == (
        "- lamb: 4,096, the largest studied")
    assert report.largest_batches(rows[:1], report.Metric.of("accuracy"), 0.01) == [
        "Largest batch: one batch size studied, nothing to compare"]


def test_the_answer_follows_the_metric_mode():
    rows = [_figure_row("lamb", 64, 2.0), _figure_row("lamb", 256, 2.01),
            _figure_row("lamb", 1024, 1.5)]
    assert report.largest_batches(rows, report.Metric.of("loss"), 0.01) == [
        "Largest batch within 1% of the smallest batch's held-out loss (lower is better):",
        "- lamb: 1,024, the largest studied"]  # 1.5 is better
    higher = report.Metric.of("loss", "max")
    assert report.largest_batches(rows, higher, 0.01) == [
        "Largest batch within 1% of the smallest batch's held-out loss (higher is better):",
        "- lamb: 256 (at 1,024: 1.5000, 25.00% worse)"]
    # the table says a direction the name does not (it said only "lower is better")
    assert "| held-out loss, higher is better (mean" in report.markdown([], higher)
    assert "| held-out loss, lower is better (mean" in report.markdown([], report.Metric.of("loss"))
    assert "| held-out accuracy (mean" in report.markdown([], report.Metric.of("accuracy"))

@pytest.mark.parametrize("name, mode", [
    ("loss", "min"), ("masked_lm_cross_entropy", "min"), ("next_sentence_loss", "min"),
    ("mae", "min"), ("val_rmse", "min"), ("mean_absolute_error", "min"), ("perplexity", "min"),
    ("top_1_accuracy", "max"), ("masked_lm_accuracy", "max"), ("val_acc", "max"),
    ("pr_auc", "max"), ("f1", "max"), ("score", None), ("accuracy_loss", None)])
def test_which_way_a_metric_is_better_is_read_from_the_words_of_its_name(name, mode):
    """`mae` was taken for higher-is-better (only `loss` and `cross_entropy` were lower), and
    the answer of a recipe's regression study said its batch held where it lost 20%."""
    assert adapter.mode_of(name) == mode
    if mode is None:
        with pytest.raises(ValueError, match=f"which way {name} is better is not known"):
            report.Metric.of(name)
        assert report.Metric.of(name, "min").lower_is_better
    else:
        assert report.Metric.of(name).lower_is_better == (mode == "min")


def test_a_batch_where_a_seed_diverged_does_not_hold():
    """A batch whose mean was of the seeds that survived counted as held."""
    rows = [_figure_row("lamb", 32, 0.90), _figure_row("lamb", 128, 0.90, seeds=1, diverged=2),
            _figure_row("lamb", 512, 0.5)]
    assert report.largest_batches(rows, report.Metric.of("accuracy"), 0.01)[1:] == [
        "- lamb: 32 (at 128: 2 of 3 seeds diverged)"]


@pytest.mark.parametrize("reference, value, held", [
    (0.5, 0.495, True), (0.95, 0.9405, True),  # exactly 1% worse: within, whatever rounding
    (0.5, 0.4949, False), (0.9533, 0.9433, False)])
def test_a_figure_exactly_the_tolerance_worse_is_within_and_the_worse_one_is_said_exactly(
        reference, value, held):
    """0.5 -> 0.495 was outside and 0.95 -> 0.9405 inside (floating point); 1.05% was
    written 1.0% under "within 1%"."""
    rows = [_figure_row("lamb", 32, reference), _figure_row("lamb", 128, value)]
    line = report.largest_batches(rows, report.Metric.of("accuracy"), 0.01)[1]
    if held:
        assert line == "- lamb: 128, the largest studied"
    else:  # (reference - value) / reference, to two decimals: 1.02%, 1.05%
        expected = f"{(reference - value) / reference * 100:.2f}%"
        assert line == f"- lamb: 32 (at 128: {value:.4f}, {expected} worse)"
        assert expected in ("1.02%", "1.05%")


def test_the_answer_says_what_makes_it_weaker():
    """A zero reference held every batch; a reference or a deciding batch whose rate is at
    an end of its sweep, and figures of unfinished runs, went unsaid."""
    accuracy = report.Metric.of("accuracy")
    zero = [_figure_row("lamb", 32, 0.0), _figure_row("lamb", 128, 0.1)]
    assert report.largest_batches(zero, accuracy, 0.01)[1] == (
        "- lamb: nothing to compare with: batch 32's figure is 0 (no fraction of it)")
    three_rates = {"0.1": 0.5, "0.2": 0.6, "0.4": 0.7}
    rows = [_figure_row("lamb", 64, 0.9, sweep=three_rates, chosen=0.4),  # top
            _figure_row("lamb", 256, 0.9, unfinished=1),
            _figure_row("lamb", 1024, 0.7, sweep=three_rates, chosen=0.1)]  # bottom
    assert report.largest_batches(rows, accuracy, 0.01)[1:] == [
        "- lamb: 256 (at 1,024: 0.7000, 22.22% worse)",
        "  - batch 64's LR is the top of its sweep: a better one may improve the reference",
        "  - batch 1,024's LR is the bottom of its sweep: a better one may hold it",
        "  - some of its runs have not finished: figures of those run so far"]


def test_unfinished_runs_of_an_untuned_line_are_counted_once():
    """The untuned line's first seed is also its one-point 'sweep': 3 runs, not 4."""
    from recipes.study import report

    grid = settings(batch_sizes=(64,), untuned=("lamb",))
    (row,) = report.summarize(grid, {}, plan.untuned_runs(grid), {},
                              report.Metric.of("accuracy"))
    assert row["unfinished_runs"] == 3


@pytest.mark.parametrize("log, line", [
    ("$ python -m recipes.resnet.train ...\nTraceback (most recent call last):\n"
     "  File ...\nValueError: bad\n", "ValueError: bad"),
    # the log is appended to by every attempt of the run: the last error is this one's
    ("$ python ...\nerror: an earlier attempt's\n$ python ...\nstep 1\nerror: this one\n",
     "error: this one"),
    ("", "(no output)"),
])
def test_a_failed_run_is_reported_by_the_last_error_line_of_its_log(log, line, tmp_path):
    (tmp_path / "log").write_text(log)
    assert runner._last_error_line(str(tmp_path / "log")) == line  # pylint: disable=protected-access


def test_adapter_reads_the_noise_scale_under_the_name_fit_logs():
    from lamb_tf import noise_scale

    assert adapter.NOISE_SCALE_LOG == noise_scale.NOISE_SCALE_LOG


@pytest.fixture
def fake_recipe(monkeypatch):
    """The study tool, in this process, driving tests/study_fake_recipe.py."""
    monkeypatch.setitem(adapter.PROGRAMS, "resnet", "study_fake_recipe")
    monkeypatch.setattr(adapter, "check_settings", lambda *args, **kwargs: None)
    monkeypatch.setattr(adapter, "check_finished_configs", lambda *args, **kwargs: None)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS_DIR, REPO_ROOT]))


def test_a_study_dir_that_cannot_be_written_is_one_line_before_any_run(
        fake_recipe, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    study_dir = str(tmp_path / "a_file" / "study")
    assert cli.main(TINY_GRID + [f"--study_dir={study_dir}"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"error: --study_dir={study_dir}: {tmp_path / 'a_file'} is a file, "
                            "not a directory; give a directory you can write (it is created "
                            "if missing)\n")
    assert captured.out == ""  # no run started


@pytest.mark.parametrize("study_dir, message", [
    ("", "--study_dir is empty; give a directory you can write (it is created if missing)"),
    ("~/study", "--study_dir=~/study: '~' is not expanded here"),
    # it made ./gs:/bucket/study and its runs wrote to the URL, then failed in a run
    ("gs://bucket/study", "--study_dir=gs://bucket/study is remote, and a study writes local "
     "files; give a local directory"),
])
def test_an_empty_or_unexpanded_study_dir_is_one_line_before_any_run(
        fake_recipe, tmp_path, monkeypatch, capsys, study_dir, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(TINY_GRID + [f"--study_dir={study_dir}"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: {message}")
    assert captured.err.count("\n") == 1
    assert captured.out == ""  # no run started
    assert os.listdir(tmp_path) == []  # nothing written (no ./~ directory)


def starts(study_dir):
    """{run name: how many times the recipe was started for it}."""
    runs_dir = os.path.join(study_dir, runner.RUNS_SUBDIR)
    return {
        name: len(open(os.path.join(runs_dir, name, "starts")).readlines())
        for name in os.listdir(runs_dir)
    }


@pytest.mark.slow  # runs the fake recipe in processes
def test_tiny_grid_picks_the_best_lr_and_reruns_it_with_seeds(fake_recipe, tmp_path, capsys):
    study_dir = str(tmp_path / "study")
    assert cli.main(TINY_GRID + [f"--study_dir={study_dir}", "--parallel=2"]) == 0
    rows = json.load(open(os.path.join(study_dir, "study.json")))["rows"]
    by_cell = {(row["line"], row["global_batch_size"]): row for row in rows}
    assert set(by_cell) == {(o, b) for o in ("lamb", "momentum") for b in (8, 32)}
    small = by_cell[("lamb", 8)]
    assert small["learning_rate"] == 0.1 and small["sweep"]["0.4"] == "diverged"
    # sqrt rule: 0.1 x sqrt(32 / 8) = 0.2 and 0.8 (diverges) at batch 32
    large = by_cell[("lamb", 32)]
    assert large["learning_rate"] == 0.2 and large["steps"] == 2
    # the fake's accuracy at lr 0.1, batch 8, seeds 1..3: 0.9 - 0.03 + 0.001 x seed
    assert small["metric_values"] == pytest.approx([0.871, 0.872, 0.873])
    assert small["metric_std"] == pytest.approx(0.001)
    assert small["noise_scale"] is None  # batch 8 = one micro-batch of 8
    assert large["noise_scale"] == 132.0
    # 8 sweep runs + 2 more seeds for each of the 4 cells, each started once
    assert sorted(starts(study_dir).values()) == [1] * 16
    table = open(os.path.join(study_dir, "study.md")).read()
    assert "| lamb | 8 | 8 | 1 | 0.1 | 0.8720 ± 0.0010 (n=3) | 0.1: 0.8710, 0.4: diverged" in table
    assert open(os.path.join(study_dir, "study.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "sweep: 8 runs" in out and "seeds: 8 runs" in out and "[8/8]" in out
    assert "steps per run (1 epoch of 64 examples): 8 at batch 8, 2 at batch 32" in out
    # the fake's mean at batch 32 (lr 0.2): 0.9 - 0.1 log10(2) - 0.05 + 0.002 = 0.8219, below
    # batch 8's 0.872 by 5.75%, more than the default tolerance of 1%: batch 8 is the answer
    answer = ("Largest batch within 1% of the smallest batch's held-out top_1_accuracy (higher "
              "is better):\n- lamb: 8 (at 32: 0.8219, 5.75% worse)\n"
              "- momentum: 8 (at 32: 0.8219, 5.75% worse)\n")
    assert answer in out and answer in table


@pytest.mark.slow  # runs the fake recipe in processes
def test_untuned_line_shares_the_runs_it_has_in_common_with_the_sweep(fake_recipe, tmp_path):
    study_dir = str(tmp_path / "study")
    argv = TINY_GRID + [f"--study_dir={study_dir}", "--untuned=lamb", "--optimizers=lamb"]
    assert cli.main(argv) == 0
    rows = json.load(open(os.path.join(study_dir, "study.json")))["rows"]
    untuned = [row for row in rows if row["line"] == "lamb (untuned sqrt rule)"]
    # the sqrt rule's own rates (0.1 at batch 8, 0.2 at 32) are the sweep's best: no new run
    assert [(row["learning_rate"], row["seeds"]) for row in untuned] == [(0.1, 3), (0.2, 3)]
    assert untuned[0]["sweep"] == {"0.1": pytest.approx(0.871)}  # its first seed's run
    assert sorted(starts(study_dir).values()) == [1] * 8  # 4 sweep + 2 x 2 seeds


# The study tool on the fake recipe, as its own process (so that it can be killed).
FAKE_STUDY_PROGRAM = (
    "import sys; from recipes.study import adapter, cli; "
    "adapter.PROGRAMS['resnet'] = 'study_fake_recipe'; "
    "adapter.check_settings = lambda *args, **kwargs: None; "
    "adapter.check_finished_configs = lambda *args, **kwargs: None; "
    "sys.exit(cli.main(sys.argv[1:]))"
)


@pytest.mark.slow  # runs the fake recipe in processes
def test_killed_study_resumes_without_rerunning_finished_runs(fake_recipe, tmp_path):
    study_dir = str(tmp_path / "study")
    argv = [sys.executable, "-c", FAKE_STUDY_PROGRAM, *TINY_GRID, f"--study_dir={study_dir}"]
    hanging = os.path.join(study_dir, runner.RUNS_SUBDIR, "lamb_b8_lr0.4_w1_s1", "starts")
    process = subprocess.Popen(
        argv, env={**os.environ, "STUDY_FAKE_HANG_ABOVE_LR": "0.3"}, cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(hanging) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert os.path.exists(hanging), "the study never reached its second run"
        time.sleep(3)  # the stopped process: 3 s or more, longer than the run's last
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the study and the run it started
        process.wait(timeout=60)
    assert starts(study_dir) == {"lamb_b8_lr0.1_w1_s1": 1, "lamb_b8_lr0.4_w1_s1": 1}
    partial = subprocess.run(
        argv + ["--report_only"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert partial.returncode == 0, partial.stderr
    table = open(os.path.join(study_dir, "study.md")).read()
    assert "0.8710 (n=1, 3 runs not finished) | 0.1: 0.8710, 0.4: not run |" in table
    assert "| momentum | 32 | 2 | 1 | – | not run yet |" in table
    assert starts(study_dir) == {"lamb_b8_lr0.1_w1_s1": 1, "lamb_b8_lr0.4_w1_s1": 1}
    result = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    counts = starts(study_dir)
    assert counts.pop("lamb_b8_lr0.4_w1_s1") == 2  # killed unfinished: run again
    status = json.load(open(os.path.join(
        study_dir, runner.RUNS_SUBDIR, "lamb_b8_lr0.4_w1_s1", runner.STATUS_FILE)))
    assert status["processes"] == 2 and status["process_seconds"] >= 3  # both processes
    assert set(counts.values()) == {1} and len(counts) == 15
    assert "[2/8] lamb_b8_lr0.4_w1_s1: diverged" in result.stdout  # 1 of 8 already done
    assert "sweep: 8 runs (1 finished before: not run again)" in result.stdout.splitlines()


@pytest.mark.slow  # runs the fake recipe in processes
def test_a_study_dir_recorded_with_other_settings_is_refused_before_any_run(
        fake_recipe, tmp_path, capsys):
    """A run's name does not hold its steps (epochs) or the recipe's config and overrides:
    a study with other settings in the same --study_dir must not tabulate its runs."""
    study_dir = str(tmp_path / "study")
    grid = [arg for arg in TINY_GRID if not arg.startswith(("--batch_sizes", "--optimizers",
                                                            "--seeds"))]
    grid += ["--batch_sizes=8", "--optimizers=lamb", "--seeds=1", f"--study_dir={study_dir}"]
    assert cli.main(grid) == 0
    capsys.readouterr()
    before = starts(study_dir)
    for change, difference in [
            ("--epochs=2", "(steps 8 then, 16 now)"),  # 2 x 64 examples / batch 8
            ("--params_override=optimizer.beta_1=0.8",
             "(--params_override '' then, 'optimizer.beta_1=0.8' now)"),
    ]:
        assert cli.main(grid + [change]) == 2
        for extra in ([], ["--report_only"]):
            assert cli.main(grid + [change] + extra) == 2
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert len(lines) == 3 and captured.out == ""
        assert lines[0].startswith(f"error: --study_dir={study_dir}: run lamb_b8_lr0.1_w1_s1 "
                                   f"was recorded with other settings {difference}")
        assert lines[0].endswith("; give another --study_dir for these settings, or the flags "
                                 "of the study that made it")
    assert starts(study_dir) == before  # nothing ran again
    assert cli.main(grid + ["--report_only"]) == 0  # the settings that made it: tabulated
    # the same config file spelled otherwise (was "recorded with other settings")
    respelled = [f"--config_file={os.path.relpath(arg.split('=', 1)[1])}"
                 if arg.startswith("--config_file=") else arg for arg in grid]
    assert respelled != grid and cli.main(respelled + ["--report_only"]) == 0


def test_a_failure_that_is_not_divergence_stops_the_study(fake_recipe, tmp_path, capsys):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STUDY_FAKE_FAIL", "1")
        assert cli.main(TINY_GRID + [f"--study_dir={tmp_path / 'study'}"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: run lamb_b8_lr0.1_w1_s1 failed (exit 2): no TFRecords")


def test_batch_sizes_are_sorted_and_the_base_batch_is_the_smallest():
    args = flags.parse_args([a for a in TINY_GRID if not a.startswith("--batch_sizes")]
                          + ["--batch_sizes=32,8", "--study_dir=unused"])
    study = flags.settings_from(args)
    assert (study.batch_sizes, study.base_batch_size) == ((8, 32), 8)


@pytest.mark.parametrize("change", ["--seeds=4294967295", "--warmup_steps=0"])
def test_edge_values_the_recipes_take_are_accepted(change):
    flag = change.split("=")[0]
    args = flags.parse_args([a for a in TINY_GRID if not a.startswith(flag + "=")]
                          + [change, "--study_dir=unused"])
    study = flags.settings_from(args)
    assert (study.seeds == (4294967295,)) if flag == "--seeds" else study.warmup_steps == 0


@pytest.mark.parametrize(
    "change, message",
    [
        ("--batch_sizes=8,x", "--batch_sizes: 'x' in '8,x' is not a whole number; give a "
         "comma-separated list of them"),
        # a list all the same: the item is what is wrong
        ("--batch_sizes=8,32.0", "--batch_sizes: '32.0' in '8,32.0' is not a whole number"),
        ("--lr_multipliers=1,x", "--lr_multipliers: 'x' in '1,x' is not a number"),
        # a flag named in full, as absl's (argparse would take --repeat for --repeats)
        # named before the missing flags argparse would report first, with its nearest
        ("--epoch=2", "--epoch is not a flag of this program (did you mean --epochs?); see "
                      "--help"),
        ("--base_lr=lamb:0.1", "expected OPTIMIZER=LR items"),
        # the number is what is wrong: it said "expected OPTIMIZER=LR items" as above
        ("--base_lr=lamb=fast", "'lamb=fast': the learning rate of lamb=fast is not a number"),
        ("--config_file=/tmp", "--config_file /tmp is a directory; give a YAML file"),
        ("--config_file=/nowhere.yaml", "--config_file /nowhere.yaml does not exist; check "
         "the path (relative to the current directory)"),
        # a misspelt optimizer is named with the flag it came from, before --base_lr's check
        ("--optimizers=lamb,moment", "--optimizers: 'moment' is not an optimizer of the "
         "recipes (optimizer.name: lamb, lars, adamw, momentum); did you mean momentum?"),
        ("--untuned=adam", "--untuned: 'adam' is not an optimizer of the recipes"),
        # a rate for an optimizer not run is kept for another study; a misspelt one is not
        ("--base_lr=lamb=0.1,momentum=0.1,lras=1.0", "--base_lr: 'lras' is not an optimizer "
         "of the recipes (optimizer.name: lamb, lars, adamw, momentum); did you mean lars?"),
        ("--micro_batch_size=16", "8 is not a multiple of --micro_batch_size=16"),
        ("--params_override={train: {seed: 3}}", "use key=value,... items"),
        # the study sets it for each run: the recipe would refuse the key given twice
        ("--params_override=train.seed=3,data.seed=1", "--params_override sets train.seed, "
         "which the study sets for each run itself from its flags (--help lists them); drop it"),
        ("--epochs=nan", "--epochs: got nan; give a finite number above 0"),
        ("--epochs=inf", "--epochs: got inf; give a finite number above 0"),
        ("--epochs=0", "--epochs: got 0.0; give a finite number above 0"),
        ("--epochs=1e30", "--epochs=1e+30 of --train_examples=64 is 8e+30 steps at batch 8, "
         "more than a step counter (an int64) holds"),
        ("--train_examples=-64", "--train_examples: got -64; give a finite number above 0"),
        ("--micro_batch_size=0", "--micro_batch_size: got 0; give a finite number above 0"),
        ("--batch_sizes=8,-32", "--batch_sizes: got -32; give a finite number above 0"),
        ("--lr_multipliers=1,nan", "--lr_multipliers: got nan; give a finite number above 0"),
        ("--lr_multipliers=inf", "--lr_multipliers: got inf; give a finite number above 0"),
        ("--parallel=0", "--parallel: got 0; give a finite number above 0"),
        ("--base_batch_size=-32", "--base_batch_size=-32 is negative"),
        ("--tolerance=-0.01", "--tolerance=-0.01: give a finite fraction of 0 or more, e.g. "
         "0.01"),
        ("--tolerance=nan", "--tolerance=nan: give a finite fraction of 0 or more"),
        ("--tolerance=inf", "--tolerance=inf: give a finite fraction of 0 or more"),
        ("--metric_mode=lowest", "--metric_mode: invalid choice: 'lowest'"),
        # a shipped recipe's metrics are known: a misspelt one is named as such
        ("--metric=top1_accuracy", "--metric=top1_accuracy: recipe resnet reports no such "
         "held-out metric"),
        ("--warmup_steps=-1", "--warmup_steps must be at least 0, got -1"),
        ("--seeds=1,-1", "--seeds: -1 is not a seed the recipes take; give seeds from 0 to"),
        ("--seeds=4294967296", "--seeds: 4294967296 is not a seed the recipes take"),
        # the study's flag named, not the --params_override the study would pass the recipe
        ("--base_lr=lamb=nan,momentum=0.1", "--base_lr: lamb=nan is not a learning rate"),
        ("--base_lr=lamb=0.1,momentum=inf", "--base_lr: momentum=inf is not a learning rate"),
        ("--base_lr=lamb=0,momentum=0.1", "--base_lr: lamb=0.0 is not a learning rate"),
        ("--base_lr=lamb=1e308,momentum=0.1", "lamb at batch 8 gets learning rate inf"),
        # a value given twice is a typo more often than a wish (argparse kept both, the grid
        # one); a layering flag given twice would keep only its last items
        ("--batch_sizes=8,8", "--batch_sizes: '8,8' gives 8 twice; give each once"),
        ("--seeds=1,2,1", "--seeds: '1,2,1' gives 1 twice; give each once"),
        ("--optimizers=lamb,momentum,lamb", "--optimizers: 'lamb,momentum,lamb' gives lamb "
         "twice"),
        ("--lr_multipliers=1,1.0", "--lr_multipliers: '1,1.0' gives 1.0 twice"),
        ("--base_lr=lamb=0.1,momentum=0.1,lamb=0.2", "--base_lr: "
         "'lamb=0.1,momentum=0.1,lamb=0.2' gives lamb twice; give each once"),
        (["--params_override=data.seed=1", "--params_override=data.seed=2"],
         "--params_override is given twice and only the last would count; give it once"),
    ],
)
def test_user_mistakes_are_one_line_before_any_run(change, message, tmp_path, capsys):
    changes = [change] if isinstance(change, str) else change
    flag = changes[0].split("=")[0]
    argv = [arg for arg in TINY_GRID if not arg.startswith(flag + "=")] + changes
    study_dir = tmp_path / "study"
    try:
        status = cli.main(argv + [f"--study_dir={study_dir}"])
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    assert status == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("error: ") and message in line
    assert captured.out == "" and not study_dir.exists()


@pytest.mark.parametrize("files", ["", "missing"])
def test_training_files_that_are_not_there_are_one_line_before_any_run(
        files, tmp_path, monkeypatch, capsys):
    # Found by the recipe's own check of the files its runs read (Task.check_data), in this
    # process: before, the first run failed on them after the study had written runs/.
    for name, value in (("TF_USE_LEGACY_KERAS", "1"), ("TF_CPP_MIN_LOG_LEVEL", "2")):
        monkeypatch.setenv(name, value)  # what the check sets, undone for the next tests
    pattern = str(tmp_path / "nowhere" / "train-*") if files else ""
    override = "data.embedded_digits=false" + (f",data.train_file_pattern={pattern}"
                                                if files else "")  # the config's: ""
    study_dir = tmp_path / "study"
    assert cli.main(TINY_GRID + [f"--params_override={override}",
                                 f"--study_dir={study_dir}"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    expected = (f"error: data.train_file_pattern={pattern!r} matches no file" if files
                else "error: data.train_file_pattern is empty")
    assert line.startswith(expected)
    assert captured.out == "" and not study_dir.exists()


def test_an_init_checkpoint_that_holds_none_is_one_line_before_any_run(
        tmp_path, monkeypatch, capsys):
    """The study checked the config and the data but not the driver's other checks before
    work: a train.init_checkpoint holding no checkpoint started the first run, which
    failed on it."""
    for name, value in (("TF_USE_LEGACY_KERAS", "1"), ("TF_CPP_MIN_LOG_LEVEL", "2")):
        monkeypatch.setenv(name, value)  # what the check sets, undone for the next tests
    nowhere, study_dir = str(tmp_path / "nowhere"), tmp_path / "study"
    assert cli.main(TINY_GRID + [f"--params_override=train.init_checkpoint={nowhere}",
                                 f"--study_dir={study_dir}"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"error: train.init_checkpoint={nowhere!r} holds no checkpoint; "
                            "give phase 1's model_dir or a checkpoint path such as "
                            "<model_dir>/checkpoints/ckpt-7038\n")
    assert captured.out == "" and not study_dir.exists()


@pytest.mark.slow  # starts TensorFlow in a process
def test_a_check_of_the_loaded_config_is_one_line_on_the_console_too(tmp_path):
    """TensorFlow's C++ start-up lines are kept off the console as in the recipes (they
    came before the error line when a check imported the driver before the study had
    quietened TensorFlow; in-process tests cannot see them: they bypass sys.stderr)."""
    nowhere, study_dir = str(tmp_path / "nowhere"), tmp_path / "study"
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "recipes.study", *TINY_GRID, f"--study_dir={study_dir}",
         f"--params_override=train.init_checkpoint={nowhere}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
        env={**env, "PYTHONPATH": REPO_ROOT})
    assert result.returncode == 2
    assert result.stderr == f"error: train.init_checkpoint={nowhere!r} holds no checkpoint; " \
        "give phase 1's model_dir or a checkpoint path such as " \
        "<model_dir>/checkpoints/ckpt-7038\n"
    assert result.stdout == "" and not study_dir.exists()


@pytest.mark.slow
def test_tiny_grid_through_the_real_resnet_recipe(tmp_path):
    """2 batch sizes x 2 learning rates, 4 and 2 steps, the real CLI (two optimizers'
    lines: the fake recipe's tests above)."""
    study_dir = tmp_path / "study"
    argv = [
        sys.executable, "-m", "recipes.study",
        "--recipe=resnet",
        f"--config_file={os.path.join(REPO_ROOT, 'configs', 'resnet', 'tiny_cpu.yaml')}",
        "--params_override=model.depth_multiplier=0.25",
        f"--study_dir={study_dir}",
        "--batch_sizes=16,32", "--optimizers=lamb",
        "--base_lr=lamb=0.005", "--lr_multipliers=1,2",
        "--epochs=1", "--train_examples=64", "--micro_batch_size=8", "--warmup_steps=1",
        "--seeds=1", "--parallel=2",
    ]
    result = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=3000,
                            env={**os.environ, "PYTHONPATH": REPO_ROOT})
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.load(open(study_dir / "study.json"))["rows"]
    assert sorted((row["line"], row["global_batch_size"], row["steps"]) for row in rows) == [
        ("lamb", 16, 4), ("lamb", 32, 2)
    ]
    for row in rows:
        assert 0.0 <= row["metric_mean"] <= 1.0 and len(row["sweep"]) == 2
        # 2 and 4 micro-batches of 8 per step: each seed's run gives an estimate, which on 64
        # examples may come out negative (then counted as not measurable, never averaged)
        if row["noise_scale"] is None:
            assert row["noise_scale_not_measurable"] == row["seeds"]
        else:
            assert row["noise_scale"] > 0 and row["noise_scale_not_measurable"] < row["seeds"]
    assert "[4/4]" in result.stdout and (study_dir / "study.png").exists()
    # the metrics the study accepts for resnet before any run are those a run reports
    for results in study_dir.glob("runs/*/results.json"):
        eval_keys = tuple(sorted(json.load(open(results))["eval"]))
        assert eval_keys == adapter.HELD_OUT_METRICS["resnet"]


def _documented_study_commands(doc="batch_study.md", fence="```sh\n"):
    """argv (after `-m recipes.study`) of every study command in the shell blocks (those
    opened by `fence`) of docs/`doc`."""
    with open(os.path.join(REPO_ROOT, "docs", doc)) as handle:
        blocks = handle.read().split(fence)[1:]  # each starts a shell block
    lines = [line for block in blocks
             for line in block.split("```")[0].replace("\\\n", " ").splitlines()]
    return [line.split("-m recipes.study", 1)[1].split()
            for line in lines if "-m recipes.study" in line]


def test_the_documented_study_commands_are_valid(tmp_path, monkeypatch, capsys):
    """Every `python -m recipes.study` command of docs/batch_study.md parses and passes the
    recipe's config checks for every run it plans (with --report_only into an empty
    directory: nothing runs; its refusal is the last check), so the published commands
    cannot rot. The digits' TFRecords that the page converts first stand in as empty files
    of their names, under tmp_path instead of /tmp."""
    commands = _documented_study_commands()
    assert len(commands) == 3  # the example, the ResNet study, the BERT study
    digits = tmp_path / "study_digits"
    (digits / "digits").mkdir(parents=True)
    for split in ("train", "validation"):
        (digits / "digits" / f"{split}-00000-of-00004").write_bytes(b"")
    commands = [[arg.replace("/tmp/study_digits", str(digits)) for arg in argv]
                for argv in commands]
    monkeypatch.chdir(REPO_ROOT)  # the commands' config paths are relative to the root
    for name, value in (("TF_USE_LEGACY_KERAS", "1"), ("TF_CPP_MIN_LOG_LEVEL", "2")):
        monkeypatch.setenv(name, value)  # what the check sets, undone for the next tests
    for index, argv in enumerate(commands):
        argv = [a for a in argv if not a.startswith("--study_dir=")]
        study_dir = tmp_path / str(index)
        assert cli.main(argv + [f"--study_dir={study_dir}", "--report_only"]) == 2, argv
        assert capsys.readouterr().err == no_finished_runs(study_dir), argv


def _write_documented_recipe_file(directory):
    """docs/writing_a_recipe.md's recipe, saved as the page says: `digits_mlp.py`."""
    with open(os.path.join(REPO_ROOT, "docs", "writing_a_recipe.md")) as handle:
        blocks = handle.read().split("```python\n")[1:]
    (code,) = [block.split("```")[0] for block in blocks if block.startswith("# digits_mlp.py:")]
    (directory / "digits_mlp.py").write_text(code)


def test_the_documented_study_of_a_recipe_file_is_valid(tmp_path, monkeypatch, capsys):
    """The page's study command parses, finds the recipe file's Task and passes its config
    checks for every run it plans (--report_only into an empty directory: nothing runs; its
    refusal is the last check)."""
    _write_documented_recipe_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    for name, value in (("TF_USE_LEGACY_KERAS", "1"), ("TF_CPP_MIN_LOG_LEVEL", "2")):
        monkeypatch.setenv(name, value)
    (command,) = _documented_study_commands("writing_a_recipe.md", "```bash\n")
    argv = [a for a in command if not a.startswith("--study_dir=")]
    assert "--recipe=digits_mlp.py" in argv
    assert cli.main(argv + [f"--study_dir={tmp_path / 'study'}", "--report_only"]) == 2
    assert capsys.readouterr().err == no_finished_runs(tmp_path / "study")


def test_a_recipe_file_needs_a_metric_and_one_task(tmp_path, capsys):
    _write_documented_recipe_file(tmp_path)
    recipe = str(tmp_path / "digits_mlp.py")
    argv = [arg for arg in TINY_GRID if not arg.startswith(("--recipe=", "--config_file="))]
    assert cli.main([f"--recipe={recipe}", f"--study_dir={tmp_path / 's'}"] + argv) == 2
    assert capsys.readouterr().err.startswith(f"error: --metric is required with --recipe={recipe}")
    # a name that does not say which way it is better needs --metric_mode, before any run
    assert cli.main([f"--recipe={recipe}", f"--study_dir={tmp_path / 's'}", "--metric=score"]
                    + argv) == 2
    assert capsys.readouterr().err == (
        "error: --metric=score: which way it is better is not known from its name; give "
        "--metric_mode=min (lower is better) or --metric_mode=max\n")
    # a misspelt word is named: it is more likely than a metric of its own
    assert cli.main([f"--recipe={recipe}", f"--study_dir={tmp_path / 's'}",
                     "--metric=val_acuracy"] + argv) == 2
    assert capsys.readouterr().err == (
        "error: --metric=val_acuracy: which way it is better is not known from its name "
        "('acuracy': accuracy misspelt?); give --metric_mode=min (lower is better) or "
        "--metric_mode=max\n")
    assert not (tmp_path / "s").exists()
    (tmp_path / "two.py").write_text(
        "from recipes.common import task\nclass A(task.Task): pass\nclass B(task.Task): pass\n")
    with pytest.raises(Exception, match="defines 2 subclasses of recipes.common.task.Task"):
        adapter.task_class_of(str(tmp_path / "two.py"))
    (tmp_path / "broken.py").write_text("import no_such_module\n")
    with pytest.raises(Exception, match="broken.py cannot be imported: ModuleNotFoundError"):
        adapter.task_class_of(str(tmp_path / "broken.py"))
    # a file that runs its program when imported: it read the study's flags and blamed one
    (tmp_path / "runs.py").write_text(
        "import sys\nprint('error: --model_dir is required', file=sys.stderr)\n"
        "sys.exit(2 if sys.argv[1:] == [] else 3)\n")
    with pytest.raises(UserError) as error:
        adapter.task_class_of(str(tmp_path / "runs.py"))
    assert str(error.value) == (
        f"--recipe={tmp_path / 'runs.py'} exited when imported (status 2): put its "
        "`driver.main(...)` under `if __name__ == \"__main__\":` (docs/writing_a_recipe.md)")
    assert capsys.readouterr().err == ""  # only the study's line
    # a name with words of both ways is no misspelling of either
    assert cli.main([f"--recipe={recipe}", f"--study_dir={tmp_path / 's'}",
                     "--metric=val_loss_accuracy"] + argv) == 2
    assert capsys.readouterr().err == (
        "error: --metric=val_loss_accuracy: which way it is better is not known from its "
        "name; give --metric_mode=min (lower is better) or --metric_mode=max\n")


def test_a_recipe_file_without_a_method_a_run_calls_is_one_line_before_any_run(
        tmp_path, monkeypatch, capsys):
    """A recipe file's Task without `evaluate` passed the study's checks; its first run
    trained and then failed on the driver's own check of the methods it calls."""
    _write_documented_recipe_file(tmp_path)
    code = (tmp_path / "digits_mlp.py").read_text()
    start = code.index("    def evaluate(")
    end = code.index("    def ", start + 1)
    (tmp_path / "digits_mlp.py").write_text(code[:start] + code[end:])
    monkeypatch.chdir(tmp_path)
    for name, value in (("TF_USE_LEGACY_KERAS", "1"), ("TF_CPP_MIN_LOG_LEVEL", "2")):
        monkeypatch.setenv(name, value)
    argv = [arg for arg in TINY_GRID if not arg.startswith(("--recipe=", "--config_file="))]
    assert cli.main(["--recipe=digits_mlp.py", "--metric=accuracy", "--study_dir=study"]
                    + argv) == 2
    captured = capsys.readouterr()
    assert captured.err == ("error: DigitsMLP does not implement evaluate, which "
                            "--mode=train_and_eval calls: define it in DigitsMLP\n")
    assert captured.out == "" and not (tmp_path / "study").exists()


@pytest.mark.slow
def test_a_study_runs_a_recipe_file_of_ones_own(tmp_path):
    """docs/writing_a_recipe.md's recipe file through the real study CLI: 2 batch sizes."""
    _write_documented_recipe_file(tmp_path)
    argv = [sys.executable, "-m", "recipes.study", "--recipe=digits_mlp.py",
            "--metric=accuracy", "--study_dir=study", "--batch_sizes=512,1024",
            "--optimizers=lamb", "--base_lr=lamb=0.05", "--lr_multipliers=1", "--epochs=1",
            "--train_examples=4000", "--micro_batch_size=256", "--warmup_steps=1",
            "--seeds=1", "--parallel=2"]
    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=900,
                            env={**os.environ, "PYTHONPATH": REPO_ROOT})
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.load(open(tmp_path / "study" / "study.json"))["rows"]
    assert sorted((row["global_batch_size"], row["steps"]) for row in rows) == [(512, 8),
                                                                                (1024, 4)]
    assert all(0.0 <= row["metric_mean"] <= 1.0 for row in rows)


def no_finished_runs(study_dir):
    return (f"error: --report_only: --study_dir={study_dir} has no finished run of this "
            "study; run the command without --report_only to run them\n")


def test_report_only_without_finished_runs_is_one_line_and_writes_nothing(
        fake_recipe, tmp_path, capsys):
    study_dir = tmp_path / "study"
    assert cli.main(TINY_GRID + [f"--study_dir={study_dir}", "--report_only"]) == 2
    captured = capsys.readouterr()
    assert (captured.err, captured.out) == (no_finished_runs(study_dir), "")
    assert not study_dir.exists()
    study_dir.mkdir()  # an empty directory: still nothing to report, nothing written in it
    assert cli.main(TINY_GRID + [f"--study_dir={study_dir}", "--report_only"]) == 2
    assert capsys.readouterr().err == no_finished_runs(study_dir)
    assert os.listdir(study_dir) == []


@pytest.mark.parametrize("name, content, advice", [
    (runner.STATUS_FILE, "", runner.REDO_ADVICE),
    (runner.STATUS_FILE, "[]", runner.REDO_ADVICE),
    (runner.STOPPED_ATTEMPTS_FILE, '{"seconds": 3}', runner.STOPPED_ATTEMPTS_ADVICE),
    (adapter.RESULTS_FILE, '{"eval": {"top_1_accuracy": 0.5', "the run is evaluated again"),
])
def test_a_damaged_file_of_a_run_is_one_line_naming_it(name, content, advice, tmp_path,
                                                        capsys):
    """A crash can leave a file truncated; one edited by hand may hold anything."""
    run = plan.sweep_runs(settings(batch_sizes=(64,)))[("lamb", 64)][0]
    directory = runner.run_dir(str(tmp_path), run)
    os.makedirs(directory)
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write(content)
    with pytest.raises(UserError) as error:
        if name == runner.STATUS_FILE:
            runner.read_status(str(tmp_path), run)
        elif name == runner.STOPPED_ATTEMPTS_FILE:
            runner._stopped_attempts(directory)
        else:
            adapter.read_results(directory, "top_1_accuracy")
    assert str(error.value).startswith(path + " ") and advice in str(error.value)
    if name == runner.STATUS_FILE:  # through the command: before any run, exit status 2
        argv = [arg for arg in TINY_GRID if not arg.startswith("--batch_sizes")]
        grid_run = plan.sweep_runs(flags.settings_from(flags.parse_args(
            argv + ["--batch_sizes=8", f"--study_dir={tmp_path}"])))[("lamb", 8)][0]
        os.makedirs(runner.run_dir(str(tmp_path), grid_run))
        with open(os.path.join(runner.run_dir(str(tmp_path), grid_run), name), "w") as handle:
            handle.write(content)
        assert cli.main(argv + ["--batch_sizes=8", f"--study_dir={tmp_path}"]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("error: ") and advice in line


def test_a_study_reported_on_another_metric_reads_that_metric_of_every_run(
        fake_recipe, tmp_path, capsys):
    """A run's study_run.json records the figure of one metric: a study made with the
    default (top-1) and tabulated with --metric=top_5_accuracy showed the top-1 figures
    under the top-5 name."""
    study_dir = tmp_path / "study"
    grid = [arg for arg in TINY_GRID if not arg.startswith(("--optimizers", "--seeds"))]
    grid += ["--optimizers=lamb", "--seeds=1", f"--study_dir={study_dir}"]
    assert cli.main(grid) == 0
    before = starts(study_dir)
    for metric in ("top_5_accuracy", "loss", "top_1_accuracy"):
        assert cli.main(grid + [f"--metric={metric}", "--report_only"]) == 0
        with open(study_dir / "study.json") as handle:
            table = json.load(handle)
        assert table["metric"] == metric
        for row in table["rows"]:
            run = f"lamb_b{row['global_batch_size']}_lr{row['learning_rate']:g}_w1_s1"
            with open(study_dir / "runs" / run / "results.json") as handle:
                assert row["metric_values"] == [json.load(handle)["eval"][metric]], metric
    assert starts(study_dir) == before  # nothing ran again
    capsys.readouterr()


def test_a_misspelt_metric_of_a_shipped_recipe_is_one_line_before_any_run(
        fake_recipe, tmp_path, capsys):
    study_dir = tmp_path / "study"
    assert cli.main(TINY_GRID + [f"--study_dir={study_dir}", "--metric=top_1_acuracy"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("error: --metric=top_1_acuracy: recipe resnet reports no such "
                            "held-out metric; give one of loss, top_1_accuracy, "
                            "top_5_accuracy\n")
    assert captured.out == "" and not study_dir.exists()


@pytest.mark.parametrize("classes, metric, refused", [
    (5, "top_5_accuracy", True), (6, "top_5_accuracy", False), (5, "top_1_accuracy", False)])
def test_top_5_of_a_config_of_5_classes_or_fewer_is_one_line_before_any_run(
        classes, metric, refused, tmp_path, monkeypatch, capsys):
    """ResNet reports top-5 only above 5 classes: the check of --metric against the recipe's
    list passed, the first run trained, and only its results.json stopped the study. Now the
    config every run would load (config file, --params_override, defaults) is asked."""
    for name, value in (("TF_USE_LEGACY_KERAS", "1"), ("TF_CPP_MIN_LOG_LEVEL", "2")):
        monkeypatch.setenv(name, value)  # what the check sets, undone for the next tests
    study_dir = tmp_path / "study"
    # (no training files: a study that passes the metric check stops at the data check)
    assert cli.main(TINY_GRID + [
        f"--params_override=data.embedded_digits=false,data.num_classes={classes}",
        f"--metric={metric}", f"--study_dir={study_dir}"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line == (
        f"error: --metric={metric}: the config's data.num_classes is {classes} (<= 5), so "
        "recipe resnet does not report top-5 accuracy (every label is among the top 5); give "
        "--metric=top_1_accuracy, or a config of more than 5 classes" if refused
        else "error: data.train_file_pattern is empty" + line.split("is empty", 1)[1])
    assert captured.out == "" and not study_dir.exists()


def test_the_study_asks_the_resnet_model_which_classes_get_top_5(monkeypatch):
    """One place knows that top-k needs more than k classes (recipes/resnet/model.py): the
    study's check follows it."""
    from recipes.resnet import model as model_lib

    config = types.SimpleNamespace(data=types.SimpleNamespace(num_classes=3))
    with pytest.raises(UserError, match=r"data.num_classes is 3 \(<= 5\).*top-5 accuracy"):
        adapter.check_metric_of_config("resnet", "top_5_accuracy", config)
    adapter.check_metric_of_config("bert", "top_5_accuracy", config)  # (not a resnet's)
    monkeypatch.setattr(model_lib, "TOP_K", 2)
    adapter.check_metric_of_config("resnet", "top_2_accuracy", config)  # 3 > k=2
    monkeypatch.setattr(model_lib, "TOP_K", 3)
    with pytest.raises(UserError, match=r"data.num_classes is 3 \(<= 3\).*top-3 accuracy"):
        adapter.check_metric_of_config("resnet", "top_3_accuracy", config)


@pytest.mark.slow  # runs the fake recipe in a process
def test_a_recipe_files_unknown_metric_stops_the_study_after_its_first_run(
        fake_recipe, tmp_path, capsys):
    """A recipe file's metrics are known only from a finished run: the first one names the
    metric given and those the run reported, and no other run starts."""
    study_dir = tmp_path / "study"
    recipe = os.path.join(TESTS_DIR, "study_fake_recipe.py")
    argv = [arg for arg in TINY_GRID if not arg.startswith(("--recipe=", "--config_file="))]
    argv += [f"--recipe={recipe}", "--metric=top_1_acc", f"--study_dir={study_dir}"]
    assert cli.main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    results = study_dir / "runs" / "lamb_b8_lr0.1_w1_s1" / "results.json"
    assert line == ("error: --metric=top_1_acc: run lamb_b8_lr0.1_w1_s1 finished, but its "
                    "held-out results have no 'top_1_acc', only loss, top_1_accuracy, "
                    "top_5_accuracy "
                    f"({results}); run the same command with --metric set to one of those")
    assert starts(study_dir) == {"lamb_b8_lr0.1_w1_s1": 1}  # no further run started
    assert runner.finished_runs(study_dir) == []  # not recorded: a fixed --metric reruns it


class _StubManager:
    latest_checkpoint = None

    def sync(self):
        pass


def _stub_model(step, variables=()):
    import tensorflow as tf

    optimizer = type("Optimizer", (), {"iterations": tf.Variable(step, dtype=tf.int64),
                                       "variables": lambda self: []})()
    return type("Model", (), {"optimizer": optimizer, "variables": list(variables),
                              "stop_training": False,
                              "make_train_function": lambda self: (lambda iterator: None),
                              "make_test_function": lambda self: (lambda iterator: None)})()


def _driver_error_line(call):
    """What recipes.common.errors.run prints for the TrainingDiverged `call` raises."""
    from recipes.common.errors import TrainingDiverged

    with pytest.raises(TrainingDiverged) as raised:
        call()
    return f"error: {raised.value}"


def test_the_driver_s_divergence_lines_are_recorded_as_diverged(tmp_path):
    """The lines the shared driver prints when a run diverges (the loss after a step, a
    variable before a checkpoint, the held-out loss), made by its own code, are what the
    study records as "diverged", and the fake recipe prints the first of them."""
    import tensorflow as tf

    from recipes.common import callbacks, driver

    sys.path.insert(0, TESTS_DIR)
    try:
        import study_fake_recipe
    finally:
        sys.path.remove(TESTS_DIR)
    loss = callbacks.CheckpointEachEpoch(_StubManager())
    loss.set_model(_stub_model(3))
    loss_line = _driver_error_line(
        lambda: loss.on_train_batch_end(2, {"loss": float("nan")}))
    assert loss_line == study_fake_recipe.DIVERGED
    weights = callbacks.CheckpointEachEpoch(_StubManager())
    weights.set_model(_stub_model(4, [tf.Variable([float("inf")], name="dense/kernel")]))
    weights_line = _driver_error_line(lambda: weights.on_epoch_end(0))
    stub_run = type("Run", (), {
        "model": _stub_model(5), "model_dir": str(tmp_path), "evaluation_dir": str(tmp_path),
        "strategy": None,
        "task": type("Task", (), {"evaluate": lambda self, model, strategy:
                                  {"loss": float("nan")}})()})()
    eval_line = _driver_error_line(lambda: driver._Run._evaluate(stub_run, "end"))
    for line in (loss_line, weights_line, eval_line):
        assert runner.is_divergence(line), line
    for line in ("error: no TFRecords match data.train_file_pattern=/nowhere",
                 "error: --params_override: config key 'optimizer.learning_rate' must be "
                 "float, got 'nan' (str)"):
        assert not runner.is_divergence(line), line


def _stop_the_study_in_its_second_run(tmp_path, stop):
    """(exit status, stdout, stderr, study dir) of a tiny study whose second run hangs,
    stopped there by `stop(process)`."""
    study_dir = str(tmp_path / "study")
    argv = [sys.executable, "-c", FAKE_STUDY_PROGRAM, *TINY_GRID, f"--study_dir={study_dir}"]
    hanging = os.path.join(study_dir, runner.RUNS_SUBDIR, "lamb_b8_lr0.4_w1_s1", "starts")
    process = subprocess.Popen(
        argv, env={**os.environ, "STUDY_FAKE_HANG_ABOVE_LR": "0.3"}, cwd=REPO_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(hanging) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert os.path.exists(hanging), "the study never reached its second run"
        stop(process)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, out, err, study_dir


@pytest.mark.slow  # runs the fake recipe in processes
def test_ctrl_c_is_one_line_naming_the_finished_runs_and_the_resume(fake_recipe, tmp_path):
    returncode, out, err, study_dir = _stop_the_study_in_its_second_run(
        tmp_path, lambda process: os.killpg(process.pid, signal.SIGINT))  # Ctrl-C's signal
    assert returncode == 130
    runs_dir = os.path.join(study_dir, runner.RUNS_SUBDIR)
    assert err == (f"interrupted: the study stopped; runs finished so far: 1, recorded in "
                   f"{runs_dir} (--report_only tabulates them); run the same command again "
                   "to resume\n")
    assert runner.finished_runs(study_dir) == ["lamb_b8_lr0.1_w1_s1"]  # the hung one: not
    assert "[1/8] lamb_b8_lr0.1_w1_s1" in out


@pytest.mark.slow  # runs the fake recipe in processes
def test_sigterm_to_the_study_stops_its_runs_and_is_one_line_exit_143(fake_recipe, tmp_path):
    """SIGTERM to the study alone (not its process group): it stops the run under way (with
    SIGTERM: a recipe saves its step), waits for it, and says what Ctrl-C says."""
    returncode, _, err, study_dir = _stop_the_study_in_its_second_run(
        tmp_path, lambda process: process.send_signal(signal.SIGTERM))
    assert returncode == 143
    runs_dir = os.path.join(study_dir, runner.RUNS_SUBDIR)
    assert err == (f"interrupted (SIGTERM): the study stopped; runs finished so far: 1, "
                   f"recorded in {runs_dir} (--report_only tabulates them); run the same "
                   "command again to resume\n")
    assert runner.finished_runs(study_dir) == ["lamb_b8_lr0.1_w1_s1"]


def test_the_plan_and_the_shared_schema_read_without_tensorflow():
    """The study's planner checks its arguments before any recipe (and TensorFlow) loads;
    the shared config schema it reads must not pull TensorFlow in."""
    code = ("import sys; import recipes.study.plan, recipes.common.schema; "
            "print('tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120, env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    assert result.stdout.strip() == "False", result.stderr[-2000:]


@pytest.mark.slow
def test_the_documented_recipe_reads_eval_steps_and_serves_float32_under_mixed_precision(
        tmp_path):
    """The page's recipe evaluated every held-out digit whatever eval.steps said, and under
    runtime.precision=mixed_bfloat16 its export served bfloat16 probabilities (README: "Losses
    and logits stay float32")."""
    _write_documented_recipe_file(tmp_path)
    argv = [sys.executable, "digits_mlp.py", "--model_dir=run", "--params_override="
            "train.steps=1,train.checkpoint_every=1,train.log_every=1,optimizer.warmup_steps=0,"
            "eval.steps=1,runtime.precision=mixed_bfloat16"]
    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": REPO_ROOT})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "(256 digits)  [after training]" in result.stdout, result.stdout
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    serve = tf.saved_model.load(str(tmp_path / "run" / "export")).signatures["serving_default"]
    served = serve(images=tf.zeros([2, 28, 28], tf.uint8))["probabilities"]
    assert served.dtype == tf.float32


def test_a_study_dir_holding_a_training_run_is_refused_before_any_run(tmp_path, capsys):
    """A study wrote its runs, study.md and study.json among a training run's files."""
    (tmp_path / "config.yaml").write_text("train: {steps: 3}\n")
    assert cli.main(TINY_GRID + [f"--study_dir={tmp_path}"]) == 2
    assert capsys.readouterr().err == (
        f"error: --study_dir={tmp_path}: it holds a training run (its config.yaml), among whose "
        "files the study's runs, study.md and study.json would be written; give a directory of "
        "its own\n")
    assert os.listdir(tmp_path) == ["config.yaml"]


def test_a_finished_run_whose_config_changed_since_is_named(tmp_path):
    """A study run again after its config file (or a recipe file's defaults) changed
    tabulated the old runs as of the new settings, without a word."""
    config_file = os.path.join(REPO_ROOT, "configs", "resnet", "tiny_cpu.yaml")
    args = flags.parse_args(TINY_GRID + [f"--study_dir={tmp_path}"])
    run = plan.sweep_runs(flags.settings_from(args))[("lamb", 8)][0]
    task_class = adapter.task_class_of("resnet")
    options = types.SimpleNamespace(config_files=(config_file,), model_dir=None,
                                    params_override=adapter.override_string(run, ""))
    config_lib.save_config(driver.load_task(task_class, options).config, str(tmp_path))
    check = lambda files, extra: adapter.check_finished_configs(
        "resnet", files, [run], lambda _: str(tmp_path), extra)
    check([config_file], "")  # as it ran
    check([os.path.relpath(config_file)], "")  # the same file spelled otherwise
    with pytest.raises(UserError, match=re.escape(
            f"run {run.name} in {tmp_path} ran with optimizer.weight_decay_rate=0.01, and this "
            "study's config gives 0.5: a config file or the recipe changed since; give another "
            "--study_dir for the new settings, or restore them")):
        check([config_file], "optimizer.weight_decay_rate=0.5")


def test_the_table_marks_a_rate_at_an_end_of_its_sweep_and_says_what_its_columns_mean():
    """A winner at the top of the sweep read as a settled choice; study.md did not say what
    its noise scale, times and chosen rates were."""
    def row(chosen, rates, line="lamb"):
        return {"line": line, "global_batch_size": 64, "steps": 10, "warmup_steps": 1,
                "learning_rate": chosen, "sweep": {f"{rate:g}": 0.5 for rate in rates},
                "seeds": 1, "diverged_seeds": 0, "unfinished_runs": 1, "metric_mean": 0.5,
                "metric_std": None, "wall_time_seconds": 1.0, "noise_scale": None,
                "noise_scale_not_measurable": 0}
    table = report.markdown([row(0.4, (0.1, 0.2, 0.4)), row(0.1, (0.1, 0.2, 0.4)),
                             row(0.2, (0.1, 0.2, 0.4)), row(0.2, (0.1, 0.2)),
                             row(0.2, (0.2,), "lamb (untuned sqrt rule)")],
                            report.Metric.of("accuracy"))
    chosen = [line.split(" | ")[4] for line in table.splitlines()[2:]]
    assert chosen == ["0.4 (top of sweep)", "0.1 (bottom of sweep)", "0.2", "0.2", "0.2"]
    assert "(n=1, 1 run not finished)" in table  # was "1 runs"
    legend = report.legend(report.Metric.of("accuracy"))
    assert "the highest held-out accuracy on the first seed" in legend
    assert "without the process's start-up" in legend and "B_simple in examples" in legend
    assert "the lowest held-out loss" in report.legend(report.Metric.of("loss"))


def test_a_base_rate_of_an_optimizer_the_study_does_not_run_and_a_tolerance_of_1_or_more_are_noted(
        fake_recipe, tmp_path, capsys):
    grid = [arg for arg in TINY_GRID if not arg.startswith(("--batch_sizes", "--optimizers",
                                                            "--seeds", "--base_lr"))]
    assert cli.main(grid + ["--batch_sizes=8", "--optimizers=lamb", "--seeds=1",
                            "--base_lr=lamb=0.1,lars=1.0", f"--study_dir={tmp_path}",
                            "--tolerance=5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert ("note: --base_lr gives lars, which --optimizers does not list; it runs no such "
            "line") in out
    # a percentage given as a fraction is taken (a loss may be 500% worse), and noted
    assert "note: --tolerance=5 is 500%; for 5% give 0.05" in out
    assert out[-2] == "Largest batch: one batch size studied, nothing to compare"
    study_md = open(tmp_path / "study.md").read().split("\n")
    assert study_md[2].startswith("Made by: `python -m recipes.study --recipe=resnet ")
    assert study_md[4] == out[-2]


@pytest.mark.parametrize("recipe", ["resnet", "bert"])
def test_the_study_page_shows_the_answer_and_table_the_code_writes_from_its_data(recipe):
    """docs/batch_study.md's answer and table of each of its studies are what `report`
    writes from the study's JSON beside it (the answer's figures are pinned above)."""
    with open(os.path.join(REPO_ROOT, "docs", f"batch_study_{recipe}.json")) as handle:
        study = json.load(handle)
    metric = report.Metric.of(study["metric"])
    with open(os.path.join(REPO_ROOT, "docs", "batch_study.md")) as handle:
        page = handle.read()
    answer = "\n".join(report.largest_batches(study["rows"], metric, 0.01))
    assert f"```text\n{answer}\n```" in page
    assert report.markdown(study["rows"], metric) in page


def test_a_runs_progress_line_names_its_metric_and_a_negative_noise_estimate_is_no_scale(capsys):
    """It printed `metric 0.9150, ..., noise scale -4,612`: neither the metric's name nor the
    table's word for a negative estimate."""
    run = plan.sweep_runs(settings(batch_sizes=(64,)))[("lamb", 64)][0]
    for noise in (-4612.0, 551.4, None):
        cli._progress(1, 2, run, {"status": "ok", "result": {  # pylint: disable=protected-access
            "metric_name": "accuracy", "metric": 0.915, "steps": 250,
            "wall_time_seconds": 6.2, "noise_scale": noise}})
    assert capsys.readouterr().out.splitlines() == [
        f"[1/2] {run.name}: accuracy 0.9150, 250 steps, 6 s, noise scale not measurable",
        f"[1/2] {run.name}: accuracy 0.9150, 250 steps, 6 s, noise scale 551",
        f"[1/2] {run.name}: accuracy 0.9150, 250 steps, 6 s"]


def test_a_run_ended_by_the_studys_signal_before_the_study_starts_no_next_run(
        tmp_path, monkeypatch):
    """The process group's SIGTERM ended the run before the study's own handler said stop:
    the study's thread took the next run at once, leaving its directory (and a log naming a
    command never started) behind (a CI run: a killed study's third run directory, empty)."""
    commands = iter([[sys.executable, "-c", "import sys; sys.exit(143)"],
                     [sys.executable, "-c", "pass"]])
    monkeypatch.setattr(adapter, "command", lambda *args: next(commands))
    runs = [plan.Run("lamb", 8, 8, 2, 1, rate, 1) for rate in (0.1, 0.2)]
    study_dir = str(tmp_path / "study")

    def study_handler(*_):  # the study's SIGTERM, handled in the main thread a bit later
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, study_handler)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.execute(runs, parallel=1, progress=lambda *args: None, recipe="bert",
                           config_files=[], study_dir=study_dir, extra_overrides="",
                           metric="loss")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert os.listdir(os.path.join(study_dir, runner.RUNS_SUBDIR)) == [runs[0].name]


@pytest.mark.parametrize("exit_code", [143, 130, -signal.SIGTERM])
def test_a_run_ended_by_the_stopping_signal_is_a_stopped_attempt_before_the_study_stops(
        tmp_path, monkeypatch, exit_code):
    """A process group's SIGTERM reaches the study and its run at once: when the run ended
    before the study had said stop, its end was taken for a failure (or a divergence) and
    its process time was lost to the resumed run's status (a CI run: `processes` 1, not 2)."""
    code = (f"import os, signal; os.kill(os.getpid(), {-exit_code})" if exit_code < 0
            else f"import sys; sys.exit({exit_code})")
    monkeypatch.setattr(runner, "_STOP_GRACE_SECONDS", 0.1)  # (no study here to say stop)
    monkeypatch.setattr(adapter, "command",
                        lambda *args: [sys.executable, "-c", code])
    run = plan.Run("lamb", 8, 8, 2, 1, 0.1, 1)
    study_dir = str(tmp_path / "study")
    assert runner.execute_one(run, recipe="bert", config_files=[], study_dir=study_dir,
                              extra_overrides="", metric="loss") is None
    assert runner.read_status(study_dir, run) is None  # not finished: runs again on resume
    with open(os.path.join(runner.run_dir(study_dir, run),
                           runner.STOPPED_ATTEMPTS_FILE)) as f:
        assert len(json.load(f)) == 1
