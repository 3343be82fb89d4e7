"""benchmarks/noise_scale_cost.py runs end to end at a tiny size (timings are not checked:
speed is the benchmark's business, never a test's)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT


@pytest.mark.slow  # a benchmark process
def test_benchmark_times_the_step_with_and_without_the_measurement(tmp_path):
    report = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO_ROOT, "benchmarks", "noise_scale_cost.py"),
            "--configurations=4x2",
            "--steps=2",
            "--repeats=1",
            "--max_overhead=inf",
            f"--json={report}",
        ],
        env={**os.environ, "PYTHONPATH": REPO_ROOT},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    written = json.loads(report.read_text())
    (row,) = written["rows"]
    # the run named: the commit measured and the load average at its start and end
    assert written["git_commit"] and written["git_tree"]
    assert len(written["load_average_start"]) == len(written["load_average_end"]) == 3
    # the two variants differ exactly by the measurement
    assert row["noise_scale_logged"] == {"off": False, "on": True, "off_again": False}
    assert min(row["cpu_ms_per_step"].values()) > 0
    assert "overhead" in result.stdout


@pytest.mark.slow  # a benchmark process
@pytest.mark.parametrize("flag, name", [("--configurations=32by8", "--configurations"),
                                        ("--steps=0", "--steps=0"),
                                        ("--json=/no/such/directory/r.json", "--json"),
                                        # the exit status would say 1 whatever it measured
                                        ("--max_overhead=-1", "error: --max_overhead=-1.0 "
                                                              "must be a share of at least 0")])
def test_benchmark_rejects_a_bad_flag_in_one_line_before_any_timing(flag, name):
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "benchmarks", "noise_scale_cost.py"), flag],
        env={**os.environ, "PYTHONPATH": REPO_ROOT},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2
    assert name in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""  # before the first timing's header
