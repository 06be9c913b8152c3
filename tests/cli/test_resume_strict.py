"""--resume is as strict as one run over all the checkpoints: inputs that have an extra tensor, lack
one, or hold one in another dtype or shape exit as `swavg average` over every checkpoint exits (4,
or 0 with --allow-missing, with the same tensors averaged), for a resumed file and a resumed
sharded folder; a folder whose shards' resume records disagree (n, mode) is exit 3 naming the
shards. The references are the one-shot runs and torch/safetensors' own readers."""
import json
import os
import unittest

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from common import TempDirTest, same_bits, swavg


def state(i, extra=False, missing=False, dtype=torch.float32, shape=(4, 3)):
    g = torch.Generator().manual_seed(100 + i)
    sd = {"fc.weight": torch.randn(*shape, generator=g).to(dtype), "fc.bias": torch.randn(4, generator=g),
          "head.weight": torch.randn(2, 4, generator=g)}
    if extra:
        sd["extra.weight"] = torch.randn(3, generator=g)
    if missing:
        del sd["head.weight"]
    return sd


class ResumeStrictTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.made = 0
        self.first = []
        for i in range(2):
            self.first.append(self.path("ckpt_%d.pt" % i))
            torch.save(state(i), self.first[-1])

    def save(self, name, sd):
        path = self.path(name)
        torch.save(sd, path)
        return path

    def resumed(self, folder):
        """The average of the first two checkpoints: a file, or a folder of several shards."""
        self.made += 1
        if folder:
            out = self.path("avg%d" % self.made) + "/"
            swavg("average", *self.first, "-o", out, "--max-shard-size", "40")
            shards = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
            self.assertGreater(len(shards), 1)
            return out
        out = self.path("avg%d.pt" % self.made)
        swavg("average", *self.first, "-o", out)
        return out

    def run_both(self, new, *flags):
        """(one run over all checkpoints, the resumed run) for the file and the folder average."""
        results = []
        for folder in (False, True):
            resume = self.resumed(folder)
            whole = swavg("average", *flags, *self.first, new, "-o", self.path("whole.pt"), "--force", check=False)
            again = swavg("average", *flags, "--resume", resume, new, "-o", self.path("again.pt"), "--force",
                          check=False)
            results.append((folder, whole, again))
        return results

    def assert_refused_alike(self, new, needle):
        for folder, whole, again in self.run_both(new):
            with self.subTest(folder=folder):
                self.assertEqual(whole.returncode, 4, whole.stderr)
                self.assertEqual(again.returncode, 4, again.stderr)
                self.assertIn(needle, whole.stderr)
                self.assertIn(needle, again.stderr)
                self.assertIn("swavg: error: the inputs disagree", again.stderr)

    def test_an_extra_tensor(self):
        self.assert_refused_alike(self.save("extra.pt", state(2, extra=True)), "tensor 'extra.weight' is missing")

    def test_a_missing_tensor(self):
        self.assert_refused_alike(self.save("missing.pt", state(2, missing=True)), "tensor 'head.weight' is missing")

    def test_another_dtype(self):
        self.assert_refused_alike(self.save("f64.pt", state(2, dtype=torch.float64)),
                                  "tensor 'fc.weight': expected dtype")

    def test_another_shape(self):
        self.assert_refused_alike(self.save("shape.pt", state(2, shape=(3, 4))), "tensor 'fc.weight': expected shape")

    def test_allow_missing_keeps_what_one_run_keeps(self):
        for name, sd in (("extra.pt", state(2, extra=True)), ("missing.pt", state(2, missing=True))):
            new = self.save(name, sd)
            for folder, whole, again in self.run_both(new, "--allow-missing"):
                with self.subTest(name=name, folder=folder):
                    self.assertEqual(whole.returncode, 0, whole.stderr)
                    self.assertEqual(again.returncode, 0, again.stderr)
                    want = torch.load(self.path("whole.pt"), weights_only=True)
                    got = torch.load(self.path("again.pt"), weights_only=True)
                    self.assertEqual(sorted(got), sorted(want))
                    for k in want:
                        self.assertTrue(same_bits(got[k], want[k]), k)

    def test_the_same_inputs_resume_as_before(self):
        new = self.save("ckpt_2.pt", state(2))
        for folder, whole, again in self.run_both(new):
            with self.subTest(folder=folder):
                self.assertEqual(again.returncode, 0, again.stderr)
                want = torch.load(self.path("whole.pt"), weights_only=True)
                got = torch.load(self.path("again.pt"), weights_only=True)
                self.assertEqual(list(got), list(want))
                for k in want:
                    self.assertTrue(same_bits(got[k], want[k]), k)


class ShardRecordsTest(TempDirTest):
    """Every shard of a resumed folder carries the average's resume record; one that differs is exit 3."""

    def setUp(self):
        super().setUp()
        self.inputs = []
        for i in range(2):
            self.inputs.append(self.path("ckpt_%d.pt" % i))
            torch.save(state(i), self.inputs[-1])
        self.folder = self.path("avg")
        swavg("average", *self.inputs, "-o", self.folder + "/", "--max-shard-size", "40")
        self.shards = sorted(f for f in os.listdir(self.folder) if f.endswith(".safetensors"))
        self.assertGreaterEqual(len(self.shards), 3)
        self.new = self.path("ckpt_2.pt")
        torch.save(state(2), self.new)

    def rewrite(self, shard, change):
        path = os.path.join(self.folder, shard)
        with safe_open(path, "pt") as f:
            metadata = dict(f.metadata())
        tensors = load_file(path)
        record = json.loads(metadata["swavg"])
        change(record)
        metadata["swavg"] = json.dumps(record)
        save_file(tensors, path, metadata=metadata)

    def resume(self, mode="average"):
        args = [mode, "--decay", "0.9"] if mode == "ema" else [mode]
        out = self.path("out.pt")
        p = swavg(*args, "--resume", self.folder + "/", self.new, "-o", out, check=False)
        self.assertFalse(os.path.exists(out))
        return p

    def test_shards_that_agree_resume(self):
        p = swavg("average", "--resume", self.folder + "/", self.new, "-o", self.path("out.pt"), check=False)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_n_differs(self):
        self.rewrite(self.shards[1], lambda r: r.update(n=5))
        p = self.resume()
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("its shards carry different resume records", p.stderr)
        self.assertIn(os.path.join(self.folder, self.shards[1]) + ": n 5 (the others: 2)", p.stderr)
        self.assertNotIn(os.path.join(self.folder, self.shards[2]) + ":", p.stderr)

    def test_mode_differs(self):
        self.rewrite(self.shards[-1], lambda r: r.update(mode="ema", decay=0.9, warmup="none"))
        for mode in ("average", "ema"):
            p = self.resume(mode)
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertIn(os.path.join(self.folder, self.shards[-1]) + ": mode ema (the others: swa)", p.stderr)

    def test_a_shard_without_a_record(self):
        path = os.path.join(self.folder, self.shards[2])
        tensors = load_file(path)
        save_file(tensors, path, metadata={"format": "pt"})
        p = self.resume()
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn(path + ": has no resume record", p.stderr)

    def test_other_input_paths_are_one_average(self):
        """Workers on other machines see the inputs under other paths: the same average."""
        self.rewrite(self.shards[1], lambda r: r.update(inputs=["/elsewhere/a.pt", "/elsewhere/b.pt"]))
        p = swavg("average", "--resume", self.folder + "/", self.new, "-o", self.path("out.pt"), check=False)
        self.assertEqual(p.returncode, 0, p.stderr)


if __name__ == "__main__":
    unittest.main()
