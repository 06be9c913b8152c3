"""swavg update-bn --model PROGRAM.pt2 (a torch.export program, saved after run_decompositions) gives
the state torch.optim.swa_utils.update_bn computes on the eager model, bit for bit on CPU (the fixtures
in export/, scripts/fixtures/export_programs.py, which checks each against a Python replay of the
saved graph); binds a checkpoint as load_state_dict(strict=True) does, BatchNorm statistics excepted;
refuses the programs it must not run; inspect lists a program's weights. The hostile .pt2 files are
cases of test_hostile.py (scripts/fixtures/hostile_pt2.py).

SWAVG_TEST_CUDA=1 (with CUDA here): every case again with --device cuda, against update_bn on CUDA."""
import collections
import json
import logging
import os
import re
import subprocess
import sys
import unittest

import numpy as np
import torch

from common import SWAVG, TempDirTest, fixture, same_bits, swavg

EXPORT = fixture("export")
STATS = ("running_mean", "running_var", "num_batches_tracked")
CUDA = os.environ.get("SWAVG_TEST_CUDA") == "1" and torch.cuda.is_available()
DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
          torch.int64: "int64", torch.int32: "int32", torch.uint8: "uint8", torch.bool: "bool"}
# torch.export.load warns about every symbol the decomposed graph no longer uses
logging.getLogger("torch._export.serde.serialize").setLevel(logging.ERROR)


def ex(name):
    return os.path.join(EXPORT, name)


def load(path):
    return torch.load(path, weights_only=False)


def cases():
    with open(ex("cases.json")) as f:
        return json.load(f)


def setUpModule():
    # update_bn's bits depend on the intra-op thread count (the order CPU kernels sum in): swavg runs on
    # as many threads as the expected states were computed on
    if os.path.exists(ex("cases.json")):
        (threads,) = {c["threads"] for c in cases().values()}
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)


def program_state(model):
    return collections.OrderedDict(torch.export.load(ex(model)).state_dict)


class ExportRun(TempDirTest):
    def run_bn(self, model, data, *args, checkpoint=None, batch_size=16, check=True):
        """Runs update-bn into a folder of its own; returns the process, the output and that folder."""
        folder = self.path("out")
        os.makedirs(folder, exist_ok=True)
        out = os.path.join(folder, "out.pt")
        cmd = ["update-bn", "--model", ex(model), "--data", ex(data), "--batch-size", batch_size, "-o", out, "--force"]
        if checkpoint:
            cmd += ["--checkpoint", checkpoint if os.path.isabs(checkpoint) else ex(checkpoint)]
        return swavg(*cmd, *args, check=check), out, folder

    def run_case(self, c, *args):
        extra = list(args) + (["--drop-last"] if c["drop_last"] else [])
        extra += ["--max-batches", c["max_batches"]] if c["max_batches"] else []
        _, out, _ = self.run_bn(c["model"], c["data"], *extra, checkpoint=c["weights"], batch_size=c["batch_size"])
        return load(out)


def libtorch_major():
    """The major version of the LibTorch swavg runs (swavg --version)."""
    out = subprocess.run([SWAVG, "--version"], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"LibTorch (\d+)\.", out).group(1))


LIBTORCH_2 = libtorch_major() >= 2


