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
   peer (scripts/bench_peer.py: torch.load each file, fold it the way AveragedModel / EMA do,
   torch.save, which does not fsync); and the I/O floor (read every input once with 16 MiB reads,
   write one output of the same size and fsync it, as swavg fsyncs its output). `swavg --version`
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
model.safetensors, --peers-n x --peers-mb MiB); the peers are the Python loop (bench_peer.py),
timm's avg_checkpoints.py, a transformers model soup and mergekit's linear merge
(scripts/bench_peers.py, run by --peer-python). A table of min and median times, the ratio of each
tool's time to swavg's, CPU time, peak RSS and whether each output matches swavg's; targets: at
least 5x faster than the fastest peer, and swavg's RSS within the flat budget.

    /usr/bin/python3 scripts/bench.py --peers all --peer-python /tmp/venvtest/v/bin/python \\
        --peer-path /tmp/mergekit-site                # 4 x 100 MiB, 3 rounds: 7 min on 2 busy CPUs

With --dcp: 4 DCP checkpoints of 4 ranks each (torch.distributed.checkpoint.save from 4 gloo
processes on CPU, scripts/bench_dcp.py under --dcp-python), --dcp-mb MiB of float32 each, averaged
cold and warm as --cold does, against the floor (read every .metadata and .distcp once, write and
fsync one output), with peak RSS against the flat budget; swavg's output is checked against torch's
dcp_to_torch_save + average. --read-ahead-kb 128,8192 runs every --cold/--dcp case at each
read_ahead_kb of the work folder's block device (root), restoring the original value afterwards;
--readahead-matrix is the whole read-ahead matrix in one command (README, Performance):

    python3 scripts/bench.py --readahead-matrix --repeats 3 --workdir /tmp/swb --json ra.json

Children are started by a small launcher process (bench_peer.py runner) created before bench.py
imports torch: a child's ru_maxrss starts at the RSS of the process that forks it. swavg runs from
a private copy of the binary, so that a rebuild during the run cannot swap it.
"""
import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_peer  # noqa: E402  (imports no torch at module level)

MiB = 1 << 20
GiB = 1 << 30
PEER = os.path.join(HERE, "bench_peer.py")
EMA_DECAY = 0.999
MODES = (("average", []), ("ema", ["--decay", str(EMA_DECAY)]))
NOISE_POOL = 1 << 20
RESNET_MIB = 98  # resnet50's state dict, for the disk estimate


# ---------------------------------------------------------------------------------------------
# Running children


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
    """Talks to `bench_peer.py runner`, which spawns each command from a small process."""

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


def log(msg):
    sys.stdout.flush()
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Checkpoints


@dataclasses.dataclass
class CkptSet:
    key: str
    label: str
    paths: list
    file_bytes: int
    largest_tensor_bytes: int
    n_tensors: int

    @property
    def total_bytes(self):
        return sum(os.path.getsize(p) for p in self.paths)

    @property
    def budget_bytes(self):
        """The RSS target above the baseline: 3 x the largest tensor + 64 MiB."""
        return 3 * self.largest_tensor_bytes + 64 * MiB


def transformer_shapes(mib):
    """Names and shapes of a GPT-like state dict of about `mib` MiB in float32 (embeddings ~1/3)."""
    params = mib * MiB // 4
    d = max(64, round(1024 * math.sqrt(mib / 400) / 64) * 64)
    ctx = 1024
    vocab = max(64, round(params / 3 / d))
    layers = max(1, round((params - (vocab + ctx + 2) * d) / (12 * d * d + 13 * d)))
    return gpt_shapes(d, vocab, ctx, layers)


def gpt_shapes(d, vocab, ctx, layers):
    """Token/position embeddings, `layers` blocks (LayerNorms, qkv, proj, MLP) and a final LayerNorm."""
    shapes = [("tok_emb.weight", (vocab, d)), ("pos_emb.weight", (ctx, d))]
    for i in range(layers):
        b = f"blocks.{i}."
        shapes += [(b + "ln1.weight", (d,)), (b + "ln1.bias", (d,)),
                   (b + "attn.qkv.weight", (3 * d, d)), (b + "attn.qkv.bias", (3 * d,)),
                   (b + "attn.proj.weight", (d, d)), (b + "attn.proj.bias", (d,)),
                   (b + "ln2.weight", (d,)), (b + "ln2.bias", (d,)),
                   (b + "mlp.fc1.weight", (4 * d, d)), (b + "mlp.fc1.bias", (4 * d,)),
                   (b + "mlp.fc2.weight", (d, 4 * d)), (b + "mlp.fc2.bias", (d,))]
    return shapes + [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]


def _base_tensor(name, shape, gen):
    import torch
    t = torch.randn(shape, generator=gen)
    if name.rsplit(".", 2)[-2].startswith("ln") and name.endswith("weight"):
        return t.mul_(0.05).add_(1.0)
    return t.mul_(0.02)


def _perturbed(base, seed):
    """A copy of `base` with small noise, from a per-checkpoint pool, on every floating tensor."""
    import torch
    pool = torch.randn(NOISE_POOL, generator=torch.Generator().manual_seed(seed)).mul_(1e-3)
    out = {}
    for i, (name, t) in enumerate(base.items()):
        x = t.clone()
        if x.is_floating_point():
            start = (i * 7919) % NOISE_POOL
            noise = torch.cat([pool[start:], pool[:start]])
            flat = x.view(-1)
            for off in range(0, flat.numel(), NOISE_POOL):
                chunk = flat[off:off + NOISE_POOL]
                chunk.add_(noise[:chunk.numel()])
        out[name] = x
    return out


def _ckpt_paths(folder, n):
    return [os.path.join(folder, f"ckpt_{i:03d}.pt") for i in range(n)]


def link_inputs(sources, n, folder):
    """n input names in `folder`, hard links to `sources` cyclically (existing names replaced)."""
    os.makedirs(folder, exist_ok=True)
    paths = _ckpt_paths(folder, n)
    for i, p in enumerate(paths):
        if os.path.realpath(p) == os.path.realpath(sources[i % len(sources)]):
            continue
        if os.path.exists(p):
            os.unlink(p)
        os.link(sources[i % len(sources)], p)
    return paths


def _cached(folder, config):
    """The manifest of a folder generated with this config, or None."""
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            man = json.load(f)
    except (OSError, ValueError):
        return None
    files = [p for s in man.get("sets", []) for p in s["paths"]]
    files += list(man.get("extra", {}).values())
    if man.get("config") != config or not all(os.path.exists(p) for p in files):
        return None
    return man


def _save_manifest(folder, config, sets, extra=None):
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"config": config, "sets": [dataclasses.asdict(s) for s in sets],
                   "extra": extra or {}}, f)


def make_transformer_sets(root, key, mib, n, distinct, dtypes, seed):
    """n checkpoints per dtype: the first `distinct` generated, the rest hard links to them."""
    folder = os.path.join(root, key)
    config = {"kind": "transformer", "mib": mib, "n": n, "distinct": distinct,
              "dtypes": list(dtypes), "seed": seed, "version": 1}
    man = _cached(folder, config)
    if man:
        return [CkptSet(**s) for s in man["sets"]]
    import torch
    gen = torch.Generator().manual_seed(seed)
    base = {name: _base_tensor(name, shape, gen) for name, shape in transformer_shapes(mib)}
    largest = max(t.numel() for t in base.values())
    tdtypes = [getattr(torch, d) for d in dtypes]
    folders = [os.path.join(folder, d) for d in dtypes]
    for k in range(distinct):
        ckpt = _perturbed(base, seed * 1000 + k + 1)
        for sub, tdt in zip(folders, tdtypes):
            os.makedirs(sub, exist_ok=True)
            torch.save({name: t.to(tdt) for name, t in ckpt.items()}, _ckpt_paths(sub, distinct)[k])
        del ckpt
    sets = []
    for sub, dtype, tdt in zip(folders, dtypes, tdtypes):
        paths = link_inputs(_ckpt_paths(sub, distinct), n, sub)
        size = os.path.getsize(paths[0])
        itemsize = torch.tensor([], dtype=tdt).element_size()
        sets.append(CkptSet(key=f"{key}_{dtype}", paths=paths, file_bytes=size,
                            label=f"transformer {dtype} {n}x{size / MiB:.0f} MiB",
                            largest_tensor_bytes=largest * itemsize, n_tensors=len(base)))
    _save_manifest(folder, config, sets)
    return sets


def make_resnet_set(root, spec, n, seed, bn_samples, bn_res):
    """n ResNet checkpoints with BatchNorm buffers; the scripted model and .npy data for update-bn.

    Returns (CkptSet, model.ts path, data.npy path)."""
    folder = os.path.join(root, "resnet")
    config = {"kind": "resnet", "spec": spec, "n": n, "seed": seed, "bn_samples": bn_samples,
              "bn_res": bn_res, "version": 1}
    extra = {"model": os.path.join(folder, "model.ts"), "data": os.path.join(folder, "data.npy")}
    man = _cached(folder, config)
    if man:
        return CkptSet(**man["sets"][0]), extra["model"], extra["data"]
    import numpy as np
    import torch
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(seed)
    model = bench_peer.build_model(spec)
    torch.jit.script(model).save(extra["model"])
    gen = torch.Generator().manual_seed(seed)
    base = model.state_dict()
    for name, t in base.items():
        if name.endswith("running_mean"):
            t.copy_(0.1 * torch.randn(t.shape, generator=gen))
        elif name.endswith("running_var"):
            t.copy_(0.5 + torch.rand(t.shape, generator=gen))
    paths = _ckpt_paths(folder, n)
    for k, path in enumerate(paths):
        ckpt = _perturbed(base, seed * 1000 + k + 1)
        for name, t in ckpt.items():
            if name.endswith("num_batches_tracked"):
                t.fill_(1000 * (k + 1))
        torch.save(ckpt, path)
    rng = np.random.default_rng(seed)
    np.save(extra["data"], rng.standard_normal((bn_samples, 3, bn_res, bn_res), dtype=np.float32))
    size = os.path.getsize(paths[0])
    arch = spec.split(":")[-1].split(",")[0]
    s = CkptSet(key="resnet", label=f"resnet ({arch}) {n}x{size / MiB:.0f} MiB", paths=paths,
                file_bytes=size, n_tensors=len(base),
                largest_tensor_bytes=max(t.numel() * t.element_size() for t in base.values()))
    _save_manifest(folder, config, [s], extra)
    return s, extra["model"], extra["data"]


def make_many_set(root, count, n, seed):
    """n checkpoints of `count` tensors of 4 float32 elements each (the per-tensor cost case)."""
    folder = os.path.join(root, f"many_{count}")
    config = {"kind": "many", "count": count, "n": n, "seed": seed, "version": 1}
    man = _cached(folder, config)
    if man:
        return CkptSet(**man["sets"][0])
    import collections
    import torch
    os.makedirs(folder, exist_ok=True)
    paths = _ckpt_paths(folder, n)
    for k, path in enumerate(paths):
        gen = torch.Generator().manual_seed(seed * 1000 + k)
        data = torch.randn(count, 4, generator=gen)
        torch.save(collections.OrderedDict((f"blocks.{i}.w", data[i].clone()) for i in range(count)), path)
    s = CkptSet(key=f"many_{count}", label=f"{count} tensors, {n}x{os.path.getsize(paths[0]) / MiB:.0f} MiB",
                paths=paths, file_bytes=os.path.getsize(paths[0]), largest_tensor_bytes=16, n_tensors=count)
    _save_manifest(folder, config, [s])
    return s


def time_many_tensors(b):
    """swavg average and the peer's over --many-tensors tiny tensors. Returns (result, jobs)."""
    args = b.args
    if not args.many_tensors:
        return {"ran": False}, []
    s = make_many_set(b.workdir, args.many_tensors, 3, args.seed)
    out, rep = b.out("many_swavg.pt"), b.out("many_swavg.json")
    jobs = [Job("many/swavg", [args.swavg, "-q", "average", *s.paths, "-o", out, "--force", "--report", rep],
                out, rep),
            Job("many/peer", [sys.executable, PEER, "average", *s.paths, "--out", b.out("many_peer.pt")],
                b.out("many_peer.pt"))]
    log(f"many tensors: 3 x {args.many_tensors} ...")
    warm(s.paths)
    run_rounds(b.runner, jobs, args.repeats, progress=False)
    ok, detail = compare_state_dicts(jobs[0].output, jobs[1].output)
    return {"ran": True, "tensors": args.many_tensors, "set": dataclasses.asdict(s), "bit_exact": ok,
            "detail": detail}, jobs


