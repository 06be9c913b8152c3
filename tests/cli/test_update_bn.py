"""swavg update-bn gives the BatchNorm buffers torch.optim.swa_utils.update_bn computes (the
fixtures in bn/ hold update_bn's results on the eager models with the same weights and batches),
for every data format, scripted and traced models, both checkpoint layouts; and its errors."""
import json
import os
import unittest

import torch

from common import TempDirTest, fixture, same_bits, swavg
from reference import load_safetensors

STATS = ("running_mean", "running_var", "num_batches_tracked")


def bn(name):
    return fixture(os.path.join("bn", name))


def expected(case):
    return torch.load(bn("expected_%s.pt" % case), weights_only=False)


class UpdateBnTest(TempDirTest):
    def run_bn(self, *args, model="cnn_scripted.ts", data="data.npy", checkpoint="weights.pt", batch_size=16,
               output="out.pt", check=True):
        cmd = ["update-bn", "--model", bn(model), "--data", bn(data), "--batch-size", batch_size]
        if checkpoint:
            cmd += ["--checkpoint", checkpoint if os.path.isabs(checkpoint) else bn(checkpoint)]
        out = self.path(output)
        return swavg(*cmd, "-o", out, "--force", *args, check=check), out

    def assert_state(self, found, want, prefix=""):
        self.assertEqual(list(found), [prefix + k for k in want])
        for k, w in want.items():
            f = found[prefix + k]
            with self.subTest(tensor=k):
                self.assertEqual((f.dtype, f.shape), (w.dtype, w.shape))
                if k.rsplit(".", 1)[-1] in STATS and w.is_floating_point():
                    torch.testing.assert_close(f, w, rtol=1e-5, atol=1e-6)
                else:
                    self.assertTrue(same_bits(f, w), "%s: %s != %s" % (k, f, w))

    def test_every_data_format(self):
        variants = [
            ("data.npy",),
            ("data_fortran.npy",),
            ("data_tensor.pt",),
            ("data_strided.pt",),
            ("data_list.pt",),
            ("data_dict.pt", "--data-key", "batch.images"),
            ("data.safetensors", "--data-key", "images"),
            ("data_single.safetensors",),
            ("data.bin", "--shape", "3,8,8", "--dtype", "float32"),
            ("data.bin", "--shape", "3,8,8"),
        ]
        want = expected("cnn_bs16")
        for data, *args in variants:
            with self.subTest(data=data, args=args):
                _, out = self.run_bn(*args, data=data)
                self.assert_state(torch.load(out, weights_only=False), want)

    def test_batching(self):
        _, out = self.run_bn("--drop-last")
        self.assert_state(torch.load(out, weights_only=False), expected("cnn_bs16_drop"))
        _, out = self.run_bn("--max-batches", "3", batch_size=8)
        self.assert_state(torch.load(out, weights_only=False), expected("cnn_bs8_max3"))

    def test_model_weights_without_checkpoint(self):
        _, out = self.run_bn(checkpoint=None)
        self.assert_state(torch.load(out, weights_only=False), expected("cnn_own_bs16"))

    def test_dtype_conversion(self):
        _, out = self.run_bn(data="data_f64.npy")
        self.assert_state(torch.load(out, weights_only=False), expected("cnn_f64_bs16"))
        _, out = self.run_bn("--shape", "3,8,8", "--dtype", "uint8", "--input-dtype", "float32", data="data_u8.bin")
        self.assert_state(torch.load(out, weights_only=False), expected("cnn_u8_bs16"))

    def test_traced_model(self):
        _, out = self.run_bn(model="cnn_traced.ts", checkpoint="traced_weights.pt")
        self.assert_state(torch.load(out, weights_only=False), expected("traced_bs16"))

    def test_batchnorm_called_twice_per_forward(self):
        _, out = self.run_bn(model="shared_bn.ts", checkpoint=None)
        found, want = torch.load(out, weights_only=False), expected("shared_bs16")
        self.assertEqual(want["bn.num_batches_tracked"].item(), 8)
        self.assert_state(found, want)

    def test_averaged_model_layout(self):
        _, out = self.run_bn(checkpoint="weights_swa.pt")
        found = torch.load(out, weights_only=False)
        n_averaged = found.pop("n_averaged")
        self.assertTrue(same_bits(n_averaged, torch.load(bn("weights_swa.pt"), weights_only=False)["n_averaged"]))
        self.assert_state(found, expected("cnn_bs16"), prefix="module.")

    def test_safetensors_output(self):
        _, out = self.run_bn(output="out.safetensors")
        found, metadata = load_safetensors(out)
        self.assert_state(found, expected("cnn_bs16"))
        report = json.loads(metadata["swavg_update_bn"])
        self.assertEqual(report["batches"], 4)

    def test_non_tensor_entries_are_carried(self):
        # The checkpoint's non-tensor entries come out as they went in (torch.save output), are refused
        # by name for safetensors before the replay, and are left out with --drop-objects.
        weights = torch.load(bn("weights.pt"), weights_only=False)
        weights["_extra_state"] = {"fp8_meta": b"\x00\x01", "step": 7}
        weights["epoch"] = 3
        ckpt = self.path("with_entries.pt")
        torch.save(weights, ckpt)
        p, out = self.run_bn("--json", checkpoint=ckpt)
        # bytes are pickled through _codecs.encode at protocol 2, as torch.save writes them, which
        # 1.13's weights_only loader refuses for torch.save's own files too.
        found = torch.load(out, weights_only=False)
        self.assertEqual(found["_extra_state"], {"fp8_meta": b"\x00\x01", "step": 7})
        self.assertEqual(found["epoch"], 3)
        self.assert_state({k: v for k, v in found.items() if isinstance(v, torch.Tensor)}, expected("cnn_bs16"))
        self.assertEqual([e["name"] for e in json.loads(p.stdout)["carried"]], ["_extra_state", "epoch"])
        p, _ = self.run_bn(checkpoint=ckpt, output="out.safetensors", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("'_extra_state (dict)'", p.stderr)
        self.assertFalse(os.path.exists(self.path("out.safetensors")))
        _, out = self.run_bn("--drop-objects", checkpoint=ckpt, output="out.safetensors")
        found, _ = load_safetensors(out)
        self.assert_state(found, expected("cnn_bs16"))

    def test_save_module(self):
        module_out = self.path("updated.ts")
        _, out = self.run_bn("--save-module", module_out)
        m = torch.jit.load(module_out)
        self.assertEqual(m.training, torch.jit.load(bn("cnn_scripted.ts")).training)
        self.assert_state(m.state_dict(), expected("cnn_bs16"))
        # The module still runs, in eval mode with the new statistics.
        m.eval()
        eager_out = m(torch.ones(2, 3, 8, 8))
        self.assertEqual(tuple(eager_out.shape), (2, 10))

    def test_report(self):
        report_file = self.path("report.json")
        p, _ = self.run_bn("--json", "--report", report_file)
        report = json.loads(p.stdout)
        with open(report_file) as f:
            self.assertEqual(json.load(f), report)
        self.assertEqual((report["samples"], report["batches"], report["batch_size"]), (50, 4, 16))
        modules = {m["name"]: m for m in report["modules"]}
        self.assertEqual(list(modules), ["bn1", "bn2", "bn3", "spare"])
        self.assertEqual([modules[n]["batches"] for n in modules], [4, 4, 4, 0])
        self.assertEqual([modules[n]["momentum"] for n in modules], [0.1, None, 0.3, 0.1])
        self.assertEqual(modules["bn3"]["type"], "torch.nn.modules.batchnorm.BatchNorm1d")
        self.assertEqual(report["data"]["format"], "npy")
        self.assertIn("not reached", p.stderr)

    def test_model_without_batchnorm(self):
        p, out = self.run_bn(model="mlp.ts", checkpoint="mlp_weights.pt")
        self.assertIn("no BatchNorm", p.stderr)
        found, want = torch.load(out, weights_only=False), torch.load(bn("mlp_weights.pt"), weights_only=False)
        self.assertEqual(list(found), list(want))
        for k in want:
            self.assertTrue(same_bits(found[k], want[k]), k)

    def test_device(self):
        p, out = self.run_bn("--device", "cuda") if torch.cuda.is_available() else (None, None)
        if p is None:
            p = swavg("update-bn", "--model", bn("cnn_scripted.ts"), "--data", bn("data.npy"), "--device", "cuda",
                      "-o", self.path("x.pt"), check=False)
            if p.returncode == 0:
                self.skipTest("this swavg has CUDA but PyTorch here does not")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("CUDA", p.stderr)
            return
        found, want = torch.load(out, weights_only=False), expected("cnn_bs16")
        for k in want:
            if k.endswith(STATS[:2]):
                torch.testing.assert_close(found[k], want[k], rtol=1e-4, atol=1e-5)


class UpdateBnErrorTest(TempDirTest):
    def fail(self, code, *args):
        cmd = ["update-bn", *args]
        if "-o" not in args:
            cmd += ["-o", self.path("out.pt")]
        p = swavg(*cmd, check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        self.assertFalse(os.path.exists(self.path("out.pt")))
        return p.stderr

    def test_model_not_torchscript(self):
        err = self.fail(3, "--model", bn("weights.pt"), "--data", bn("data.npy"))
        self.assertIn("not a TorchScript module", err)

    def test_data_shape_does_not_fit(self):
        err = self.fail(4, "--model", bn("cnn_scripted.ts"), "--data", bn("data_bad_channels.npy"))
        self.assertIn("[10, 4, 8, 8]", err)
        self.assertIn("[4, 8, 8]", err)

    def test_missing_data(self):
        err = self.fail(5, "--model", bn("cnn_scripted.ts"), "--data", bn("no_such_data.npy"))
        self.assertIn("no_such_data.npy", err)

    def test_missing_model(self):
        self.fail(5, "--model", bn("no_such_model.ts"), "--data", bn("data.npy"))

    def test_checkpoint_names_differ(self):
        err = self.fail(4, "--model", bn("cnn_scripted.ts"), "--data", bn("data.npy"), "--checkpoint",
                        bn("weights_renamed.pt"))
        self.assertIn("conv1.weight", err)
        self.assertIn("conv_one.weight", err)

    def test_traced_in_eval_mode(self):
        err = self.fail(3, "--model", bn("cnn_traced_eval.ts"), "--data", bn("data.npy"))
        self.assertIn("eval mode", err)

    def test_batchnorm_called_twice_with_momentum(self):
        err = self.fail(3, "--model", bn("shared_bn_momentum.ts"), "--data", bn("data.npy"))
        self.assertIn("ran 2 times in one forward", err)

    def test_data_needs_key(self):
        err = self.fail(2, "--model", bn("cnn_scripted.ts"), "--data", bn("data.safetensors"))
        self.assertIn("--data-key", err)
        self.fail(2, "--model", bn("cnn_scripted.ts"), "--data", bn("data_dict.pt"), "--data-key", "batch.nope")

    def test_raw_needs_shape(self):
        err = self.fail(3, "--model", bn("cnn_scripted.ts"), "--data", bn("data.bin"))
        self.assertIn("--shape", err)
        err = self.fail(3, "--model", bn("cnn_scripted.ts"), "--data", bn("data.bin"), "--shape", "3,7,7")
        self.assertIn("not a whole number of samples", err)

    def test_last_batch_of_one(self):
        err = self.fail(4, "--model", bn("cnn_scripted.ts"), "--data", bn("data.npy"), "--batch-size", "49")
        self.assertIn("--drop-last", err)

    def test_outputs(self):
        existing = self.path("exists.pt")
        open(existing, "w").close()
        self.fail(2, "--model", bn("cnn_scripted.ts"), "--data", bn("data.npy"), "-o", existing)
        self.fail(2, "--model", bn("cnn_scripted.ts"), "--data", bn("data.npy"), "-o", bn("data.npy"), "--force")
        p = swavg("update-bn", "--model", bn("cnn_scripted.ts"), "--data", bn("data.npy"), check=False)
        self.assertEqual(p.returncode, 2, p.stderr)


if __name__ == "__main__":
    unittest.main()
