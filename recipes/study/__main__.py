"""`python -m recipes.study ...`: the batch-size study (see recipes/study/cli.py)."""
import sys

from recipes.study import cli

sys.exit(cli.main())
