"""PyTorch Distributed Checkpoint (DCP) inputs for scripts/bench.py --dcp, and their reference.

Run with a Python whose torch has torch.distributed.checkpoint and DTensor (torch 2.14 in
/var/lib/swavg/venv); bench.py, which may run under another Python, starts it as a child:

    python dcp_torch.py make OUT_DIR... --entries entries.json --ranks 4 --seed 7
        One checkpoint per OUT_DIR (the i-th from seed 1000 * seed + i), written by real torch.distributed.checkpoint.save from --ranks gloo
        processes on localhost (CPU), as FSDP2 saves one: {"model": state dict of DTensors on a
        CPU DeviceMesh}, matrices Shard(0) (Shard(1) for the attention output projections, as
        tensor parallelism cuts them), vectors Replicate (saved once). entries.json is
        [[name, shape], ...]; values are a per-checkpoint block of random normals * 0.02 tiled
        over the tensors (fast at any size), the same on every rank, so no rank sends anything.
    python dcp_torch.py check OUT.safetensors DCP_DIR...
        Consolidates each folder with torch's own dcp_to_torch_save, averages in float64 and
        compares with swavg's output (allclose at float32 rounding). Exit 1 if they differ.
"""
import argparse
import json
import math
import os
import socket
import sys

BLOCK = 1 << 22  # float32 values in the random block tiled over the tensors (16 MiB)


def placement_of(name, shape):
    if len(shape) < 2:
        return "r"
    return "s1" if name.endswith("attn.proj.weight") else "s0"


def _tensor(shape, block, pos):
    """A tensor of `shape` from `block` starting at element `pos` (wrapping). Returns (t, next pos)."""
    import torch
    n = math.prod(shape)
    out = torch.empty(n, dtype=torch.float32)
    done = 0
    while done < n:
        take = min(n - done, block.numel() - pos)
        out[done:done + take] = block[pos:pos + take]
        done += take
        pos = (pos + take) % block.numel()
    return out.view(shape), pos


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, outs, entries, seed):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        kinds = {"s0": [Shard(0)], "s1": [Shard(1)], "r": [Replicate()]}
        for i, out in enumerate(outs):
            gen = torch.Generator().manual_seed(1000 * seed + i)
            block = torch.randn(BLOCK, generator=gen).mul_(0.02)
            pos = int(torch.randint(BLOCK, (1,), generator=gen))
            state = {}
            for name, shape in entries:
                full, pos = _tensor(tuple(shape), block, pos)
                state[name] = distribute_tensor(full, mesh, kinds[placement_of(name, shape)], src_data_rank=None)
            dcp.save({"model": state}, checkpoint_id=out)
            del state
        dist.barrier()
    finally:
        dist.destroy_process_group()


def cmd_make(args):
    import torch.multiprocessing as mp
    with open(args.entries) as f:
        entries = json.load(f)
    for out in args.outs:
        os.makedirs(out, exist_ok=True)
    mp.spawn(_worker, args=(args.ranks, _free_port(), args.outs, entries, args.seed), nprocs=args.ranks,
             join=True)


def _read_safetensors(path):
    import torch
    from safetensors.torch import load_file
    return {k: v.to(torch.float64) for k, v in load_file(path).items()}


def cmd_check(args):
    import tempfile
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    total = None
    with tempfile.TemporaryDirectory() as tmp:
        for i, d in enumerate(args.inputs):
            p = os.path.join(tmp, f"{i}.pt")
            dcp_to_torch_save(d, p)
            sd = torch.load(p, map_location="cpu", weights_only=True)["model"]
            os.unlink(p)
            if total is None:
                total = {k: v.to(torch.float64) for k, v in sd.items()}
            else:
                for k, v in sd.items():
                    total[k] += v.to(torch.float64)
    got = _read_safetensors(args.output)
    if sorted(got) != sorted(total):
        print(f"names differ: {sorted(set(got) ^ set(total))[:5]}")
        return 1
    bad = [k for k, v in total.items()
           if got[k].shape != v.shape or not torch.allclose(got[k], v / len(args.inputs), rtol=1e-6, atol=1e-8)]
    print(f"{len(total) - len(bad)}/{len(total)} tensors match torch's dcp_to_torch_save + average"
          + (f"; first differing: {bad[:3]}" if bad else ""))
    return 1 if bad else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("outs", nargs="+")
    m.add_argument("--entries", required=True)
    m.add_argument("--ranks", type=int, default=4)
    m.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("check")
    c.add_argument("output")
    c.add_argument("inputs", nargs="+")
    args = p.parse_args(argv)
    return cmd_make(args) or 0 if args.cmd == "make" else cmd_check(args)


if __name__ == "__main__":
    sys.exit(main())
