"""What every benchmark module shares: sizes, where the scripts and the child processes are, and
the progress log (stderr, after what was printed so far)."""
import os
import sys

MiB = 1 << 20
GiB = 1 << 30
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # scripts/
CHILDREN = os.path.join(SCRIPTS, "bench", "children")
PEER = os.path.join(CHILDREN, "peer.py")


def log(msg):
    sys.stdout.flush()
    print(msg, file=sys.stderr, flush=True)
