"""Scaling rows for counts a checkpoint declares (`swavg inspect` and `swavg average` CPU time for
N items): the command line of scripts/bench/counts.py, which describes the rows.

    python bench_counts.py SWAVG_BIN [--sizes 10000,100000] [--tensor-sizes 100000,1000000] [--dir TMP]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench.counts import main  # noqa: E402

if __name__ == "__main__":
    main()
