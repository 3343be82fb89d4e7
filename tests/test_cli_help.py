"""What `--help`, `--help_config` and a missing `--model_dir` print, through the real CLIs;
and that every flag of every program here has a help text (read with `ast`)."""

import ast
import dataclasses
import os
import re
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = {
    "recipes.bert.pretrain": ("recipes.bert.config", "BertPretrainingConfig"),
    "recipes.resnet.train": ("recipes.resnet.config", "ResNetConfig"),
}


def run_cli(module, *args):
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def leaf_keys(schema_cls, prefix=""):
    keys = []
    for field in dataclasses.fields(schema_cls):
        value = getattr(schema_cls(), field.name)
        if dataclasses.is_dataclass(value):
            keys += leaf_keys(type(value), f"{prefix}{field.name}.")
        else:
            keys.append(f"{prefix}{field.name}")
    return keys


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(RECIPES))
def test_help_config_lists_every_key_with_default_and_meaning(module):
    import importlib

    config_module, class_name = RECIPES[module]
    schema_cls = getattr(importlib.import_module(config_module), class_name)
    result = run_cli(module, "--help_config")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    listed = {line.split()[0] for line in lines if line and not line.startswith(" ")}
    missing = [key for key in leaf_keys(schema_cls) if key not in listed]
    assert not missing, f"keys missing from --help_config: {missing}"
    row = next(i for i, line in enumerate(lines) if line.startswith("train.global_batch_size "))
    assert "int" in lines[row] and "default" in lines[row]
    assert "Examples per optimizer update" in lines[row + 1]  # the schema's comment
    # no TensorFlow start-up lines (CUDA probing, CPU features) on the console
    assert "cuInit" not in result.stderr and "oneDNN" not in result.stderr, result.stderr


@pytest.mark.parametrize("config_module, class_name", sorted(RECIPES.values()))
def test_every_config_key_has_a_meaning_in_help_config(config_module, class_name):
    """A comment above two fields gave the second none (optimizer.beta_2, epsilon,
    nesterov: --help_config reads the comment above each field)."""
    import importlib

    from recipes.common import config_help

    schema_cls = getattr(importlib.import_module(config_module), class_name)
    lines = config_help.format_config_help(schema_cls, "python -m x").splitlines()
    rows = {line.split()[0]: index for index, line in enumerate(lines)
            if line and not line.startswith(" ")}
    without = [key for key in leaf_keys(schema_cls)
               if not lines[rows[key] + 1].startswith(" ")]
    assert without == []


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(RECIPES))
def test_help_lists_the_recipe_flags_only(module):
    result = run_cli(module, "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    for flag in ("config_file", "params_override", "model_dir", "mode", "help_config",
                 "verbose", "tpu", "strategy", "cpu_replicas", "communication",
                 "deterministic"):  # (--cpu_replicas was only in --helpfull)
        assert re.search(rf"--(\[no\])?{flag}\b", result.stdout), f"--{flag} not in --help"
    assert "--test_tmpdir" not in result.stdout  # absl/TensorFlow's own flags stay in --helpfull


PROGRAMS = ("recipes.bert.pretrain", "recipes.resnet.train", "recipes.bert.finetune")


@pytest.fixture(scope="module")
def without_tensorflow(tmp_path_factory):
    """An environment whose `import tensorflow` fails: what a program answers there, it
    answers before TensorFlow loads (about 5 s here; its own checks took that much)."""
    fake = tmp_path_factory.mktemp("no_tensorflow") / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('tensorflow was imported')\n")
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    return {**env, "PYTHONPATH": os.pathsep.join([str(fake.parent), REPO_ROOT])}


