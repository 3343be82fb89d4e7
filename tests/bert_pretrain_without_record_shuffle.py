"""`python -m recipes.bert.pretrain` with the reader's record shuffle turned off.

Why (tests/test_multi_worker.py compares 2 workers with 1 process): Model Garden's
pretraining reader shards the data per host and *then* shuffles records in a 10,000-record
buffer (`recipes.bert.input.SHUFFLE_BUFFER_SIZE`), so which examples form a global batch
depends on the number of hosts. With one training file and no record shuffle, host `h` of
`N` reads records h, h+N, h+2N, ... and global batch j is records [jG, (j+1)G) for any N,
so 2 workers and 1 process see the same examples at every step. Remove this file once the
recipe exposes `data.shuffle_buffer_size` (the test would pass it in --params_override).
"""
import os
import runpy
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # as recipes/bert/pretrain.py, before TF
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from recipes.bert import input as bert_input  # noqa: E402

bert_input.SHUFFLE_BUFFER_SIZE = 1  # a buffer of one record: records in file order
runpy.run_module("recipes.bert.pretrain", run_name="__main__", alter_sys=True)
