"""Every shell command of README.md and docs/*.md that runs this project's code is valid as
written, checked without running it (most need a TPU, a bucket or hours): its program exists
(`python -m` a module of lamb_tf/ recipes/ benchmarks/ tests/, `python benchmarks/x.py`, the
test files given to pytest); every `--flag` it passes is listed by the program's own
`--helpfull` (absl) or `--help` (argparse), run once per program through tests/preloaded_cli.py
(`lamb_tf.model_garden` needs a valid subcommand, whose Model Garden flags count; a flag
`prepare_data --runner=...` does not define must be a Beam pipeline option); every
`--config_file=configs/...` exists, and for a recipe's driver program every key of those files
and of `--params_override` is a key of its schema (`recipes.common.config`), and the config
the program builds from them passes the schema's checks across keys (`refused_config`: a
documented override the program would refuse, an end learning rate above the peak, say).

Commands: ```bash, ```sh and bare ``` blocks (with `$ ` prompts, the prompted lines; without,
only if the first line is a command), indented blocks starting with a python command; lines
joined at a backslash, environment prefixes, a function wrapping `python $*` (README's `run`),
commands in quoted strings (`gcloud ... --command="..."`) and the block's variables resolved.
Not checked: `python -c`, pytest's and gcloud's options, programs the reader writes
(digits_mlp.py), recipes.study's config keys (tests/test_batch_study.py runs those commands).
"""

import collections
import functools
import importlib
import itertools
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from conftest import REPO_ROOT
from lamb_tf import model_garden
from recipes.common import config as config_lib
from recipes.common import schema
from recipes.common.errors import UserError

