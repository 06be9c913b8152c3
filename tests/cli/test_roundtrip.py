"""Python -> swavg -> Python: bit-exact, loads with weights_only=True, storages stay shared; and
the output rules: atomic, --force, never over an input."""
import collections
import os
import unittest

import torch

from common import TempDirTest, fixture, same_bits, swavg
from reference import load_safetensors


def load_weights_only(path):
    return torch.load(path, weights_only=True)


class RoundTripTest(TempDirTest):
    def check_same(self, got, want):
        self.assertIsInstance(got, collections.OrderedDict)
        self.assertEqual(list(got.keys()), list(want.keys()))
        for k in want:
            with self.subTest(tensor=k):
                self.assertTrue(same_bits(got[k], want[k]), k)
                self.assertEqual(got[k].stride(), want[k].stride())

    def test_torch_roundtrip(self):
        cases = [("resnet18.pt", [], lambda o: o), ("dtypes.pt", [], lambda o: o),
                 ("training.pt", ["--key", "model"], lambda o: o["model"]),
                 ("crafted/archive_v2.pt", [], lambda o: o)]
        for name, args, pick in cases:
            with self.subTest(name=name):
                out = self.path(os.path.basename(name) + ".out.pt")
                swavg("convert", fixture(name), *args, "-o", out)
                self.check_same(load_weights_only(out), pick(torch.load(fixture(name), weights_only=False)))

    def test_shared_storages_stay_shared(self):
        out = self.path("dtypes.pt")
        swavg("convert", fixture("dtypes.pt"), "-o", out)
        sd = load_weights_only(out)
        self.assertEqual(sd["tied.a"].data_ptr(), sd["tied.b"].data_ptr())
        self.assertEqual(sd["transposed"].storage().data_ptr(), sd["row_view"].storage().data_ptr())

    def test_torchscript_to_state_dict(self):
        out = self.path("scripted.pt")
        swavg("convert", fixture("scripted.ts"), "-o", out)
        want = torch.jit.load(fixture("scripted.ts")).state_dict()
        got = load_weights_only(out)
        self.assertEqual(set(got), set(want))
        for k in want:
            self.assertTrue(same_bits(got[k], want[k]), k)

    def test_safetensors_roundtrip(self):
        want = torch.load(fixture("resnet18.pt"), weights_only=False)
        st = self.path("resnet18.safetensors")
        swavg("convert", fixture("resnet18.pt"), "-o", st)
        got, _ = load_safetensors(st)
        self.assertEqual(list(got), list(want))
        for k in want:
            self.assertTrue(same_bits(got[k], want[k]), k)
        back = self.path("back.pt")
        swavg("convert", st, "-o", back)
        self.check_same(load_weights_only(back), want)

    def test_non_contiguous_to_safetensors(self):
        st = self.path("dtypes.safetensors")
        p = swavg("convert", fixture("dtypes.pt"), "-o", st, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)  # complex tensors do not fit safetensors
        self.assertIn("complex", p.stderr)
        self.assertFalse(os.path.exists(st))
        src = collections.OrderedDict((k, v) for k, v in torch.load(fixture("dtypes.pt"), weights_only=False).items()
                                      if not v.is_complex())
        src_path = self.path("real_only.pt")
        torch.save(src, src_path)
        swavg("convert", src_path, "-o", st)
        got, _ = load_safetensors(st)
        for k in src:
            self.assertTrue(same_bits(got[k], src[k]), k)


class OutputRulesTest(TempDirTest):
    def test_existing_output_needs_force(self):
        out = self.path("out.pt")
        open(out, "w").write("keep me")
        p = swavg("convert", fixture("dtypes.pt"), "-o", out, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--force", p.stderr)
        self.assertEqual(open(out).read(), "keep me")
        swavg("convert", fixture("dtypes.pt"), "-o", out, "--force")
        self.assertIn("f32", load_weights_only(out))

    def test_output_is_never_an_input(self):
        src = self.path("in.pt")
        torch.save({"w": torch.ones(3)}, src)
        before = open(src, "rb").read()
        os.symlink(src, self.path("link.pt"))
        os.link(src, self.path("hard.pt"))
        for out in [src, self.path("link.pt"), self.path("hard.pt")]:
            with self.subTest(out=out):
                p = swavg("convert", src, "-o", out, "--force", check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("is the input", p.stderr)
        self.assertEqual(open(src, "rb").read(), before)

    def test_failed_run_leaves_nothing(self):
        out = self.path("out.pt")
        p = swavg("convert", fixture("crafted/storage_short.pt"), "-o", out, check=False)
        self.assertEqual(p.returncode, 3)
        self.assertEqual(os.listdir(self.tmp), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
