"""The peak RSS of one swavg run, for the tests that check memory stays flat.

A child's ru_maxrss starts at the RSS of the process that forks it, and a test process that has
imported torch is larger than swavg: swavg is started by a small launcher (the same interpreter,
nothing imported) and the launcher reports its one child's peak."""
import subprocess
import sys

from common import SWAVG

_LAUNCHER = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
sys.stderr.write(p.stderr.decode("utf-8", "replace"))
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss(*args):
    """Runs swavg with `args`; returns its peak RSS in bytes. Raises AssertionError if it fails."""
    p = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, SWAVG, *map(str, args)], capture_output=True,
                       text=True, timeout=600)
    fields = p.stdout.split()
    if p.returncode != 0 or len(fields) != 2 or fields[0] != "0":
        raise AssertionError("swavg %s failed (%s):\n%s" % (" ".join(map(str, args)), p.stdout.strip(), p.stderr))
    return int(fields[1]) * 1024