@pytest.mark.parametrize("module", PROGRAMS)
@pytest.mark.parametrize("args, status, output", [
    (["--help"], 0, "--params_override"),
    (["-h"], 0, "--params_override"),
    (["--model_dri=/tmp/x"], 2, "error: --model_dri is not a flag of this program (did you "
                                "mean --model_dir?); see --help"),
    (["--model_dir=/tmp/x", "--mode=trian"], 2, "error: flag --mode=trian: value should be "
                                                "one of <train|eval|train_and_eval|export>"),
    ([], 2, "error: --model_dir is required: the directory for this run's checkpoints"),
    (["--model_dir=~/run"], 2, "error: --model_dir=~/run: '~' is not expanded here"),
    (["--model_dir=/tmp/x", "extra"], 2, "error: unexpected arguments extra: all options "
                                         "are --flags (see --help)"),
    # absl: "invalid literal for int() with base 10: 'x'" (Python's words)
    (["--model_dir=/tmp/x", "--mode=train", "--verbose=yes"], 2,
     "error: flag --verbose=yes: --verbose takes true or false (default false); see --help"),
    # it read as if 2 were not a number of devices
    (["--model_dir=/tmp/x", "--cpu_replicas=2"], 2, "error: --cpu_replicas=2 splits the CPU for "
                                                     "--strategy=mirrored only (--strategy is "
                                                     "unset); add --strategy=mirrored"),
    (["--model_dir=/tmp/x", "--cpu_replicas=-1"], 2, "error: --cpu_replicas=-1: give a number "
                                                      "of logical CPU devices >= 1 with "
                                                      "--strategy=mirrored (0: off)"),
    # the TPU was dropped without a word (`strategy: default, 1 replica(s) in sync`)
    (["--model_dir=/tmp/x", "--mode=eval", "--tpu=local", "--strategy=mirrored"], 2,
     "error: --tpu=local runs on a TPU, which --strategy=mirrored does not use; drop "
     "--strategy (--tpu picks tpu) or drop --tpu"),
    (["--model_dir=/tmp/x", "--communication=nccl"], 2, "error: --communication=nccl sets the "
     "collectives of --strategy=multi_worker_mirrored only (--strategy is unset and TF_CONFIG "
     "is not set)"),
    (["--model_dir=/tmp/x", "--params_override=a.b=1", "--params_override=c.d=2"], 2,
     "error: --params_override is given 2 times and only the last would count"),
])
def test_help_and_flag_mistakes_are_answered_before_tensorflow_loads(
        module, args, status, output, without_tensorflow):
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT,
                            env=without_tensorflow, capture_output=True, text=True, timeout=60)
    assert result.returncode == status, result.stderr[-2000:]
    if status:
        assert result.stderr.splitlines() == [result.stderr.strip()]  # one line
        assert result.stderr.startswith(output) and result.stdout == "", result.stderr
    else:
        assert output in result.stdout and result.stderr == "", result.stderr[-2000:]


