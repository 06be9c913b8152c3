"""Benchmark swavg against the Python peer and the I/O floor, and check the targets of issue 5.

Run with the system Python (torch, numpy):

    /usr/bin/python3 scripts/bench.py                 # full: 8 x 400 MiB, ~10 GB of disk, minutes
    /usr/bin/python3 scripts/bench.py --quick         # tiny sizes, one round (CI)
    /usr/bin/python3 scripts/bench.py --json bench.json --workdir /tmp/swb   # keeps the inputs

Every tool runs as its own process, timed wall-clock from spawn to exit (start-up included), with
the peak RSS of that child alone (ru_maxrss from os.wait4):

1. Checkpoints with fixed seeds, written with torch.save into the work folder: a transformer-like
   state dict (token/position embeddings, attention qkv/proj and MLP fc1/fc2 matrices with biases,
   LayerNorm vectors) of --model-mb MiB in float32, the same tensors in bfloat16, and a ResNet-50
   (torchvision's, else the same layout written by hand) with BatchNorm buffers; --n checkpoints
   each, a base tensor plus small per-checkpoint noise. A --workdir that holds them is reused.
2. Alternating rounds (--repeats; medians reported), after reading every input once so that the
   page cache is warm: `swavg average`, `swavg ema --decay 0.999`, `swavg inspect`; the Python
   peer (scripts/bench/children/peer.py: torch.load each file, fold it the way AveragedModel /
   EMA do, torch.save, which does not fsync); and the I/O floor (read every input once with 16 MiB
   reads, write one output of the same size and fsync it, as swavg fsyncs its output). `swavg --version`
   gives the start-up time and baseline RSS (swavg does not load LibTorch for these jobs;
   `swavg-torch --version` shows what loading it costs).
3. Memory scaling: peak RSS of `swavg average` for --scale-ns inputs (hard links to the distinct
   files under other names) and for models of --scale-mb MiB (sizes above --model-mb from two
   distinct files linked N times, to bound disk), against 3 x largest tensor + 64 MiB above the
   baseline; with sampled peaks of RssAnon and RssFile, since mapped inputs count in RSS.
4. `swavg update-bn` against torch.optim.swa_utils.update_bn on the same ResNet (scripted for
   swavg, eager for Python), weights and .npy batches, when the binary has update-bn.
5. Many tensors (--many-tensors, 100,000 by default): `swavg average` and the peer over 3
   checkpoints of that many 4-element tensors, where the per-tensor work of reading, planning
   and writing dominates (it must stay linear in the tensor count: a few seconds).
6. One table with medians, swavg/peer and swavg/floor ratios and RSS; PASS/MISS per target;
   whether swavg's outputs equal the peer's bit for bit; all of it as JSON with --json.

With --peers, instead: swavg against what users run, side by side on the same files with the same
durability (every output fsynced): N Hugging Face folders of a Llama-like model (config.json and one
model.safetensors, --peers-n x --peers-mb MiB); the peers are the Python loop
(scripts/bench/children/peer.py), timm's avg_checkpoints.py, a transformers model soup and
mergekit's linear merge (scripts/bench/children/real_peers.py, run by --peer-python). A table of
min and median times, the ratio of each tool's time to swavg's, CPU time, peak RSS and whether each
output matches swavg's; targets: at least 5x faster than the fastest peer, and swavg's RSS within
the flat budget.

    /usr/bin/python3 scripts/bench.py --peers all --peer-python /tmp/venvtest/v/bin/python \\
        --peer-path /tmp/mergekit-site                # 4 x 100 MiB, 3 rounds: 7 min on 2 busy CPUs

With --dcp: 4 DCP checkpoints of 4 ranks each (torch.distributed.checkpoint.save from 4 gloo
processes on CPU, scripts/bench/children/dcp_torch.py under --dcp-python), --dcp-mb MiB of float32
each, averaged cold and warm as --cold does, against the floor (read every .metadata and .distcp
once, write and fsync one output), with peak RSS against the flat budget; swavg's output is checked
against torch's dcp_to_torch_save + average. --read-ahead-kb 128,8192 runs every --cold/--dcp case
at each read_ahead_kb of the work folder's block device (root), restoring the original value
afterwards;
--readahead-matrix is the whole read-ahead matrix in one command (README, Performance):

    python3 scripts/bench.py --readahead-matrix --repeats 3 --workdir /tmp/swb --json ra.json

Children are started by a small launcher process (children/peer.py runner) created before the
bench imports torch: a child's ru_maxrss starts at the RSS of the process that forks it. swavg runs
from a private copy of the binary, so that a rebuild during the run cannot swap it.

The code is the package scripts/bench/ (cli.py: the command line; one module per benchmark:
average.py, scaling.py, update_bn.py, many_tensors.py, disk.py, readahead.py, workers.py, dcp.py,
peers.py; runner.py, datasets.py, report.py shared; children/: the processes it times that are
Python), started by scripts/bench.py.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

from ._common import SCRIPTS
from .average import run_bench
from .dcp import DCP_KEY, VENV_PYTHON
from .disk import run_disk_bench
from .peers import PEER_TOOLS, run_peers_bench
from .runner import Bench, Runner, snapshot_binary


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_main_options(p)
    add_disk_options(p)
    add_peers_options(p)
    args = p.parse_args(argv)
    apply_modes(p, args)
    apply_defaults(args)
    return args


def add_main_options(p):
    """The binary, the work folder, the output and the default benchmark's sizes."""
    p.add_argument("--swavg", default=os.path.join(SCRIPTS, "..", "build", "swavg"), help="the binary")
    p.add_argument("--workdir", help="where the inputs go, kept and reused [a temp dir]")
    p.add_argument("--keep", action="store_true", help="keep the temp work folder")
    p.add_argument("--json", help="write all results to this file")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one round: for CI")
    p.add_argument("--model-mb", type=int, help="transformer size in MiB, float32 [400; quick 4]")
    p.add_argument("--n", type=int, default=8, help="checkpoints per set [8]")
    p.add_argument("--repeats", type=int, help="timed rounds [5; quick 1]")
    p.add_argument("--scale-ns", default="2,8,32", help="input counts for memory scaling [2,8,32]")
    p.add_argument("--scale-mb", help="model sizes for memory scaling [100,400,1600; quick 1,4,16]")
    p.add_argument("--bn-samples", type=int, help="update-bn samples [128; quick 32]")
    p.add_argument("--bn-res", type=int, help="update-bn image size [96; quick 32]")
    p.add_argument("--bn-batch", type=int, help="update-bn batch size [32; quick 8]")
    p.add_argument("--many-tensors", type=int,
                   help="tensors per checkpoint of the many-tensors case, 0 to skip [100000; quick 2000]")
    p.add_argument("--seed", type=int, default=0)


