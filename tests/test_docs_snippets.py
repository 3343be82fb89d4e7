"""Every Python block in README.md and docs/*.md runs as written.

Each ```python block is run in a fresh Python process with the default Keras (nothing set
in the environment but this repository on the path), from an empty working directory, so a
block must carry its own imports, and a tiny model and data where it needs them.

A block that reads what a documented run wrote says so in its first line, naming the run:

    # After the main job (runs/bert_tiny): ...
    # After the ResNet default (runs/resnet_tiny): ...
    # After the fine-tuning default (runs/bert_finetune): ...

Those blocks run after a short version of that run (same command, fewer steps) in the same
working directory, so the paths they read are the ones the docs name.

A block that is a whole program to save and run says so in its first line, with the command:

    # digits_mlp.py: run it as `python digits_mlp.py --model_dir=runs/digits_mlp`

It is written to that file in the working directory and run with that command line.
"""

import os
import re
import shlex
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC_FILES = ["README.md"] + sorted(
    os.path.join("docs", name) for name in os.listdir(os.path.join(REPO_ROOT, "docs"))
    if name.endswith(".md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

# The documented runs, shortened (same command, fewer steps), in the order they depend on.
RUNS = {
    "main job": [
        "-m", "recipes.bert.pretrain", "--config_file={repo}/configs/bert/tiny_cpu.yaml",
        "--model_dir=runs/bert_tiny",
        "--params_override=train.steps=2,train.checkpoint_every=2,train.log_every=1,"
        "optimizer.warmup_steps=1"],
    "fine-tuning default": [
        "-m", "recipes.bert.finetune", "--config_file={repo}/configs/bert/finetune_stdlib.yaml",
        "--model_dir=runs/bert_finetune", "--compare_with_random_init",
        "--params_override=encoder.pretraining_dir=runs/bert_tiny,train.steps=2,"
        "train.checkpoint_every=2,train.log_every=1,optimizer.warmup_steps=1"],
    "ResNet default": [
        "-m", "recipes.resnet.train", "--config_file={repo}/configs/resnet/tiny_cpu.yaml",
        "--model_dir=runs/resnet_tiny",
        "--params_override=train.steps=2,train.checkpoint_every=2,train.log_every=1,"
        "optimizer.warmup_steps=1"],
}
# The first line of a block that is a program: its file name, then the arguments it runs with.
PROGRAM_FILE = re.compile(r"^# (\w+\.py): run it as `(?:\.venv/bin/)?python \1 ?(.*)`$")
# The first line of a block that reads a run's outputs -> the runs that write them.
AFTER_RUN = {
    "# After the main job (runs/bert_tiny)": ["main job"],
    "# After the fine-tuning default (runs/bert_finetune)": ["main job", "fine-tuning default"],
    "# After the ResNet default (runs/resnet_tiny)": ["ResNet default"],
}


def python_blocks():
    """(id, code) of every ```python block, in document order."""
    blocks = []
    for doc in DOC_FILES:
        with open(os.path.join(REPO_ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 2  # first line of code
            blocks.append(pytest.param(match.group(1), id=f"{doc}:{line}"))
    return blocks


def run_python(args, cwd, timeout):
    env = {key: value for key, value in os.environ.items() if key != "TF_USE_LEGACY_KERAS"}
    env.update(PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2", MPLBACKEND="Agg")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One working directory for all blocks; documented runs are made there on demand."""
    return tmp_path_factory.mktemp("docs_snippets")


_runs_done = set()


def ensure_run(marker, workdir):
    for name in AFTER_RUN[marker]:
        if name in _runs_done:
            continue
        args = [arg.format(repo=REPO_ROOT) for arg in RUNS[name]]
        result = run_python(args, cwd=workdir, timeout=900)
        assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stderr[-3000:]}"
        _runs_done.add(name)


def test_every_doc_has_only_known_run_markers():
    """A block that reads a run's outputs names one of the runs this test knows how to make."""
    for param in python_blocks():
        first_line = param.values[0].splitlines()[0]
        if first_line.startswith("# After "):
            assert any(first_line.startswith(marker) for marker in AFTER_RUN), (
                f"{param.id}: unknown run marker {first_line!r}; known: {sorted(AFTER_RUN)}")


@pytest.mark.slow
@pytest.mark.parametrize("code", python_blocks())
def test_python_block_runs_as_written(code, workdir):
    first_line = code.splitlines()[0]
    for marker in AFTER_RUN:
        if first_line.startswith(marker):
            ensure_run(marker, workdir)
    code_lines = [line.split("#", 1)[0] for line in code.splitlines()]
    assert not any("..." in line for line in code_lines), (
        "a documented block must be complete: no '...' placeholders outside comments")
    program = PROGRAM_FILE.match(first_line)
    if program:
        (workdir / program.group(1)).write_text(code)
        args = [program.group(1), *shlex.split(program.group(2))]
    else:
        args = ["-c", code]
    result = run_python(args, cwd=workdir, timeout=600)
    assert result.returncode == 0, f"block failed:\n{code}\n--- stderr ---\n{result.stderr[-3000:]}"


def test_no_python_block_writes_to_tmp():
    """The blocks run in the suite, from an empty working directory: one that wrote under
    /tmp would leave its files there after every test run (README, "Layout and tests")."""
    assert [block.id for block in python_blocks() if "/tmp" in block.values[0]] == []


def test_the_recipe_guides_config_file_loads_with_its_recipes_schema(tmp_path, monkeypatch):
    """docs/writing_a_recipe.md's ```yaml block, as the config file of its digits_mlp.py."""
    import importlib.util

    from recipes.common import config as config_lib

    with open(os.path.join(REPO_ROOT, "docs", "writing_a_recipe.md"), encoding="utf-8") as f:
        page = f.read()
    (program,) = [code for code in BLOCK.findall(page) if code.startswith("# digits_mlp.py:")]
    (yaml_text,) = re.findall(r"^```yaml\n(.*?)^```", page, re.S | re.M)
    (tmp_path / "digits_mlp.py").write_text(program)
    (tmp_path / "wide.yaml").write_text(yaml_text)
    spec = importlib.util.spec_from_file_location("digits_mlp", tmp_path / "digits_mlp.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "digits_mlp", module)
    spec.loader.exec_module(module)
    config = config_lib.load_config(module.DigitsMLPConfig, [str(tmp_path / "wide.yaml")])
    assert (config.train.steps, config.model.hidden_units) == (120, 512)
    assert config.train.global_batch_size == 1024  # the schema's default stands in
