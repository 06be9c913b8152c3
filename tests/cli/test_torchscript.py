"""TorchScript archives through swavg (scripts/fixtures/torchscript_models.py wrote them): inspect,
convert, average and --model read them with swavg's own reader, in `swavg` itself (no hand-over to
swavg-torch, no LibTorch), giving what torch.jit.load gives in Python; and an archive whose code
would run at load time does run under torch.jit.load, but not under swavg.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from common import FIXTURES, SWAVG, fixture, same_bits

import torch

with open(fixture("torchscript/cases.json")) as _f:
    CASES = json.load(_f)
MARKER = "swavg_ts_marker"
# Set, the binary must not hand the job to swavg-torch: a hand-over is an internal error then.
NO_HAND_OVER = dict(os.environ, SWAVG_HANDED_OVER="1")


def run(*args, cwd=None):
    return subprocess.run([SWAVG, *map(str, args)], capture_output=True, text=True, timeout=600, env=NO_HAND_OVER,
                          cwd=cwd)


def load(path):
    return torch.load(path)


class TorchScriptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="swavg-ts-")
        self.addCleanup(self.tmp.cleanup)

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def ok(self, p):
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("swavg-torch", p.stderr)

    def test_inspect_matches_pytorch(self):
        for case in CASES:
            with self.subTest(case=case["name"]):
                p = run("inspect", "--json", fixture(case["archive"]))
                self.ok(p)
                doc = json.loads(p.stdout)
                self.assertEqual(doc["format"], "torchscript")
                with open(fixture(case["reference"])) as f:
                    want = json.load(f)["tensors"]
                got = [(t["name"], t["kind"], t["dtype"], t["shape"]) for t in doc["tensors"]]
                self.assertEqual(got, [(t["name"], t["kind"], t["dtype"], t["shape"]) for t in want])

    def test_convert_gives_the_state_dict(self):
        for name in ("tied", "mixed", "resnet18_traced", "mobilenet_v2_scripted"):
            with self.subTest(case=name):
                case = next(c for c in CASES if c["name"] == name)
                out = self.path(name + ".pt")
                self.ok(run("convert", fixture(case["archive"]), "-o", out))
                want = torch.jit.load(fixture(case["archive"])).state_dict()
                got = load(out)
                self.assertEqual(list(got), list(want))
                for k in want:
                    self.assertTrue(same_bits(got[k], want[k]), k)

    def test_average_of_a_model_with_itself(self):
        case = next(c for c in CASES if c["name"] == "resnet18_scripted")
        out = self.path("avg.pt")
        self.ok(run("average", fixture(case["archive"]), fixture(case["archive"]), "-o", out))
        want = torch.jit.load(fixture(case["archive"])).state_dict()
        got = load(out)
        self.assertEqual(list(got), list(want))
        for k in want:
            self.assertTrue(same_bits(got[k], want[k]), k)

    def test_model_decides_buffers_without_libtorch(self):
        ckpts = [fixture("runs/cnn/ckpt_%d.pt" % i) for i in (0, 1)]
        out = self.path("model.pt")
        p = run("average", *ckpts, "--model", fixture("runs/cnn/net.ts"), "-o", out, "--json")
        self.ok(p)
        self.assertTrue(os.path.exists(out))

    def test_payload_runs_under_torch_jit_load_but_not_swavg(self):
        evil = os.path.abspath(os.path.join(FIXTURES, "hostile", "ts_setstate_marker.pt"))
        with tempfile.TemporaryDirectory() as cwd:
            subprocess.run([sys.executable, "-c", "import sys, torch; torch.jit.load(sys.argv[1])", evil], cwd=cwd,
                           capture_output=True, timeout=300)
            self.assertTrue(os.path.exists(os.path.join(cwd, MARKER)), "the payload is not live")
        for command in (["inspect", evil], ["convert", evil, "-o", "out.pt"]):
            with self.subTest(command=command[0]), tempfile.TemporaryDirectory() as cwd:
                p = run(*command, cwd=cwd)
                self.assertEqual(p.returncode, 3, p.stderr)
                self.assertIn("defines __setstate__", p.stderr)
                self.assertEqual(os.listdir(cwd), [])

    def test_nesting_bound(self):
        self.ok(run("inspect", fixture("torchscript/nested_200.ts")))
        p = run("inspect", fixture("torchscript/nested_201.ts"))
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("nested 201 modules deep; swavg reads at most 200", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
