"""swavg ema against real PyTorch: `avg.lerp_(x, 1 - decay)` per checkpoint after the first, the
update get_ema_multi_avg_fn makes in PyTorch 2.x (1.13 has no such helper, so the reference is the
lerp itself), with the torch_ema and power (timm) warmup schedules, per-rule decays, resume,
bfloat16 inputs and the averaged-model layout.

Every expected value is computed here by PyTorch from the fixture files."""
import json
import os
import shutil
import subprocess
import unittest

import torch

from common import SWAVG, TempDirTest, same_bits, swavg
from reference import (bf16_ulp, ema_decays, ema_fold, is_buffer_name, load_output, load_safetensors,
                       model_for, run_paths, save_state, state_dict_of, write_rules)


def averaged_model_ema(run, paths, decays):
    """AveragedModel(model, avg_fn, use_buffers=True) with get_ema_multi_avg_fn's update (PyTorch
    2.x) applied per tensor: lerp for floating tensors, `p * decay + x * (1 - decay)` copied back
    into the integer ones. decays[i] is the decay for the i-th checkpoint (decays[0] unused)."""
    def avg_fn(avg, x, n_averaged):
        d = decays[int(n_averaged)]
        if avg.is_floating_point():
            return avg.lerp(x, 1 - d)
        return avg * d + x * (1 - d)

    model = model_for(run)
    avg = torch.optim.swa_utils.AveragedModel(model, avg_fn=avg_fn, use_buffers=True)
    for p in paths:
        model.load_state_dict(state_dict_of(p))
        avg.update_parameters(model)
    return avg.module.state_dict()


class EmaTest(TempDirTest):
    def ema(self, *args, out_name="ema.pt"):
        out = self.path(out_name)
        swavg("ema", *args, "-o", out, "--force")
        return load_output(out)

    def assert_bits(self, got, want, name):
        self.assertEqual(got.dtype, want.dtype, name)
        self.assertEqual(tuple(got.shape), tuple(want.shape), name)
        if not same_bits(got, want):
            diff = (got.double() - want.double()).abs()
            self.fail("%s: not bit-exact, max |diff| %g at %d of %d elements"
                      % (name, diff.max().item(), int((diff != 0).sum()), diff.numel()))

    def check_run(self, run, decay, warmup_args=(), schedule=None, buffers="latest"):
        """swavg ema over a whole run vs the lerp reference with the decays from `schedule`."""
        paths = run_paths(run)
        sds = [state_dict_of(p) for p in paths]
        decays = ema_decays(len(paths), decay, **(schedule or {}))
        extra = ["--buffers", "average"] if buffers == "average" else []
        got = self.ema("--decay", str(decay), *paths, *warmup_args, *extra)
        self.assertEqual(type(got).__name__, "OrderedDict")
        self.assertEqual(list(got.keys()), list(sds[0].keys()))
        want_average = averaged_model_ema(run, paths, decays) if buffers == "average" else None
        for k in sds[0]:
            with self.subTest(run=run, decay=decay, warmup=warmup_args, tensor=k):
                floating = sds[0][k].is_floating_point()
                if buffers == "average" and is_buffer_name(k):
                    # use_buffers=True: every buffer, the integer counters included.
                    self.assert_bits(got[k], want_average[k], k)
                elif not floating or is_buffer_name(k):
                    self.assert_bits(got[k], sds[-1][k], k)
                else:
                    self.assert_bits(got[k], ema_fold([sd[k] for sd in sds], decays), k)
                    if want_average is not None:
                        self.assert_bits(got[k], want_average[k], k)
        return got