def add_disk_options(p):
    """--cold, --larger-than-ram, --workers, --dcp and the read-ahead matrix."""
    p.add_argument("--cold", action="store_true",
                   help="disk cases instead of the full bench: average of 8 x 159 MiB, 32 x 40 MiB and 8 "
                        "sharded folders, each run after dropping the page cache (root) and after warming it")
    p.add_argument("--larger-than-ram", action="store_true",
                   help="average 4 bf16 checkpoints adding up to 1.25 x the machine's memory, cold")
    p.add_argument("--ltr-gib", type=float, help="--larger-than-ram: total input size in GiB instead")
    p.add_argument("--workers", help="e.g. 1,2,4: N concurrent --shard i/N processes + finalize "
                                     "(cold with --cold)")
    p.add_argument("--prefetch-bytes",
                   help="--cold: also time swavg with SWAVG_PREFETCH_BYTES set to each of these (0: no "
                        "read-ahead), e.g. 0,134217728")
    p.add_argument("--no-peer", action="store_true", help="--cold: leave the Python peer out")
    p.add_argument("--dcp", action="store_true",
                   help="disk case: average of 4 DCP checkpoints of 4 ranks each (torch.distributed.checkpoint.save "
                        "in 4 gloo processes), cold and warm, against the I/O floor, with peak RSS")
    p.add_argument("--dcp-mb", type=int, default=320,
                   help="--dcp: model size in MiB of float32 of each checkpoint [320, as 8 x 159 MiB and 32 x 40 MiB "
                        "of --cold; quick 4]")
    p.add_argument("--dcp-python", default=VENV_PYTHON if os.path.exists(VENV_PYTHON) else sys.executable,
                   help="--dcp: the Python (torch 2.x with DTensor) that writes and checks the DCP folders "
                        f"[{VENV_PYTHON}]")
    p.add_argument("--no-check", action="store_true",
                   help="--dcp: skip comparing swavg's average with torch's dcp_to_torch_save + average")
    p.add_argument("--floor-ahead", action="store_true",
                   help="--cold/--dcp: also time the floor with 64 MiB of each file under POSIX_FADV_WILLNEED "
                        "ahead of its reads (floor-ahead; the target stays against the plain floor)")
    p.add_argument("--read-ahead-kb",
                   help="--cold/--dcp: run every case at each of these read_ahead_kb of the work folder's block "
                        "device (root; restored afterwards), e.g. 128,8192")
    p.add_argument("--readahead-matrix", action="store_true",
                   help="the read-ahead matrix: --cold --dcp --disk-cases disk32,disk8,dcp4x4 --read-ahead-kb "
                        "128,8192 --caches cold,warm --prefetch-bytes 0,33554432,134217728,536870912 --no-peer --floor-ahead "
                        "(each overridable)")
    p.add_argument("--disk-cases", help="--cold/--dcp: only these of disk8,disk32,disk8_sharded,dcp4x4")
    p.add_argument("--caches", default="cold,warm", help="--cold/--dcp: cold, warm or both [cold,warm]")


