"""Running the timed children: each command is spawned by a small launcher process
(children/peer.py runner) and timed wall-clock from spawn to exit, with the peak RSS (ru_maxrss),
user and system time of that child alone; Job collects one command's runs over the rounds.

The launcher is started before the bench imports torch: a child's ru_maxrss starts at the RSS of
the process that forks it. Also here: the page-cache helpers (warm, drop_caches), the state of a
run (Bench) and the private copy of the binary that the timed runs use.
"""
import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys

from ._common import MiB, PEER, log


@dataclasses.dataclass
class Run:
    wall_s: float
    maxrss_bytes: int
    rc: int
    user_s: float
    sys_s: float
    peak_anon_bytes: int = None  # sampled from /proc, only for jobs with sample=True
    peak_file_bytes: int = None


class Runner:
    """Talks to `children/peer.py runner`, which spawns each command from a small process."""

    def __init__(self, logdir):
        self.stderr = os.path.join(logdir, "stderr.txt")
        self.proc = subprocess.Popen([sys.executable, PEER, "runner"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def run(self, argv, sample=False):
        job = {"argv": argv, "stderr": self.stderr, "sample": sample}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        run = Run(**json.loads(self.proc.stdout.readline()))
        if run.rc != 0:
            with open(self.stderr, errors="replace") as f:
                raise RuntimeError(f"exit {run.rc}: {' '.join(argv)}\n{f.read()[-4000:]}")
        return run

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


@dataclasses.dataclass
class Job:
    """One command, run once per round; its output is removed before each run."""
    key: str
    argv: list
    output: str = None
    report: str = None  # swavg --report file: its wall_time_s is recorded too
    sample: bool = False  # poll the child's anonymous and file-backed RSS
    runs: list = dataclasses.field(default_factory=list)
    internal_s: list = dataclasses.field(default_factory=list)

    def median(self, attr="wall_s"):
        return statistics.median(getattr(r, attr) for r in self.runs) if self.runs else None

    def min(self, attr="wall_s"):
        return min(getattr(r, attr) for r in self.runs) if self.runs else None

    def peak_rss(self):
        return max(r.maxrss_bytes for r in self.runs) if self.runs else None

    def summary(self):
        internal = statistics.median(self.internal_s) if self.internal_s else None
        return {"argv": self.argv, "median_s": self.median(), "peak_rss_bytes": self.peak_rss(),
                "median_user_s": self.median("user_s"), "median_sys_s": self.median("sys_s"),
                "swavg_internal_median_s": internal,
                "runs": [dataclasses.asdict(r) for r in self.runs]}


def run_job(runner, job):
    for p in (job.output, job.report):
        if p and os.path.isdir(p):
            shutil.rmtree(p)  # a Hugging Face folder (--peers)
        elif p and os.path.exists(p):
            os.unlink(p)
    job.runs.append(runner.run(job.argv, job.sample))
    if job.report:
        with open(job.report) as f:
            job.internal_s.append(json.load(f)["wall_time_s"])


def run_rounds(runner, jobs, repeats, progress=True):
    """Every job once per round, each round starting one job later (alternating runs)."""
    for r in range(repeats):
        shift = r % len(jobs)
        for job in jobs[shift:] + jobs[:shift]:
            run_job(runner, job)
        if progress:
            log(f"  round {r + 1}/{repeats} done")


def warm(paths):
    """Read every file once so that the timed runs find it in the page cache."""
    buf = memoryview(bytearray(16 * MiB))
    for p in dict.fromkeys(os.path.realpath(p) for p in paths):
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def drop_caches():
    """Write back dirty pages and drop the page cache (root only): the next reads come from disk."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        raise SystemExit(f"--cold needs root to drop the page cache (/proc/sys/vm/drop_caches): {e}")


@dataclasses.dataclass
class Bench:
    """One run's state, handed to every benchmark: the options, the folders, the launcher, notes."""
    args: argparse.Namespace
    workdir: str
    outdir: str
    runner: Runner
    notes: list = dataclasses.field(default_factory=list)
    baseline_rss: int = None  # the disk modes: peak RSS of `swavg --version`
    checked: dict = dataclasses.field(default_factory=dict)  # --dcp: swavg's output against torch's
    done: list = dataclasses.field(default_factory=list)  # the disk modes: rows of earlier read_ahead_kb

    def out(self, name):
        return os.path.join(self.outdir, name)


def snapshot_binary(swavg, outdir):
    """A private copy of the binaries (swavg and the swavg-torch it hands LibTorch jobs to), so that
    a rebuild during the run cannot change or break them."""
    copy = os.path.join(outdir, "swavg")
    shutil.copy2(swavg, copy)
    if os.path.exists(swavg + "-torch"):  # --peers and the disk modes run without it
        shutil.copy2(swavg + "-torch", copy + "-torch")
    res = subprocess.run([copy, "--version"], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{swavg} --version fails (being rebuilt?): {res.stderr.strip()}")
    return copy
