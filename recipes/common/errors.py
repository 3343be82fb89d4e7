"""One-line errors for bad input, and the `main` wrapper that prints them.

A recipe raises `UserError` for anything the user can fix (a config typo, a missing file,
batch arithmetic that does not divide). `run(main)` turns it into a single line on stderr
and exit status 2, with no traceback, before anything is written to `model_dir`.

Stopping: Ctrl-C (KeyboardInterrupt) and SIGTERM outside training's own handler
(`recipes.common.preemption.StopOnSigterm`, which saves the step in progress) both unwind
the program as an exception, so that what it was writing is cleaned up (`except
BaseException` / `finally`), and end in one line, exit status 130 or 143. Before `run`
starts `main` (TensorFlow loading, the command line's checks: `stop_while_starting`),
either ends the process at once with one line, as nothing has been written yet.

A closed stdout (`--help | head -1`: the reader went before the program wrote all) ends the
program quietly, as Python's docs recommend (library/signal.html, "Note on SIGPIPE"): stdout
is pointed at os.devnull, no traceback, exit status 1 where the program would have exited
with 0 (not all of its output was read), its own otherwise (`quiet_on_closed_stdout`).
"""

import contextlib
import difflib
import os
import re
import select
import signal
import sys

from absl import app, flags


class UserError(Exception):
    """Bad input. The message is one line: what is wrong, where, and what to do."""


class UnreachableStorage(UserError):
    """A remote file system (gs://) not reached, or refusing access: said as it is, never
    taken for a file that is damaged or another program's (`cloud_storage_problem`)."""


class TrainingDiverged(UserError):
    """The loss became NaN or Inf; the last good checkpoint is kept."""


class WorkerLost(UserError):
    """Multi-worker: a collective failed because another worker died or became unreachable."""


class Preempted(Exception):
    """The process was told to stop (SIGTERM); a checkpoint of the current step is saved."""


class Terminated(BaseException):
    """SIGTERM outside training (`run`'s handler raises it in the main thread, as Python
    raises KeyboardInterrupt for Ctrl-C): data preparation, building, evaluation, export.
    `doing` is what the program was doing (`doing`), or None."""

    def __init__(self, doing=None):
        super().__init__(doing)
        self.doing = doing


_activities = []  # what the program is doing, innermost last (`doing`)
_newest_checkpoint = None  # a callable: the run's newest checkpoint path, or None


@contextlib.contextmanager
def doing(what):
    """While in the block, a SIGTERM's line says the program was stopped `what` ("while
    exporting")."""
    _activities.append(what)
    try:
        yield
    finally:
        _activities.pop()


def name_newest_checkpoint(find):
    """`find()` (the run's newest checkpoint path, or None) is called when the program is
    stopped (Ctrl-C, SIGTERM outside training), so that its line names where a rerun goes
    on from. The driver sets it once --model_dir is known."""
    global _newest_checkpoint
    _newest_checkpoint = find


def _raise_terminated(signum, frame):
    del signum, frame
    raise Terminated(_activities[-1] if _activities else None)


