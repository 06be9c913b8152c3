"""swavg average --update-bn against AveragedModel followed by update_bn, in one run."""
import json
import os
import unittest

import torch

from common import TempDirTest, fixture, same_bits, swavg


def run_dir(name):
    return fixture(os.path.join("bn_pipeline", name))


class AverageThenUpdateBnTest(TempDirTest):
    def inputs(self):
        return [run_dir("ckpt_%d.pt" % i) for i in range(3)]

    def test_matches_averaged_model_then_update_bn(self):
        out = self.path("swa_bn.pt")
        p = swavg("average", *self.inputs(), "--update-bn", "--model", fixture("bn/cnn_scripted.ts"),
                  "--data", fixture("bn/data.npy"), "--batch-size", "16", "-o", out, "--json")
        report = json.loads(p.stdout)
        self.assertEqual(report["n"], 3)
        self.assertEqual(report["update_bn"]["batches"], 4)
        got = torch.load(out, weights_only=True)
        want = torch.load(run_dir("expected_bs16.pt"), weights_only=False)
        self.assertEqual(list(got), list(want))
        for k, v in want.items():
            with self.subTest(tensor=k):
                if "running" in k or "num_batches" in k:
                    if v.is_floating_point():
                        self.assertTrue(torch.allclose(got[k], v, rtol=1e-5, atol=1e-6), k)
                    else:
                        self.assertTrue(torch.equal(got[k], v), k)
                else:
                    self.assertTrue(same_bits(got[k], v), k)
        self.assertEqual([f for f in os.listdir(self.tmp)], ["swa_bn.pt"])

    def test_resume_metadata_survives(self):
        out = self.path("swa_bn.pt")
        swavg("average", *self.inputs()[:2], "--update-bn", "--model", fixture("bn/cnn_scripted.ts"),
              "--data", fixture("bn/data.npy"), "-o", out)
        p = swavg("average", "--resume", out, self.inputs()[2], "-o", self.path("more.pt"), "--json")
        self.assertEqual(json.loads(p.stdout)["n"], 3)

    def test_errors_leave_nothing(self):
        cases = [
            (["--update-bn", "--data", fixture("bn/data.npy")], 2, "--model"),
            (["--update-bn", "--model", fixture("bn/cnn_scripted.ts")], 2, "--data"),
            (["--data", fixture("bn/data.npy")], 2, "--update-bn"),
            (["--update-bn", "--model", fixture("bn/cnn_scripted.ts"), "--data", fixture("bn/data_bad_channels.npy")],
             4, "data_bad_channels.npy"),
            (["--update-bn", "--model", fixture("bn/cnn_scripted.ts"), "--data", fixture("bn/missing.npy")],
             5, "missing.npy"),
        ]
        for args, code, message in cases:
            with self.subTest(args=args):
                p = swavg("average", *self.inputs(), *args, "-o", self.path("out.pt"), check=False)
                self.assertEqual(p.returncode, code, p.stderr)
                self.assertIn(message, p.stderr)
                self.assertEqual(os.listdir(self.tmp), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