def warm(paths):
    """Read every file once so that the timed runs find it in the page cache."""
    buf = memoryview(bytearray(16 * MiB))
    for p in dict.fromkeys(os.path.realpath(p) for p in paths):
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


# ---------------------------------------------------------------------------------------------
# The phases of a run


@dataclasses.dataclass
class Bench:
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


def fold_jobs(b, s):
    """swavg average/ema, the peer's average/ema and the I/O floor on one checkpoint set."""
    py = [sys.executable, PEER]
    jobs = []
    for mode, extra in MODES:
        out, rep = b.out(f"{s.key}_{mode}_swavg.pt"), b.out(f"{s.key}_{mode}_swavg.json")
        jobs.append(Job(f"{s.key}/{mode}/swavg", [b.args.swavg, "-q", mode, *extra, *s.paths,
                                                  "-o", out, "--force", "--report", rep], out, rep))
        out = b.out(f"{s.key}_{mode}_peer.pt")
        jobs.append(Job(f"{s.key}/{mode}/peer", py + [mode, *extra, *s.paths, "--out", out], out))
    out = b.out(f"{s.key}_floor.bin")
    jobs.append(Job(f"{s.key}/floor", py + ["floor", *s.paths, "--out", out], out))
    return jobs


def time_main(b, sets):
    """The alternating rounds: start-up, average/ema/floor per set, inspect. Returns {key: Job}."""
    f32 = sets[0]
    jobs = [Job("version", [b.args.swavg, "--version"]),
            Job("version/torch", [b.args.swavg + "-torch", "--version"])]
    for s in sets:
        jobs += fold_jobs(b, s)
    jobs += [Job("inspect/swavg", [b.args.swavg, "inspect", f32.paths[0]]),
             Job("inspect/peer", [sys.executable, PEER, "inspect", f32.paths[0]])]
    log(f"warming the page cache, then {b.args.repeats} round(s) of {len(jobs)} runs ...")
    warm([p for s in sets for p in s.paths])
    run_rounds(b.runner, jobs, b.args.repeats)
    return {j.key: j for j in jobs}


