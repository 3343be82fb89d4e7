"""The parser of the project's argparse programs (the batch-size study, the benchmark
scripts), made to behave as its absl programs (the recipes) do: a mistake is one line,
`error: ...; see --help`, and exit status 2, without argparse's usage block; an unknown
flag is named before any missing one, with the known flag it is nearest to, in the words of
the absl programs (`errors.not_a_flag`); flags are taken only in full (argparse would read
`--step` as `--steps`); and `--helpfull`, absl's full help, prints the help as `--help`
does."""

import argparse
import sys

from recipes.common import errors


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
        known = sorted(flag[2:] for flag in self._option_string_actions if flag.startswith("--"))
        for arg in args:
            if arg == "--":  # what follows is not flags
                break
            name = arg[2:].split("=", 1)[0]
            if arg.startswith("--") and name not in known:
                self.error(errors.not_a_flag(name, known))
        return super().parse_known_args(args, namespace)
