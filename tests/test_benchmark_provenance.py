"""Every benchmark's --json names the commit it measured and the load the machine was under
(benchmarks/alternation.py `run_started`, `run_finished`), so that a figure quoted in a doc
can name them."""
import os
import subprocess

import pytest

from benchmarks import alternation

from conftest import REPO_ROOT

# every script of benchmarks/ that writes a --json report
JSON_SCRIPTS = ("accumulation_memory", "input_teardown", "iterator_checkpoint", "loop_callbacks",
                "noise_scale_cost", "optimizer_step", "recipe_throughput", "step_after_pause")


def _git(directory, *arguments):
    return subprocess.run(["git", "-C", str(directory), "-c", "user.name=t", "-c",
                           "user.email=t@example.com", *arguments], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_outside_git_the_commit_is_unknown(tmp_path):
    assert alternation.source_commit(str(tmp_path)) == {"git_commit": "unknown",
                                                        "git_tree": "unknown"}


def test_the_commit_is_the_checkouts_head_and_a_changed_tracked_file_makes_it_dirty(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "script.py").write_text("x = 1\n")
    _git(tmp_path, "add", "script.py")
    _git(tmp_path, "commit", "-q", "-m", "first")
    head = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "scratch.txt").write_text("untracked: not the code measured\n")
    assert alternation.source_commit(str(tmp_path)) == {"git_commit": head, "git_tree": "clean"}
    (tmp_path / "script.py").write_text("x = 2\n")
    assert alternation.source_commit(str(tmp_path)) == {"git_commit": head, "git_tree": "dirty"}
    # from a subdirectory of the checkout (benchmarks/ of the repository) too
    (tmp_path / "sub").mkdir()
    assert alternation.source_commit(str(tmp_path / "sub"))["git_commit"] == head


def test_a_run_records_the_commit_and_the_load_average_at_its_start_and_end(monkeypatch):
    loads = iter([(1.0, 2.0, 3.0), (4.0, 5.0, 6.0)])
    monkeypatch.setattr(os, "getloadavg", lambda: next(loads))
    started = alternation.run_started()
    run = alternation.run_finished(started)
    assert run["load_average_start"] == [1.0, 2.0, 3.0]
    assert run["load_average_end"] == [4.0, 5.0, 6.0]
    if os.path.isdir(os.path.join(REPO_ROOT, ".git")):  # this checkout's own HEAD
        assert run["git_commit"] == _git(REPO_ROOT, "rev-parse", "HEAD")
        assert run["git_tree"] in ("clean", "dirty")


@pytest.mark.parametrize("script", JSON_SCRIPTS)
def test_every_benchmark_writing_a_json_records_its_run(script):
    """Each script takes the start when its flags are checked and the end when it is done,
    and writes both into its --json (the scripts' runs are in the slow tests)."""
    with open(os.path.join(REPO_ROOT, "benchmarks", f"{script}.py"), encoding="utf-8") as f:
        source = f.read()
    assert '"--json"' in source or 'json_help="' in source
    assert source.count("alternation.run_started()") == 1
    assert "alternation.run_finished(" in source


def test_the_list_names_every_benchmark_with_a_json():
    scripts = {name[:-3] for name in os.listdir(os.path.join(REPO_ROOT, "benchmarks"))
               if name.endswith(".py")}
    with_json = set()
    for script in scripts:
        with open(os.path.join(REPO_ROOT, "benchmarks", f"{script}.py"), encoding="utf-8") as f:
            source = f.read()
        if ('add_argument("--json"' in source or "add_recipe_flags(" in source) and (
                "def main(" in source):  # (not recipe_flags.py, the module defining the flag)
            with_json.add(script)
    assert with_json == set(JSON_SCRIPTS)
