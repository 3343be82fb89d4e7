"""The parser of the project's argparse programs (the batch-size study, the benchmark
scripts), made to behave as its absl programs (the recipes) do: a mistake is one line,
`error: ...; see --help`, and exit status 2, without argparse's usage block; an unknown
flag is named before any missing one, with the known flag it is nearest to (absl's "Did
you mean"); flags are taken only in full (argparse would read `--step` as `--steps`); and
`--helpfull`, absl's full help, prints the help as `--help` does."""

import argparse
import difflib
import sys


class OneLineParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` with the absl programs' conventions (see the module)."""

    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, **kwargs)
        self.add_argument("--helpfull", action="help", help=argparse.SUPPRESS)

    def error(self, message):
        print(f"error: {message}; see --help", file=sys.stderr, flush=True)
        sys.exit(2)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        known = sorted(flag for flag in self._option_string_actions if flag.startswith("--"))
        for arg in args:
            if arg == "--":  # what follows is not flags
                break
            name = arg.split("=", 1)[0]
            if arg.startswith("--") and name not in known:
                nearest = difflib.get_close_matches(name, known, n=1)
                self.error(f"unknown flag {name}"
                           + (f" (did you mean {nearest[0]}?)" if nearest else ""))
        return super().parse_known_args(args, namespace)
