"""One-line errors for bad input, and the `main` wrapper that prints them.

A recipe raises `UserError` for anything the user can fix (a config typo, a missing file,
batch arithmetic that does not divide). `run(main)` turns it into a single line on stderr
and exit status 2, with no traceback, before anything is written to `model_dir`.
"""

import sys

from absl import app, flags


class UserError(Exception):
    """Bad input. The message is one line: what is wrong, where, and what to do."""


class TrainingDiverged(UserError):
    """The loss became NaN or Inf; the last good checkpoint is kept."""


class WorkerLost(UserError):
    """Multi-worker: a collective failed because another worker died or became unreachable."""


class Preempted(Exception):
    """The process was told to stop (SIGTERM); a checkpoint of the current step is saved."""


EXIT_USER_ERROR = 2
_HELP_FLAGS = {"--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml"}
EXIT_PREEMPTED = 143  # 128 + SIGTERM, what a shell reports for a process stopped by it
EXIT_INTERRUPTED = 130  # 128 + SIGINT (Ctrl-C)


def parse_command_line(known_only=False):
    """Parses `sys.argv` into absl's FLAGS (the flags defined so far) as `run` does first:
    `--help`, `--helpfull` and `-h` print the help and exit with status 0; a bad flag is one
    line and exit status 2, as any mistake. Returns the arguments left (argv[0] first;
    with `known_only`, the flags not defined yet too)."""
    app.define_help_flags()
    # `-h`, which argparse programs (and most others) take for help, is not an absl flag
    sys.argv = [("--help" if arg == "-h" else arg) for arg in sys.argv]
    try:
        return flags.FLAGS(sys.argv, known_only=known_only)
    except SystemExit as help_exit:  # absl prints --help/--helpfull, then exits with status 1
        sys.exit(0 if set(sys.argv[1:]) & _HELP_FLAGS else help_exit.code)
    except flags.Error as error:
        print(f"error: {error}; see --help", file=sys.stderr, flush=True)
        sys.exit(EXIT_USER_ERROR)


def run(main):
    """Runs `main` like `absl.app.run`, reporting `UserError` as one line and exit status 2."""

    def guarded_main(argv):
        try:
            return main(argv)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)
        except Preempted as stopped:
            print(f"stopped: {stopped}", file=sys.stderr, flush=True)
            sys.exit(EXIT_PREEMPTED)
        except Exception as error:  # pylint: disable=broad-except
            problem = _cloud_storage_problem(error)
            if problem is None:
                raise
            print(f"error: {problem}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)
        except KeyboardInterrupt:  # Ctrl-C: what was written stays (checkpoints are atomic)
            print("stopped: interrupted (Ctrl-C); run the same command again to go on (a "
                  "training run resumes from its newest checkpoint; SIGTERM also saves the step "
                  "in progress first)", file=sys.stderr, flush=True)
            sys.exit(EXIT_INTERRUPTED)

    parse_command_line()
    try:
        app.run(guarded_main)
    except app.UsageError as error:  # absl raises this for bad flags in some paths.
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(EXIT_USER_ERROR)


def _cloud_storage_problem(error):
    """One line for a TensorFlow file-system error on a remote path (gs://, ...): a host
    that cannot be reached, or access refused; None for any other error."""
    if not type(error).__module__.startswith("tensorflow"):
        return None
    message = " ".join(str(error).split())
    refused = type(error).__name__ in ("PermissionDeniedError", "UnauthenticatedError")
    if "Error executing an HTTP request" not in message and not (refused and "://" in message):
        return None
    return (f"cannot reach remote storage: {message}; check the path, the network and the "
            "credentials (gcloud auth application-default login)")
