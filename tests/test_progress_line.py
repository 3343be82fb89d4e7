"""The console's progress line times steps from the end of the process's first step: the
first step's tracing and compiling (seconds, once) made every later figure and the time
left too large (`step 1/6 ... 8.86 s/step, 0m44s left` at about 1 s a step)."""
import types

import pytest

from recipes.common import callbacks


class _Iterations:
    def __init__(self):
        self.value = 0

    def numpy(self):
        return self.value


def _run(every, total, step_ends, monkeypatch, capsys, logs=None):
    """Drives a ProgressLine: training starts at time 0; step i+1 ends at step_ends[i]."""
    clock = {"now": 0.0}
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: clock["now"])
    iterations = _Iterations()
    line = callbacks.ProgressLine(total, every)
    line.set_model(types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=iterations)))
    line.on_train_begin()
    for step, end in enumerate(step_ends, start=1):
        clock["now"], iterations.value = end, step
        line.on_train_batch_end(step - 1, logs or {"loss": 1.0})
    return capsys.readouterr().out.splitlines()


def test_seconds_per_step_leave_out_the_first_steps_tracing(monkeypatch, capsys):
    # the first step takes 9 s (tracing), each later one 1 s
    lines = _run(2, 6, [9.0, 10.0, 11.0, 12.0, 13.0, 14.0], monkeypatch, capsys)
    assert [line.split("  ")[-1] for line in lines] == [
        "1.00 s/step, 0m04s left", "1.00 s/step, 0m02s left", "1.00 s/step, 0m00s left"]


def test_a_line_at_the_first_step_says_its_time_includes_tracing(monkeypatch, capsys):
    lines = _run(1, 3, [9.0, 10.0, 12.0], monkeypatch, capsys)
    assert lines[0].endswith("loss=1  9.00 s/step (with tracing), 0m18s left")
    assert lines[1].endswith("1.00 s/step, 0m01s left")
    assert lines[2].endswith("1.50 s/step, 0m00s left")


def test_the_scalars_are_printed_by_name(monkeypatch, capsys):
    lines = _run(1, 1, [2.0], monkeypatch, capsys)
    assert lines == ["step 1/1  loss=1  2.00 s/step (with tracing), 0m00s left"]


def test_steps_under_a_second_are_given_in_milliseconds(monkeypatch, capsys):
    # the first step 2 s (tracing), then steps of 30 and 4.2 ms: 17.1 ms a step after it
    lines = _run(1, 3, [2.0, 2.03, 2.0342], monkeypatch, capsys)
    assert lines[0].endswith("2.00 s/step (with tracing), 0m04s left")
    assert lines[1].endswith("  30.0 ms/step, 0m00s left")
    assert lines[2].endswith("  17.1 ms/step, 0m00s left")


@pytest.mark.parametrize("seconds, text", [
    (12.3, "12.30 s"), (1.0, "1.00 s"), (0.9996, "1.00 s"), (0.9994, "999 ms"),
    (0.42, "420 ms"), (0.09996, "100 ms"), (0.042, "42.0 ms"), (0.0042, "4.20 ms")])
def test_a_step_time_keeps_three_figures(seconds, text):
    assert callbacks._step_time(seconds) == text


@pytest.mark.parametrize("estimate, text", [
    (227.4, "gradient_noise_scale=227.4"), (-1523.0, "gradient_noise_scale=not_yet"),
    (0.0, "gradient_noise_scale=not_yet"), (float("nan"), "gradient_noise_scale=not_yet")])
def test_a_noise_scale_estimate_below_zero_reads_not_yet(monkeypatch, capsys, estimate, text):
    # the estimate is negative while |G|² or tr(Σ) is below its noise: no scale yet, as the
    # run's final line says ("not measurable yet"), rather than a negative number of examples
    lines = _run(1, 1, [2.0], monkeypatch, capsys,
                 logs={"loss": 1.0, "gradient_noise_scale": estimate})
    assert lines == [f"step 1/1  loss=1 {text}  2.00 s/step (with tracing), 0m00s left"]