def check_outputs(jobs, sets):
    """swavg's outputs against the peer's, tensor by tensor with torch.equal."""
    f32, bf16, resnet = sets
    checks = {}
    for s, mode in ((f32, "average"), (f32, "ema"), (bf16, "average"), (bf16, "ema"),
                    (resnet, "average")):
        ok, detail = compare_state_dicts(jobs[f"{s.key}/{mode}/swavg"].output,
                                         jobs[f"{s.key}/{mode}/peer"].output)
        checks[f"{s.key}/{mode}"] = {"bit_exact": ok, "detail": detail}
    return checks


def compare_state_dicts(a_path, b_path, exact=True, rtol=0.0, atol=0.0):
    """(ok, detail): same names, dtypes and shapes; values torch.equal, or allclose if not exact.

    Either may be a torch.save file, a safetensors file or a Hugging Face folder."""
    import torch
    a, b = bench_peer.load_checkpoint(a_path), bench_peer.load_checkpoint(b_path)
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


def plan_scaling(b):
    """The model sizes for memory scaling that fit on the disk (the largest dropped first)."""
    args = b.args
    free = shutil.disk_usage(b.workdir).free
    main = (args.n * args.model_mb * 1.5 + args.n * (1 if args.quick else RESNET_MIB)
            + 8 * args.model_mb) * MiB
    if main + GiB > free:
        raise SystemExit(f"not enough disk in {b.workdir}: need ~{main / GiB:.1f} GiB, "
                         f"{free / GiB:.1f} GiB free")
    sizes = sorted(args.scale_mb)

    def need(szs):
        return main + sum((scale_distinct(m, args) + 2) * m * MiB
                          for m in szs if m != args.model_mb)

    while sizes and need(sizes) + 2 * GiB > free:
        b.notes.append(f"scaling size {sizes[-1]} MiB skipped: {free / GiB:.1f} GiB free")
        sizes.pop()
    return sizes


def scale_distinct(mib, args):
    """Distinct files generated for a scaling size: N up to the main model's size, two above."""
    return args.n if mib <= args.model_mb else min(2, args.n)


def memory_scaling(b, f32, sizes, baseline):
    """Peak RSS of one `swavg average` per point: N inputs of the smallest size, then each size.

    Also samples the anonymous and file-backed parts (mapped inputs and libraries count in RSS);
    the first row is `swavg --version`, their baseline."""
    args = b.args
    size_sets = {}
    for mib in sizes:
        if mib == args.model_mb:
            size_sets[mib] = f32
        else:
            size_sets[mib] = make_transformer_sets(b.workdir, f"scale{mib}", mib, args.n,
                                                   scale_distinct(mib, args), ("float32",),
                                                   args.seed + mib)[0]
    small = size_sets[sizes[0]] if sizes else f32
    points = [(n, small) for n in args.scale_ns]
    points += [(args.n, s) for s in size_sets.values() if (args.n, s) not in points]
    version = Job("scale/version", [args.swavg, "--version"], sample=True)
    run_job(b.runner, version)
    r = version.runs[0]
    rows = [{"set": "swavg --version", "model_bytes": None, "n": None, "wall_s": r.wall_s,
             "peak_rss_bytes": r.maxrss_bytes, "peak_anon_bytes": r.peak_anon_bytes,
             "peak_file_bytes": r.peak_file_bytes, "above_baseline_bytes": None,
             "largest_tensor_bytes": None, "budget_bytes": None, "ok": None}]
    out = b.out("scale.pt")
    for n, s in points:
        paths = s.paths if n == len(s.paths) else link_inputs(
            s.paths, n, os.path.join(b.workdir, "links", f"{s.key}_n{n}"))
        warm(paths)
        job = Job(f"scale/{s.key}/n{n}",
                  [args.swavg, "-q", "average", *paths, "-o", out, "--force"], out, sample=True)
        run_job(b.runner, job)
        r = job.runs[0]
        above = r.maxrss_bytes - baseline
        rows.append({"set": s.key, "model_bytes": s.file_bytes, "n": n, "wall_s": r.wall_s,
                     "peak_rss_bytes": r.maxrss_bytes, "peak_anon_bytes": r.peak_anon_bytes,
                     "peak_file_bytes": r.peak_file_bytes, "above_baseline_bytes": above,
                     "largest_tensor_bytes": s.largest_tensor_bytes, "budget_bytes": s.budget_bytes,
                     "ok": above <= s.budget_bytes})
        os.unlink(out)
    shutil.rmtree(os.path.join(b.workdir, "links"), ignore_errors=True)
    return rows


def update_bn_usage(swavg):
    """(ok, note): whether `swavg update-bn --help` works and has the options used here."""
    res = subprocess.run([swavg, "update-bn", "--help"], capture_output=True, text=True)
    if res.returncode != 0:
        return False, "swavg update-bn is not in this build (--help fails): skipped"
    missing = [o for o in ("--model", "--data", "--checkpoint", "--batch-size", "--output",
                           "--force") if o not in res.stdout]
    if missing:
        return False, f"swavg update-bn lacks {missing}: skipped"
    return True, ""


def time_update_bn(b, resnet, model_ts, data_npy, spec):
    """swavg update-bn against update_bn: (result dict, jobs); result["ran"] False if skipped."""
    args = b.args
    ok, note = update_bn_usage(args.swavg)
    if not ok:
        b.notes.append(note)
        return {"ran": False, "note": note}, []
    log("update-bn ...")
    common = ["--checkpoint", resnet.paths[0], "--data", data_npy,
              "--batch-size", str(args.bn_batch)]
    sw_out, py_out = b.out("bn_swavg.pt"), b.out("bn_peer.pt")
    jobs = [Job("update-bn/swavg", [args.swavg, "-q", "update-bn", "--model", model_ts, *common,
                                    "-o", sw_out, "--force"], sw_out),
            Job("update-bn/peer", [sys.executable, PEER, "update-bn", "--arch", spec, *common,
                                   "--out", py_out], py_out)]
    warm([resnet.paths[0], data_npy, model_ts])
    run_rounds(b.runner, jobs, args.repeats, progress=False)
    close, detail = compare_state_dicts(sw_out, py_out, exact=False, rtol=1e-4, atol=1e-5)
    return ({"ran": True, "arch": spec, "samples": args.bn_samples, "res": args.bn_res,
             "batch": args.bn_batch, "matches_update_bn": close, "detail": detail}, jobs)


def machine_info(swavg):
    import torch

    def first(path, prefix, conv):
        with open(path) as f:
            return next((conv(line.split(":", 1)[1]) for line in f if line.startswith(prefix)),
                        None)

    git = subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty"],
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


# ---------------------------------------------------------------------------------------------
# Targets and report


