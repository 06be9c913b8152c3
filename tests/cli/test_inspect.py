"""swavg inspect agrees with PyTorch on every name, dtype and shape; CLI basics and exit codes."""
import json
import unittest

import torch

from common import SWAVG, fixture, swavg

DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
          torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
          torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
          torch.complex64: "complex64", torch.complex128: "complex128"}


def inspect_json(*args):
    return json.loads(swavg("inspect", "--json", *args).stdout)


class InspectTest(unittest.TestCase):
    def assert_matches(self, report, state):
        expected = [(k, DTYPES[v.dtype], list(v.shape), v.numel() * v.element_size())
                    for k, v in state.items() if isinstance(v, torch.Tensor)]
        found = [(t["name"], t["dtype"], t["shape"], t["bytes"]) for t in report["tensors"]]
        self.assertEqual(found, expected)
        self.assertEqual(report["totals"]["tensors"], len(expected))
        self.assertEqual(report["totals"]["bytes"], sum(e[3] for e in expected))

    def test_state_dicts(self):
        for name in ["resnet18.pt", "dtypes.pt", "crafted/archive_v2.pt"]:
            with self.subTest(name=name):
                report = inspect_json(fixture(name))
                self.assertEqual(report["format"], "torch")
                self.assertEqual(report["key"], "")
                self.assert_matches(report, torch.load(fixture(name), weights_only=False))

    def test_training_checkpoint(self):
        report = inspect_json(fixture("training.pt"))
        ckpt = torch.load(fixture("training.pt"), weights_only=False)
        self.assertEqual(report["key"], "model")
        self.assert_matches(report, ckpt["model"])
        opaque = {o["path"]: o["type"] for o in report["opaque"]}
        self.assertEqual(opaque.get("args"), "argparse.Namespace")
        self.assertTrue(opaque.get("best", "").startswith("numpy"), opaque)
        text = swavg("inspect", fixture("training.pt"))
        self.assertIn("took the state dict at 'model'", text.stderr)
        self.assertIn("argparse.Namespace", text.stdout)

    def test_key_option(self):
        report = inspect_json(fixture("training.pt"), "--key", "model")
        self.assert_matches(report, torch.load(fixture("training.pt"), weights_only=False)["model"])

    def test_torchscript(self):
        report = inspect_json(fixture("scripted.ts"))
        self.assertEqual(report["format"], "torchscript")
        m = torch.jit.load(fixture("scripted.ts"))
        self.assert_matches(report, m.state_dict())
        params = {n for n, _ in m.named_parameters()}
        for t in report["tensors"]:
            self.assertEqual(t["kind"], "parameter" if t["name"] in params else "buffer", t["name"])

    def test_strip_prefix(self):
        report = inspect_json(fixture("prefixed.pt"), "--strip-prefix", "module.", "--strip-prefix", "_orig_mod.")
        state = torch.load(fixture("prefixed.pt"), weights_only=False)
        self.assertEqual([t["name"] for t in report["tensors"]],
                         [k[len("module._orig_mod."):] for k in state])


class CliBasicsTest(unittest.TestCase):
    def test_help_and_version(self):
        self.assertIn("inspect", swavg("--help").stdout)
        self.assertIn("LibTorch", swavg("--version").stdout)
        for cmd in ["inspect", "convert"]:
            self.assertIn("Examples", swavg(cmd, "--help").stdout)

    def test_exit_codes(self):
        cases = [
            (["inspect", fixture("missing.pt")], 5, "missing.pt"),
            (["inspect", fixture("crafted/storage_short.pt")], 3, "storage_short.pt"),
            (["inspect", fixture("legacy.pt")], 3, "legacy torch.save format"),
            (["inspect", fixture("training.pt"), "--key", "nope"], 2, "no entry 'nope'"),
            (["inspect"], 2, "input"),
            (["frobnicate"], 2, ""),
        ]
        for args, code, message in cases:
            with self.subTest(args=args):
                p = swavg(*args, check=False)
                self.assertEqual(p.returncode, code, p.stderr)
                self.assertIn(message, p.stderr)
                self.assertEqual(p.stdout, "")

    def test_quiet(self):
        p = swavg("-q", "inspect", fixture("training.pt"))
        self.assertEqual(p.stderr, "")
        p = swavg("inspect", fixture("training.pt"), "-q")
        self.assertEqual(p.stderr, "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
