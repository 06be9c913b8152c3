"""What a run reports beside its timings: the machine it ran on, whether two outputs hold the
same tensors, and the text tables (with their number formats) every benchmark prints.
"""
import datetime
import os
import platform
import subprocess

from ._common import MiB, SCRIPTS
from .children.peer import load_checkpoint


def machine_info(swavg):
    """The machine, the Pythons' torch, swavg's version and commit, and the load at the start."""
    import torch

    def first(path, prefix, conv):
        with open(path) as f:
            return next((conv(line.split(":", 1)[1]) for line in f if line.startswith(prefix)),
                        None)

    git = subprocess.run(["git", "-C", SCRIPTS, "describe", "--always", "--dirty"],
                         capture_output=True, text=True)
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "platform": platform.platform(),
            "cpu": first("/proc/cpuinfo", "model name", str.strip) or platform.processor(),
            "nproc": len(os.sched_getaffinity(0)),
            "mem_total_bytes": first("/proc/meminfo", "MemTotal",
                                     lambda v: int(v.split()[0]) * 1024),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "swavg_version": subprocess.run([swavg, "--version"], capture_output=True,
                                            text=True).stdout.strip(),
            "swavg_commit": git.stdout.strip(), "loadavg_start": os.getloadavg()}


def compare_state_dicts(a_path, b_path, exact=True, rtol=0.0, atol=0.0):
    """(ok, detail): same names, dtypes and shapes; values torch.equal, or allclose if not exact.

    Either may be a torch.save file, a safetensors file or a Hugging Face folder."""
    import torch
    a, b = load_checkpoint(a_path), load_checkpoint(b_path)
    if sorted(a) != sorted(b):
        return False, f"names differ: {sorted(set(a) ^ set(b))[:5]}"
    bad, worst, dtypes = [], 0.0, set()
    for k, x in a.items():
        y = b[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            bad.append(k)
            if x.dtype != y.dtype:
                dtypes.add(f"{x.dtype} vs {y.dtype}".replace("torch.", ""))
        elif exact or not x.is_floating_point():
            if not torch.equal(x, y):
                bad.append(k)
        else:
            if x.numel():
                worst = max(worst, (x.double() - y.double()).abs().max().item())
            if not torch.allclose(x, y, rtol=rtol, atol=atol):
                bad.append(k)
    detail = f"{len(a) - len(bad)}/{len(a)} tensors {'equal' if exact else 'close'}"
    if not exact:
        detail += f", max |diff| {worst:.3g}"
    if bad:
        detail += f"; first differing: {bad[:3]}"
    if dtypes:
        detail += f"; dtypes differ: {', '.join(sorted(dtypes))}"
    return not bad, detail


def table(headers, rows):
    """Text columns: the first left-aligned, the rest right-aligned; None prints empty."""
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fmt_s(x):
    """Seconds."""
    return None if x is None else f"{x:.3f}"


def fmt_r(x):
    """A ratio."""
    return None if x is None else f"{x:.2f}"


def fmt_mib(x):
    """Bytes in MiB: one decimal below 10."""
    if x is None:
        return None
    v = round(x / MiB, 1)
    return f"{v:.1f}" if abs(v) < 10 else f"{v:.0f}"
