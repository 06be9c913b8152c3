"""One output rule for every subcommand that writes (issue 29, item 1): the files a run reads (every
input's files as its reader opens them, after symlinks: an index's shards, a DCP folder's .metadata
and rank files; --resume, --rules, --model, --data, --inputs-from) are gathered by one piece of code
(src/cli/read_set.h), and no output, report or module output may be one of them, lie in a folder
read, or, as a folder output, hold one: exit 2, every file read unchanged, whatever --force says.

Each subcommand is run with each output-like option pointed at each file it reads."""
import hashlib
import json
import os
import shutil
import subprocess
import unittest
import warnings

import numpy as np
import torch
from safetensors.torch import save_file

from common import SWAVG, TempDirTest


def run(*args):
    return subprocess.run([SWAVG, *map(os.fsencode, args)], capture_output=True, timeout=600)


def tensors(seed):
    g = torch.Generator().manual_seed(seed)
    return {"a.weight": torch.randn(4, 4, generator=g), "b.weight": torch.randn(4, generator=g)}


def save_sharded(folder, state):
    """A transformers-style sharded folder: one tensor per shard and the index."""
    os.makedirs(folder)
    names = sorted(state)
    weight_map = {}
    for i, name in enumerate(names):
        shard = "model-%05d-of-%05d.safetensors" % (i + 1, len(names))
        save_file({name: state[name]}, os.path.join(folder, shard), metadata={"format": "pt"})
        weight_map[name] = shard
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = os.path.join(folder, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    return index


class OutputRule(TempDirTest):
    def setUp(self):
        super().setUp()
        import torch.distributed.checkpoint as dcp
        self.idx1 = save_sharded(self.path("s1"), tensors(1))
        self.idx2 = save_sharded(self.path("s2"), tensors(2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(tensors(3), checkpoint_id=self.path("d1"))
        # A DCP snapshot whose rank file is a symlink into another folder.
        os.mkdir(self.path("store"))
        rank = self.path("d1/__0_0.distcp")
        self.assertTrue(os.path.isfile(rank))
        shutil.move(rank, self.path("store/blob0"))
        os.symlink(os.path.join("..", "store", "blob0"), rank)
        self.rules = self.path("rules.json")
        with open(self.rules, "w") as f:
            json.dump([{"match": "^b\\.", "action": "latest"}], f)
        self.listed = self.path("inputs.txt")
        with open(self.listed, "w") as f:
            f.write(self.idx2 + "\n")
        self.fold_reads = [self.idx1, self.path("s1/model-00001-of-00002.safetensors"),
                           self.path("s1/model-00002-of-00002.safetensors"), self.path("d1/.metadata"), rank,
                           self.path("store/blob0"), self.idx2, self.path("s2/model-00001-of-00002.safetensors"),
                           self.path("s2/model-00002-of-00002.safetensors"), self.rules, self.listed]

    def digests(self):
        out = {}
        for root, _, files in os.walk(self.tmp):
            for name in files:
                p = os.path.join(root, name)
                with open(p, "rb") as f:
                    out[p] = hashlib.sha256(f.read()).hexdigest()
        return out

    def refused(self, args, what):
        before = self.digests()
        p = run(*args)
        self.assertEqual(p.returncode, 2, "%s: %s\n%s" % (what, args, p.stderr.decode(errors="replace")))
        self.assertRegex(p.stderr, rb"input|--resume|name the same file", p.stderr)
        self.assertEqual(self.digests(), before, "%s: a file changed" % what)

    def fold_args(self, command):
        args = [command, self.idx1, self.path("d1"), "--inputs-from", self.listed, "--rules", self.rules, "--force"]
        return args + (["--decay", "0.5"] if command == "ema" else [])

    def test_average_and_ema(self):
        for command in ("average", "ema"):
            for f in self.fold_reads:
                with self.subTest(command=command, read=f):
                    self.refused(self.fold_args(command) + ["-o", f], "-o")
                    self.refused(self.fold_args(command) + ["-o", self.path("out.safetensors"), "--report", f],
                                 "--report")
            # A report inside a folder read, and the rolling average's resumed file as a report.
            self.refused(self.fold_args(command) + ["-o", self.path("o.pt"), "--report", self.path("d1/r.json")],
                         "--report in d1/")

    def test_resume(self):
        first = self.path("ema0.safetensors")
        p = run("ema", "--decay", "0.5", self.idx1, "-o", first)
        self.assertEqual(p.returncode, 0, p.stderr)
        args = ["ema", "--decay", "0.5", self.idx2, "--resume", first, "--force"]
        self.refused(args + ["-o", self.path("o.safetensors"), "--report", first], "--report at --resume")
        for f in (self.idx2, self.path("s2/model-00002-of-00002.safetensors")):
            self.refused(args + ["-o", f], "-o at an input")
        # The rolling average may replace what it resumed.
        p = run(*args, "-o", first)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_folder_outputs_and_workers(self):
        for shard in ([], ["--shard", "0/2"]):
            base = ["average", self.idx1, self.path("d1"), "--force", *shard]
            for folder in (self.path("s1/"), self.path("store/"), self.path("d1/")):
                with self.subTest(shard=shard, folder=folder):
                    self.refused(base + ["-o", folder], "a folder output holding a file read")
            for f in self.fold_reads[:6]:
                with self.subTest(shard=shard, report=f):
                    self.refused(base + ["-o", self.path("out/"), "--report", f], "a worker's --report")
        self.refused(["convert", self.path("d1"), "-o", self.path("store/"), "--force"], "convert -o DIR/")

    def test_posthoc_ema(self):
        args = ["posthoc-ema", "--sigma-rel", "0.1", "--snapshot-times", "100,200", "--snapshot-sigmas", "0.05",
                self.idx1, self.path("d1"), "--force"]
        reads = self.fold_reads[:6]
        for f in reads:
            with self.subTest(read=f):
                self.refused(args + ["-o", f], "-o")
                self.refused(args + ["-o", self.path("out.safetensors"), "--report", f], "--report")
        # Several outputs: -o a pattern whose second output is (a hard link to) a shard read.
        os.link(self.path("s1/model-00002-of-00002.safetensors"), self.path("0.15"))
        self.refused(["posthoc-ema", "--sigma-rel", "0.1", "--sigma-rel", "0.15", "--snapshot-times", "100,200",
                      "--snapshot-sigmas", "0.05", self.idx1, self.path("d1"), "--force", "-o",
                      self.path("{sigma_rel}")], "a pattern")

    def test_convert(self):
        for source, reads in ((self.idx1, self.fold_reads[:3]), (self.path("d1"), self.fold_reads[3:6])):
            for f in reads:
                with self.subTest(source=source, read=f):
                    self.refused(["convert", source, "-o", f, "--force"], "-o")
        self.refused(["convert", self.path("d1"), "-o", self.path("d1/x.pt")], "-o inside a DCP folder")

    def test_update_bn(self):
        net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
        model = self.path("net.ts")
        torch.jit.script(net).save(model)
        index = save_sharded(self.path("bnck"), {k: v.clone() for k, v in net.state_dict().items()})
        data = self.path("data.npy")
        np.save(data, np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))
        shards = sorted(os.path.join(self.path("bnck"), n) for n in os.listdir(self.path("bnck")) if "-of-" in n)
        reads = [model, data, index, *shards]
        base = ["update-bn", "--model", model, "--data", data, "--checkpoint", index, "--force"]
        for f in reads:
            with self.subTest(read=f):
                self.refused(base + ["-o", f], "-o")
                self.refused(base + ["--save-module", f], "--save-module")
                self.refused(base + ["-o", self.path("bn.pt"), "--report", f], "--report")

    def resumable_folder(self):
        """An average written as a sharded folder (index and shards), to resume from; its files."""
        folder = self.path("avg")
        p = run("average", self.idx1, self.idx2, "-o", folder + "/", "--max-shard-size", "40")
        self.assertEqual(p.returncode, 0, p.stderr)
        names = sorted(os.listdir(folder))
        self.assertIn("model.safetensors.index.json", names)
        self.assertGreaterEqual(len(names), 3)
        return folder, [os.path.join(folder, n) for n in names]

    def test_resumed_folder_files(self):
        """The files of a resumed folder are read: a file output (-o) or a report may not be one of them, with
        a file output or a folder output; only the folder itself may be the output (the rolling average)."""
        folder, files = self.resumable_folder()
        args = ["average", "--resume", folder + "/", self.idx1, "--force"]
        for f in files:
            with self.subTest(read=f):
                self.refused(args + ["-o", f], "-o at a resumed file")
                self.refused(args + ["-o", self.path("o.pt"), "--report", f], "--report at a resumed file")
                self.refused(args + ["-o", self.path("out/"), "--report", f],
                             "--report at a resumed file, with a folder output")

    def test_report_inside_the_output_folder(self):
        """A folder output is written as a whole: --report may not lie in it (nor in a worker's OUT.partial/)."""
        for shard, report in (([], self.path("out/r.json")), (["--shard", "0/2"], self.path("out/r.json")),
                              (["--shard", "0/2"], self.path("out.partial/r.json"))):
            with self.subTest(shard=shard, report=report):
                before = self.digests()
                p = run("average", self.idx1, self.idx2, "-o", self.path("out/"), "--report", report, *shard)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(b"--report %s: inside the output folder" % os.fsencode(report), p.stderr)
                self.assertEqual(self.digests(), before)
                self.assertFalse(os.path.exists(self.path("out")))
                self.assertFalse(os.path.exists(self.path("out.partial/r.json")))

    def test_symlinked_partial(self):
        """A worker's OUT.partial/ that is a symlink (issue 29, item 8): refused, saying what it is, where it
        points and what to do; a dry run refuses it the same; finalize too."""
        os.mkdir(self.path("elsewhere"))
        os.symlink(self.path("elsewhere"), self.path("out.partial"))
        args = ["average", self.idx1, self.idx2, "-o", self.path("out/"), "--shard", "0/2"]
        for extra in ([], ["--dry-run"]):
            p = run(*args, *extra)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(b"a symbolic link (to '%s')" % os.fsencode(self.path("elsewhere")), p.stderr)
            self.assertIn(b"remove the link", p.stderr)
        self.assertEqual(os.listdir(self.path("elsewhere")), [])
        p = run("finalize", self.path("out/"))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(b"a symbolic link", p.stderr)


if __name__ == "__main__":
    unittest.main()