def add_peers_options(p):
    """--peers: the real peers and their folders."""
    p.add_argument("--peers", help="instead of the full bench: swavg against what users run, on the same "
                                   f"Hugging Face folders: all, or some of {','.join(PEER_TOOLS)}")
    p.add_argument("--peer-python", default=sys.executable,
                   help="--peers: the Python that runs the peers (torch 2.x, timm, transformers) [this one]")
    p.add_argument("--peer-path", help="--peers: a folder put first on the peers' PYTHONPATH (a --target "
                                       "install of mergekit)")
    p.add_argument("--peers-mb", type=int, help="--peers: model size in MiB of float32 [100; quick 4]")
    p.add_argument("--peers-n", type=int, help="--peers: folders averaged [4; quick 3]")
    p.add_argument("--peers-dtype", default="float32", choices=("float32", "bfloat16"),
                   help="--peers: the folders' dtype [float32]")


def apply_modes(p, args):
    """What --readahead-matrix stands for, the modes' rounds and --peers' tools and sizes."""
    q = args.quick
    if args.readahead_matrix:
        args.cold = args.dcp = args.no_peer = args.floor_ahead = True
        args.disk_cases = args.disk_cases or f"disk32,disk8,{DCP_KEY}"
        args.read_ahead_kb = args.read_ahead_kb or "128,8192"
        args.prefetch_bytes = args.prefetch_bytes or "0,33554432,134217728,536870912"
    args.read_ahead_kb = [int(x) for x in args.read_ahead_kb.split(",")] if args.read_ahead_kb else []
    if (args.cold or args.dcp or args.larger_than_ram or args.workers or args.peers) and args.repeats is None:
        args.repeats = 1 if q else 3
    if args.peers:
        args.peers = list(PEER_TOOLS) if args.peers == "all" else args.peers.split(",")
        unknown = [t for t in args.peers if t not in PEER_TOOLS]
        if unknown:
            p.error(f"--peers: unknown {unknown}; choose from all,{','.join(PEER_TOOLS)}")
        args.peers_mb = args.peers_mb or (4 if q else 100)
        args.peers_n = args.peers_n or (3 if q else 4)


def apply_defaults(args):
    """The default benchmark's sizes (--quick: tiny) and the comma lists as numbers."""
    q = args.quick
    defaults = {"model_mb": 4 if q else 400, "repeats": 1 if q else 5,
                "scale_mb": "1,4,16" if q else "100,400,1600", "bn_samples": 32 if q else 128,
                "bn_res": 32 if q else 96, "bn_batch": 8 if q else 32,
                "many_tensors": 2000 if q else 100000}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.scale_ns = [int(x) for x in args.scale_ns.split(",")]
    args.workers = [int(x) for x in args.workers.split(",")] if args.workers else []
    args.prefetch_bytes = [int(x) for x in args.prefetch_bytes.split(",")] if args.prefetch_bytes else []
    args.scale_mb = [int(x) for x in args.scale_mb.split(",")]
    args.swavg = os.path.abspath(args.swavg)


def main(argv=None):
    """Runs the benchmark the options ask for in a work folder, prints its report, writes --json."""
    args = parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="swavg-bench-", dir="/tmp")
    outdir = os.path.join(workdir, "out")
    os.makedirs(outdir, exist_ok=True)
    args.swavg_source, args.swavg = args.swavg, snapshot_binary(args.swavg, outdir)
    runner = Runner(outdir)  # before torch is imported: see the module docstring
    try:
        bench = Bench(args, workdir, outdir, runner)
        disk = args.cold or args.dcp or args.larger_than_ram or args.workers
        res = run_peers_bench(bench) if args.peers else run_disk_bench(bench) if disk else run_bench(bench)
    finally:
        runner.close()
        if args.workdir or args.keep:
            shutil.rmtree(outdir, ignore_errors=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0
