"""What every recipe's program sets before TensorFlow is imported (import this first).

- `TF_USE_LEGACY_KERAS=1`: Model Garden models are tf_keras models.
- TensorFlow's C++ start-up lines (CUDA probing on a machine without a GPU, CPU feature
  notes, end-of-dataset notices) stay off the console unless `--verbose` is given; a value
  of `TF_CPP_MIN_LOG_LEVEL` set by the user wins.

`check_command_line` answers `--help` and flag mistakes before TensorFlow loads; from it
until the program's `main` starts, Ctrl-C or SIGTERM is one line, exit status 130 or 143
(`errors.stop_while_starting`), not a traceback of TensorFlow's import.
"""

import os
import sys

_FULL_HELP = {"--helpfull", "-helpfull", "--helpxml", "-helpxml"}  # left to the full parse
_CHECKED = set()  # the config classes `check_command_line` checked the command line for

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv[1:] else "3")


def check_command_line(config_class=None, extra_flags=()):
    """Answers what the command line alone decides before TensorFlow is imported (about 5 s
    on a CPU machine): `--help`; a mistake in the program's own flags (one line, exit status
    2, as `driver.main` reports it; a flag it does not know is answered here only when it is
    close to one of its own, as a misspelling, or names a config key, which --params_override
    sets: TensorFlow defines a few flags when it loads);
    and, given the program's `config_class`, `--help_config` and the mistakes the schema
    alone finds in the config files and `--params_override` (a YAML error, an unknown key, a
    wrong type). `--helpfull`, which lists TensorFlow's flags too, is left to `driver.main`.
    A recipe program calls it at its top, under `if __name__ == "__main__":`; `driver.main`
    defines and parses the same flags again and does the rest (calling this first: a
    second call for the same config class returns at once)."""
    if config_class is not None and config_class in _CHECKED:
        return
    from recipes.common import config as config_lib  # pylint: disable=import-outside-toplevel
    from recipes.common import config_help, errors  # pylint: disable=import-outside-toplevel
    from recipes.common import flags as flags_lib  # pylint: disable=import-outside-toplevel
    from recipes.common import schema  # pylint: disable=import-outside-toplevel

    errors.stop_while_starting()
    if _FULL_HELP & set(sys.argv[1:]):
        return
    flags_lib.define_flags(extra_flags)
    argv = errors.parse_command_line(known_only=True)
    try:
        unknown = flags_lib.unknown_flags(argv[1:])
        for argument in unknown if config_class else ():  # a config key given as a flag
            problem = config_help.config_key_given_as_flag(argument, config_class)
            if problem:
                raise errors.UserError(problem)
        if unknown:  # flags TensorFlow may define
            return
        options = flags_lib.read_options(argv, extra_flags)
    except errors.UserError as error:
        _refuse(str(error))
    if config_class is None:
        return
    if options.help_config:
        with errors.quiet_on_closed_stdout():  # (`--help_config | head -1`)
            print(config_help.format_config_help(config_class, flags_lib.program_name(argv[0])))
            sys.exit(0)
    try:  # as the driver loads it first (its further checks import TensorFlow)
        config_lib.load_config(config_class, options.config_files, options.params_override,
                               renamed_keys=schema.RENAMED_KEYS)
    except errors.UserError as error:
        _refuse(str(error))
    _CHECKED.add(config_class)


def check_program_flags(define_flags, check_flags):
    """`check_command_line` for a program without config files (`prepare_data`, `convert`):
    `define_flags()` (a second call must add nothing: the program calls it again after
    TensorFlow loads), then `--help`, absl's flag mistakes and the `UserError`s of
    `check_flags(FLAGS, arguments)` (`arguments`: what the parse left, the flags not
    defined included) answered before TensorFlow is imported, one line and exit status 2."""
    from absl import flags  # pylint: disable=import-outside-toplevel

    from recipes.common import errors  # pylint: disable=import-outside-toplevel

    errors.stop_while_starting()
    if _FULL_HELP & set(sys.argv[1:]):
        return
    define_flags()
    argv = errors.parse_command_line(known_only=True)
    try:
        check_flags(flags.FLAGS, argv[1:])
    except errors.UserError as error:
        _refuse(str(error))


def _refuse(message):
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)  # recipes.common.errors.EXIT_USER_ERROR
