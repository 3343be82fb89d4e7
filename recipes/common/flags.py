"""The absl flags both recipes share, in Model Garden's style.

`--config_file` may repeat (later files override earlier ones), then `--params_override`
(`a.b=c,d.e=f` or a YAML mapping) overrides the files, as in Model Garden's
`official/common/flags.py`. The schema is strict: see `recipes/common/config.py`.
"""

import dataclasses
import os
import sys

from absl import flags

from recipes.common import storage
from recipes.common import errors
from recipes.common.errors import UserError

FLAGS = flags.FLAGS

MODES = ("train", "eval", "train_and_eval", "export")
TRAIN_MODES = ("train", "train_and_eval")  # the modes that train (and read training data)
STRATEGIES = ("", "default", "mirrored", "multi_worker_mirrored", "tpu")


@dataclasses.dataclass(frozen=True)
class ExtraFlag:
    """A boolean flag one program has besides the shared ones (fine-tuning's
    `--compare_with_random_init`): defined by `define_flags`, read by `read_options`."""
    name: str
    help: str
    default: bool = False


_KEY_FLAGS = ("config_file", "params_override", "model_dir", "mode", "tpu", "strategy",
              "cpu_replicas", "communication", "deterministic", "verbose", "help_config")


def define_flags(extra_flags=()):
    """Defines the shared flags and the program's `extra_flags`, each once: a second call
    (the program's early `startup.check_command_line`, then `driver.main`) adds nothing."""
    if "config_file" not in FLAGS:
        _define_shared_flags()
    for extra in extra_flags:
        if extra.name not in FLAGS:
            flags.DEFINE_bool(extra.name, extra.default, extra.help)
    register_key_flags((*_KEY_FLAGS, *(extra.name for extra in extra_flags)))


def define_program_flags(define, module_name):
    """Calls `define()`, the `DEFINE_*` calls of the module `module_name`, unless they ran
    (a program defines its flags before TensorFlow loads, then again in its `main` block),
    and makes its flags ones that `--help` lists."""
    if not FLAGS.get_flags_for_module(module_name):
        define()
    register_key_flags(flag.name for flag in FLAGS.get_flags_for_module(module_name))


def register_key_flags(names):
    """Makes the flags `names` ones that `--help` lists: absl lists the key flags of the
    program, which it names by `sys.argv[0]` (the flags defined in its own file are; these
    are defined in a module it imports)."""
    registered = {flag.name for flag in FLAGS.get_key_flags_for_module(sys.argv[0])}
    for name in names:
        if name not in registered:
            FLAGS.register_key_flag_for_module(sys.argv[0], FLAGS[name])


def _define_shared_flags():
    flags.DEFINE_multi_string(  # (default None: absl's --help would show `(default: '[]')`)
        "config_file", None, "YAML config file; repeat to layer files (later ones win). "
        "None given: the config.yaml of the run in --model_dir, if it holds one of this "
        "program's (--params_override on top), else the program's defaults (--help_config)"
    )
    flags.DEFINE_string(
        "params_override",
        "",
        "Overrides applied after the config files: `train.steps=100,optimizer.name=adamw` "
        "or a YAML mapping; --help_config lists every key.",
    )
    flags.DEFINE_string(
        "model_dir",
        None,
        "Directory (local or gs://) for checkpoints, summaries, config.yaml and the export.",
    )
    flags.DEFINE_enum("mode", "train_and_eval", MODES, "What to run.")
    _define_distribution_flags()
    flags.DEFINE_bool(
        "deterministic",
        False,
        "Turn on TF op determinism: a run and a run resumed from its checkpoints give "
        "bitwise-equal weights on the same hardware and software (slower; see "
        "docs/reliability.md).",
    )
    flags.DEFINE_bool(
        "verbose",
        False,
        "Also print the resolved config and TensorFlow's logs (by default the console "
        "shows progress and results; the config is in <model_dir>/config.yaml, TensorFlow's "
        "C++ log lines and Python logging records in <model_dir>/tensorflow.log).",
    )
    flags.DEFINE_bool(
        "help_config",
        False,
        "List every config key of this recipe (type, default, meaning) and exit.",
    )


def _define_distribution_flags():
    """Where the run runs: --tpu, --strategy, --cpu_replicas, --communication."""
    flags.DEFINE_string(
        "tpu",
        "",
        "TPU to use: `local` on a single-host TPU VM; on a pod slice, its TPU name, given "
        "once, on worker 0 (docs/distributed.md); or a grpc:// address for a TPU node. "
        "Empty: no TPU.",
    )
    flags.DEFINE_enum(
        "strategy",
        "",
        STRATEGIES,
        "Distribution strategy. Empty: guess (TPU if --tpu, multi-worker if TF_CONFIG is set, "
        "mirrored if several GPUs, else default). With --tpu: empty or tpu.",
    )
    flags.DEFINE_integer(
        "cpu_replicas",
        0,
        "With --strategy=mirrored on a machine without GPUs: split the CPU into this many "
        "logical devices, a replica each, to try the multi-replica path (per-replica "
        "batches, the all-reduce, resume) where there is no accelerator. 0: off.",
    )
    flags.DEFINE_enum(
        "communication",
        "auto",
        ("auto", "ring", "nccl"),
        "Collective implementation for MultiWorkerMirroredStrategy (--strategy="
        "multi_worker_mirrored, or unset with TF_CONFIG set; refused with another).",
    )