def targets(res, jobs, sets):
    """PASS/MISS per target of issue 5: [{"target", "value", "ok", "show"}]."""
    f32, bf16, _ = sets
    startup = res["startup_s"]

    def med(key):
        return jobs[key].median()

    out = []
    for mode, _ in MODES:
        sw, peer = med(f"{f32.key}/{mode}/swavg"), med(f"{f32.key}/{mode}/peer")
        floor = med(f"{f32.key}/floor")
        out.append({"target": f"{mode} f32: >= 5x faster than the Python peer",
                    "value": peer / sw, "ok": peer / sw >= 5, "show": f"{peer / sw:.2f}x"})
        out.append({"target": f"{mode} f32: within 1.5x of the I/O floor",
                    "value": sw / floor, "ok": sw / floor <= 1.5, "show": f"{sw / floor:.2f}x"})
    base = res["baseline_rss_bytes"]
    points = [(f"{s.key}/{mode}", jobs[f"{s.key}/{mode}/swavg"].peak_rss() - base, s.budget_bytes)
              for s in sets for mode, _ in MODES]
    points += [(f"scaling {p['set']} N={p['n']}", p["above_baseline_bytes"], p["budget_bytes"])
               for p in res["scaling"] if p["n"]]
    worst = max(points, key=lambda p: p[1] / p[2])
    out.append({"target": "peak RSS above baseline < 3 x largest tensor + 64 MiB, every run",
                "value": worst[1] / worst[2], "ok": all(a <= lim for _, a, lim in points),
                "show": f"worst {worst[0]}: {worst[1] / MiB:.0f} of {worst[2] / MiB:.0f} MiB"})
    for mode, _ in MODES:
        t32, t16 = med(f"{f32.key}/{mode}/swavg"), med(f"{bf16.key}/{mode}/swavg")
        raw = (t16 / bf16.total_bytes) / (t32 / f32.total_bytes)
        if min(t16, t32) > 2 * startup:
            net = ((t16 - startup) / bf16.total_bytes) / ((t32 - startup) / f32.total_bytes)
            show = f"{net:.2f}x (with start-up {raw:.2f}x)"
        else:
            net, show = raw, f"{raw:.2f}x (runs too short to take start-up out)"
        out.append({"target": f"{mode} bf16 (f32 accumulation) <= 1.3x f32 time per byte, "
                              "start-up excluded", "value": net, "raw_value": raw,
                    "ok": net <= 1.3, "show": show})
    if res["many_tensors"]["ran"]:
        t = med("many/swavg")
        out.append({"target": f"average of 3 x {res['many_tensors']['tensors']} tiny tensors within 5 s "
                              "(linear in the tensor count)", "value": t, "ok": t <= 5.0, "show": f"{t:.2f} s"})
    name = "update-bn no slower than Python's update_bn"
    if res["update_bn"]["ran"]:
        ratio = med("update-bn/swavg") / med("update-bn/peer")
        out.append({"target": name, "value": ratio, "ok": ratio <= 1.0,
                    "show": f"swavg/peer {ratio:.2f}"})
    else:
        out.append({"target": name, "value": None, "ok": None, "show": res["update_bn"]["note"]})
    return out


def table(headers, rows):
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _s(x):
    return None if x is None else f"{x:.3f}"


def _r(x):
    return None if x is None else f"{x:.2f}"


def _mib(x):
    if x is None:
        return None
    v = round(x / MiB, 1)
    return f"{v:.1f}" if abs(v) < 10 else f"{v:.0f}"


def main_table(res, jobs, sets):
    base = res["baseline_rss_bytes"]

    def row(label, sw, peer, floor=None, budget=None):
        ts, tp, tf = sw.median(), peer.median(), floor.median() if floor else None
        internal = statistics.median(sw.internal_s) if sw.internal_s else None
        return [label, _s(ts), _s(internal), _s(tp), _s(tf), _r(ts / tp),
                _r(ts / tf) if tf else None,
                _mib(sw.peak_rss() - base), _mib(budget), _mib(peer.peak_rss()),
                _mib(floor.peak_rss()) if floor else None]

    rows = [row(f"{s.label} {mode}", jobs[f"{s.key}/{mode}/swavg"], jobs[f"{s.key}/{mode}/peer"],
                jobs[f"{s.key}/floor"], s.budget_bytes) for s in sets for mode, _ in MODES]
    rows.append(row(f"inspect one {sets[0].file_bytes / MiB:.0f} MiB file", jobs["inspect/swavg"],
                    jobs["inspect/peer"]))
    if res["many_tensors"]["ran"]:
        rows.append(row(f"average 3 x {res['many_tensors']['tensors']} tensors of 4 floats",
                        jobs["many/swavg"], jobs["many/peer"]))
    bn = res["update_bn"]
    if bn["ran"]:
        rows.append(row(f"update-bn {bn['samples']}x3x{bn['res']}x{bn['res']}, batch {bn['batch']}",
                        jobs["update-bn/swavg"], jobs["update-bn/peer"]))
    rows.append(["swavg --version (start-up; baseline RSS)", _s(res["startup_s"]), None, None, None,
                 None, None, f"({_mib(base)})", None, None, None])
    rows.append(["swavg-torch --version (LibTorch loaded)", _s(res["startup_torch_s"]), None, None, None,
                 None, None, f"({_mib(res['baseline_torch_rss_bytes'])})", None, None, None])
    return table(["case", "swavg s", "(work)", "peer s", "floor s", "swavg/peer", "swavg/floor",
                  "swavg RSS+", "RSS budget", "peer RSS", "floor RSS"], rows)


def print_report(res, jobs, sets, args):
    print(f"\nmedians of {args.repeats} round(s), page cache warm, wall time with start-up; "
          "(work) = swavg's own wall_time_s (--report);\n"
          "RSS in MiB, swavg's above the baseline (`swavg --version`); "
          "floor = read the inputs + write and fsync one output;\n"
          "peer = python: torch.load / fold / torch.save")
    print(main_table(res, jobs, sets))
    print("\nmemory scaling: swavg average, one run each; MiB; anon and file: sampled peaks of "
          "RssAnon and RssFile\n(file = mapped inputs and shared libraries)")
    print(table(["set", "model", "N", "wall s", "RSS", "anon", "file", "RSS+", "largest tensor",
                 "budget", ""],
                [[p["set"], _mib(p["model_bytes"]), p["n"], _s(p["wall_s"]),
                  _mib(p["peak_rss_bytes"]), _mib(p["peak_anon_bytes"]), _mib(p["peak_file_bytes"]),
                  _mib(p["above_baseline_bytes"]), _mib(p["largest_tensor_bytes"]),
                  _mib(p["budget_bytes"]), {True: "ok", False: "OVER", None: ""}[p["ok"]]]
                 for p in res["scaling"]]))
    print("\ncorrectness (swavg's output against the Python peer's, torch.equal per tensor):")
    for k, c in res["correctness"].items():
        print(f"  {k}: {'bit-exact' if c['bit_exact'] else 'DIFFERS'} ({c['detail']})")
    many = res["many_tensors"]
    if many["ran"]:
        print(f"  many tensors: {'bit-exact' if many['bit_exact'] else 'DIFFERS'} ({many['detail']})")
    bn = res["update_bn"]
    if bn["ran"]:
        print(f"  update-bn against update_bn: {'match' if bn['matches_update_bn'] else 'DIFFER'} "
              f"({bn['detail']})")
    quick = " (--quick: sizes too small for the targets to mean much)" if args.quick else ""
    print(f"\ntargets{quick}:")
    for t in res["targets"]:
        mark = "SKIP" if t["ok"] is None else "PASS" if t["ok"] else "MISS"
        print(f"  {mark}  {t['target']}: {t['show']}")
    for n in res["notes"]:
        print(f"note: {n}")


# ---------------------------------------------------------------------------------------------
# Main


# ---------------------------------------------------------------------------------------------
# Disk-bound modes: --cold, --larger-than-ram, --workers
#
# Inputs are written as safetensors with numpy (fixed seeds, finite values), which is fast at any
# size: a per-file block of random normals tiled over the tensors. The peer reads them whole, as
# safetensors.torch.load_file does (bench_peer.load_checkpoint), and merges sharded folders.

