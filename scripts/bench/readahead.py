"""The block device's readahead (--read-ahead-kb, --readahead-matrix): read_ahead_kb of the work
folder's device, set for a block and always restored; what swavg's own read-ahead does on a set;
and the matrix table, one line per set x cache x read_ahead_kb.
"""
import os
import subprocess

from ._common import log
from .report import fmt_s, table


def read_ahead_file(path):
    """/sys/block/<dev>/queue/read_ahead_kb of the block device holding `path` (a partition's
    disk), or None (no block device: tmpfs, overlay, NFS)."""
    st = os.stat(path)
    dev = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    for d in (dev, os.path.dirname(dev)):  # a partition has no queue/ of its own
        f = os.path.join(d, "queue", "read_ahead_kb")
        if os.path.exists(f):
            return f
    return None


class ReadAhead:
    """Sets read_ahead_kb of the work folder's device for a block and always restores it, also on
    SIGTERM / SIGHUP / Ctrl-C (root only)."""

    def __init__(self, path):
        self.file = read_ahead_file(path)
        if self.file is None:
            raise SystemExit(f"--read-ahead-kb: {path} is on no block device with a queue/read_ahead_kb")
        with open(self.file) as f:
            self.original = int(f.read())
        self.saved_handlers = {}

    def set(self, kb):
        try:
            with open(self.file, "w") as f:
                f.write(f"{kb}\n")
        except OSError as e:
            raise SystemExit(f"--read-ahead-kb needs root to write {self.file}: {e}")
        with open(self.file) as f:
            return int(f.read())

    def _on_signal(self, signum, frame):
        raise SystemExit(f"signal {signum}: read_ahead_kb restored to {self.original}")

    def __enter__(self):
        import signal
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self.saved_handlers[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc):
        import signal
        with open(self.file, "w") as f:
            f.write(f"{self.original}\n")
        for sig, h in self.saved_handlers.items():
            signal.signal(sig, h)
        log(f"read_ahead_kb of {self.file} restored to {self.original}")
        return False


def current_read_ahead_kb(path):
    f = read_ahead_file(path)
    if f is None:
        return None
    with open(f) as fh:
        return int(fh.read())


def default_read_ahead(b, s):
    """What swavg's default read-ahead does on this set: its -v line (`read-ahead: ...`), or 'off'."""
    out = b.out(f"{s.key}_probe.safetensors")
    res = subprocess.run([b.args.swavg, "-v", "average", *s.paths, "-o", out, "--force"],
                         capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                              if k != "SWAVG_PREFETCH_BYTES"})
    if os.path.exists(out):
        os.unlink(out)
    lines = [ln.split("read-ahead", 1)[1].lstrip(": ") for ln in res.stderr.splitlines() if "read-ahead" in ln]
    return lines[-1] if lines else "off"


def tool_name(tool):
    if tool.startswith("swavg-readahead-"):
        return f"swavg PREFETCH={tool.rsplit('-', 1)[1]}"
    return "swavg (default)" if tool == "swavg" else tool


def print_matrix(rows):
    """One line per set x cache x read_ahead_kb: each swavg variant's median / floor [spread]."""
    tools = list(dict.fromkeys(r["tool"] for r in rows if r["tool"].startswith("swavg") or r["tool"] == "floor-ahead"))
    if len(tools) < 2 and len({r["read_ahead_kb"] for r in rows}) < 2:
        return
    print("\nread-ahead matrix: each tool's median / floor median [fastest-slowest run / floor median]; floor-ahead: "
          "the floor with 64 MiB per file under POSIX_FADV_WILLNEED")
    by = {}
    for r in rows:
        by.setdefault((r["label"], r["cache"], r["read_ahead_kb"]), {})[r["tool"]] = r
    out = []
    for (label, cache, kb), group in by.items():
        floor = next(iter(group.values()))["floor_s"]
        cells = [f"{g['ratio_to_floor']:.2f} [{g['ratio_min']:.2f}-{g['ratio_max']:.2f}]" if g else ""
                 for g in (group.get(t) for t in tools)]
        out.append([label, cache, kb, fmt_s(floor)] + cells)
    print(table(["inputs", "cache", "ra", "floor s"] + [tool_name(t) for t in tools], out))
