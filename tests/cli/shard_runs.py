"""Shared by the shard-parallel engine tests (test_slurm, test_k8s_form): small checkpoints from
real PyTorch that average into several output shards, a plain one-process run to compare with,
and byte-for-byte comparison of output folders."""
import json
import os
import subprocess

import torch

from common import SWAVG
from reference import load_safetensors, swa_fold

MAX_SHARD = "1MB"  # 10^6 bytes: lm_head (1.6 MB) is over it, the rest packs into several shards
SHARD_LIMIT = 10 ** 6
SHAPES = [  # name, dtype, shape; the order the output follows
    ("tok_embeddings.weight", torch.bfloat16, (512, 768)),
    ("layers.0.attn.weight", torch.float32, (384, 384)),
    ("layers.0.attn.bias", torch.float32, (384,)),
    ("layers.0.mlp.weight", torch.bfloat16, (768, 384)),
    ("lm_head.weight", torch.float32, (640, 640)),
    ("layers.1.attn.weight", torch.float32, (384, 384)),
    ("layers.1.attn.bias", torch.float32, (384,)),
    ("layers.1.mlp.weight", torch.bfloat16, (768, 384)),
    ("norm.weight", torch.float32, (384,)),
]
WORKER_ENV = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT", "SLURM_PROCID",
              "SLURM_NTASKS", "RANK", "WORLD_SIZE", "JOB_COMPLETION_INDEX")


def make_checkpoints(folder, count=3, seed=1234):
    """`count` torch.save state dicts (fixed seed) in folder; returns their paths."""
    os.makedirs(folder, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    paths = []
    for i in range(count):
        sd = {name: torch.randn(shape, generator=gen).to(dtype) for name, dtype, shape in SHAPES}
        path = os.path.join(folder, "step-%d.pt" % (1000 * (i + 1)))
        torch.save(sd, path)
        paths.append(path)
    return paths


def plain_env(**extra):
    """This environment without any worker variable (a test run inside a Slurm job or torchrun
    would otherwise pick up its own), plus extra."""
    env = {k: v for k, v in os.environ.items() if k not in WORKER_ENV}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_swavg(args, env):
    return subprocess.run([SWAVG, *map(str, args)], capture_output=True, text=True, timeout=300, env=env)


def plain_run(test, paths, out):
    """One process, no worker variables: the reference output folder."""
    p = run_swavg(["average", *paths, "-o", out, "--max-shard-size", MAX_SHARD], plain_env())
    test.assertEqual(p.returncode, 0, p.stderr)
    check_reference(test, out, paths)


def check_reference(test, out, paths):
    """The plain run is worth comparing with: an index over several shards, lm_head alone in one
    over the limit, every float32 tensor bit-exact with PyTorch's SWA fold of the inputs."""
    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        index = json.load(f)
    weight_map = index["weight_map"]
    test.assertEqual(sorted(weight_map), sorted(name for name, _, _ in SHAPES))
    shards = sorted(set(weight_map.values()))
    test.assertGreaterEqual(len(shards), 5, shards)  # more shards than 4 workers: one gets two
    big = weight_map["lm_head.weight"]
    test.assertEqual([n for n, s in weight_map.items() if s == big], ["lm_head.weight"])
    test.assertGreater(os.path.getsize(os.path.join(out, big)), SHARD_LIMIT)
    inputs = [torch.load(p) for p in paths]
    for shard in shards:
        tensors, _ = load_safetensors(os.path.join(out, shard))
        for name, got in tensors.items():
            want = swa_fold([sd[name] for sd in inputs])
            test.assertEqual(got.dtype, want.dtype, name)
            if got.dtype == torch.float32:
                test.assertTrue(torch.equal(got, want), name)


def folder_bytes(root):
    """{path relative to root: bytes} for every file under root."""
    files = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                files[os.path.relpath(p, root)] = f.read()
    return files


def assert_same_folder(test, got, want):
    g, w = folder_bytes(got), folder_bytes(want)
    test.assertEqual(sorted(g), sorted(w), "file lists differ: %s vs %s" % (got, want))
    for name in w:
        test.assertTrue(g[name] == w[name], "%s differs from %s" % (os.path.join(got, name), os.path.join(want, name)))


def assert_unpublished(test, out):
    """finalize refused: OUT/ does not exist, the workers' parts stay in OUT.partial/."""
    test.assertFalse(os.path.exists(out.rstrip("/")), "%s was published" % out)
    test.assertTrue(os.path.isdir(out.rstrip("/") + ".partial"), "%s.partial is gone" % out.rstrip("/"))


def finalize(out, env=None):
    return run_swavg(["finalize", out], env or plain_env())