DISK_TARGET = 1.2  # issue 12: average within 1.2x of the I/O floor, cold and warm
DISK_BLOCK = 4 << 20  # float32 values per generated block (16 MiB)
FLOOR_AHEAD = 64 << 20  # --floor-ahead: the floor's reads with this much under POSIX_FADV_WILLNEED ahead


def drop_caches():
    """Write back dirty pages and drop the page cache (root only): the next reads come from disk."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        raise SystemExit(f"--cold needs root to drop the page cache (/proc/sys/vm/drop_caches): {e}")


def _st_header(entries, dtype_name, itemsize, metadata=None):
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, shape in entries:
        n = math.prod(shape) * itemsize
        header[name] = {"dtype": dtype_name, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return len(text).to_bytes(8, "little") + text


def write_random_safetensors(path, entries, dtype, seed):
    """`entries` [(name, shape)] of float32 or bfloat16 random normals * 0.02 (finite)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal(DISK_BLOCK, dtype=np.float32) * 0.02)
    if dtype == "bfloat16":
        block = (block.view(np.uint32) >> 16).astype(np.uint16)
    raw = block.tobytes()
    itemsize = 4 if dtype == "float32" else 2
    with open(path, "wb") as f:
        f.write(_st_header(entries, "F32" if dtype == "float32" else "BF16", itemsize, {"format": "pt"}))
        pos = int(rng.integers(len(raw) // itemsize)) * itemsize
        for _, shape in entries:
            left = math.prod(shape) * itemsize
            while left:
                piece = raw[pos:pos + left]
                f.write(piece)
                left -= len(piece)
                pos = (pos + len(piece)) % len(raw)


def write_sharded_folder(folder, entries, dtype, seed, max_shard_bytes):
    """A Hugging Face folder: greedy shards of at most max_shard_bytes, an index, a config."""
    itemsize = 4 if dtype == "float32" else 2
    groups, size = [[]], 0
    for name, shape in entries:
        n = math.prod(shape) * itemsize
        if groups[-1] and size + n > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append((name, shape))
        size += n
    os.makedirs(folder, exist_ok=True)
    weight_map = {}
    for k, group in enumerate(groups, 1):
        file = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
        write_random_safetensors(os.path.join(folder, file), group, dtype, seed * 100 + k)
        weight_map.update({name: file for name, _ in group})
    total = sum(math.prod(s) * itemsize for _, s in entries)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write('{"model_type": "bench"}\n')
    return len(groups)


def files_of(path):
    """The files a checkpoint argument reads (a folder: its index and shards)."""
    if not os.path.isdir(path):
        return [path]
    return [os.path.join(path, n) for n in sorted(os.listdir(path)) if n != "config.json"]


def make_disk_set(root, key, mib, n, dtype, seed, shard_mib=None):
    """n distinct checkpoints of a transformer of `mib` MiB (float32 sizes), single files or folders."""
    folder = os.path.join(root, key)
    config = {"kind": "disk", "mib": mib, "n": n, "dtype": dtype, "seed": seed, "shard_mib": shard_mib,
              "version": 1}
    man = _cached(folder, config)
    if man:
        return CkptSet(**man["sets"][0])
    entries = transformer_shapes(mib)
    itemsize = 4 if dtype == "float32" else 2
    os.makedirs(folder, exist_ok=True)
    paths, shards = [], 0
    for i in range(n):
        if shard_mib:
            p = os.path.join(folder, f"ckpt_{i:03d}")
            shards = write_sharded_folder(p, entries, dtype, seed * 1000 + i, shard_mib * MiB)
        else:
            p = os.path.join(folder, f"ckpt_{i:03d}.safetensors")
            write_random_safetensors(p, entries, dtype, seed * 1000 + i)
        paths.append(p)
    size = sum(os.path.getsize(f) for f in files_of(paths[0]))
    shape_of = {name: shape for name, shape in entries}
    largest = max(math.prod(s) for s in shape_of.values()) * itemsize
    label = f"{n} x {size / MiB:.0f} MiB {dtype}" + (f", {shards} shards each" if shard_mib else "")
    s = CkptSet(key=key, paths=paths, file_bytes=size, label=label, largest_tensor_bytes=largest,
                n_tensors=len(entries))
    _save_manifest(folder, config, [s])
    return s


def disk_jobs(b, s, peer=True):
    """swavg average, (swavg without read-ahead), the peer and the floor on one set."""
    py = [sys.executable, PEER]
    out, rep = b.out(f"{s.key}_swavg.safetensors"), b.out(f"{s.key}_swavg.json")
    avg = [b.args.swavg, "-q", "average", *s.paths, "-o", out, "--force", "--report", rep]
    jobs = [Job(f"{s.key}/swavg", avg, out, rep)]
    for v in b.args.prefetch_bytes:
        jobs.append(Job(f"{s.key}/swavg-readahead-{v}", ["env", f"SWAVG_PREFETCH_BYTES={v}", *avg], out, rep))
    if peer:
        out = b.out(f"{s.key}_peer.pt")
        jobs.append(Job(f"{s.key}/peer", py + ["average", *s.paths, "--out", out], out))
    out = b.out(f"{s.key}_floor.bin")
    files = [f for p in s.paths for f in files_of(p)]
    jobs.append(Job(f"{s.key}/floor", py + ["floor", *files, "--out", out, "--out-bytes", str(s.file_bytes)], out))
    if b.args.floor_ahead:
        jobs.append(Job(f"{s.key}/floor-ahead", py + ["floor", *files, "--out", out, "--out-bytes", str(s.file_bytes),
                                                      "--ahead", str(FLOOR_AHEAD)], out))
    return jobs


def time_disk(b, s, cache, repeats, peer=True):
    """Rounds of the set's jobs, each run after dropping the page cache (cold) or reading every
    input once (warm). Returns {key: Job}."""
    jobs = disk_jobs(b, s, peer)
    files = [f for p in s.paths for f in files_of(p)]
    for r in range(repeats):
        shift = r % len(jobs)
        for job in jobs[shift:] + jobs[:shift]:
            drop_caches() if cache == "cold" else warm(files)
            run_job(b.runner, job)
        log(f"  {s.key} {cache}: round {r + 1}/{repeats} done")
    return {j.key: j for j in jobs}


def disk_rows(s, cache, jobs, baseline_rss=None):
    floor = jobs[f"{s.key}/floor"].median()
    rows = []
    for key, job in jobs.items():
        tool = key.split("/", 1)[1]
        ratio = job.median() / floor
        row = {"set": s.key, "label": s.label, "cache": cache, "tool": tool, "median_s": job.median(),
               "floor_s": floor, "ratio_to_floor": ratio, "peak_rss_bytes": job.peak_rss(),
               "throughput_mib_s": s.total_bytes / MiB / job.median(), "runs": [r.wall_s for r in job.runs],
               "ratio_min": job.min() / floor, "ratio_max": max(r.wall_s for r in job.runs) / floor,
               "median_user_s": job.median("user_s"), "median_sys_s": job.median("sys_s"),
               "model_bytes": s.file_bytes, "budget_bytes": s.budget_bytes}
        if tool.startswith("swavg") and baseline_rss is not None:
            row["rss_above_baseline_bytes"] = job.peak_rss() - baseline_rss
            row["rss_ok"] = row["rss_above_baseline_bytes"] <= s.budget_bytes
        if tool == "swavg":
            row["target"] = f"within {DISK_TARGET}x of the I/O floor"
            row["ok"] = ratio <= DISK_TARGET
        rows.append(row)
    return rows


def disk_cases(b):
    """The sets of --cold (8 x 159 MiB, 32 x 40 MiB, 8 sharded folders) and of --dcp, less those
    --disk-cases leaves out."""
    a = b.args
    q = a.quick
    keep = a.disk_cases.split(",") if a.disk_cases else None
    cases = []
    if a.cold:
        for key, mib, n, seed, shard in (("disk8", 4 if q else 159, 8, a.seed, None),
                                         ("disk32", 1 if q else 40, 32, a.seed + 1, None),
                                         ("disk8_sharded", 4 if q else 159, 8, a.seed + 2, 2 if q else 60)):
            if keep is None or key in keep:
                cases.append(make_disk_set(b.workdir, key, mib, n, "float32", seed, shard_mib=shard))
    if a.dcp and (keep is None or DCP_KEY in keep):
        cases.append(make_dcp_set(b, 4 if q else a.dcp_mb))
    return cases


def run_cold(b, cases, read_ahead_kb):
    """Every case, cold and warm (--caches), at the device's current read_ahead_kb."""
    a = b.args
    rows = []
    for s in cases:
        for cache in a.caches.split(","):
            jobs = time_disk(b, s, cache, a.repeats, peer=not a.no_peer and s.key != DCP_KEY)
            for r in disk_rows(s, cache, jobs, b.baseline_rss):
                r["read_ahead_kb"] = read_ahead_kb
                rows.append(r)
            if a.json:  # what is done so far, should the run be stopped
                with open(a.json + ".partial", "w") as f:
                    json.dump(b.done + rows, f, indent=1)
            if s.key == DCP_KEY and not a.no_check and s.key not in b.checked:
                ok, detail = check_dcp_output(b, s, jobs[f"{s.key}/swavg"].output)
                b.checked[s.key] = {"matches_torch": ok, "detail": detail}
                log(f"  {s.key}: {detail}")
    return rows


# ---------------------------------------------------------------------------------------------
# DCP inputs: --dcp
#
# 4 checkpoints saved by torch.distributed.checkpoint.save from 4 gloo processes on CPU (DTensors on
# a CPU DeviceMesh, as FSDP2 saves), written by scripts/bench_dcp.py under --dcp-python (torch 2.x
# with DTensor: this bench may run under a Python without it). The model has many layers and a
# small embedding, so the flat-RSS budget (3 x largest tensor + 64 MiB) is well under the model.

BENCH_DCP = os.path.join(HERE, "bench_dcp.py")
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
    man = _cached(folder, config)
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
    _save_manifest(folder, config, [s])
    return s


def check_dcp_output(b, s, output):
    """swavg's average of the DCP set against torch's dcp_to_torch_save + average."""
    res = subprocess.run([b.args.dcp_python, BENCH_DCP, "check", output, *s.paths], capture_output=True, text=True)
    detail = (res.stdout.strip() or res.stderr.strip()[-500:])
    return res.returncode == 0, detail


# ---------------------------------------------------------------------------------------------
# The block device's readahead: --read-ahead-kb


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


def run_larger_than_ram(b):
    """--larger-than-ram: 4 bf16 checkpoints adding up to more than the machine's memory, averaged
    once from a cold cache; throughput and peak RSS; the inputs are removed afterwards."""
    a = b.args
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    total = int(a.ltr_gib * GiB) if a.ltr_gib else int(mem * 1.25)
    each = total // 4
    tensor = 256 * MiB // 2  # bf16 elements per tensor
    count = max(1, each // (tensor * 2))
    entries = [(f"layers.{i}.weight", (tensor // 4096, 4096)) for i in range(count)]
    folder = os.path.join(b.workdir, "larger_than_ram")
    os.makedirs(folder, exist_ok=True)
    log(f"larger than RAM: writing 4 x {count * tensor * 2 / GiB:.1f} GiB bf16 ({mem / GiB:.1f} GiB of memory) ...")
    try:
        paths = []
        for i in range(4):
            p = os.path.join(folder, f"ckpt_{i}.safetensors")
            write_random_safetensors(p, entries, "bfloat16", a.seed + i)
            paths.append(p)
        size = os.path.getsize(paths[0])
        s = CkptSet(key="larger_than_ram", paths=paths, file_bytes=size, label=f"4 x {size / GiB:.1f} GiB bf16",
                    largest_tensor_bytes=tensor * 2, n_tensors=count)
        saved, a.prefetch_bytes = a.prefetch_bytes, []
        jobs = time_disk(b, s, "cold", 1, peer=False)
        a.prefetch_bytes = saved
        rows = disk_rows(s, "cold", jobs, b.baseline_rss)
        for r in rows:
            r["inputs_bytes"] = s.total_bytes
            r["memory_bytes"] = mem
        return rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for name in os.listdir(b.outdir):
            if name.startswith("larger_than_ram"):
                os.unlink(os.path.join(b.outdir, name))


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


def _tool_name(tool):
    if tool.startswith("swavg-readahead-"):
        return f"swavg PREFETCH={tool.rsplit('-', 1)[1]}"
    return "swavg (default)" if tool == "swavg" else tool


def print_disk_report(res):
    if res.get("cold"):
        print("\nAverage from a cold and a warm page cache, against the I/O floor "
              f"(target {DISK_TARGET}x; medians of {res['args']['repeats']}; spread = fastest and slowest run / "
              "floor median;\nPREFETCH = SWAVG_PREFETCH_BYTES, 0 = none; RSS+ = peak RSS above `swavg --version`'s, "
              "budget 3 x largest tensor + 64 MiB; ra = read_ahead_kb):")
        rows = [[r["label"], r["read_ahead_kb"], r["cache"], _tool_name(r["tool"]), _s(r["median_s"]),
                 _s(r["floor_s"]), f"{r['ratio_to_floor']:.2f}x", f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}",
                 _s(r["median_user_s"] + r["median_sys_s"]), _mib(r["peak_rss_bytes"]),
                 _mib(r.get("rss_above_baseline_bytes")),
                 "" if "rss_ok" not in r else f"{_mib(r['budget_bytes'])} {'ok' if r['rss_ok'] else 'OVER'}",
                 "" if "ok" not in r else ("PASS" if r["ok"] else "MISS")] for r in res["cold"]]
        print(table(["inputs", "ra", "cache", "tool", "median s", "floor s", "/floor", "spread", "CPU s",
                     "peak RSS MiB", "RSS+", "budget", "target"], rows))
        print_matrix(res["cold"])
    for key, d in res.get("default_read_ahead", {}).items():
        print(f"swavg's default read-ahead on {key}: {d}")
    for key, c in res.get("dcp_check", {}).items():
        print(f"{key}: swavg's average {'matches' if c['matches_torch'] else 'DIFFERS FROM'} torch's "
              f"dcp_to_torch_save + average ({c['detail']})")
    if res.get("larger_than_ram"):
        print("\nLarger than RAM (cold, one run):")
        rows = [[r["label"], r["tool"], _s(r["median_s"]), f"{r['throughput_mib_s']:.0f}",
                 f"{r['ratio_to_floor']:.2f}x", _mib(r["peak_rss_bytes"])] for r in res["larger_than_ram"]]
        print(table(["inputs", "tool", "s", "MiB/s", "/floor", "peak RSS MiB"], rows))
    if res.get("workers"):
        print("\nWorkers on one machine (N x `average --shard i/N` concurrently, then finalize):")
        rows = [[r["workers"], r["cache"], _s(r["median_s"]),
                 "" if r["ratio_to_one_process"] is None else f"{r['ratio_to_one_process']:.2f}x",
                 _mib(r["peak_rss_bytes"])] for r in res["workers"]]
        print(table(["workers", "cache", "median s", "/1 process", "peak RSS MiB (one worker)"], rows))
    for n in res.get("notes", []):
        print("note: " + n)


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
        out.append([label, cache, kb, _s(floor)] + cells)
    print(table(["inputs", "cache", "ra", "floor s"] + [_tool_name(t) for t in tools], out))


def run_disk_bench(b):
    a = b.args
    info = machine_info(a.swavg)
    print(f"swavg disk bench: {info['swavg_version']} ({info['swavg_commit']}), {info['nproc']} CPUs, "
          f"{info['date']}, load average {info['loadavg_start'][0]:.1f}")
    if info["loadavg_start"][0] > 0.5:
        b.notes.append(f"load average {info['loadavg_start'][0]:.1f} on {info['nproc']} CPUs at start: "
                       "other work was running, timings are noisy")
    res = {"machine": info, "args": vars(a)}
    version = Job("disk/version", [a.swavg, "--version"])
    run_job(b.runner, version)
    b.baseline_rss = res["baseline_rss_bytes"] = version.peak_rss()
    if a.cold or a.dcp:
        cases = disk_cases(b)
        res["cold"] = []
        if a.read_ahead_kb:
            with ReadAhead(b.workdir) as ra:
                info["read_ahead_kb_original"] = ra.original
                for kb in a.read_ahead_kb:
                    got = ra.set(kb)
                    log(f"read_ahead_kb {got} ({ra.file})")
                    res["cold"] += run_cold(b, cases, got)
                    b.done = res["cold"]
                    res.setdefault("default_read_ahead", {}).update(
                        {f"{s.key} at read_ahead_kb {got}": default_read_ahead(b, s) for s in cases})
        else:
            kb = current_read_ahead_kb(b.workdir)
            res["cold"] = run_cold(b, cases, kb)
            res["default_read_ahead"] = {f"{s.key} at read_ahead_kb {kb}": default_read_ahead(b, s) for s in cases}
        res["dcp_check"] = b.checked
    if a.larger_than_ram:
        res["larger_than_ram"] = run_larger_than_ram(b)
    if a.workers:
        res["workers"] = run_workers(b, a.workers)
    info["loadavg_end"] = os.getloadavg()
    res["notes"] = b.notes
    print_disk_report(res)
    return res


# ---------------------------------------------------------------------------------------------
# Real peers: --peers
#
# What users run instead of swavg, side by side on the same files: N Hugging Face folders of a
# Llama-like model (config.json + one model.safetensors, written with numpy like the disk cases).
# swavg averages the folders into a folder; the peers (scripts/bench_peers.py, run with
# --peer-python) are timm's avg_checkpoints.py logic on the folders' model.safetensors files,
# a transformers model soup (from_pretrained, sum, save_pretrained) and mergekit's linear merge;
# `loop` is bench_peer.py's AveragedModel loop. Every one of them fsyncs its output, as swavg does.

REAL_PEERS = os.path.join(HERE, "bench_peers.py")
PEER_TOOLS = ("loop", "timm", "transformers", "mergekit")
PEER_TARGET = 5.0  # issue 18: swavg at least 5x faster than the fastest peer


def llama_shapes(mib):
    """(entries, config) of a LlamaForCausalLM of about `mib` MiB in float32 (embeddings ~1/2)."""
    params = mib * MiB // 4
    d = max(64, round(768 * math.sqrt(mib / 100) / 64) * 64)
    heads = d // 64
    inter = round(8 * d / 3 / 64) * 64
    vocab = max(64, round(params / 4 / d / 64) * 64)
    layers = max(1, round((params - 2 * vocab * d) / (4 * d * d + 3 * d * inter + 2 * d)))
    entries = [("model.embed_tokens.weight", (vocab, d))]
    for i in range(layers):
        b = f"model.layers.{i}."
        entries += [(b + "input_layernorm.weight", (d,))]
        entries += [(b + f"self_attn.{p}_proj.weight", (d, d)) for p in "qkvo"]
        entries += [(b + "post_attention_layernorm.weight", (d,)),
                    (b + "mlp.gate_proj.weight", (inter, d)), (b + "mlp.up_proj.weight", (inter, d)),
                    (b + "mlp.down_proj.weight", (d, inter))]
    entries += [("model.norm.weight", (d,)), ("lm_head.weight", (vocab, d))]
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
              "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": heads,
              "num_hidden_layers": layers, "vocab_size": vocab, "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False}
    return entries, config


def make_hf_set(root, mib, n, dtype, seed):
    """n distinct Hugging Face folders (config.json + model.safetensors) of a Llama of `mib` MiB."""
    folder = os.path.join(root, f"hf_{mib}_{dtype}")
    config = {"kind": "hf", "mib": mib, "n": n, "dtype": dtype, "seed": seed, "version": 1}
    man = _cached(folder, config)
    if man:
        return CkptSet(**man["sets"][0])
    entries, model_config = llama_shapes(mib)
    model_config["dtype"] = dtype
    paths = []
    for i in range(n):
        p = os.path.join(folder, f"ckpt_{i:03d}")
        os.makedirs(p, exist_ok=True)
        write_random_safetensors(os.path.join(p, "model.safetensors"), entries, dtype, seed * 1000 + i)
        with open(os.path.join(p, "config.json"), "w") as f:
            json.dump(model_config, f, indent=2)
        paths.append(p)
    size = os.path.getsize(os.path.join(paths[0], "model.safetensors"))
    itemsize = 4 if dtype == "float32" else 2
    s = CkptSet(key=f"hf_{dtype}", paths=paths, file_bytes=size, n_tensors=len(entries),
                label=f"{n} x {size / MiB:.0f} MiB {dtype} Llama folders",
                largest_tensor_bytes=max(math.prod(sh) for _, sh in entries) * itemsize)
    _save_manifest(folder, config, [s])
    return s


def peer_env(args):
    """argv prefix for a peer: `env` with --peer-path on PYTHONPATH and the Hub offline."""
    path = [args.peer_path] if args.peer_path else []
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return ["env", "HF_HUB_OFFLINE=1", "TRANSFORMERS_NO_ADVISORY_WARNINGS=1"] + (
        [f"PYTHONPATH={os.pathsep.join(path)}"] if path else [])


def probe_peers(b):
    """{tool: version} of the asked-for peers that import with --peer-python; notes for the rest."""
    a = b.args
    found = {}
    for tool in a.peers:
        mod = "torch" if tool == "loop" else tool
        res = subprocess.run(peer_env(a) + [a.peer_python, REAL_PEERS, "probe", mod],
                             capture_output=True, text=True)
        if res.returncode == 0:
            found[tool] = ("torch " if tool == "loop" else "") + res.stdout.strip()
        else:
            why = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"
            b.notes.append(f"peer {tool} skipped: {mod} does not import with {a.peer_python} ({why})")
    return found


def peers_jobs(b, s, tools):
    """swavg average (folders in, a folder out) and each peer's job on the same folders."""
    a = b.args
    env, py = peer_env(a), a.peer_python
    out, rep = b.out("peers_swavg/"), b.out("peers_swavg.json")
    avg = [a.swavg, "-q", "average", *s.paths, "-o", out, "--force", "--report", rep]
    jobs = [Job("peers/version", [a.swavg, "--version"]), Job("peers/swavg", avg, out.rstrip("/"), rep)]
    files = [os.path.join(p, "model.safetensors") for p in s.paths]
    argv = {"loop": [py, PEER, "average", *s.paths, "--out", b.out("peers_loop.pt"), "--fsync"],
            "timm": [py, REAL_PEERS, "timm", *files, "--safetensors", "--out", b.out("peers_timm.safetensors")],
            "transformers": [py, REAL_PEERS, "transformers", *s.paths, "--out", b.out("peers_transformers")],
            "mergekit": [py, REAL_PEERS, "mergekit", *s.paths, "--out", b.out("peers_mergekit")]}
    outputs = {t: v[v.index("--out") + 1] for t, v in argv.items()}
    jobs += [Job(f"peers/{t}", env + argv[t], outputs[t]) for t in PEER_TOOLS if t in tools]
    return jobs


def run_peers_bench(b):
    """--peers: swavg against the asked-for real peers on the same folders, warm, fsynced."""
    a = b.args
    info = machine_info(a.swavg)
    print(f"swavg peers bench: {info['swavg_version']} ({info['swavg_commit']}), {info['nproc']} CPUs, "
          f"{info['date']}, load average {info['loadavg_start'][0]:.1f}")
    tools = probe_peers(b)
    s = make_hf_set(b.workdir, a.peers_mb, a.peers_n, a.peers_dtype, a.seed)
    jobs = peers_jobs(b, s, tools)
    log(f"peers: {s.label}; warming the page cache, then {a.repeats} round(s) of {len(jobs)} runs ...")
    warm([os.path.join(p, "model.safetensors") for p in s.paths])
    run_rounds(b.runner, jobs, a.repeats)
    by_key = {j.key: j for j in jobs}
    sw, base = by_key["peers/swavg"], by_key["peers/version"].peak_rss()
    rows = []
    for tool in ("swavg",) + PEER_TOOLS:
        job = by_key.get(f"peers/{tool}")
        if job is None:
            continue
        row = {"tool": tool, "version": info["swavg_version"] if tool == "swavg" else tools[tool],
               "min_s": job.min(), "median_s": job.median(), "ratio": job.min() / sw.min(),
               "peak_rss_bytes": job.peak_rss(), "min_cpu_s": min(r.user_s + r.sys_s for r in job.runs),
               "runs": [r.wall_s for r in job.runs]}
        if tool != "swavg":
            exact = tool == "loop"  # the AveragedModel loop is swavg's bit-for-bit reference
            ok, detail = compare_state_dicts(sw.output, job.output, exact=exact, rtol=1e-5, atol=1e-7)
            row.update({"matches_swavg": ok, "detail": detail, "bit_exact_expected": exact})
        rows.append(row)
    peers = [r for r in rows if r["tool"] != "swavg"]
    res = {"machine": info, "args": vars(a), "set": dict(dataclasses.asdict(s), total_bytes=s.total_bytes),
           "baseline_rss_bytes": base, "rows": rows, "notes": b.notes,
           "jobs": {k: j.summary() for k, j in by_key.items()}, "targets": []}
    if peers:
        fastest = min(peers, key=lambda r: r["min_s"])
        res["targets"].append({"target": f"at least {PEER_TARGET:g}x faster than the fastest peer",
                               "value": fastest["ratio"], "ok": fastest["ratio"] >= PEER_TARGET,
                               "show": f"{fastest['ratio']:.1f}x ({fastest['tool']})"})
    above = sw.peak_rss() - base
    res["targets"].append({"target": "peak RSS above baseline < 3 x largest tensor + 64 MiB",
                           "value": above / s.budget_bytes, "ok": above <= s.budget_bytes,
                           "show": f"{above / MiB:.1f} of {s.budget_bytes / MiB:.0f} MiB"})
    info["loadavg_end"] = os.getloadavg()
    print_peers_report(res, s)
    return res


def print_peers_report(res, s):
    a = res["args"]
    print(f"\n{s.label} ({s.n_tensors} tensors), page cache warm, every output fsynced; "
          f"min of {a['repeats']} run(s), wall time with start-up; ratio = tool / swavg; RSS in MiB")
    rows = [[r["tool"], r["version"], _s(r["min_s"]), _s(r["median_s"]), f"{r['ratio']:.1f}x",
             _s(r["min_cpu_s"]), _mib(r["peak_rss_bytes"]),
             "" if "detail" not in r else ("ok" if r["matches_swavg"] else "DIFFERS") + f" ({r['detail']})"]
            for r in res["rows"]]
    print(table(["tool", "version", "min s", "median s", "/swavg", "CPU s", "peak RSS", "output vs swavg's"],
                rows))
    print(f"swavg --version: {_mib(res['baseline_rss_bytes'])} MiB RSS (baseline)")
    print("\ntargets:")
    for t in res["targets"]:
        print(f"  {'PASS' if t['ok'] else 'MISS'}  {t['target']}: {t['show']}")
    for n in res["notes"]:
        print("note: " + n)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--swavg", default=os.path.join(HERE, "..", "build", "swavg"), help="the binary")
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
    args = p.parse_args(argv)
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
    return args


def run_bench(b):
    args = b.args
    info = machine_info(args.swavg)
    print(f"swavg bench: {info['swavg_version']} ({info['swavg_commit']}), torch {info['torch']}, "
          f"{info['cpu']}, {info['nproc']} CPUs, {info['date']}")
    if info["loadavg_start"][0] > 0.5:
        b.notes.append(f"load average {info['loadavg_start'][0]:.1f} on {info['nproc']} CPUs at "
                       "start: other work was running, timings are noisy")
        print("note: " + b.notes[-1])
    sizes = plan_scaling(b)
    log(f"work folder {b.workdir}; generating checkpoints ...")
    sets = make_transformer_sets(b.workdir, "main", args.model_mb, args.n, args.n,
                                 ("float32", "bfloat16"), args.seed)
    spec = bench_peer.resnet_spec(args.quick)
    resnet, model_ts, data_npy = make_resnet_set(b.workdir, spec, args.n, args.seed,
                                                 args.bn_samples, args.bn_res)
    sets.append(resnet)

    jobs = time_main(b, sets)
    res = {"machine": info, "args": vars(args),
           "sets": [dict(dataclasses.asdict(s), total_bytes=s.total_bytes) for s in sets],
           "baseline_rss_bytes": jobs["version"].peak_rss(), "startup_s": jobs["version"].median(),
           "baseline_torch_rss_bytes": jobs["version/torch"].peak_rss(),
           "startup_torch_s": jobs["version/torch"].median()}
    res["correctness"] = check_outputs(jobs, sets)
    log("memory scaling ...")
    res["scaling"] = memory_scaling(b, sets[0], sizes, res["baseline_rss_bytes"])
    res["update_bn"], bn_jobs = time_update_bn(b, resnet, model_ts, data_npy, spec)
    jobs.update({j.key: j for j in bn_jobs})
    res["many_tensors"], many_jobs = time_many_tensors(b)
    jobs.update({j.key: j for j in many_jobs})
    res["jobs"] = {k: j.summary() for k, j in jobs.items()}
    res["targets"] = targets(res, jobs, sets)
    res["notes"] = b.notes
    info["loadavg_end"] = os.getloadavg()
    print_report(res, jobs, sets, args)
    return res


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


def main(argv=None):
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


if __name__ == "__main__":
    sys.exit(main())
