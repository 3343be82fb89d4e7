"""The flags every benchmark of a recipe takes (recipe_throughput.py and the scripts built on
it), and the check of a script's command line before TensorFlow loads: this module imports
no TensorFlow, so that `--help` and a flag mistake are answered in a fraction of a second
(as the recipes answer theirs: recipes/common/startup.py `check_command_line`)."""

import sys

RECIPE_NAMES = ("bert", "resnet")  # --recipe's choices: the keys of recipe_throughput.RECIPES
DATA_REUSED = "where the recipe's data are prepared or reused"  # --work_dir's help, at least


def add_recipe_flags(parser, name, work_dir_help=DATA_REUSED,
                     json_help="write every sample here"):
    """--recipe, --config_file, --work_dir (default /tmp/<name>) and, given `json_help`,
    --json, as every benchmark of a recipe takes them."""
    parser.add_argument("--recipe", choices=RECIPE_NAMES, default="bert",
                        help="the recipe measured, on its tiny config by default")
    parser.add_argument("--config_file",
                        help="the recipe's config (default: configs/<recipe>/tiny_cpu.yaml)")
    parser.add_argument("--work_dir", default=f"/tmp/{name}", help=work_dir_help)
    if json_help:
        parser.add_argument("--json", help=json_help)


def check_command_line(parse_arguments, bad_arguments):
    """Answers what the command line alone decides, before TensorFlow is imported: `--help`
    (exit status 0) and a mistake (one line `error: ...`, exit status 2) that argparse finds
    in `parse_arguments(argv)` or `bad_arguments(args)` names (a line, or None). A script
    calls it at its top, under `if __name__ == "__main__":`; its `main` parses and checks
    the same flags again, for callers in the same process, and checks the rest (its config)."""
    problem = bad_arguments(parse_arguments(sys.argv[1:]))
    if problem:  # as recipe_throughput.exit_status prints main's UserError
        print(f"error: {problem}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":  # run alone it would do nothing: say what to run instead
    print("error: benchmarks/recipe_flags.py is a module of the benchmark scripts, used by "
          "recipe_throughput.py and the other benchmarks of a recipe; run one of those "
          "(--help lists its flags)", file=sys.stderr)
    sys.exit(2)
