"""Scaling rows for counts a checkpoint declares: the CPU time of `swavg inspect` on inputs that
declare N items, for N = 10^4 and 10^5 (--sizes), so that a check quadratic in N shows at once.

    python bench_counts.py SWAVG_BIN [--sizes 10000,100000] [--dir TMP]

Rows (CPU seconds of the swavg child, from resource.getrusage, never wall time):
  dcp_columns   a DCP folder whose one tensor [1, N] is saved as N column chunks (every chunk
                points at the same torch.save archive of a [1, 1] tensor, so the folder stays small):
                the chunk tiling check.
  dcp_rows      the same count as N row chunks of [N, 1].
  zero3_groups  a one-rank ZeRO-3 tag folder with N flat fp32 groups of one parameter each (views
                of one storage): zero3_slices' group lookup.
Needs torch (torch.distributed.checkpoint's metadata classes), nothing else; prints one line per row.
"""
import argparse
import io
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile


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


def cpu_of(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("swavg")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--dir")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="swavg-bench-counts-", dir=args.dir)
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            rows = {"dcp_columns": os.path.join(root, "cols%d" % n), "dcp_rows": os.path.join(root, "rows%d" % n),
                    "zero3_groups": os.path.join(root, "zero3_%d" % n, "global_step1")}
            dcp_folder(rows["dcp_columns"], n, True)
            dcp_folder(rows["dcp_rows"], n, False)
            zero3_folder(rows["zero3_groups"], n)
            for name, path in rows.items():
                print("%-13s N=%-7d swavg inspect: %.2f s CPU" % (name, n, cpu_of([args.swavg, "inspect", path])),
                      flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