DOC_FILES = ["README.md"] + sorted(
    os.path.join("docs", name) for name in os.listdir(os.path.join(REPO_ROOT, "docs"))
    if name.endswith(".md"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
COMMAND_LINE = re.compile(r"(\$ )?(\w+=\S*\s+)*(\S*/)?python3?\s")
PYTHON = re.compile(r"(\S*/)?python3?")
FUNCTION = re.compile(r"\s*(\w+)\s*\(\)\s*\{(.*)\}\s*;?\s*", re.S)
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
OUR_CODE = ("lamb_tf", "recipes", "benchmarks", "tests")
MODEL_GARDEN, SUBCOMMANDS = model_garden.__name__, tuple(model_garden.DRIVERS)
BEAM_PROGRAM = "recipes.bert.prepare_data"  # with --runner, flags it does not define go to Beam
ABSL_FLAG = re.compile(r"^  (?:-\S+,)?--(\[no\])?(\w+):", re.M)  # `  --[no]verbose: ...`
ARGPARSE_FLAG = re.compile(r"^  (?:-\w, )?--([\w-]+)", re.M)  # `  --size {base,...}`
Command = collections.namedtuple("Command", "where argv")  # doc:line, from the python word on


def blocks(text):
    """(first line, text) of each block of commands, lines that are not commands blanked."""
    found = []
    for match in FENCE.finditer(text):
        language, lines = match.group(1), match.group(2).split("\n")
        if language == "" and any(line.startswith("$ ") for line in lines):
            for index, line in enumerate(lines):  # the prompted lines and their continuations
                continued = index and lines[index - 1].endswith("\\")
                lines[index] = line[2:] if line.startswith("$ ") else line if continued else ""
        elif language not in ("bash", "sh", "shell") and not (
                language == "" and COMMAND_LINE.match(lines[0])):
            continue  # another language, or a program's output
        found.append((text.count("\n", 0, match.start(2)) + 1, "\n".join(lines)))
    lines, fenced = text.split("\n"), False
    for index, line in enumerate(lines):
        fenced ^= line.lstrip().startswith("```")
        if (not fenced and line.startswith("    ") and COMMAND_LINE.match(line[4:])
                and not lines[index - 1].strip()):  # an indented block
            end = index
            while lines[end].endswith("\\"):
                end += 1
            found.append((index + 1, "\n".join(line[4:] for line in lines[index:end + 1])))
    return found


def logical_lines(block):
    """(line offset, text) of each shell line: backslash-newlines joined (inside quotes too:
    a `--command='...'` runs in a shell), a line with an open quote joined with the next."""
    found, start, text = [], 0, ""
    for number, line in enumerate(block.split("\n")):
        start = start if text else number
        if line.endswith("\\"):
            text += line[:-1]
            continue
        text += line + "\n"
        try:
            shlex.split(text, comments=True)
        except ValueError:  # an open quote: the string goes on
            continue
        found, text = found + [(start, text)], ""
    return found + [(start, text)] * bool(text.strip())  # unclosed: python_calls says so


def python_calls(line, where, variables, functions):
    """The python commands of one shell line (`variables` gets its assignments)."""
    name, _, rest = line.strip().partition(" ")
    if name in functions:  # README's `run() { gcloud ... --command="... python $*"; }`
        line = functions[name].replace("$*", rest).replace("$@", rest)
    line = re.sub(r"<([A-Za-z][\w.-]*)>", r"\1", line)  # <placeholder>: not a redirection
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer) + [";"]
    except ValueError as error:
        raise AssertionError(f"{where}: {error} in {line!r}") from None
    found, simple = [], []
    for word in words:
        if not set(word) <= set("();<>|&"):
            simple.append(VARIABLE.sub(lambda m: variables.get(m[1], m[0]), word))
            continue
        assignments = simple[simple[:1] == ["export"]:]
        if assignments and all(re.match(r"\w+=", word) for word in assignments):
            variables.update(word.split("=", 1) for word in assignments)
        for index, word in enumerate(simple):
            if PYTHON.fullmatch(word):
                found.append(Command(where, simple[index:]))
                break
            if "python" in word and re.search(r"\s", word):  # a command in a string
                found += python_calls(re.sub(r"^--\w+=", "", word), where, variables, functions)
        simple = []
    return found


def commands_in(doc, text):
    found = []
    for first_line, block in blocks(text):
        variables, functions = {}, {}
        for offset, line in logical_lines(block):
            function = FUNCTION.fullmatch(line)
            if function:
                functions[function[1]] = function[2]
            else:
                found += python_calls(line, f"{doc}:{first_line + offset}", variables, functions)
    return found


def program_of(argv):
    """(program, its candidate files, its arguments), or None if not this project's code.
    The program as `-m` names it: benchmarks/x.py is benchmarks.x, `lamb_tf.model_garden nlp`
    includes the subcommand."""
    rest = list(itertools.dropwhile(lambda w: w.startswith("-") and w not in ("-m", "-c"),
                                    argv[1:]))  # python's own options
    if len(rest) > 1 and rest[0] == "-m":
        program, args, path = rest[1], rest[2:], rest[1].replace(".", "/")
        files = [path + ".py", os.path.join(path, "__main__.py")]
    elif rest and rest[0].endswith(".py"):
        files, args = [os.path.normpath(rest[0])], rest[1:]
        program = files[0][:-3].replace("/", ".")
    else:
        return None  # `python -c`, an interactive python
    if program == "pytest":
        files = [arg for arg in args if arg.startswith("tests/")]
    elif program.split(".")[0] not in OUR_CODE:
        return None
    if program == MODEL_GARDEN and args and args[0] in SUBCOMMANDS:
        program, args = f"{program} {args[0]}", args[1:]
    return program, files, args


def options(args):
    """[(name, value)] of the --flags in `args`; `[--flag]` (optional) is read as the flag."""
    return [arg[2:].partition("=")[::2] for arg in (
        arg[1:].rstrip("]") if arg.startswith("[--") else arg for arg in args)
        if arg.startswith("--") and arg != "--"]


@functools.lru_cache(maxsize=None)
def beam_options():
    """Every Beam pipeline option, the Flink and Spark runners' included."""
    from apache_beam.options import pipeline_options
    from apache_beam.runners.portability import flink_runner, spark_runner  # noqa: F401

    return set(pipeline_options.PipelineOptions([]).get_all_options())


@functools.lru_cache(maxsize=None)
def schema_of(program):
    """The `config_class` of a recipe's driver program, else None."""
    path = os.path.join(REPO_ROOT, program.replace(".", "/") + ".py")
    if not os.path.exists(path) or "driver.main(" not in open(path, encoding="utf-8").read():
        return None
    module, task = importlib.import_module(program), importlib.import_module("recipes.common.task")
    (recipe,) = [value for value in vars(module).values() if isinstance(value, type)
                 and issubclass(value, task.Task) and value.__module__ == module.__name__]
    return recipe.config_class


def config_problems(program, flags):
    problems, config_class = [], schema_of(program)
    for name, value in flags:
        updates, source = {}, "--params_override"
        if name == "config_file" and value.startswith("configs/"):
            source = value
            if not os.path.isfile(os.path.join(REPO_ROOT, value)):
                problems.append(f"config file {value} does not exist")
            elif config_class:
                with open(os.path.join(REPO_ROOT, value), encoding="utf-8") as f:
                    updates = yaml.safe_load(f) or {}
        elif name == "params_override" and config_class:
            try:  # a `...` value is the reader's to fill in (YAML would read a document end)
                updates = config_lib.parse_params_override(re.sub(r"=\.\.\.(?=,|$)", "=x", value))
            except UserError as error:
                problems.append(str(error))
        for key in config_lib.unknown_keys(updates, config_class) if updates else ():
            renamed = f" (now {schema.RENAMED_KEYS[key]})" if key in schema.RENAMED_KEYS else ""
            problems.append(f"unknown config key {key}{renamed} of {program}, in {source}")
    return problems


# An item of --params_override whose value is the reader's to fill in: `...`, or one with a
# shell variable the block does not set (`train.steps=$N` in a loop)
PLACEHOLDER_ITEM = re.compile(r"(?:^|,)[\w.]+=(?:\.\.\.|[^,]*\$[^,]*)(?=,|$)")


def refused_config(program, flags):
    """The refusal, as a one-item list, of the config a recipe's driver program builds from
    the command (its --config_file files, then --params_override: `config.load_config`, as
    `driver.load_task`), checked across keys by the schema (`schema.check`, as the driver
    does before any work), in-process, nothing trained; else []. Built only when every
    --config_file is a file of configs/: without one the program reads the config.yaml of the
    run in --model_dir, which another command writes. Placeholder items are left out."""
    config_class = schema_of(program)
    files = [value for name, value in flags if name == "config_file"]
    if config_class is None or not files or not all(
            f.startswith("configs/") and os.path.isfile(os.path.join(REPO_ROOT, f))
            for f in files):
        return []
    override = ",".join(PLACEHOLDER_ITEM.sub("", value).lstrip(",")
                        for name, value in flags if name == "params_override")
    try:
        config = config_lib.load_config(
            config_class, [os.path.join(REPO_ROOT, f) for f in files], override,
            renamed_keys=schema.RENAMED_KEYS)
        schema.check(config)
    except UserError as error:
        return [f"{program} refuses the config ({error})"]
    return []


def problems_of(command, flags_of):
    """What is wrong with one command, each as `doc:line: what: the command`."""
    program, files, args = program_of(command.argv) or (None, [], [])
    missing = [f for f in files if not os.path.exists(os.path.join(REPO_ROOT, f))]
    flags, defined = options(args), flags_of.get(program, set())
    if program == BEAM_PROGRAM and any(name == "runner" for name, _ in flags):
        defined = defined | beam_options()
    if program is None or program == "pytest":
        problems = [f"no such file {f}" for f in missing]
    elif len(missing) == len(files):
        problems = [f"no such file {files[0]}"]
    elif program == MODEL_GARDEN:
        problems = [f"{args[:1]} is not a subcommand of {MODEL_GARDEN} {SUBCOMMANDS}"]
    else:
        problems = [f"unknown flag --{name} of {program}" for name, _ in flags
                    if name not in defined] + config_problems(program, flags)
        if not problems:
            problems = refused_config(program, flags)
    return [f"{command.where}: {problem}: {' '.join(command.argv)}" for problem in problems]


def read_flags(programs, directory):
    """{program: the flags its --helpfull (absl) or else its --help (argparse) lists}."""
    runs = [(program, option) for program in programs for option in ("--helpfull", "--help")]
    jobs = [dict(module=program.split()[0], args=[*program.split()[1:], option],
                 stdout=str(directory / f"{index}.out"), stderr=str(directory / f"{index}.err"),
                 timeout=300) for index, (program, option) in enumerate(runs)]
    (directory / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([sys.executable, os.path.join("tests", "preloaded_cli.py"),
                    str(directory / "jobs.json"), str(directory / "results.json")],
                   cwd=REPO_ROOT, check=True, timeout=900)
    flags_of = collections.defaultdict(set)
    for index, (program, option) in enumerate(runs):
        text = (directory / f"{index}.out").read_text()
        if option == "--helpfull":  # absl
            flags_of[program] |= {flag for no, name in ABSL_FLAG.findall(text)
                                  for flag in ((name, "no" + name) if no else (name,))}
        else:  # argparse: the option lines after `options:` (absl's --help has none)
            flags_of[program] |= set(ARGPARSE_FLAG.findall(text.partition("\noptions:\n")[2]))
    unread = [program for program in programs if not flags_of[program]]
    assert not unread, f"no flags in the --helpfull / --help of {unread} (see {directory})"
    return flags_of


@pytest.fixture(scope="module")
def doc_commands():
    commands = []
    for doc in DOC_FILES:
        with open(os.path.join(REPO_ROOT, doc), encoding="utf-8") as f:
            commands += commands_in(doc, f.read())
    return commands


@pytest.fixture(scope="module")
def flags_of(doc_commands, tmp_path_factory):
    programs = {found[0] for command in doc_commands
                if (found := program_of(command.argv)) and found[0] != "pytest"}
    return read_flags(sorted(programs - {MODEL_GARDEN}), tmp_path_factory.mktemp("help"))


@pytest.fixture(autouse=True)
def _recipe_environment(monkeypatch):
    """Importing a recipe (for its schema) sets TF_USE_LEGACY_KERAS: undone afterwards."""
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", os.environ.get("TF_USE_LEGACY_KERAS", "1"))


def test_commands_are_read_through_wrappers_strings_prompts_and_indented_blocks(doc_commands):
    read = [(command.where, " ".join(command.argv)) for command in doc_commands]
    for where, part in [  # README's `run` with $IMAGENET; --command='...'; `$ `; indented
            # (the file, not the line: docs move)
            ("README.md", "recipes.resnet.train --tpu=lamb-v4-32 --config_file=configs/"
             "resnet/resnet50_lamb_32k.yaml --params_override=data.train_file_pattern=gs://"),
            ("docs/bert.md", "-m recipes.bert.pretrain --config_file=configs/bert/"),
            ("docs/performance.md", "benchmarks/optimizer_step.py --size base"),
            ("docs/reliability.md", "[--deterministic] --params_override=data.embedded_"
             "digits=false,data.train_file_pattern=/tmp/digits/train-*-of-00004,train.steps")]:
        assert any(w.split(":")[0] == where and part in text for w, text in read), (where, part)
    assert not any("Model Garden's Controller" in text for _, text in read)  # output: not read


def test_documented_commands_use_existing_programs_flags_and_config_keys(doc_commands, flags_of):
    problems = [problem for command in doc_commands for problem in problems_of(command, flags_of)]
    assert not problems, "\n".join(problems)


def test_the_check_reports_misspelled_flags_an_unknown_key_and_a_missing_program(flags_of):
    doc = ("```bash\nBUCKET=gs://YOUR_BUCKET\n"
           "PYTHONPATH=$PWD .venv/bin/python -m recipes.resnet.train \\\n"
           "    --config_file=configs/resnet/tiny_cpu.yaml --model_dri=/tmp/x \\\n"
           "    --params_override=train.stesp=10,data.train_file_pattern=$BUCKET/train-*\n"
           "python -m recipes.resnet.trian --config_file=configs/resnet/tiny.yaml\n"
           "python -m recipes.bert.prepare_data --output_dir=/tmp/d --runner=FnApiRunner \\\n"
           "    --direct_num_worker=2  # a Beam option, misspelled\n```\n")
    problems = [problem for command in commands_in("fake.md", doc)
                for problem in problems_of(command, flags_of)]
    assert [problem.rsplit(": ", 1)[0] for problem in problems] == [
        "fake.md:3: unknown flag --model_dri of recipes.resnet.train",
        "fake.md:3: unknown config key train.stesp of recipes.resnet.train, in --params_override",
        "fake.md:6: no such file recipes/resnet/trian.py",
        "fake.md:7: unknown flag --direct_num_worker of recipes.bert.prepare_data",
    ]


def test_a_documented_config_the_program_refuses_is_reported_placeholders_left_out():
    """README's "train the run further" lowered optimizer.learning_rate below tiny_cpu.yaml's
    end_learning_rate: every key existed, and the program refused the config (exit 2)."""
    doc = ("```bash\n"
           "python -m recipes.bert.pretrain --config_file=configs/bert/tiny_cpu.yaml \\\n"
           "    --params_override=train.steps=240,optimizer.learning_rate=0.01\n"
           "python -m recipes.bert.pretrain --config_file=configs/bert/tiny_cpu.yaml \\\n"
           "    --params_override=train.steps=$N,data.vocab_file=...,train.checkpoint_every=60\n"
           "python -m recipes.bert.pretrain --model_dir=runs/x --params_override=train.steps=7\n"
           "```\n")
    refused = []
    for command in commands_in("fake.md", doc):
        program, _, args = program_of(command.argv)
        refused.append(refused_config(program, options(args)))
    assert refused == [
        ["recipes.bert.pretrain refuses the config (optimizer.end_learning_rate=0.02 is above "
         "optimizer.learning_rate=0.01, the peak it decays from; give an end rate at most the "
         "peak (0: decay to zero))"],
        [],  # $N and ... left out: 120 steps in checkpoints of 60
        [],  # the run's own config.yaml (not the defaults, whose 7 steps would be refused)
    ]