@contextlib.contextmanager
def sigterm_raises():
    """SIGTERM raises `Terminated` in the block (in the main thread; elsewhere there are no
    signal handlers); the handler before it is put back after (the default: the process
    ends, as after the program's last line)."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stopped_while_starting(signum, frame):
    """Ctrl-C or SIGTERM before `run` starts `main`: one line, and the process ends at once
    (an exception raised here would unwind an import of TensorFlow into a traceback)."""
    del frame
    interrupted = signum == signal.SIGINT
    sys.stdout.flush()
    print(f"stopped: {'interrupted (Ctrl-C)' if interrupted else 'SIGTERM'} while starting, "
          "before anything was written", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED if interrupted else EXIT_PREEMPTED)


_DEFAULT_HANDLERS = ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))


def stop_while_starting():
    """From here until `run` starts `main`, Ctrl-C and SIGTERM end the program with one line
    and exit status 130 or 143 (`recipes.common.startup` calls it first; by default Python
    prints a KeyboardInterrupt's traceback, and SIGTERM ends the process without a word). A
    signal the process ignores (SIGINT in a shell's background job) stays ignored."""
    for signum, default in _DEFAULT_HANDLERS:
        if signal.getsignal(signum) is default:
            signal.signal(signum, _stopped_while_starting)


def _started():
    """`main` starts: Ctrl-C and SIGTERM back to what `run` handles (KeyboardInterrupt, the
    default SIGTERM that `sigterm_raises` replaces)."""
    for signum, default in _DEFAULT_HANDLERS:
        if signal.getsignal(signum) is _stopped_while_starting:
            signal.signal(signum, default)


EXIT_USER_ERROR = 2
_HELP_FLAGS = {"--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml"}
EXIT_PREEMPTED = 143  # 128 + SIGTERM, what a shell reports for a process stopped by it
EXIT_INTERRUPTED = 130  # 128 + SIGINT (Ctrl-C)


EXIT_CLOSED_STDOUT = 1  # Python's recommendation: output was lost


@contextlib.contextmanager
def quiet_on_closed_stdout():
    """In the block, and as it ends (its last output is flushed then: a write that stayed in
    the buffer fails only when flushed), a BrokenPipeError of a closed stdout ends the
    program quietly (`_end_on_closed_stdout`); an exit in the block (`sys.exit`) keeps its
    status, but 0, which becomes 1, if stdout turns out closed."""
    try:
        yield
    except SystemExit as exiting:
        if _flush_fails():
            _end_on_closed_stdout(exiting.code or EXIT_CLOSED_STDOUT)
        raise
    except BaseException as error:
        if _caused_by(error, BrokenPipeError) and _stdout_closed():
            _end_on_closed_stdout(EXIT_CLOSED_STDOUT)
        raise
    if _flush_fails():
        _end_on_closed_stdout(EXIT_CLOSED_STDOUT)


def _flush_fails():
    """Flushes stdout; whether it failed as its reader has gone."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    return False


def _stdout_closed():
    """Whether stdout's reader has gone (a pipe's read end closed: the poll reports an
    error), so that a BrokenPipeError is stdout's, not a socket's."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or stdout without a descriptor
        return False


def _end_on_closed_stdout(status):
    """Exits with `status`, stdout pointed at os.devnull first: the interpreter's own flush
    at exit, of what is still in the buffer, then has nowhere to fail (a second message)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(status)


def parse_command_line(known_only=False):
    """Parses `sys.argv` into absl's FLAGS (the flags defined so far) as `run` does first:
    `--help`, `--helpfull` and `-h` print the help and exit with status 0 (1 if stdout is
    closed before it is written: `quiet_on_closed_stdout`); a bad flag is one
    line and exit status 2, as any mistake. Returns the arguments left (argv[0] first;
    with `known_only`, the flags not defined yet too)."""
    app.define_help_flags()
    # `-h`, which argparse programs (and most others) take for help, is not an absl flag
    sys.argv = [("--help" if arg == "-h" else arg) for arg in sys.argv]
    with quiet_on_closed_stdout():  # the help's text to a closed stdout: exit status 1
        try:
            return flags.FLAGS(sys.argv, known_only=known_only)
        except SystemExit as help_exit:  # absl prints --help/--helpfull, then exits with 1
            sys.exit(0 if set(sys.argv[1:]) & _HELP_FLAGS else help_exit.code)
        except flags.Error as error:
            print(f"error: {_flag_error_line(error)}; see --help", file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)


_VALUE_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false"}


def not_a_flag(name, known=None):
    """The line for `--name`, which the program does not define: with the closest of the
    flags it does define (`known`, names without `--`; by default absl's), if one is close (a
    misspelling)."""
    nearest = closest_flag(name, known)
    guess = f" (did you mean --{nearest}?)" if nearest else ""
    return f"--{name} is not a flag of this program{guess}"


def closest_flag(name, known=None):
    """The flag of `known` (names without `--`; by default absl's) so close to `name` that
    `name` is a misspelling of it, or None."""
    nearest = difflib.get_close_matches(name, list(flags.FLAGS if known is None else known),
                                        n=1, cutoff=0.8)
    return nearest[0] if nearest else None


def unexpected_arguments(arguments):
    """The line for `arguments` of the command line that are not flags."""
    return f"unexpected arguments {' '.join(arguments)}: all options are --flags (see --help)"


def _flag_error_line(error):
    """absl's `error` of the command line, in this project's words where absl's are Python's:
    an unknown flag (absl: "Unknown command line flag 'x'. Did you mean: y ?"), a value not
    of the flag's type (absl: "invalid literal for int() with base 10", "('Non-boolean
    argument to boolean flag', 'x')")."""
    if isinstance(error, flags.UnrecognizedFlagError):
        return not_a_flag(error.flagname)
    match = re.match(r"flag --([^=]+)=(.*?): ", str(error), flags=re.DOTALL)
    if match is None or match.group(1) not in flags.FLAGS:
        return str(error)
    flag = flags.FLAGS[match.group(1)]
    kind = _VALUE_KINDS.get(flag.flag_type())
    if kind is None or not isinstance(error.__context__, (TypeError, ValueError)):
        return str(error)
    default = "" if flag.default is None else f" (default {flag.default_as_str.strip(chr(39))})"
    return f"flag --{flag.name}={match.group(2)}: --{flag.name} takes {kind}{default}"


def run(main, trains=True):
    """Runs `main` like `absl.app.run`, reporting `UserError` as one line and exit status 2;
    Ctrl-C and SIGTERM as one line (`stopped_line`), exit status 130 and 143. `trains`: the
    program is a training program (its line says how a run resumes), not a data tool."""

    def guarded_main(argv):
        try:
            _started()
            with sigterm_raises():
                return main(argv)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)
        except Preempted as stopped:
            print(f"stopped: {stopped}", file=sys.stderr, flush=True)
            sys.exit(EXIT_PREEMPTED)
        except (KeyboardInterrupt, Terminated, Exception) as error:
            stopped = stop_behind(error)
            if isinstance(stopped, KeyboardInterrupt):  # Ctrl-C: what was written stays
                print(stopped_line("interrupted (Ctrl-C)", "SIGTERM also saves the step in "
                                   "progress first", trains), file=sys.stderr, flush=True)
                sys.exit(EXIT_INTERRUPTED)
            if stopped is not None:  # SIGTERM outside training: cleaned up as for Ctrl-C
                how = f"SIGTERM ({stopped.doing})" if stopped.doing else "SIGTERM"
                print(stopped_line(how, trains=trains), file=sys.stderr, flush=True)
                sys.exit(EXIT_PREEMPTED)
            problem = cloud_storage_problem(error)
            if problem is None:
                raise
            print(f"error: {problem}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)

    parse_command_line()
    try:
        with quiet_on_closed_stdout():  # the console's lines (`... | head`)
            app.run(guarded_main)
    except app.UsageError as error:  # absl raises this for bad flags in some paths.
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(EXIT_USER_ERROR)


def stop_behind(error):
    """The Ctrl-C (KeyboardInterrupt) or SIGTERM (`Terminated`) behind `error`: itself, or
    one it was raised from or while handling (a signal's exception raised inside C code,
    numpy's `__array__` say, reaches Python as a SystemError with it as its context); None
    if none is."""
    return _caused_by(error, (KeyboardInterrupt, Terminated))


def _caused_by(error, kinds):
    """The exception of `kinds` (a class or tuple of them) that is `error`, or one it was
    raised from or while handling; None if none is."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kinds):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def stopped_line(how, note=None, trains=True):
    """The line of a program stopped by `how` ("interrupted (Ctrl-C)", "SIGTERM (while
    exporting)"): how to go on, from the newest checkpoint when the run has one; of a data
    tool (not `trains`), only to run it again."""
    if not trains:
        return f"stopped: {how}; run the same command again"
    newest = None
    if _newest_checkpoint is not None:
        try:
            newest = _newest_checkpoint()
        except Exception:  # pylint: disable=broad-except  (a damaged run: said on the rerun)
            newest = None
    if newest:
        step = re.search(r"-(\d+)$", newest)
        at = f" (step {step.group(1)})" if step else ""
        notes = f" ({note})" if note else ""
        return (f"stopped: {how}; the newest checkpoint is {newest}{at}: run the same command "
                f"again to go on from there{notes}")
    notes = f"; {note}" if note else ""
    return (f"stopped: {how}; run the same command again to go on (a training run resumes "
            f"from its newest checkpoint{notes})")


def cloud_storage_problem(error):
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
