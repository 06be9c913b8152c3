"""Sharded outputs (-o DIR/) against real PyTorch: Hugging Face folders of safetensors and
torch.save shards with their index, values bit-exact with the single-file output of the same fold
and with PyTorch's running average; shard-parallel workers (--shard I/N and each environment form,
in any order and concurrently, a worker killed mid-write and run again) plus `swavg finalize` give
the same bytes as one process; finalize refuses a missing worker and a tampered file; the output
folder's rules (existing, --force, holding an input).

Inputs are made here by PyTorch with fixed seeds."""
import collections
import hashlib
import json
import os
import signal
import subprocess
import time
import unittest

import torch

import safetensors_ref
from common import SWAVG, TempDirTest, same_bits, swavg
from reference import load_output, load_safetensors, swa_fold

# name -> shape; sizes in float32 bytes: 4096, 400, 16384 (over a 10KB limit), 2048, 8, 0
SHAPES = collections.OrderedDict([
    ("embed.weight", (32, 32)), ("block.0.weight", (10, 10)), ("block.0.big", (64, 64)),
    ("block.1.weight", (16, 32)), ("head.bias", (2,)), ("empty", (0, 3)),
])
ENV_FORMS = ["SLURM_ARRAY_TASK_ID", "SLURM_PROCID", "RANK", "JOB_COMPLETION_INDEX"]


