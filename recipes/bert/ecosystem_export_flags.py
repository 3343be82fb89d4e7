"""The command line of `python -m recipes.bert.ecosystem_export`, in a module without
TensorFlow: the program defines and checks its flag before TensorFlow loads
(`recipes.common.startup.check_program_flags`), so that `--help` and a flag mistake are
answered at once instead of after about 5 s."""

import os

from absl import flags

from recipes.common import errors
from recipes.common import flags as flags_lib
from recipes.common import storage
from recipes.common.errors import UserError


def define_flags():
    """Defines the program's flag, once (a second call adds nothing), as one `--help`
    lists."""
    flags_lib.define_program_flags(_define_flags, __name__)


def _define_flags():
    flags.DEFINE_string("model_dir", None, "A pretraining run's --model_dir.")


def check_flags(values, arguments):
    """A `UserError` (one line: what, where, what to do) for a mistake the command line
    alone shows. `arguments`: what absl's parse left of it."""
    if flags_lib.unknown_flags(arguments):  # the full parse, after TensorFlow's, names them
        return
    if arguments:
        raise UserError(errors.unexpected_arguments(arguments))
    if not values.model_dir:  # None, or empty (an unset $VAR)
        raise UserError("--model_dir is required: the --model_dir of the pretraining run to "
                        "export (see --help)")
    storage.refuse_unexpanded_home("--model_dir", values.model_dir)
    path = values.model_dir
    if storage.all_local([path]) and not os.path.isdir(storage.local_path(path)):
        what = "is a file" if os.path.exists(storage.local_path(path)) else "does not exist"
        raise UserError(f"--model_dir={path} {what}: give the --model_dir of a pretraining run "
                        "(python -m recipes.bert.pretrain)")