def unknown_flags(arguments):
    """The flags among `arguments` that the program does not define, which the full parse
    (after TensorFlow has defined its own) accepts or refuses; a `UserError`
    (`errors.not_a_flag`) for one that is close to one of the program's flags, a
    misspelling."""
    unknown = [arg for arg in arguments if arg.startswith("-")]
    for arg in unknown:
        name = arg.lstrip("-").split("=", 1)[0]
        if errors.closest_flag(name):
            raise UserError(f"{errors.not_a_flag(name)}; see --help")
    return unknown


def program_name(path):
    """`python -m recipes.bert.pretrain` for .../recipes/bert/pretrain.py (how it was run)."""
    if path.endswith(".py") and "recipes" + os.sep in path:
        module = path[path.rindex("recipes" + os.sep):-3].replace(os.sep, ".")
        return f"python -m {module}"
    return path


def cluster_strategy(tpu):
    """The strategy that --tpu or TF_CONFIG picks when --strategy is unset: "tpu" for a
    `tpu`, then "multi_worker_mirrored" when TF_CONFIG is set, else "" (the machine's own
    devices decide: `strategy._guess`). No TensorFlow: the flags are checked before it loads."""
    if tpu:
        return "tpu"
    return "multi_worker_mirrored" if os.environ.get("TF_CONFIG") else ""


def check_distribution_flags(tpu, strategy, cpu_replicas, communication):
    """A UserError for distribution flags that contradict one another (one of them would be
    dropped without a word): `--cpu_replicas` but for --strategy=mirrored, `--tpu` with a
    --strategy other than tpu, `--communication` for a strategy that is not multi-worker
    (given, or guessed as `strategy.make_strategy` does: --tpu, then TF_CONFIG)."""
    if cpu_replicas < 0:
        raise UserError(f"--cpu_replicas={cpu_replicas}: give a number of logical CPU "
                        "devices >= 1 with --strategy=mirrored (0: off)")
    given = f"--strategy={strategy}" if strategy else "--strategy is unset"
    if cpu_replicas and strategy != "mirrored":
        raise UserError(f"--cpu_replicas={cpu_replicas} splits the CPU for "
                        f"--strategy=mirrored only ({given}); add --strategy=mirrored")
    if tpu and strategy not in ("", "tpu"):
        raise UserError(f"--tpu={tpu} runs on a TPU, which {given} does not use; drop "
                        "--strategy (--tpu picks tpu) or drop --tpu")
    guessed = strategy or cluster_strategy(tpu)
    if communication != "auto" and guessed != "multi_worker_mirrored":
        reason = (given if strategy else "--tpu picks tpu" if tpu
                  else "--strategy is unset and TF_CONFIG is not set")
        raise UserError(f"--communication={communication} sets the collectives of "
                        f"--strategy=multi_worker_mirrored only ({reason}); drop "
                        "--communication, or run on a cluster (TF_CONFIG: docs/distributed.md)")


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The flags' values: read once (`read_options`) and passed down."""
    config_files: tuple
    params_override: str
    model_dir: str
    mode: str
    tpu: str
    strategy: str
    communication: str
    deterministic: bool
    verbose: bool = False
    help_config: bool = False
    cpu_replicas: int = 0
    extra: dict = dataclasses.field(default_factory=dict)  # ExtraFlag name -> value


def _times_given(name, argv):
    """How often the command line gives flag `name` (`--name=v`, `--name v`, `-name`, and
    `--noname` for a bool), as absl reads it: up to a `--`. (absl's own `present` counts
    parses, and the programs parse twice: recipes/common/errors.py.)"""
    times = 0
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("-"):
            given = arg.lstrip("-").split("=", 1)[0]
            times += given in (name, "no" + name)
    return times


def read_options(argv, extra_flags=()):
    """The parsed flags (the shared ones and `extra_flags`) as a `RunOptions`: the only
    place the training programs read FLAGS. `argv`: what absl left of the command line."""
    if len(argv) > 1:
        raise UserError(errors.unexpected_arguments(argv[1:]))
    # absl keeps the last value of a repeated flag: right for --mode or --model_dir (a
    # script's defaults, then the caller's), not for the items of --params_override, which
    # layer as --config_file's files do.
    times = _times_given("params_override", sys.argv[1:])
    if times > 1:
        raise UserError(f"--params_override is given {times} times and only the last would "
                        "count; give it once, joining the items with commas: "
                        "--params_override=a.b=1,c.d=2")
    if not FLAGS.model_dir and not FLAGS.help_config:  # None, or empty (an unset $VAR)
        given = "is required" if FLAGS.model_dir is None else "is empty"
        raise UserError(f"--model_dir {given}: the directory for this run's checkpoints, "
                        "config.yaml and export (see --help)")
    storage.refuse_unexpanded_home("--model_dir", FLAGS.model_dir or "")
    for config_file in FLAGS.config_file or ():
        storage.refuse_unexpanded_home("--config_file", config_file)
    check_distribution_flags(FLAGS.tpu, FLAGS.strategy, FLAGS.cpu_replicas,
                             FLAGS.communication)
    return RunOptions(
        config_files=tuple(FLAGS.config_file or ()),
        params_override=FLAGS.params_override,
        # a file:// URL as the local path it names: every local file of the run (a BERT
        # preparation's too) is written with Python's own files
        model_dir=FLAGS.model_dir and storage.local_path(FLAGS.model_dir),
        mode=FLAGS.mode,
        tpu=FLAGS.tpu,
        strategy=FLAGS.strategy,
        communication=FLAGS.communication,
        deterministic=FLAGS.deterministic,
        verbose=FLAGS.verbose,
        help_config=FLAGS.help_config,
        cpu_replicas=FLAGS.cpu_replicas,
        extra={extra.name: FLAGS[extra.name].value for extra in extra_flags},
    )
