"""One-line errors for bad input, and the `main` wrapper that prints them.

A recipe raises `UserError` for anything the user can fix (a config typo, a missing file,
batch arithmetic that does not divide). `run(main)` turns it into a single line on stderr
and exit status 2, with no traceback, before anything is written to `model_dir`.
"""

import sys

from absl import app


class UserError(Exception):
    """Bad input. The message is one line: what is wrong, where, and what to do."""


EXIT_USER_ERROR = 2


def run(main):
    """Runs `main` like `absl.app.run`, reporting `UserError` as one line and exit status 2."""

    def guarded_main(argv):
        try:
            return main(argv)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)

    try:
        app.run(guarded_main)
    except app.UsageError as error:  # absl raises this for bad flags in some paths.
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(EXIT_USER_ERROR)