@pytest.mark.parametrize("module", PROGRAMS)
def test_help_config_is_answered_before_tensorflow_loads(module, without_tensorflow):
    result = subprocess.run([sys.executable, "-m", module, "--help_config"], cwd=REPO_ROOT,
                            env=without_tensorflow, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
    assert any(line.startswith("train.global_batch_size ") for line in result.stdout.splitlines())


@pytest.mark.parametrize("module", PROGRAMS)
@pytest.mark.parametrize("args, line", [
    (["--params_override=train.stepz=3"], "error: --params_override: unknown config key "
                                          "'train.stepz'; did you mean train.steps?"),
    (["--config_file=/nonexistent/run.yaml"], "error: config file '/nonexistent/run.yaml' does "
                                              "not exist; check --config_file"),
    (["--params_override=train.steps=two"], "error: --params_override: config key "
                                            "'train.steps' must be int"),
    # a config key given as a flag: was absl's "Unknown command line flag 'learning_rate'",
    # after TensorFlow had loaded
    (["--learning_rate=0.1"], "error: --learning_rate is not a flag of this program; config "
     "keys are set with --params_override: --params_override=optimizer.learning_rate=0.1; "
     "--help_config lists them"),
    (["--train.steps=3"], "error: --train.steps is not a flag of this program; config keys "
     "are set with --params_override: --params_override=train.steps=3; --help_config"),
    (["--steps", "7"], "error: --steps is not a flag of this program; config keys are set "
     "with --params_override: --params_override=train.steps=VALUE (or eval.steps); "),
])
def test_config_mistakes_the_schema_finds_are_answered_before_tensorflow_loads(
        module, args, line, without_tensorflow):
    result = subprocess.run([sys.executable, "-m", module, "--model_dir=/tmp/unused", *args],
                            cwd=REPO_ROOT, env=without_tensorflow, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(line), (
        result.stderr)


@pytest.mark.slow  # imports TensorFlow
def test_a_config_key_given_as_a_flag_is_named_for_a_recipe_that_checks_no_config_early(tmp_path):
    """docs/writing_a_recipe.md's recipe calls `startup.check_command_line()` without its
    config class: the shared driver's own parse gave only "--learning_rate is not a flag"."""
    with open(os.path.join(REPO_ROOT, "docs", "writing_a_recipe.md"), encoding="utf-8") as f:
        program = re.search(r"^```python\n(# digits_mlp\.py: .*?)^```", f.read(),
                            re.S | re.M).group(1)
    assert "startup.check_command_line()" in program
    (tmp_path / "digits_mlp.py").write_text(program)
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "digits_mlp.py", "--model_dir=run", "--learning_rate=0.1"],
        cwd=tmp_path, env=dict(env, PYTHONPATH=REPO_ROOT), capture_output=True, text=True,
        timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr == (
        "error: --learning_rate is not a flag of this program; config keys are set with "
        "--params_override: --params_override=optimizer.learning_rate=0.1; --help_config "
        "lists them\n")
    assert not (tmp_path / "run").exists()


def test_a_flag_the_program_does_not_know_and_does_not_resemble_is_left_to_tensorflow(
        without_tensorflow):
    """TensorFlow defines flags of its own when it loads (its TPU client's --runtime_oom_exit,
    say): such a flag is not refused before it loads. Here TensorFlow cannot load."""
    result = subprocess.run([sys.executable, "-m", "recipes.bert.pretrain",
                             "--runtime_oom_exit=false", "--model_dir=/tmp/x"], cwd=REPO_ROOT,
                            env=without_tensorflow, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "tensorflow was imported" in result.stderr


@pytest.mark.parametrize("module, first_line, flag, listed", [
    ("recipes.bert.prepare_data", "Raw text -> BERT pretraining TFRecords", "--help",
     "output_dir"),
    ("recipes.resnet.convert", "Image folder or NumPy arrays -> ImageNet-format TFRecords",
     "--help", "output_dir"),
    ("recipes.bert.prepare_data", "Raw text -> BERT pretraining TFRecords", "-h",  # as argparse
     "output_dir"),
    ("recipes.bert.ecosystem_export", "The pretrained encoder in the formats the rest of the "
     "ecosystem reads.", "--help", "model_dir"),
])
def test_data_programs_print_their_help_before_tensorflow_loads(module, first_line, flag,
                                                                listed, without_tensorflow):
    # prepare_data's own flags must be known before it hands the unknown ones to Beam:
    # --help was once taken for a Beam option, and the missing --output_dir refused instead
    result = subprocess.run([sys.executable, "-m", module, flag], cwd=REPO_ROOT,
                            env=without_tensorflow, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(first_line), result.stdout[:500]
    assert re.search(rf"^  --{listed}: ", result.stdout, re.MULTILINE), result.stdout
    assert "--test_tmpdir" not in result.stdout  # absl's own flags stay in --helpfull
    assert result.stderr.strip() == "", result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("given, words", [((), "is required"), (("--model_dir=",), "is empty")],
                         ids=["left-out", "empty"])
def test_missing_model_dir_is_one_line_and_exit_2(given, words):
    """An empty one is what `--model_dir=$RUN` gives with RUN unset."""
    result = run_cli("recipes.resnet.train", "--config_file=configs/resnet/tiny_cpu.yaml", *given)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --model_dir {words}: the directory for this run's checkpoints, "
        "config.yaml and export (see --help)"]


@pytest.mark.parametrize("module, args, line", [
    ("recipes.bert.prepare_data", ["--input_path=corpus/*.txt"],
     "error: --output_dir is required: where to write the shards, vocab.txt and metadata.json"),
    ("recipes.bert.prepare_data", ["--output_dri=OUT"], "error: --output_dri=OUT: not a "
     "prepare_data flag; did you mean --output_dir? (Beam pipeline options need --runner"),
    ("recipes.bert.prepare_data", ["--output_dir=OUT", "--direct_num_workers", "2"],
     "error: --direct_num_workers: not a prepare_data flag; Beam pipeline options need "
     "--runner, e.g. --runner=FnApiRunner"),
    ("recipes.bert.prepare_data", ["--output_dir=OUT", "corpus.txt"],
     "error: unexpected arguments corpus.txt: all options are --flags (see --help)"),
    ("recipes.bert.prepare_data", ["--output_dir=OUT", "--seq_length=long"],
     "error: flag --seq_length=long: --seq_length takes an integer (default 128); see --help"),
    ("recipes.bert.prepare_data", ["--output_dir=OUT", "--masked_lm_prob=15%"],
     "error: flag --masked_lm_prob=15%: --masked_lm_prob takes a number (default 0.15)"),
    ("recipes.bert.prepare_data", ["--output_dir=OUT", "--lower_case=maybe"],
     "error: flag --lower_case=maybe: --lower_case takes true or false (default true)"),
    ("recipes.bert.prepare_data", ["--output_dir=~/data"],
     "error: --output_dir=~/data: '~' is not expanded here"),
    ("recipes.resnet.convert", ["--digit", "--output_dir=OUT"],
     "error: --digit is not a flag of this program (did you mean --digits?); see --help"),
    ("recipes.resnet.convert", ["--output_dir=OUT"],
     "error: pass exactly one of --image_dir, --npz, --digits (or --check)"),
    ("recipes.resnet.convert", ["--digits"],
     "error: --output_dir is required: where to write the TFRecords"),
    ("recipes.resnet.convert", ["--digits", "--output_dir=OUT", "--jpeg_quality=0"],
     "error: --jpeg_quality=0 must be from 1 to 100; give e.g. 95 (the default)"),
    ("recipes.resnet.convert", ["--digits", "--output_dir=OUT", "photos/"],
     "error: unexpected arguments photos/: all options are --flags (see --help)"),
    ("recipes.resnet.convert", ["--check=OUT/train-*", "--output_dir=OUT"],
     "error: --check reads the records of a glob and writes nothing, so --output_dir has no "
     "use with it; drop it (or drop --check to convert)"),
    ("recipes.resnet.convert", ["--image_dir=OUT", "--output_dir=OUT/records"],
     "error: --output_dir=OUT/records is within --image_dir=OUT: the records would sit among "
     "the class folders"),
    ("recipes.bert.ecosystem_export", [],
     "error: --model_dir is required: the --model_dir of the pretraining run to export"),
    ("recipes.bert.ecosystem_export", ["--model_dri=OUT"],
     "error: --model_dri is not a flag of this program (did you mean --model_dir?); see "
     "--help"),
    ("recipes.bert.ecosystem_export", ["--model_dir=OUT", "run2"],
     "error: unexpected arguments run2: all options are --flags (see --help)"),
    ("recipes.bert.ecosystem_export", ["--model_dir=~/runs/bert"],
     "error: --model_dir=~/runs/bert: '~' is not expanded here"),
])
def test_data_programs_answer_flag_mistakes_before_tensorflow_loads(
        module, args, line, without_tensorflow, tmp_path):
    output_dir = tmp_path / "out"
    args = [arg.replace("OUT", str(output_dir)) for arg in args]
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT,
                            env=without_tensorflow, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(line.replace("OUT", str(output_dir))), result.stderr
    assert result.stdout == "" and not output_dir.exists()


def argparse_programs():
    """The command lines of the argparse programs: every benchmark script that parses
    arguments, and the batch-size study."""
    scripts = []
    for name in sorted(os.listdir(os.path.join(REPO_ROOT, "benchmarks"))):
        if not name.endswith(".py"):  # (a __pycache__ directory is not opened)
            continue
        with open(os.path.join(REPO_ROOT, "benchmarks", name), encoding="utf-8") as f:
            if "parse_args(" in f.read():
                scripts.append([os.path.join("benchmarks", name)])
    return [["-m", "recipes.study"], *scripts]


@pytest.mark.slow  # a fresh process for each program (some import TensorFlow)
@pytest.mark.parametrize("program", argparse_programs(), ids=lambda program: program[-1])
def test_argparse_programs_take_helpfull_as_help(program):
    """absl's programs (the recipes) take --helpfull; these printed "unrecognized
    arguments" or a required flag instead, exit status 2."""
    result = subprocess.run([sys.executable, *program, "--helpfull"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: ") and "-h, --help" in result.stdout, result.stdout


@pytest.mark.parametrize("program", [p for p in argparse_programs() if p[0] != "-m"],
                         ids=lambda program: program[-1])
def test_benchmark_scripts_answer_help_and_a_flag_mistake_before_tensorflow_loads(
        program, without_tensorflow):
    """Five of them imported TensorFlow (and the recipes) first: --help took 6-9 s."""
    def run(*args):
        return subprocess.run([sys.executable, *program, *args], cwd=REPO_ROOT,
                              env=without_tensorflow, capture_output=True, text=True, timeout=60)

    result = run("--help")
    assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
    assert result.stdout.startswith("usage: "), result.stdout[:500]
    result = run("--no_such_flag")
    assert result.returncode == 2 and result.stdout == "", result.stderr[-2000:]
    assert len(result.stderr.splitlines()) == 1, result.stderr  # one line
    assert result.stderr.startswith("error: --no_such_flag is not a flag of this program")


def benchmark_parser():
    sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
    try:
        import alternation
    finally:
        sys.path.pop(0)
    parser = alternation.argument_parser("A benchmark.\n\nMore text.")
    parser.add_argument("--steps", type=int, required=True, help="timed steps")
    parser.add_argument("--size", choices=("base", "large"), default="base", help="shapes")
    return parser


@pytest.mark.parametrize("argv, line", [
    # argparse printed its usage block, then "unrecognized arguments", and only after the
    # required flags were all given; absl names the unknown flag first, with its nearest
    (["--step=3"], "error: --step is not a flag of this program (did you mean --steps?); see "
                   "--help"),
    (["--steps=3", "--no_such_flag"], "error: --no_such_flag is not a flag of this program; "
                                      "see --help"),
    (["--size=bse", "--steps=3"], "error: argument --size: invalid choice: 'bse' (choose "
     "from 'base', 'large'); see --help"),
    ([], "error: the following arguments are required: --steps; see --help"),
])
def test_argparse_programs_mistakes_are_one_line_exit_2_naming_an_unknown_flag_first(
        argv, line, capsys):
    with pytest.raises(SystemExit) as exited:
        benchmark_parser().parse_args(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line] and captured.out == ""


def test_argparse_programs_take_flags_in_full_and_after_a_double_dash_nothing_is_a_flag():
    parser = benchmark_parser()
    assert parser.parse_args(["--steps", "4", "--size=large"]).steps == 4
    args, rest = parser.parse_known_args(["--steps=4", "--", "--anything"])
    assert (args.steps, rest) == (4, ["--", "--anything"])


def flags_without_help(source, filename="<source>"):
    """[(line, flag)] of the `add_argument` calls in `source` that give no `help=`."""
    missing = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
                and not any(keyword.arg == "help" for keyword in node.keywords)):
            first = node.args[0] if node.args else None
            missing.append((node.lineno,
                            first.value if isinstance(first, ast.Constant) else "?"))
    return missing


def test_every_flag_of_the_command_line_programs_has_help_text():
    missing = []
    for top in ("recipes", "benchmarks", "lamb_tf"):
        for directory, _, names in os.walk(os.path.join(REPO_ROOT, top)):
            for name in sorted(n for n in names if n.endswith(".py")):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    missing += [f"{os.path.relpath(path, REPO_ROOT)}:{line} {flag}"
                                for line, flag in flags_without_help(f.read(), path)]
    assert not missing, f"flags that --help would list without a word: {missing}"


def test_flags_without_help_finds_a_flag_without_help():
    source = ('parser.add_argument("--a", help="what a is")\n'
              'parser.add_argument("--b", type=int)\n')
    assert flags_without_help(source) == [(2, "--b")]


@pytest.mark.parametrize("trains, line", [
    (True, "stopped: interrupted (Ctrl-C); run the same command again to go on (a training run "
           "resumes from its newest checkpoint; SIGTERM also saves the step in progress first)"),
    # a data tool's line spoke of a training run's checkpoints
    (False, "stopped: interrupted (Ctrl-C); run the same command again")])
def test_ctrl_c_is_one_line_and_exit_130(trains, line):
    """KeyboardInterrupt anywhere in a program run by `errors.run` (training, data
    preparation): one line saying how to go on, the shell's status for SIGINT."""
    program = ("import sys; from recipes.common import errors\n"
               "def main(argv):\n    raise KeyboardInterrupt\n"
               f"errors.run(main, trains={trains})")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 130
    assert result.stderr.strip().splitlines() == [line]


@pytest.mark.parametrize("module, args, written", [
    ("recipes.bert.prepare_data", [], "the shards, vocab.txt and metadata.json"),
    ("recipes.resnet.convert", ["--digits"], "the shards, labels.txt and dataset_info.json"),
])
@pytest.mark.parametrize("run_file", ["config.yaml", "params.yaml"])
def test_data_tools_refuse_an_output_dir_holding_a_training_run_before_tensorflow_loads(
        module, args, written, run_file, without_tensorflow, tmp_path):
    """prepare_data wrote its shards among a training run's files (convert too)."""
    (tmp_path / run_file).write_text("train: {steps: 3}\n")
    result = subprocess.run([sys.executable, "-m", module, f"--output_dir={tmp_path}", *args],
                            cwd=REPO_ROOT, env=without_tensorflow, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines() == [
        f"error: --output_dir={tmp_path}: it holds a training run (its {run_file}), among whose "
        f"files {written} would be written; give a directory of its own"]
    assert os.listdir(tmp_path) == [run_file]


def test_config_file_help_says_without_one_the_runs_own_config_yaml_is_read():
    """It said `none: the program's defaults`, while a run's own config.yaml is read (the
    program prints `config: the run's own runs/X/config.yaml`)."""
    from recipes.common import flags as flags_lib

    flags_lib.define_flags()
    text = flags_lib.FLAGS["config_file"].help
    assert "the config.yaml of the run in --model_dir" in text, text
    assert "none: the program's defaults" not in text


def run_with_closed_stdout(command, env):
    """`command`'s exit status and stderr, run with stdout a pipe whose read end is closed
    before it starts (`... | head -1` with the reader gone before the program writes)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(command, cwd=REPO_ROOT, env=env, stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    return result.returncode, result.stderr


@pytest.mark.parametrize("module, option", [("recipes.bert.pretrain", "--help_config"),
                                            ("recipes.bert.finetune", "--help"),
                                            ("recipes.resnet.train", "-h")])
def test_help_to_a_closed_stdout_ends_quietly(module, option, without_tensorflow):
    """`--help_config | head -1` printed `BrokenPipeError: [Errno 32] Broken pipe` and a
    traceback when the reader had gone."""
    status, stderr = run_with_closed_stdout([sys.executable, "-m", module, option],
                                            without_tensorflow)
    assert (status, stderr) == (1, "")


@pytest.mark.parametrize("size", [10, 100_000])  # left in the buffer at the end; written at once
def test_a_programs_lines_to_a_closed_stdout_end_it_quietly(size, without_tensorflow):
    """`errors.run`, every program's entry point: Python's traceback (a print) or `Exception
    ignored ... BrokenPipeError` (its flush at exit) on stderr were all that a closed stdout
    got."""
    program = ("import sys; from recipes.common import errors; "
               f"errors.run(lambda argv: print('x' * {size}))")
    status, stderr = run_with_closed_stdout([sys.executable, "-c", program], without_tensorflow)
    assert (status, stderr) == (1, "")
