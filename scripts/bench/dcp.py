"""DCP inputs (--dcp): 4 checkpoints saved by torch.distributed.checkpoint.save from 4 gloo
processes on CPU (DTensors on a CPU DeviceMesh, as FSDP2 saves), written by children/dcp_torch.py
under --dcp-python (torch 2.x with DTensor: the bench may run under a Python without it), and
swavg's average checked against torch's dcp_to_torch_save + average. The model has many layers and
a small embedding, so the flat-RSS budget (3 x largest tensor + 64 MiB) is well under the model.
The cases run as disk.py runs --cold's.
"""
import json
import math
import os
import shutil
import subprocess

from ._common import CHILDREN, MiB, log
from .datasets import CkptSet, cached_manifest, files_of, gpt_shapes, save_manifest


BENCH_DCP = os.path.join(CHILDREN, "dcp_torch.py")
DCP_KEY = "dcp4x4"
VENV_PYTHON = "/var/lib/swavg/venv/bin/python"


def dcp_shapes(mib):
    """A GPT-like state dict of about `mib` MiB in float32 whose largest tensor is ~1/16 of it."""
    params = mib * MiB // 4
    d = 1024 if mib >= 256 else 256 if mib >= 16 else 64
    vocab = max(64, params // 16 // d // 64 * 64)
    ctx = 1024
    layers = max(1, round((params - (vocab + ctx + 2) * d) / (12 * d * d + 13 * d)))
    return gpt_shapes(d, vocab, ctx, layers)


def make_dcp_set(b, mib, n=4, ranks=4):
    """n DCP folders of a `mib` MiB float32 model, each saved by `ranks` gloo processes."""
    a = b.args
    folder = os.path.join(b.workdir, DCP_KEY)
    config = {"kind": "dcp", "mib": mib, "n": n, "ranks": ranks, "seed": a.seed, "version": 1}
    man = cached_manifest(folder, config)
    if man:
        return CkptSet(**man["sets"][0])
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    entries = dcp_shapes(mib)
    with open(os.path.join(folder, "entries.json"), "w") as f:
        json.dump(entries, f)
    paths = [os.path.join(folder, f"ckpt_{i:03d}") for i in range(n)]
    log(f"dcp: writing {n} x {mib} MiB with torch.distributed.checkpoint.save on {ranks} gloo ranks ...")
    subprocess.run([a.dcp_python, BENCH_DCP, "make", *paths, "--entries", os.path.join(folder, "entries.json"),
                    "--ranks", str(ranks), "--seed", str(a.seed)], check=True)
    size = sum(os.path.getsize(f) for f in files_of(paths[0]))
    s = CkptSet(key=DCP_KEY, paths=paths, file_bytes=size,
                label=f"{n} x {size / MiB:.0f} MiB DCP of {ranks} ranks",
                largest_tensor_bytes=max(math.prod(sh) for _, sh in entries) * 4, n_tensors=len(entries))
    save_manifest(folder, config, [s])
    return s


def check_dcp_output(b, s, output):
    """swavg's average of the DCP set against torch's dcp_to_torch_save + average."""
    res = subprocess.run([b.args.dcp_python, BENCH_DCP, "check", output, *s.paths], capture_output=True, text=True)
    detail = (res.stdout.strip() or res.stderr.strip()[-500:])
    return res.returncode == 0, detail
