"""input_teardown.py and noise_scale_cost.py time their contenders through
benchmarks/alternation.py: each round (a trial, a repeat) in another order, not one fixed
order in which the same contender always runs first, or right after the same other one."""
import collections
import importlib
import types


def _load(name):
    """A script of benchmarks/ as a module (stubbed per test by monkeypatch)."""
    return importlib.import_module(f"benchmarks.{name}")


def test_input_teardown_flips_autotuning_on_and_off_every_trial(monkeypatch, capsys):
    input_teardown = _load("input_teardown")
    order = []
    monkeypatch.setattr(input_teardown, "_distributed_dataset",
                        lambda task, plan, strategy, autotune: "on" if autotune else "off")
    monkeypatch.setattr(input_teardown, "_deletion_seconds",
                        lambda dataset, seconds, step_s: order.append(dataset) or 0.5)
    args = types.SimpleNamespace(trials=4, seconds=1.0, step_ms=10.0)
    samples = input_teardown._time_deletions(None, None, None, args)
    assert order == ["on", "off", "off", "on", "on", "off", "off", "on"]
    assert samples == {"on": [0.5] * 4, "off": [0.5] * 4}
    assert "trial 4/4 done" in capsys.readouterr().out


def test_noise_scale_cost_runs_its_three_variants_in_a_balanced_order(monkeypatch):
    noise_scale_cost = _load("noise_scale_cost")

    class Model:  # what measure uses of a GradientAccumulationModel
        def __init__(self, decay):
            self.decay = decay

        def make_train_function(self):
            self.train_function = lambda iterator: {}

    models = []
    monkeypatch.setattr(noise_scale_cost, "build", lambda micro, k, decay: (
        models.append(Model(decay)) or models[-1], [None]))
    timed = []
    monkeypatch.setattr(noise_scale_cost, "time_steps", lambda model, iterator, steps: (
        timed.append(models.index(model)) or (1.0, 0.5 + models.index(model))))
    row = noise_scale_cost.measure(4, 2, steps=1, repeats=6)
    rounds = [timed[i:i + 3] for i in range(3, len(timed), 3)]  # after 3 warm-up timings
    assert timed[:3] == [0, 1, 2] and len(rounds) == 6
    after = collections.Counter((r[i], r[i + 1]) for r in rounds for i in range(2))
    # over 6 rounds, each variant right after each other one twice (fixed order: 0->1, 1->2)
    assert after == {(a, b): 2 for a in range(3) for b in range(3) if a != b}
    assert row["cpu_ms_per_step"] == {"off": 500.0, "on": 1500.0, "off_again": 2500.0}
