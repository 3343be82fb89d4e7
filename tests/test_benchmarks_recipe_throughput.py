"""benchmarks/recipe_throughput.py runs end to end on tiny BERT data (its timings are not
checked: the speed claim is the same-run ratio the script prints)."""
import json
import math
import os
import subprocess
import sys

import pytest
import yaml

import tiny_bert_data
from conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # a subprocess building and tracing two BERT training loops


def test_recipe_and_model_garden_loops_both_timed_on_tiny_data(tmp_path):
    (tmp_path / "data").mkdir()
    data = tiny_bert_data.prepare(tmp_path / "data")
    config = tiny_bert_data.config(data, micro_batch_size=8, steps=2, checkpoint_every=2,
                                   dropout_rate=0.0)
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    report_path = tmp_path / "throughput.json"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "benchmarks", "recipe_throughput.py"),
         "--config_file", str(config_file), "--work_dir", str(tmp_path / "work"),
         "--steps", "2", "--rounds", "1", "--json", str(report_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": REPO_ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["batch"] == 8  # the micro-batch, k = 1
    for side in ("recipe", "Model Garden"):
        row = report["rows"][side]
        assert len(row["examples_per_s"]["samples"]) == 1
        assert math.isfinite(row["examples_per_s"]["median"]) and row["examples_per_s"]["median"] > 0
        assert 0 < row["optimizer_share"] and math.isfinite(row["optimizer_share"])
        assert report["parameters"][side] > 1000
    assert report["input_pipeline_vs_step"] > 0
    assert "| Model Garden |" in result.stdout and "| recipe |" in result.stdout
