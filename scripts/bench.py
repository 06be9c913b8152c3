"""Benchmark swavg against the Python peer, real peers and the I/O floor: the command line of the
package scripts/bench/ (its cli.py describes every mode; --help prints it).

    /usr/bin/python3 scripts/bench.py --quick         # tiny sizes, one round (CI)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench.cli import main  # noqa: E402  (the package beside this file, not this file)

if __name__ == "__main__":
    sys.exit(main())