@unittest.skipUnless(os.path.exists(ex("cases.json")), "no export/ fixtures (written where torch has torch.export)")
@unittest.skipIf(LIBTORCH_2, "the LibTorch swavg runs has the operators of torch.export's core ATen")
class LeanBuildTest(ExportRun):
    """The lean build (Debian's LibTorch 1.13) predates the operators torch 2.x exports: refused by name."""

    def test_refused_naming_the_libtorch(self):
        p, out, _ = self.run_bn("small.pt2", "small_data.npy", check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("has no such operator (torch.export programs need the LibTorch of a torch 2.x", p.stderr)
        self.assertFalse(os.path.exists(out))


@unittest.skipUnless(os.path.exists(ex("cases.json")), "no export/ fixtures (written where torch has torch.export)")
@unittest.skipUnless(LIBTORCH_2, "LibTorch 1.13 (the lean build) has no _native_batch_norm_legit_functional")
class UpdateBnExportTest(ExportRun):
    def assert_state(self, found, want, prefix=""):
        """Names and order as want's, every tensor bit for bit."""
        self.assertEqual(list(found), [prefix + k for k in want])
        for k, w in want.items():
            with self.subTest(tensor=k):
                f = found[prefix + k]
                self.assertEqual((f.dtype, f.shape), (w.dtype, w.shape))
                self.assertTrue(torch.equal(f, w) and same_bits(f, w), "%s: %s != %s" % (k, f, w))

    def test_every_case(self):
        for name, c in cases().items():
            with self.subTest(case=name):
                want = load(ex(c["expected"]))
                # the fixture's order is the contract's: the checkpoint's, or the program's ep.state_dict
                source = load(ex(c["weights"])) if c["weights"] else program_state(c["model"])
                self.assertEqual(list(want), list(source))
                self.assert_state(self.run_case(c), want)

    def test_batching(self):
        every = cases()
        full = load(ex(every["small_bs16"]["expected"]))
        for name, batches in [("small_bs16_drop", 3), ("small_bs8_max3", 3)]:
            with self.subTest(case=name):
                want = load(ex(every[name]["expected"]))
                self.assertEqual(want["bn.num_batches_tracked"].item(), batches)
                self.assertFalse(torch.equal(want["bn.running_mean"], full["bn.running_mean"]))
                self.assert_state(self.run_case(every[name]), want)

    def test_batchnorm_called_twice_per_forward(self):
        found = self.run_case(cases()["shared_bn_bs16"])
        self.assertEqual(found["bn.num_batches_tracked"].item(), 8)  # 4 batches, 2 calls each

    def test_batchnorm_never_reached(self):
        # the checkpoint's stale statistics are reset, as update_bn resets every BatchNorm
        weights = load(ex("unreached_weights.pt"))
        self.assertEqual(weights["spare.num_batches_tracked"].item(), 17)
        found = self.run_case(cases()["unreached_bs16"])
        self.assertTrue(torch.equal(found["spare.running_mean"], torch.zeros(4)))
        self.assertTrue(torch.equal(found["spare.running_var"], torch.ones(4)))
        self.assertEqual(found["spare.num_batches_tracked"].item(), 0)
        self.assertTrue(same_bits(found["spare.weight"], weights["spare.weight"]))

    def test_averaged_model_layout(self):
        swa = load(ex("small_weights_swa.pt"))
        _, out, _ = self.run_bn("small.pt2", "small_data.npy", checkpoint="small_weights_swa.pt")
        found = load(out)
        # n_averaged is kept (after the module's tensors, as for a TorchScript model)
        self.assertTrue(same_bits(found.pop("n_averaged"), swa["n_averaged"]))
        self.assert_state(found, load(ex("expected_small_bs16.pt")), prefix="module.")

    def test_in_the_averaging_run(self):
        # average --update-bn --model PROGRAM: the fold's result through the same replay, in one run
        first = load(ex("small_weights.pt"))
        second = collections.OrderedDict((k, v + 0.25 if v.is_floating_point() else v) for k, v in first.items())
        a, b = self.path("a.pt"), self.path("b.pt")
        torch.save(first, a)
        torch.save(second, b)
        one_run = self.path("one_run.pt")
        swavg("average", a, b, "--update-bn", "--model", ex("small.pt2"), "--data", ex("small_data.npy"),
              "--batch-size", 16, "-o", one_run)
        averaged = self.path("averaged.pt")
        swavg("average", a, b, "-o", averaged)
        _, two_steps, _ = self.run_bn("small.pt2", "small_data.npy", checkpoint=averaged)
        found, want = load(one_run), load(two_steps)
        self.assertEqual(list(found), list(want))
        for k in want:
            with self.subTest(tensor=k):
                self.assertTrue(same_bits(found[k], want[k]), k)
        self.assertFalse(torch.equal(found["bn.running_mean"], load(averaged)["bn.running_mean"]))

    def test_batch_dimension_range_at_its_edges(self):
        # Dim("batch", min=2, max=16) and 50 samples: --batch-size 16 (first batch 16, last 2) runs;
        # 17 (first batch one past max) and 7 (last batch 1, one below min) are refused, exit 4.
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
        from fixtures.export_programs import SmallCnn
        torch.manual_seed(90)
        model = SmallCnn().train()
        ep = torch.export.export(model, (torch.randn(4, 3, 8, 8),),
                                 dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=16)},))
        program = self.path("ranged.pt2")
        torch.export.save(ep.run_decompositions(), program)

        def run(batch_size):
            out = self.path("ranged_%d.pt" % batch_size)
            p = swavg("update-bn", "--model", program, "--data", ex("small_data.npy"), "--batch-size", batch_size,
                      "-o", out, check=False)
            return p, out

        p, out = run(16)
        self.assertEqual(p.returncode, 0, p.stderr)
        for batch_size, what, size in ((17, "the batch (--batch-size)", 17), (7, "the last batch", 1)):
            p, out = run(batch_size)
            self.assertEqual(p.returncode, 4, p.stderr)
            self.assertIn("%s is %d, outside" % (what, size), p.stderr)
            self.assertIn("range 2..16", p.stderr)
            self.assertFalse(os.path.exists(out))

    def test_output_named_like_a_program(self):
        # swavg writes weights, never a program: a .pt2 output name is refused unless --format says so
        out = self.path("net_bn.pt2")
        args = ["update-bn", "--model", ex("small.pt2"), "--data", ex("small_data.npy"), "--batch-size", 16, "-o", out]
        p = swavg(*args, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("a .pt2 name is a torch.export program's, which swavg does not write", p.stderr)
        self.assertFalse(os.path.exists(out))
        swavg(*args, "--format", "torch")
        self.assertEqual(list(load(out)), list(program_state("small.pt2")))

    def test_checkpoint_without_batchnorm_statistics(self):
        weights = load(ex("small_weights.pt"))
        ckpt = self.path("no_stats.pt")
        torch.save(collections.OrderedDict((k, v) for k, v in weights.items() if k.rsplit(".", 1)[-1] not in STATS),
                   ckpt)
        _, out, _ = self.run_bn("small.pt2", "small_data.npy", checkpoint=ckpt)
        found, want = load(out), load(ex("expected_small_bs16.pt"))
        self.assertEqual(set(found), set(want))
        kept = [k for k in found if k.rsplit(".", 1)[-1] not in STATS]
        self.assertEqual(kept, [k for k in weights if k.rsplit(".", 1)[-1] not in STATS])
        for k in want:
            with self.subTest(tensor=k):
                self.assertTrue(same_bits(found[k], want[k]), k)

    def mismatch(self, change, tensor):
        weights = load(ex("small_weights.pt"))
        change(weights)
        ckpt = self.path("changed.pt")
        torch.save(weights, ckpt)
        p, out, folder = self.run_bn("small.pt2", "small_data.npy", checkpoint=ckpt, check=False)
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertRegex(p.stderr, r"(?m)^swavg: error:")
        self.assertIn("'%s'" % tensor, p.stderr)
        self.assertEqual(os.listdir(folder), [])

    def test_checkpoint_missing_parameter(self):
        self.mismatch(lambda w: w.pop("fc.weight"), "fc.weight")

    def test_checkpoint_extra_tensor(self):
        self.mismatch(lambda w: w.__setitem__("extra.weight", torch.ones(3)), "extra.weight")

    def test_checkpoint_shape_differs(self):
        self.mismatch(lambda w: w.__setitem__("fc.weight", torch.zeros(10, 9)), "fc.weight")

    def refused(self, model, message, code=3):
        p, out, folder = self.run_bn(model, "small_data.npy", checkpoint="small_weights.pt", check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        errors = "\n".join(line for line in p.stderr.splitlines() if line.startswith("swavg: error:"))
        self.assertTrue(errors, p.stderr)
        self.assertIn(message, errors)
        self.assertEqual(os.listdir(folder), [])
        return errors

    def test_training_ir_refused(self):
        self.refused("training_ir.pt2", "run_decompositions")

    def test_eval_mode_refused(self):
        self.refused("eval_mode.pt2", "train mode")

    def test_static_batch_refused(self):
        # exported at batch 4 without a dynamic dimension: exit 4 (the data do not fit the model, as in
        # test_update_bn), the message names the batch dimension
        err = self.refused("static_shape.pt2", "16", code=4)
        self.assertIn("batch", err.lower().replace(ex("").lower(), ""))

    def test_inspect(self):
        for model in sorted({c["model"] for c in cases().values()}):
            with self.subTest(model=model):
                report = json.loads(swavg("inspect", "--json", ex(model)).stdout)
                self.assertEqual(report["format"], "export")
                self.assertTrue(swavg("inspect", ex(model)).stdout.startswith("%s: export" % ex(model)))
                ep = torch.export.load(ex(model))
                want = [(k, DTYPES[v.dtype], list(v.shape)) for k, v in ep.state_dict.items()]
                self.assertEqual([(t["name"], t["dtype"], t["shape"]) for t in report["tensors"]], want)
                params = set(ep.graph_signature.parameters)
                for t in report["tensors"]:
                    if "kind" in t:
                        self.assertEqual(t["kind"], "parameter" if t["name"] in params else "buffer", t["name"])


def cuda_reference(model, weights, data, c):
    """update_bn on the eager model on CUDA, with swavg's batching."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
    from fixtures.export_programs import batches_of, factories
    from torch.optim.swa_utils import update_bn
    net = factories()[model[:-len(".pt2")]]().cuda()
    net.load_state_dict(weights)
    net.eval()
    update_bn([b.cuda() for b in batches_of(data, c["batch_size"], c["drop_last"], c["max_batches"])], net)
    state = net.state_dict()
    return collections.OrderedDict((k, state[k].cpu()) for k in weights)


@unittest.skipUnless(CUDA and os.path.exists(ex("cases.json")), "SWAVG_TEST_CUDA=1 and CUDA wanted")
class UpdateBnExportCudaTest(ExportRun):
    def test_every_case_on_cuda(self):
        for name, c in cases().items():
            with self.subTest(case=name):
                weights = load(ex(c["weights"])) if c["weights"] else program_state(c["model"])
                data = torch.from_numpy(np.load(ex(c["data"])))
                want = cuda_reference(c["model"], weights, data, c)
                found = self.run_case(c, "--device", "cuda")
                self.assertEqual(list(found), list(want))
                for k, w in want.items():
                    f = found[k]
                    self.assertEqual((f.dtype, f.shape), (w.dtype, w.shape), k)
                    if w.is_floating_point():
                        torch.testing.assert_close(f, w, rtol=1e-5, atol=1e-6, msg=k)
                    else:
                        self.assertTrue(torch.equal(f, w), k)


if __name__ == "__main__":
    unittest.main()