class EmaVsLerpTest(EmaTest):
    """3: bit-exact with the lerp reference."""

    def test_cnn(self):
        for decay in (0.9, 0.999):
            self.check_run("cnn", decay)

    def test_resnet18(self):
        for decay in (0.9, 0.999):
            self.check_run("resnet18", decay)

    def test_decay_matters(self):
        a = self.check_run("cnn", 0.9)
        b = self.check_run("cnn", 0.5)
        self.assertFalse(same_bits(a["conv1.weight"], b["conv1.weight"]))

    def test_warmup_torch_ema(self):
        for decay in (0.9, 0.999):
            self.check_run("cnn", decay, ["--warmup", "torch_ema"], {"warmup": "torch_ema"})
        self.check_run("resnet18", 0.999, ["--warmup", "torch_ema"], {"warmup": "torch_ema"})
        # The schedule changes the result (at n < 8 the warmup decay is below 0.9).
        plain = self.ema("--decay", "0.9", *run_paths("cnn"), out_name="plain.pt")
        warm = self.ema("--decay", "0.9", *run_paths("cnn"), "--warmup", "torch_ema", out_name="warm.pt")
        self.assertFalse(same_bits(plain["fc.weight"], warm["fc.weight"]))

    def test_warmup_power(self):
        for decay in (0.9, 0.999):
            self.check_run("cnn", decay, ["--warmup", "power"], {"warmup": "power"})
        self.check_run("cnn", 0.999, ["--warmup", "power", "--inv-gamma", "2", "--power", "0.75"],
                       {"warmup": "power", "inv_gamma": 2.0, "power": 0.75})
        # min_decay clamps from below: 1 - (1 + 1)^-0.75 = 0.405 < 0.6.
        self.check_run("cnn", 0.99, ["--warmup", "power", "--power", "0.75", "--min-decay", "0.6"],
                       {"warmup": "power", "power": 0.75, "min_decay": 0.6})
        self.check_run("resnet18", 0.999, ["--warmup", "power"], {"warmup": "power"})

    def test_buffers_average(self):
        got = self.check_run("cnn", 0.9, buffers="average")
        last = state_dict_of(run_paths("cnn")[-1])
        self.assertFalse(same_bits(got["bn1.running_var"], last["bn1.running_var"]))
        self.assertNotEqual(int(got["bn1.num_batches_tracked"]), int(last["bn1.num_batches_tracked"]))
        self.check_run("cnn", 0.999, ["--warmup", "torch_ema"], {"warmup": "torch_ema"}, buffers="average")
        self.check_run("resnet18", 0.5, buffers="average")

    def test_buffers_first(self):
        paths = run_paths("cnn")
        got = self.ema("--decay", "0.9", *paths, "--buffers", "first")
        first = state_dict_of(paths[0])
        for k, v in first.items():
            if is_buffer_name(k):
                self.assert_bits(got[k], v, k)
        self.assertFalse(same_bits(got["bn1.running_var"], state_dict_of(paths[-1])["bn1.running_var"]))

    def test_integer_ema_edge_cases(self):
        # Every integer dtype and values past float32's 24 bits, against get_ema_multi_avg_fn's
        # integer branch run by PyTorch: p.copy_(p * decay + x * (1 - decay)).
        cases = {
            "i64": [[2 ** 24 + 1, 7, -2 ** 40, 0], [2 ** 24 + 3, -7, 2 ** 40, 1], [5, 2 ** 30, 3, 1]],
            "i32": [[2 ** 24 + 1, -9, 2 ** 30], [3, 9, -2 ** 30], [2 ** 24 + 3, 0, 1]],
            "i16": [[30000, -3], [-30000, 9], [5, 1]],
            "i8": [[100, -100], [-100, 100], [3, 4]],
            "u8": [[200, 10], [10, 200], [255, 0]],
        }
        dtypes = {"i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8}
        paths = [save_state(self.path("i%d.pt" % i), {k: torch.tensor(v[i], dtype=dtypes[k]) for k, v in cases.items()})
                 for i in range(3)]
        rules = write_rules(self.path("rules.json"), [{"match": ".", "action": "average"}])
        for decay in (0.9, 0.3):
            got = self.ema("--decay", str(decay), *paths, "--rules", rules, out_name="i%g.pt" % decay)
            for k, xs in cases.items():
                avg = torch.tensor(xs[0], dtype=dtypes[k])
                for x in xs[1:]:
                    avg.copy_(avg * decay + torch.tensor(x, dtype=dtypes[k]) * (1 - decay))
                with self.subTest(decay=decay, dtype=k):
                    self.assert_bits(got[k], avg, k)

    def test_integer_rule_with_its_decay(self):
        # A rule's decay applies to the integer tensors it averages, as get_ema_multi_avg_fn would.
        paths = run_paths("cnn")
        rules = write_rules(self.path("rules.json"), [{"match": "num_batches_tracked$", "action": "average",
                                                         "decay": 0.25}])
        got = self.ema("--decay", "0.9", *paths, "--rules", rules)
        want = averaged_model_ema("cnn", paths, ema_decays(len(paths), 0.25))
        for k in got:
            if k.endswith("num_batches_tracked"):
                self.assert_bits(got[k], want[k], k)

    def test_int_first(self):
        paths = run_paths("cnn")
        got = self.ema("--decay", "0.9", *paths, "--int", "first")
        first = state_dict_of(paths[0])
        for k, v in first.items():
            if not v.is_floating_point():
                self.assert_bits(got[k], v, k)


class EmaStepOrderTest(EmaTest):
    """A shell glob sorts ckpt_10 before ckpt_2; the EMA is over the steps in order all the same."""

    def test_glob_order_is_step_order(self):
        paths = run_paths("cnn")
        named = []
        for i, p in enumerate(paths):
            named.append(self.path("ckpt_%d.pt" % (i * 5)))  # ckpt_0 ckpt_5 ckpt_10 ckpt_15 ...
            shutil.copy(p, named[-1])
        globbed = sorted(named)  # ckpt_0 ckpt_10 ckpt_15 ckpt_20 ckpt_25 ckpt_5
        self.assertNotEqual(globbed, named)
        sds = [state_dict_of(p) for p in paths]
        decays = ema_decays(len(paths), 0.9)
        got = self.ema("--decay", "0.9", *globbed)
        for k in ("conv1.weight", "fc.bias"):
            self.assert_bits(got[k], ema_fold([sd[k] for sd in sds], decays), k)
        self.assert_bits(got["bn1.running_mean"], sds[-1]["bn1.running_mean"], "the latest step's buffer")
        given = self.ema("--decay", "0.9", *globbed, "--sort", "none", out_name="given.pt")
        globbed_sds = [state_dict_of(p) for p in globbed]
        self.assert_bits(given["fc.bias"], ema_fold([sd["fc.bias"] for sd in globbed_sds], decays), "--sort none")


class EmaRulesTest(EmaTest):
    """6 (ema): per-rule decay and actions."""

    def test_rules_with_decay(self):
        paths = run_paths("cnn")
        sds = [state_dict_of(p) for p in paths]
        rules = write_rules(self.path("rules.json"), [
            {"match": "^fc\\.", "action": "average", "decay": 0.5},
            {"match": "^bn3\\.weight$", "action": "first"},
            {"match": "conv1\\.bias", "action": "drop"},
            {"match": "bn1\\.running_var", "action": "average", "decay": 0.75},
            {"match": "^bn3\\.", "action": "latest"},
        ])
        got = self.ema("--decay", "0.9", *paths, "--rules", rules)
        d09, d05, d075 = (ema_decays(len(paths), d) for d in (0.9, 0.5, 0.75))
        expected = {}
        for k in sds[0]:
            xs = [sd[k] for sd in sds]
            if k == "conv1.bias":
                continue
            if k.startswith("fc."):
                expected[k] = ema_fold(xs, d05)
            elif k == "bn3.weight":
                expected[k] = xs[0]
            elif k == "bn1.running_var":
                expected[k] = ema_fold(xs, d075)
            elif k.startswith("bn3.") or is_buffer_name(k):
                expected[k] = xs[-1]
            else:
                expected[k] = ema_fold(xs, d09)
        self.assertEqual(list(got.keys()), list(expected.keys()))
        for k, v in expected.items():
            with self.subTest(tensor=k):
                self.assert_bits(got[k], v, k)


class EmaResumeTest(EmaTest):
    """4 (ema): resume in pieces, n stored (the warmup depends on it)."""

    def check_pieces(self, run, pieces, layout, args):
        paths = run_paths(run)
        whole = self.path("whole.pt")
        swavg("ema", *args, *paths, "--layout", layout, "-o", whole, "--force")
        prev, start = None, 0
        for i, size in enumerate(pieces):
            out = self.path("piece%d.pt" % i)
            resume = ["--resume", prev] if prev else []
            swavg("ema", *args, *paths[start:start + size], *resume, "--layout", layout, "-o", out, "--force")
            prev, start = out, start + size
        a, b = load_output(prev), load_output(whole)
        self.assertEqual(list(a.keys()), list(b.keys()))
        for k in b:
            with self.subTest(run=run, layout=layout, args=args, tensor=k):
                self.assert_bits(a[k], b[k], k)
        return a

    def test_cnn(self):
        self.check_pieces("cnn", [2, 2, 2], "state-dict", ["--decay", "0.9"])
        self.check_pieces("cnn", [2, 2, 2], "averaged-model", ["--decay", "0.999", "--warmup", "torch_ema"])
        self.check_pieces("cnn", [2, 2, 2], "state-dict", ["--decay", "0.999", "--warmup", "power", "--inv-gamma", "2"])
        got = self.check_pieces("cnn", [1, 3, 2], "averaged-model", ["--decay", "0.99", "--warmup", "torch_ema"])
        self.assertEqual(int(got["n_averaged"]), 6)
        # ... and the resumed result is the reference's.
        sds = [state_dict_of(p) for p in run_paths("cnn")]
        decays = ema_decays(6, 0.99, warmup="torch_ema")
        self.assert_bits(got["module.conv2.weight"], ema_fold([sd["conv2.weight"] for sd in sds], decays), "conv2.weight")

    def test_resnet18(self):
        self.check_pieces("resnet18", [2, 2], "state-dict", ["--decay", "0.999", "--warmup", "torch_ema"])

    def test_resume_from_average_refused(self):
        paths = run_paths("cnn")
        avg = self.path("avg.pt")
        swavg("average", *paths[:2], "-o", avg)
        out = self.path("ema.pt")
        p = swavg("ema", "--decay", "0.9", *paths[2:], "--resume", avg, "-o", out, check=False)
        self.assertNotIn(p.returncode, (0, 1), p.stderr)
        self.assertFalse(os.path.exists(out))


class EmaBfloat16Test(EmaTest):
    """5 (ema): bfloat16 inputs with float32 and float64 accumulators."""

    def test_accumulators(self):
        paths = run_paths("cnn_bf16")
        sds = [state_dict_of(p) for p in paths]
        decays = ema_decays(len(paths), 0.9, warmup="torch_ema")
        f32 = self.ema("--decay", "0.9", "--warmup", "torch_ema", *paths, out_name="f32.pt")
        f64 = self.ema("--decay", "0.9", "--warmup", "torch_ema", *paths, "--accumulate", "float64", out_name="f64.pt")
        nat = self.ema("--decay", "0.9", "--warmup", "torch_ema", *paths, "--accumulate", "native", out_name="nat.pt")
        err = {"f32": 0.0, "native": 0.0}
        for k, v in sds[0].items():
            if not v.is_floating_point() or is_buffer_name(k):
                for got in (f32, f64, nat):
                    self.assert_bits(got[k], sds[-1][k], k)
                continue
            with self.subTest(tensor=k):
                xs = [sd[k] for sd in sds]
                ref = ema_fold(xs, decays, torch.float64)
                self.assert_bits(f32[k], ema_fold(xs, decays, torch.float32).to(torch.bfloat16), k)
                self.assert_bits(f64[k], ref.to(torch.bfloat16), k)
                self.assert_bits(nat[k], ema_fold(xs, decays), k)
                self.assertTrue(bool(((f32[k].double() - ref).abs() <= bf16_ulp(ref)).all()), k)
                err["f32"] += float((f32[k].double() - ref).abs().sum())
                err["native"] += float((nat[k].double() - ref).abs().sum())
        self.assertGreater(err["native"], err["f32"])


class EmaOutputTest(EmaTest):
    """8, 10, 12 (ema): layout, safetensors, report; usage errors."""

    def test_averaged_model_layout(self):
        paths = run_paths("cnn")
        got = self.ema("--decay", "0.9", *paths, "--layout", "averaged-model")
        plain = self.ema("--decay", "0.9", *paths, out_name="plain.pt")
        self.assertEqual(int(got["n_averaged"]), 6)
        self.assertEqual(got["n_averaged"].dtype, torch.int64)
        for k, v in plain.items():
            self.assert_bits(got["module." + k], v, k)
        avg = torch.optim.swa_utils.AveragedModel(model_for("cnn"))
        avg.load_state_dict(got, strict=True)

    def test_safetensors(self):
        paths = run_paths("cnn")
        want = self.ema("--decay", "0.999", *paths)
        out = self.path("ema.safetensors")
        swavg("ema", "--decay", "0.999", *paths, "-o", out)
        got, _ = load_safetensors(out)
        self.assertEqual(sorted(got), sorted(want))
        for k in want:
            self.assert_bits(got[k], want[k], k)

    def test_report(self):
        paths = run_paths("cnn")
        report_path = self.path("r.json")
        p = swavg("ema", "--decay", "0.999", *paths, "-o", self.path("e.pt"), "--json", "--report", report_path)
        r = json.loads(p.stdout)
        with open(report_path) as f:
            self.assertEqual({k: v for k, v in json.load(f).items() if k != "wall_time_s"},
                             {k: v for k, v in r.items() if k != "wall_time_s"})
        self.assertEqual(r["mode"], "ema")
        self.assertEqual(r["decay"], 0.999)
        self.assertEqual(r["n"], 6)
        self.assertEqual([os.path.realpath(x) for x in r["inputs"]], [os.path.realpath(x) for x in paths])
        sd = state_dict_of(paths[0])
        self.assertEqual(r["tensors"], len(sd))
        self.assertEqual(sorted(r["buffers"]), sorted(k for k in sd if is_buffer_name(k)))
        for key in ("rules", "bytes_read", "bytes_written", "wall_time_s"):
            self.assertIn(key, r)

    def test_bad_usage(self):
        paths = run_paths("cnn")[:2]
        out = self.path("x.pt")
        for args in ([*paths, "-o", out], ["--decay", "1.5", *paths, "-o", out],
                     ["--decay", "abc", *paths, "-o", out],
                     ["--decay", "0.9", *paths, "-o", out, "--weights", "1,1"],
                     ["--decay", "0.9", *paths, "-o", out, "--warmup", "cosine"],
                     ["--decay", "0.9", *paths, "-o", out, "--warmup", "power", "--inv-gamma", "0"]):
            with self.subTest(args=args):
                p = swavg("ema", *args, check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertFalse(os.path.exists(out))

    def test_nonfinite(self):
        import collections
        paths = run_paths("cnn")[:2]
        sd = collections.OrderedDict((k, v.clone()) for k, v in state_dict_of(paths[1]).items())
        sd["bn2.weight"][1] = float("-inf")
        bad = self.path("bad_ema.pt")
        torch.save({"model": sd}, bad)  # laid out as the run's checkpoints
        out = self.path("x.pt")
        p = swavg("ema", "--decay", "0.9", paths[0], bad, "--sort", "none", "-o", out, check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("bad_ema.pt", p.stderr)
        self.assertIn("bn2.weight", p.stderr)
        self.assertFalse(os.path.exists(out))
        got = self.ema("--decay", "0.9", paths[0], bad, "--allow-nonfinite", "--sort", "none")
        self.assertEqual(float(got["bn2.weight"][1]), float("-inf"))



# Set, swavg must not hand the job to swavg-torch (LibTorch): a hand-over is an internal error, exit 1.
NO_HAND_OVER = dict(os.environ, SWAVG_HANDED_OVER="1")
TORCH_MAJOR = int(torch.__version__.split(".")[0])  # the tests run with the build's own torch


class EmaInSwavgTest(EmaTest):
    """EMA runs in swavg itself, with either LibTorch: its lerp is ATen's bit for bit, except at a
    weight of exactly 1 under torch 2.x, which it leaves to ATen (swavg-torch)."""

    def run_in_swavg(self, *args):
        return subprocess.run([SWAVG, *map(str, args)], capture_output=True, text=True, timeout=600,
                              env=NO_HAND_OVER)

    def test_no_hand_over(self):
        paths = run_paths("cnn")
        sds = [state_dict_of(p) for p in paths]
        decays = ema_decays(len(paths), 0.99, warmup="torch_ema")
        out = self.path("ema.pt")
        p = self.run_in_swavg("ema", "--decay", "0.99", "--warmup", "torch_ema", *paths, "-o", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = load_output(out)
        for k in sds[0]:
            if sds[0][k].is_floating_point() and not is_buffer_name(k):
                self.assert_bits(got[k], ema_fold([sd[k] for sd in sds], decays), k)

    def test_weight_one(self):
        # --decay 0: each step lerps at weight 1. torch 2.x's vector lanes give +0 for x = -0 where its
        # scalar tail gives -0 (avg > 0), so which zero an element gets depends on ATen's split.
        a = torch.ones(1001)
        b = torch.full((1001,), -0.0)
        paths = [self.path("ckpt_0.pt"), self.path("ckpt_1.pt")]
        torch.save({"w": a}, paths[0])
        torch.save({"w": b}, paths[1])
        want = a.clone().lerp_(b, 1.0)
        got = self.ema("--decay", "0", *paths)["w"]
        self.assert_bits(got, want, "w")
        out = self.path("native.pt")
        p = self.run_in_swavg("ema", "--decay", "0", *paths, "-o", out)
        if TORCH_MAJOR >= 2 and os.path.basename(SWAVG) != "swavg-torch":  # (swavg-torch has ATen in process)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("needs LibTorch", p.stderr)
            self.assertFalse(os.path.exists(out))
        else:  # 1.x's lanes and tail agree at weight 1: swavg's kernel computes it (or ATen, in swavg-torch)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assert_bits(load_output(out)["w"], want, "w")


if __name__ == "__main__":
    unittest.main()