def make_state(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return collections.OrderedDict((k, torch.randn(s, generator=g).to(dtype)) for k, s in SHAPES.items())


def folder_bytes(path):
    """{file name: bytes} of a folder (which holds files only)."""
    out = {}
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        assert os.path.isfile(full) and not os.path.islink(full), full
        with open(full, "rb") as f:
            out[name] = f.read()
    return out


def python_index(total, weight_map):
    return json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"


class ShardedOutputTest(TempDirTest):
    def inputs(self, dtype=torch.float32, n=3, fmt="safetensors"):
        paths, states = [], []
        for i in range(n):
            sd = make_state(100 + i, dtype)
            p = self.path("in_%d.%s" % (i, "safetensors" if fmt == "safetensors" else "pt"))
            if fmt == "safetensors":
                safetensors_ref.write(p, sd, metadata={"format": "pt", "origin": "test"})
            else:
                torch.save(sd, p)
            paths.append(p)
            states.append(sd)
        return paths, states

    def assert_fails(self, p, code, *needles):
        self.assertEqual(p.returncode, code, "exit %d, expected %d; stderr:\n%s" % (p.returncode, code, p.stderr))
        for n in needles:
            self.assertIn(n, p.stderr)

    def read_folder(self, out):
        """The tensors of a published folder, through its index (or its single file), as PyTorch reads them."""
        files = os.listdir(out)
        tensors, metadata = collections.OrderedDict(), []
        index = [f for f in files if f.endswith(".index.json")]
        if index:
            with open(os.path.join(out, index[0])) as f:
                wm = json.load(f)["weight_map"]
            shards = sorted(set(wm.values()))
        else:
            shards = [f for f in files if f in ("model.safetensors", "pytorch_model.bin")]
        for s in shards:
            full = os.path.join(out, s)
            if s.endswith(".safetensors"):
                sd, md = load_safetensors(full)
                metadata.append(md)
            else:
                sd = load_output(full)
            tensors.update(sd)
        return tensors, metadata, index


class LayoutTest(ShardedOutputTest):
    def test_safetensors_shards_are_the_single_file_fold(self):
        paths, states = self.inputs()
        single = self.path("single.safetensors")
        swavg("average", *paths, "-o", single)
        want, _ = load_safetensors(single)
        out = self.path("out")
        p = swavg("average", *paths, "-o", out + "/", "--max-shard-size", "10KB", "--json")
        files = sorted(os.listdir(out))
        # 4096+400 | 16384 (over the limit: alone) | 2048+8+0
        self.assertEqual(files, ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                 "model-00003-of-00003.safetensors", "model.safetensors.index.json"])
        got, metadata, _ = self.read_folder(out)
        self.assertEqual(list(got), list(SHAPES))
        for k in SHAPES:
            self.assertTrue(same_bits(got[k], want[k]), k)
            self.assertTrue(same_bits(got[k], swa_fold([s[k] for s in states])), k)
        # Every shard carries the same metadata: "format": "pt", the inputs' own, swavg's record.
        self.assertTrue(all(md == metadata[0] for md in metadata))
        self.assertEqual(metadata[0]["format"], "pt")
        self.assertEqual(metadata[0]["origin"], "test")
        self.assertIn("swavg", metadata[0])
        with open(os.path.join(out, "model.safetensors.index.json")) as f:
            text = f.read()
        index = json.loads(text)
        total = sum(t.numel() * t.element_size() for t in want.values())
        self.assertEqual(index["metadata"]["total_size"], total)
        self.assertEqual(text, python_index(total, index["weight_map"]))
        self.assertEqual(index["weight_map"]["block.0.big"], "model-00002-of-00003.safetensors")
        self.assertEqual(index["weight_map"]["head.bias"], "model-00003-of-00003.safetensors")
        report = json.loads(p.stdout)
        self.assertEqual(report["worker"], {"index": 0, "count": 1, "source": "none"})
        self.assertEqual([s["tensors"] for s in report["shards"]], [2, 1, 3])
        self.assertEqual(len(report["plan_hash"]), 64)
        self.assertFalse([f for f in os.listdir(self.tmp) if ".swavg-" in f], "staging left behind")

    def test_limit_edges(self):
        paths, _ = self.inputs(n=2)
        # 4096 + 400 = 4496 bytes: exactly at the limit, one shard; one byte less, two.
        at = self.path("at")
        swavg("average", *paths, "-o", at + "/", "--max-shard-size", "4496")
        with open(os.path.join(at, "model.safetensors.index.json")) as f:
            wm = json.load(f)["weight_map"]
        self.assertEqual(wm["embed.weight"], wm["block.0.weight"])
        below = self.path("below")
        swavg("average", *paths, "-o", below + "/", "--max-shard-size", "4495")
        with open(os.path.join(below, "model.safetensors.index.json")) as f:
            wm = json.load(f)["weight_map"]
        self.assertNotEqual(wm["embed.weight"], wm["block.0.weight"])

    def test_one_shard_is_model_safetensors_without_index(self):
        paths, _ = self.inputs()
        out = self.path("out")
        swavg("average", *paths, "-o", out + "/")  # default 5GB
        self.assertEqual(os.listdir(out), ["model.safetensors"])
        single = self.path("single.safetensors")
        swavg("average", *paths, "-o", single)
        a, _ = load_safetensors(single)
        b, _ = load_safetensors(os.path.join(out, "model.safetensors"))
        for k in SHAPES:
            self.assertTrue(same_bits(a[k], b[k]), k)

    def test_bf16_torch_shards(self):
        paths, states = self.inputs(dtype=torch.bfloat16, fmt="torch")
        single = self.path("single.pt")
        swavg("average", *paths, "-o", single)
        want = load_output(single)
        out = self.path("out")
        swavg("average", *paths, "-o", out + "/", "--format", "torch", "--max-shard-size", "5KB")
        files = sorted(os.listdir(out))
        self.assertIn("pytorch_model.bin.index.json", files)
        shards = [f for f in files if f.endswith(".bin")]
        self.assertEqual(shards, ["pytorch_model-%05d-of-%05d.bin" % (k, len(shards)) for k in range(1, len(shards) + 1)])
        got, _, _ = self.read_folder(out)
        self.assertEqual(list(got), list(SHAPES))
        for k in SHAPES:
            self.assertEqual(got[k].dtype, torch.bfloat16)
            self.assertTrue(same_bits(got[k], want[k]), k)
            ref = swa_fold([s[k] for s in states], acc_dtype=torch.float32).to(torch.bfloat16)
            self.assertTrue(same_bits(got[k], ref), k)
        with open(os.path.join(out, "pytorch_model.bin.index.json")) as f:
            index = json.load(f)
        self.assertEqual(index["metadata"]["total_size"], sum(t.numel() * 2 for t in want.values()))

    def test_tied_tensors_are_written_each(self):
        w = torch.randn(64, 64, generator=torch.Generator().manual_seed(3))
        sd = collections.OrderedDict([("a", w), ("b", w), ("c", torch.randn(4))])
        p = self.path("tied.pt")
        torch.save(sd, p)
        out = self.path("out")
        swavg("average", p, p, "-o", out + "/", "--format", "torch", "--max-shard-size", "16KB")
        got, _, _ = self.read_folder(out)
        self.assertTrue(same_bits(got["a"], w) and same_bits(got["b"], w))

    def test_objects_need_drop_objects(self):
        p = self.path("obj.pt")
        torch.save({"w": torch.ones(3), "epoch": 7}, p)
        out = self.path("out")
        r = swavg("average", p, "-o", out + "/", "--format", "torch", check=False)
        self.assert_fails(r, 2, "epoch", "--drop-objects")
        self.assertFalse(os.path.exists(out))
        swavg("average", p, "-o", out + "/", "--format", "torch", "--drop-objects")
        self.assertEqual(os.listdir(out), ["pytorch_model.bin"])

    def test_option_errors(self):
        paths, _ = self.inputs(n=1)
        for value in ["0", "-1", "5XB", "9223372036854775808", "1.5"]:
            r = swavg("average", *paths, "-o", self.path("o") + "/", "--max-shard-size", value, check=False)
            self.assert_fails(r, 2, "--max-shard-size")
        r = swavg("average", *paths, "-o", self.path("o.safetensors"), "--max-shard-size", "1GB", check=False)
        self.assert_fails(r, 2, "--max-shard-size")
        r = swavg("average", *paths, "-o", self.path("o.safetensors"), "--shard", "0/2", check=False)
        self.assert_fails(r, 2, "--shard")
        r = swavg("average", *paths, "-o", self.path("o") + "/", "--shard", "2/2", check=False)
        self.assert_fails(r, 2, "--shard")
        self.assertFalse(os.path.exists(self.path("o")))
        self.assertFalse(os.path.exists(self.path("o.partial")))


