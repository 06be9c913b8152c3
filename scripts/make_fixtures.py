#!/usr/bin/env python3
"""Writes the test fixtures with real PyTorch and fixed seeds.

Usage: make_fixtures.py OUTDIR

Each module in scripts/fixtures/ with a make(outdir) function runs, in name order (zoo.py: the
checkpoint layouts of real projects). Beside each
checkpoint a JSON manifest records what Python itself reads from it (names, dtypes, shapes,
strides, storage offsets and a digest of the bytes), so the C++ tests compare against PyTorch and
never against numbers produced by swavg.
"""
import importlib
import os
import pkgutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    outdir = os.path.abspath(sys.argv[1])
    os.makedirs(outdir, exist_ok=True)
    import fixtures
    for info in sorted(pkgutil.iter_modules(fixtures.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module("fixtures." + info.name)
        if hasattr(module, "make"):  # families such as hostile_zip only add cases to hostile.py's suite
            module.make(outdir)
    print("fixtures written to", outdir)


if __name__ == "__main__":
    main()
