"""Scaling rows for counts a checkpoint declares: the CPU time of `swavg inspect` on inputs that
declare N items, for N = 10^4 and 10^5 (--sizes), so that a check quadratic in N shows at once.

    python scripts/bench_counts.py SWAVG_BIN [--sizes 10000,100000] [--dir TMP]

Rows (CPU seconds of the swavg child, from its rusage through runner.py's launcher, never wall time):
  dcp_columns   a DCP folder whose one tensor [1, N] is saved as N column chunks (every chunk
                points at the same torch.save archive of a [1, 1] tensor, so the folder stays small):
                the chunk tiling check.
  dcp_rows      the same count as N row chunks of [N, 1].
  zero3_groups  a one-rank ZeRO-3 tag folder with N flat fp32 groups of one parameter each (views
                of one storage): zero3_slices' group lookup.
  tensors       `swavg average` of two safetensors files of N one-element float32 tensors each:
                the fold's time and its peak memory per tensor (peak RSS / N), for --tensor-sizes.
Needs torch (torch.distributed.checkpoint's metadata classes), nothing else; prints one line per row.
"""
import argparse
import io
import os
import pickle
import shutil
import struct
import tempfile

# The bench's launcher (a child's ru_maxrss starts at the RSS of the process that forks it, and this
# one holds torch once a DCP or ZeRO row is made) and its safetensors header.
from .datasets import st_header
from .runner import Runner


def dcp_folder(folder, n, columns):
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex,
                                                       TensorProperties, TensorStorageMetadata)
    os.makedirs(folder)
    buf = io.BytesIO()
    torch.save(torch.ones(1, 1), buf)
    with open(os.path.join(folder, "__0_0.distcp"), "wb") as f:
        f.write(buf.getvalue())
    size = torch.Size([1, n] if columns else [n, 1])
    chunks, storage = [], {}
    for i in range(n):
        offsets = torch.Size([0, i] if columns else [i, 0])
        chunks.append(ChunkStorageMetadata(offsets=offsets, sizes=torch.Size([1, 1])))
        storage[MetadataIndex("w", offsets, i)] = _StorageInfo("__0_0.distcp", 0, len(buf.getvalue()))
    tm = TensorStorageMetadata(TensorProperties(dtype=torch.float32), size, chunks)
    md = Metadata(state_dict_metadata={"w": tm}, planner_data={"w": ("w",)}, storage_data=storage)
    with open(os.path.join(folder, ".metadata"), "wb") as f:
        pickle.dump(md, f)


def zero3_folder(tag, n):
    import collections
    import torch
    os.makedirs(tag)
    flat = torch.arange(n, dtype=torch.float32)
    shapes = collections.OrderedDict(("p%d" % i, torch.Size([1])) for i in range(n))
    torch.save({"module": {}, "buffer_names": [], "param_shapes": [shapes], "shared_params": {},
                "frozen_param_shapes": None, "frozen_param_fragments": None, "ds_version": "0.19.8"},
               os.path.join(tag, "zero_pp_rank_0_mp_rank_00_model_states.pt"))
    torch.save({"optimizer_state_dict": {"zero_stage": 3, "partition_count": 1,
                                         "fp32_flat_groups": list(flat.split(1))}, "ds_version": "0.19.8"},
               os.path.join(tag, "zero_pp_rank_0_mp_rank_00_optim_states.pt"))


def safetensors_file(path, n, value):
    """N one-element float32 tensors t0..t{N-1}, written directly (no torch: quick at 10^6)."""
    with open(path, "wb") as f:
        f.write(st_header([("t%d" % i, (1,)) for i in range(n)], "F32", 4) + struct.pack("<f", value) * n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("swavg")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--tensor-sizes", default="100000,1000000")
    ap.add_argument("--dir")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="swavg-bench-counts-", dir=args.dir)
    runner = Runner(root)  # before torch is imported
    try:
        for n in (int(s) for s in args.sizes.split(",") if s):
            rows = {"dcp_columns": os.path.join(root, "cols%d" % n), "dcp_rows": os.path.join(root, "rows%d" % n),
                    "zero3_groups": os.path.join(root, "zero3_%d" % n, "global_step1")}
            dcp_folder(rows["dcp_columns"], n, True)
            dcp_folder(rows["dcp_rows"], n, False)
            zero3_folder(rows["zero3_groups"], n)
            for name, path in rows.items():
                run = runner.run([args.swavg, "inspect", path])
                print("%-13s N=%-7d swavg inspect: %.2f s CPU" % (name, n, run.user_s + run.sys_s), flush=True)
        for n in (int(s) for s in args.tensor_sizes.split(",") if s):
            inputs = [os.path.join(root, "t%d_%d.safetensors" % (n, k)) for k in range(2)]
            for k, path in enumerate(inputs):
                safetensors_file(path, n, float(k + 1))
            out = os.path.join(root, "avg%d.safetensors" % n)
            run = runner.run([args.swavg, "average", *inputs, "-o", out, "--force"])
            print("%-13s N=%-7d swavg average: %.2f s CPU, peak RSS %.0f MiB, %.0f bytes per tensor"
                  % ("tensors", n, run.user_s + run.sys_s, run.maxrss_bytes / 2**20, run.maxrss_bytes / n), flush=True)
            for path in inputs + [out]:
                os.unlink(path)
    finally:
        runner.close()
        shutil.rmtree(root, ignore_errors=True)