class ConvertTest(ShardedOutputTest):
    def test_convert_reshards(self):
        paths, states = self.inputs(n=1)
        out = self.path("re")
        swavg("convert", paths[0], "-o", out + "/", "--max-shard-size", "10KB")
        got, metadata, index = self.read_folder(out)
        self.assertEqual(index, ["model.safetensors.index.json"])
        self.assertEqual(list(got), list(SHAPES))
        for k in SHAPES:
            self.assertTrue(same_bits(got[k], states[0][k]), k)
        self.assertEqual(metadata[0]["origin"], "test")
        pt = self.path("re_pt")
        swavg("convert", paths[0], "-o", pt + "/", "--format", "torch", "--max-shard-size", "10KB")
        got, _, _ = self.read_folder(pt)
        for k in SHAPES:
            self.assertTrue(same_bits(got[k], states[0][k]), k)
        r = swavg("convert", paths[0], "-o", self.path("x.pt"), "--max-shard-size", "10KB", check=False)
        self.assert_fails(r, 2, "--max-shard-size")


class FolderRulesTest(ShardedOutputTest):
    def test_failed_fold_leaves_nothing(self):
        paths, _ = self.inputs(n=2)
        sd = make_state(5, torch.float32)
        sd["block.0.big"][3, 3] = float("nan")
        bad = self.path("nan.safetensors")
        safetensors_ref.write(bad, sd)
        out = self.path("out")
        r = swavg("average", paths[0], bad, "-o", out + "/", "--max-shard-size", "10KB", check=False)
        self.assert_fails(r, 3, "block.0.big")
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted(os.path.basename(p) for p in paths + [bad]))

    def test_a_worker_reads_only_its_tensors(self):
        """block.0.big (shard 2 of 3) is non-finite in one input: only worker 1, which folds it, sees that."""
        paths, _ = self.inputs(n=2)
        sd = make_state(5, torch.float32)
        sd["block.0.big"][3, 3] = float("inf")
        bad = self.path("inf.safetensors")
        safetensors_ref.write(bad, sd)
        out = self.path("out")
        for i in (0, 2):
            swavg("average", paths[0], bad, "-o", out + "/", "--max-shard-size", "10KB", "--shard", "%d/3" % i)
        r = swavg("average", paths[0], bad, "-o", out + "/", "--max-shard-size", "10KB", "--shard", "1/3", check=False)
        self.assert_fails(r, 3, "block.0.big")
        self.assert_fails(swavg("finalize", out + "/", check=False), 6, "1")


    def test_existing_folder_force_and_inputs(self):
        paths, _ = self.inputs(n=2)
        out = self.path("out")
        os.mkdir(out)
        swavg("average", *paths, "-o", out)  # an existing empty folder, no slash needed
        self.assertEqual(os.listdir(out), ["model.safetensors"])
        r = swavg("average", *paths, "-o", out + "/", "--max-shard-size", "5KB", check=False)
        self.assert_fails(r, 2, "--force")
        self.assertEqual(os.listdir(out), ["model.safetensors"])
        # A worker too: run again after its job was published, it would start another job beside OUT/.
        r = swavg("average", *paths, "-o", out + "/", "--shard", "0/2", check=False)
        self.assert_fails(r, 2, "--force")
        self.assertFalse(os.path.exists(out + ".partial"))
        swavg("average", *paths, "-o", out + "/", "--max-shard-size", "5KB", "--force")
        self.assertIn("model.safetensors.index.json", os.listdir(out))
        self.assertNotIn("model.safetensors", os.listdir(out))
        self.assertFalse([f for f in os.listdir(self.tmp) if ".swavg-" in f])
        # An output folder holding an input: refused even with --force, the input untouched.
        inside = os.path.join(out, "in.safetensors")
        with open(paths[0], "rb") as f:
            data = f.read()
        with open(inside, "wb") as f:
            f.write(data)
        for extra in ([], ["--force"], ["--shard", "0/2", "--force"]):
            r = swavg("average", inside, paths[1], "-o", out + "/", *extra, check=False)
            self.assert_fails(r, 2, "holds the input")
            with open(inside, "rb") as f:
                self.assertEqual(f.read(), data)
        r = swavg("average", *paths, "-o", paths[0] + "/", check=False)
        self.assertNotEqual(r.returncode, 0)
        with open(paths[0], "rb") as f:
            self.assertEqual(f.read(), data)

    def test_stale_staging_folder_is_removed(self):
        paths, _ = self.inputs(n=1)
        stale = self.path(".out.swavg-stage-99999-1")
        os.mkdir(stale)
        open(os.path.join(stale, "x"), "w").close()
        swavg("average", *paths, "-o", self.path("out") + "/")
        self.assertFalse(os.path.exists(stale))

    def test_config_files_are_copied(self):
        """The last input folder's non-weight files, by a plain run and by worker 0 of several alike."""
        srcs = []
        for i in range(2):
            src = self.path("ckpt-%d" % i)
            os.mkdir(src)
            safetensors_ref.write(os.path.join(src, "model.safetensors"), make_state(i, torch.float32),
                                  metadata={"format": "pt"})
            with open(os.path.join(src, "config.json"), "w") as f:
                f.write('{"model_type": "test", "step": %d}\n' % i)
            srcs.append(src)
        src = srcs[-1]
        with open(os.path.join(src, "tokenizer.json"), "w") as f:
            f.write("{}\n")
        torch.save({"state": {}}, os.path.join(src, "optimizer.pt"))  # not averaged: never copied
        os.symlink("config.json", os.path.join(src, "generation_config.json"))
        os.mkdir(os.path.join(src, "sub"))
        out = self.path("out")
        p = swavg("average", *[s + "/" for s in srcs], "-o", out + "/", "--json")
        self.assertEqual(sorted(os.listdir(out)), ["config.json", "generation_config.json", "model.safetensors",
                                                   "tokenizer.json"])
        with open(os.path.join(out, "generation_config.json")) as f:
            self.assertEqual(f.read(), '{"model_type": "test", "step": 1}\n')
        report = json.loads(p.stdout)
        self.assertEqual(report["copied"], ["config.json", "generation_config.json", "tokenizer.json"])
        for name in ("sub", "model.safetensors", "optimizer.pt"):
            self.assertIn(name, report["skipped"])
        par = self.path("par")
        for i in (1, 0):
            swavg("average", *[s + "/" for s in srcs], "-o", par + "/", "--shard", "%d/2" % i)
        swavg("finalize", par + "/")
        self.assertEqual(sorted(os.listdir(par)), sorted(os.listdir(out)))
        for name in os.listdir(out):
            with open(os.path.join(out, name), "rb") as a, open(os.path.join(par, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)


class WorkersTest(ShardedOutputTest):
    ARGS = ["--max-shard-size", "3KB"]  # 6 tensors, 4 shards: {embed}, {block.0.weight}, {big}, {the rest}

    def plain(self, paths, fmt="safetensors"):
        out = self.path("plain")
        swavg("average", *paths, "-o", out + "/", "--format", fmt, *self.ARGS)
        return folder_bytes(out)

    def run_worker(self, paths, out, i, n, env=None, extra=()):
        full = dict(os.environ)
        for k in ["SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_STEP",
                  "SLURM_PROCID", "SLURM_NTASKS", "RANK", "WORLD_SIZE", "JOB_COMPLETION_INDEX"]:
            full.pop(k, None)
        args = [SWAVG, "average", *paths, "-o", out + "/", *self.ARGS, "--json", *extra]
        if env is None:
            args += ["--shard", "%d/%d" % (i, n)]
        else:
            full.update(env)
        return subprocess.run(args, capture_output=True, text=True, env=full, timeout=600)

    @staticmethod
    def env_for(form, i, n):
        if form == "SLURM_ARRAY_TASK_ID":
            return {"SLURM_ARRAY_TASK_ID": str(10 + 2 * i), "SLURM_ARRAY_TASK_MIN": "10",
                    "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": str(n)}, ()
        if form == "SLURM_PROCID":
            return {"SLURM_PROCID": str(i), "SLURM_NTASKS": str(n)}, ()
        if form == "RANK":
            return {"RANK": str(i), "WORLD_SIZE": str(n)}, ()
        return {"JOB_COMPLETION_INDEX": str(i)}, ("--shard-count", str(n))

    def test_workers_in_any_order_give_the_plain_bytes(self):
        paths, _ = self.inputs()
        want = self.plain(paths)
        self.assertEqual(len([f for f in want if f.endswith(".safetensors")]), 4)
        for n, order in [(2, [1, 0]), (3, [2, 0, 1]), (7, list(range(6, -1, -1)))]:
            out = self.path("w%d" % n)
            hashes = set()
            for i in order:
                if i == order[-1]:
                    r = swavg("finalize", out + "/", check=False)
                    self.assert_fails(r, 6, str(i))
                    self.assertFalse(os.path.exists(out))
                p = self.run_worker(paths, out, i, n)
                self.assertEqual(p.returncode, 0, p.stderr)
                report = json.loads(p.stdout)
                self.assertEqual(report["worker"], {"index": i, "count": n, "source": "--shard"})
                hashes.add(report["plan_hash"])
            self.assertEqual(len(hashes), 1)
            self.assertFalse(os.path.exists(out))
            f = swavg("finalize", out + "/", "--json")
            self.assertEqual(json.loads(f.stdout)["plan_hash"], hashes.pop())
            self.assertEqual(folder_bytes(out), want, "n=%d" % n)
            self.assertFalse(os.path.exists(out + ".partial"))

    def test_environment_forms(self):
        paths, _ = self.inputs()
        want = self.plain(paths)
        for form in ENV_FORMS:
            out = self.path(form)
            for i in [2, 0, 1]:
                env, extra = self.env_for(form, i, 3)
                p = self.run_worker(paths, out, i, 3, env=env, extra=extra)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(json.loads(p.stdout)["worker"], {"index": i, "count": 3, "source": form})
            swavg("finalize", out + "/")
            self.assertEqual(folder_bytes(out), want, form)

    def test_concurrent_workers_torch_format(self):
        paths, _ = self.inputs(dtype=torch.bfloat16, fmt="torch")
        want = self.plain(paths, fmt="torch")
        out = self.path("conc")
        procs = [subprocess.Popen([SWAVG, "average", *paths, "-o", out + "/", "--format", "torch", *self.ARGS,
                                   "--shard", "%d/4" % i], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for i in range(4)]
        for p in procs:
            _, err = p.communicate(timeout=600)
            self.assertEqual(p.returncode, 0, err)
        swavg("finalize", out + "/")
        self.assertEqual(folder_bytes(out), want)

    def test_another_plan_is_refused(self):
        paths, _ = self.inputs()
        out = self.path("mix")
        self.assertEqual(self.run_worker(paths, out, 0, 2).returncode, 0)
        p = self.run_worker(paths, out, 1, 3)
        self.assert_fails(p, 4, "another job's plan")
        # The same inputs in another order: the same job in step order, another one as given.
        self.assertEqual(self.run_worker(list(reversed(paths)), out, 1, 2, extra=["--dry-run"]).returncode, 0)
        p = self.run_worker(list(reversed(paths)), out, 1, 2, extra=["--sort", "none"])
        self.assert_fails(p, 4, "another job's plan")

    def test_tampered_and_extra_files(self):
        paths, _ = self.inputs()
        out = self.path("t")
        for i in range(2):
            self.assertEqual(self.run_worker(paths, out, i, 2).returncode, 0)
        shard = os.path.join(out + ".partial", "model-00002-of-00004.safetensors")
        with open(shard, "r+b") as f:
            f.seek(-1, 2)
            last = f.read(1)
            f.seek(-1, 2)
            f.write(bytes([last[0] ^ 1]))
        r = swavg("finalize", out + "/", check=False)
        self.assert_fails(r, 5, "model-00002-of-00004.safetensors", "sha256")
        self.assertFalse(os.path.exists(out))
        with open(shard, "r+b") as f:
            f.seek(-1, 2)
            f.write(last)
        extra = os.path.join(out + ".partial", "stray.txt")
        open(extra, "w").close()
        r = swavg("finalize", out + "/", check=False)
        self.assert_fails(r, 4, "stray.txt")
        os.unlink(extra)
        os.unlink(os.path.join(out + ".partial", "model-00003-of-00004.safetensors"))
        r = swavg("finalize", out + "/", check=False)
        self.assert_fails(r, 5, "model-00003-of-00004.safetensors")
        self.assertFalse(os.path.exists(out))
        r = swavg("finalize", self.path("nothing") + "/", check=False)
        self.assert_fails(r, 6)

    def test_killed_worker_rerun_gives_the_same_bytes(self):
        # Large enough (4 x 32 MiB per input) that the worker is caught mid-write.
        big = collections.OrderedDict(("t%d" % k, torch.randn(8 << 20, generator=torch.Generator().manual_seed(k)))
                                      for k in range(4))
        paths = []
        for i in range(2):
            p = self.path("big_%d.safetensors" % i)
            safetensors_ref.write(p, collections.OrderedDict((k, v + i) for k, v in big.items()))
            paths.append(p)
        args = ["--max-shard-size", "40MB"]
        plain = self.path("plain")
        swavg("average", *paths, "-o", plain + "/", *args)
        want = folder_bytes(plain)
        out = self.path("k")
        partial = out + ".partial"
        proc = subprocess.Popen([SWAVG, "average", *paths, "-o", out + "/", *args, "--shard", "0/2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            if os.path.isdir(partial) and any(".swavg-tmp-" in f for f in os.listdir(partial)):
                break
            time.sleep(0.002)
        killed = proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.assertEqual(subprocess.run([SWAVG, "average", *paths, "-o", out + "/", *args, "--shard", "1/2"],
                                        capture_output=True).returncode, 0)
        if killed:
            r = swavg("finalize", out + "/", check=False)
            self.assert_fails(r, 6, "0")
            self.assertFalse(os.path.exists(out))
        self.assertEqual(subprocess.run([SWAVG, "average", *paths, "-o", out + "/", *args, "--shard", "0/2"],
                                        capture_output=True).returncode, 0)
        swavg("finalize", out + "/")
        self.assertEqual(folder_bytes(out), want)
        self.assertTrue(killed, "the worker finished before it could be killed")


if __name__ == "__main__":
    unittest.main()
