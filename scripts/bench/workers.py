"""--workers 1,2,4: N concurrent `swavg average ... --shard i/N` processes, then `swavg finalize`,
against one process writing the same folder; each worker's peak RSS through GNU time.
"""
import os
import shutil
import statistics
import subprocess
import time

from ._common import log
from .datasets import files_of, make_disk_set
from .runner import drop_caches, warm


def swavg_has_shard(swavg):
    p = subprocess.run([swavg, "average", "--help"], capture_output=True, text=True)
    q = subprocess.run([swavg, "finalize", "--help"], capture_output=True, text=True)
    return "--shard" in p.stdout and q.returncode == 0


def run_workers(b, counts):
    """--workers 1,2,4: N concurrent `swavg average ... -o OUT/ --shard i/N`, then `swavg finalize
    OUT/`, against one process writing the same folder. Skipped when the binary has no --shard."""
    a = b.args
    if not swavg_has_shard(a.swavg):
        msg = f"{a.swavg} has no --shard / finalize: --workers skipped"
        log(msg)
        b.notes.append(msg)
        return []
    s = make_disk_set(b.workdir, "disk8", 4 if a.quick else 159, 8, "float32", a.seed)
    files = [f for p in s.paths for f in files_of(p)]
    max_shard = "2MB" if a.quick else "40MB"
    out = b.out("workers_out")
    rows = []
    for n in counts:
        walls, rss = [], []
        for r in range(a.repeats):
            for d in (out, out + ".partial"):
                shutil.rmtree(d, ignore_errors=True)
            drop_caches() if a.cold else warm(files)
            argv = [a.swavg, "-q", "average", *s.paths, "-o", out + "/", "--max-shard-size", max_shard]
            shards = [[]] if n == 1 else [["--shard", f"{i}/{n}"] for i in range(n)]
            # Each worker's peak RSS through GNU time: a child forked from this process (torch
            # imported) would report this process's RSS as its own peak.
            rss_files = [b.out(f"workers_rss_{i}") for i in range(len(shards))]
            t0 = time.perf_counter()
            timed = os.path.exists("/usr/bin/time")  # Debian's package `time`
            procs = [subprocess.Popen((["/usr/bin/time", "-f", "%M", "-o", f] if timed else []) + argv + extra)
                     for f, extra in zip(rss_files, shards)]
            peak = 0
            for p, f in zip(procs, rss_files):
                if p.wait() != 0:
                    raise RuntimeError(f"worker failed: {' '.join(p.args)}")
                if timed:
                    with open(f) as fh:
                        peak = max(peak, int(fh.read().split()[-1]) * 1024)
            if n > 1:
                subprocess.run([a.swavg, "-q", "finalize", out + "/"], check=True)
            walls.append(time.perf_counter() - t0)
            rss.append(peak)
        rows.append({"set": s.key, "workers": n, "cache": "cold" if a.cold else "warm",
                     "median_s": statistics.median(walls), "runs": walls, "peak_rss_bytes": max(rss)})
    one = rows[0]["median_s"] if rows and rows[0]["workers"] == 1 else None
    for r in rows:
        r["ratio_to_one_process"] = r["median_s"] / one if one else None
    shutil.rmtree(out, ignore_errors=True)
    return rows
