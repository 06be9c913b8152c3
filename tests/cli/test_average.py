"""swavg average against real PyTorch: torch.optim.swa_utils.AveragedModel (use_buffers False and
True) on a resnet18 and a small CNN trained for a few steps; bfloat16 inputs against a float64
reference; resume, rules, weights, integer tensors, layouts, formats, input selection, mismatches,
non-finite values and the report.

Every expected value is computed here by PyTorch from the fixture files."""
import json
import os
import shutil
import unittest

import torch

from common import SWAVG, TempDirTest, fixture, same_bits, swavg
from reference import (averaged_model_1_13, averaged_model_reference, bf16_ulp, copy_state, float64_weighted_mean,
                       is_buffer_name, lerp_fold, load_output, load_safetensors, model_for, nan_equal,
                       run_paths, save_state, state_dict_of, swa_fold, swavg_input, weighted_weights,
                       write_rules)


class AverageTest(TempDirTest):
    def average(self, *args, out_name="avg.pt"):
        """Runs `swavg average ARGS -o OUT`; returns the output as torch.load(weights_only=True) reads it."""
        out = self.path(out_name)
        swavg("average", *args, "-o", out)
        return load_output(out)

    def assert_keys(self, got, want_keys):
        self.assertIsInstance(got, dict)
        self.assertEqual(type(got).__name__, "OrderedDict")
        self.assertEqual(list(got.keys()), list(want_keys))

    def assert_bits(self, got, want, name):
        self.assertEqual(got.dtype, want.dtype, name)
        self.assertEqual(tuple(got.shape), tuple(want.shape), name)
        if not same_bits(got, want):
            diff = (got.double() - want.double()).abs()
            self.fail("%s: not bit-exact, max |diff| %g at %d of %d elements"
                      % (name, diff.max().item(), int((diff != 0).sum()), diff.numel()))

    def assert_failed(self, p, code, out, *needles):
        self.assertEqual(p.returncode, code, "exit %d, expected %d; stderr:\n%s" % (p.returncode, code, p.stderr))
        self.assertFalse(os.path.exists(out), "an output was written although swavg failed")
        for n in needles:
            self.assertIn(n, p.stderr)


class AveragedModelTest(AverageTest):
    """1 and 2: bit-exact with AveragedModel on float32 training runs."""

    def check_use_buffers_false(self, run, *extra):
        paths = run_paths(run)
        got = self.average(*paths, *extra)
        want, n = averaged_model_reference(run, paths, use_buffers=False)
        self.assertEqual(n, len(paths))
        last = state_dict_of(paths[-1])
        self.assert_keys(got, last.keys())
        for k in last:
            with self.subTest(run=run, tensor=k):
                if is_buffer_name(k):  # use_buffers=False: buffers are the last checkpoint's
                    self.assert_bits(got[k], last[k], k)
                else:
                    self.assert_bits(got[k], want[k], k)

    def test_resnet18_use_buffers_false(self):
        self.check_use_buffers_false("resnet18")

    def test_cnn_use_buffers_false(self):
        self.check_use_buffers_false("cnn", "--key", "model")

    def test_cnn_with_model_ts(self):
        # The TorchScript tells parameters and buffers apart exactly: same result here.
        self.check_use_buffers_false("cnn", "--model", fixture("runs/cnn/net.ts"))

    def test_strip_prefix(self):
        # A DataParallel / torch.compile'd model's names: module._orig_mod.<name>.
        paths = run_paths("cnn")[:3]
        prefixed = []
        for i, p in enumerate(paths):
            sd = state_dict_of(p)
            prefixed.append(save_state(self.path("p%d.pt" % i), type(sd)(
                ("module._orig_mod." + k, v) for k, v in sd.items())))
        got = self.average(*prefixed, "--strip-prefix", "module.", "--strip-prefix", "_orig_mod.")
        want, _ = averaged_model_reference("cnn", paths, use_buffers=False)
        self.assert_keys(got, want.keys())
        for k in want:
            if not is_buffer_name(k):
                self.assert_bits(got[k], want[k], k)

    def check_use_buffers_true(self, run):
        paths = run_paths(run)
        got = self.average(*paths, "--buffers", "average")
        want, _ = averaged_model_reference(run, paths, use_buffers=True)
        last = state_dict_of(paths[-1])
        self.assert_keys(got, last.keys())
        for k in last:
            with self.subTest(run=run, tensor=k):
                # num_batches_tracked too: AveragedModel runs avg_fn on it and truncates into int64.
                self.assert_bits(got[k], want[k], k)
        # The run's buffers really differ between checkpoints, so this tells latest from average;
        # in the cnn run the truncated average of the counters is neither the first nor the last
        # value (in resnet18's, 1 to 4 steps, truncation brings it back to the first).
        first = state_dict_of(paths[0])
        self.assertFalse(same_bits(first["bn1.running_var"], last["bn1.running_var"]))
        self.assertFalse(same_bits(got["bn1.running_var"], last["bn1.running_var"]))
        counter = "bn1.num_batches_tracked"
        if run == "cnn":
            self.assertNotIn(int(got[counter]), (int(first[counter]), int(last[counter])))

    def test_buffers_first_is_use_buffers_false_in_1_13(self):
        # AveragedModel(model) built from the first checkpoint keeps the buffers it deep-copied
        # (PyTorch 1.13, run as Debian's python3-torch; 2.x copies the latest model's buffers in,
        # which is --buffers latest).
        for run in ("cnn", "resnet18"):
            paths = run_paths(run)
            want = averaged_model_1_13(run, paths, self.path("ref_%s.pt" % run))
            got = self.average(*paths, "--buffers", "first", "--force")
            self.assert_keys(got, want.keys())
            for k in want:
                with self.subTest(run=run, tensor=k):
                    self.assert_bits(got[k], want[k], k)
            first, last = state_dict_of(paths[0]), state_dict_of(paths[-1])
            self.assertFalse(same_bits(first["bn1.running_var"], last["bn1.running_var"]))
            self.assertFalse(same_bits(first["bn1.num_batches_tracked"], last["bn1.num_batches_tracked"]))

    def test_buffers_first_resumes(self):
        paths = run_paths("cnn")
        whole = self.average(*paths, "--buffers", "first", out_name="whole.pt")
        part = self.path("part.pt")
        swavg("average", *paths[:2], "--buffers", "first", "-o", part)
        swavg("average", "--resume", part, *paths[2:], "--buffers", "first", "-o", part, "--force")
        got = load_output(part)
        for k in whole:
            self.assert_bits(got[k], whole[k], k)

    def test_rule_average_on_an_integer_is_obeyed(self):
        # An explicit rule is obeyed: counters averaged as AveragedModel(use_buffers=True) does.
        paths = run_paths("cnn")
        want, _ = averaged_model_reference("cnn", paths, use_buffers=True)
        rules = write_rules(self.path("rules.json"), [{"match": "num_batches_tracked$", "action": "average"}])
        out = self.path("r.pt")
        p = swavg("average", *paths, "--rules", rules, "-o", out, "--json")
        got = load_output(out)
        last = state_dict_of(paths[-1])
        for k in got:
            with self.subTest(tensor=k):
                if k.endswith("num_batches_tracked"):
                    self.assert_bits(got[k], want[k], k)
                    self.assertNotEqual(int(got[k]), int(last[k]))
                elif is_buffer_name(k):
                    self.assert_bits(got[k], last[k], k)
        details = {t["name"]: t for t in json.loads(p.stdout)["details"]}
        self.assertEqual(details["bn1.num_batches_tracked"]["action"], "average")
        self.assertEqual(details["bn1.num_batches_tracked"]["reason"], "rule")

    def test_integer_average_edge_cases(self):
        # Every integer dtype, wrapping differences and values past float32's 24 bits, against
        # AveragedModel's own expression (avg_fn, then copy_ into the integer tensor).
        cases = {
            # 2 ** 24 + 1 has no float32: AveragedModel's float32 add rounds it (a double would not).
            "i64": [torch.tensor([0, 2 ** 40 + 1, -7, 2 ** 62, 2 ** 24 + 1], dtype=torch.int64),
                    torch.tensor([3, 5, 8, -2 ** 62, 2 ** 24 + 3], dtype=torch.int64),
                    torch.tensor([100, -(2 ** 40), 1, 2 ** 62, 2 ** 24 + 1], dtype=torch.int64)],
            "i32": [torch.tensor([0, 2 ** 30, -5], dtype=torch.int32), torch.tensor([7, -2 ** 30, 6], dtype=torch.int32),
                    torch.tensor([1, 2 ** 30, -1], dtype=torch.int32)],
            "i16": [torch.tensor([30000, -3], dtype=torch.int16), torch.tensor([-30000, 9], dtype=torch.int16),
                    torch.tensor([5, 1], dtype=torch.int16)],
            "i8": [torch.tensor([100, -100, 3], dtype=torch.int8), torch.tensor([-100, 100, 4], dtype=torch.int8),
                   torch.tensor([0, 1, 2], dtype=torch.int8)],
            "u8": [torch.tensor([200, 10, 255], dtype=torch.uint8), torch.tensor([10, 200, 0], dtype=torch.uint8),
                   torch.tensor([7, 7, 128], dtype=torch.uint8)],
        }
        paths = []
        for i in range(3):
            paths.append(save_state(self.path("i%d.pt" % i), {k: v[i] for k, v in cases.items()}))
        rules = write_rules(self.path("rules.json"), [{"match": ".", "action": "average"}])
        got = self.average(*paths, "--rules", rules)
        for k, xs in cases.items():
            avg, n = xs[0].clone(), torch.tensor(1, dtype=torch.long)
            for x in xs[1:]:
                avg.copy_(avg + (x - avg) / (n + 1))  # AveragedModel.update_parameters with the default avg_fn
                n += 1
            with self.subTest(dtype=k):
                self.assert_bits(got[k], avg, k)

    def test_integer_average_refused_where_pytorch_has_none(self):
        paths = run_paths("cnn")[:3]
        out = self.path("x.pt")
        p = swavg("average", *paths, "--buffers", "average", "--weights", "1,2,3", "-o", out, check=False)
        self.assert_failed(p, 2, out, "bn1.num_batches_tracked", "--weights")
        flags = [save_state(self.path("b%d.pt" % i), {"w": torch.ones(2), "flag": torch.tensor([i % 2 == 0])})
                 for i in range(2)]
        rules = write_rules(self.path("rules.json"), [{"match": "^flag$", "action": "average"}])
        p = swavg("average", *flags, "--rules", rules, "-o", out, check=False)
        self.assert_failed(p, 2, out, "'flag' is bool", "^flag$")

    def test_resnet18_use_buffers_true(self):
        self.check_use_buffers_true("resnet18")

    def test_cnn_use_buffers_true(self):
        self.check_use_buffers_true("cnn")

    def test_non_standard_buffer_names(self):
        # ScaledNet's buffers are 'feature_scale' (float) and 'seen' (int64): only --model or
        # --buffer makes them buffers.
        paths = run_paths("custom")
        sds = [state_dict_of(p) for p in paths]
        avg = lambda k: swa_fold([sd[k] for sd in sds])
        self.assertFalse(same_bits(sds[0]["feature_scale"], sds[-1]["feature_scale"]))
        got = self.average(*paths, out_name="default.pt")
        self.assert_bits(got["feature_scale"], avg("feature_scale"), "feature_scale (a parameter by name)")
        self.assert_bits(got["seen"], sds[-1]["seen"], "seen (int: latest)")
        for extra in (["--model", fixture("runs/custom/net.ts")], ["--buffer", "^feature_sc"]):
            with self.subTest(extra=extra):
                got = self.average(*paths, *extra, "--force")
                self.assert_bits(got["feature_scale"], sds[-1]["feature_scale"], "feature_scale (buffer: latest)")
                self.assert_bits(got["lin.weight"], avg("lin.weight"), "lin.weight")
                self.assert_bits(got["seen"], sds[-1]["seen"], "seen")
        out = self.path("r.pt")
        p = swavg("average", *paths, "--model", fixture("runs/custom/net.ts"), "--buffers", "average", "-o", out, "--json")
        got = load_output(out)
        self.assert_bits(got["feature_scale"], avg("feature_scale"), "feature_scale (--buffers average)")
        seen, n = sds[0]["seen"].clone(), torch.tensor(1, dtype=torch.long)
        for sd in sds[1:]:
            seen.copy_(seen + (sd["seen"] - seen) / (n + 1))  # AveragedModel(use_buffers=True) on an int buffer
            n += 1
        self.assert_bits(got["seen"], seen, "seen (int buffer, averaged as AveragedModel does)")
        self.assertEqual(sorted(json.loads(p.stdout)["buffers"]), ["feature_scale", "seen"])


class ResumeTest(AverageTest):
    """4: --resume in pieces gives the bits of one run."""

    def check_pieces(self, run, pieces, layout):
        paths = run_paths(run)
        whole = self.path("whole.pt")
        swavg("average", *paths, "--layout", layout, "-o", whole)
        prev, start = None, 0
        for i, size in enumerate(pieces):
            out = self.path("piece%d.pt" % i)
            resume = ["--resume", prev] if prev else []
            p = swavg("average", *paths[start:start + size], *resume, "--layout", layout, "-o", out, "--json")
            self.assertEqual(json.loads(p.stdout)["n"], start + size, "n counts the resumed checkpoints")
            prev, start = out, start + size
        self.assertEqual(start, len(paths))
        a, b = load_output(prev), load_output(whole)
        self.assert_keys(a, b.keys())
        for k in b:
            with self.subTest(run=run, layout=layout, tensor=k):
                self.assert_bits(a[k], b[k], k)
        # ... and one run is AveragedModel's.
        want, n = averaged_model_reference(run, paths, use_buffers=False)
        prefix = "module." if layout == "averaged-model" else ""
        for k, v in want.items():
            if not is_buffer_name(k):
                self.assert_bits(a[prefix + k], v, k)
        if layout == "averaged-model":
            self.assertEqual(int(a["n_averaged"]), n)

    def test_cnn_2_2_2_state_dict(self):
        self.check_pieces("cnn", [2, 2, 2], "state-dict")

    def test_cnn_1_4_1_averaged_model(self):
        self.check_pieces("cnn", [1, 4, 1], "averaged-model")

    def test_resnet18_2_2(self):
        self.check_pieces("resnet18", [2, 2], "state-dict")

    def test_resume_in_place(self):
        # The documented pipeline: fold each new checkpoint into the same file.
        paths = run_paths("cnn")
        ref, _ = averaged_model_reference("cnn", paths, use_buffers=False)
        whole = {k: (state_dict_of(paths[-1])[k] if is_buffer_name(k) else v) for k, v in ref.items()}
        swa = self.path("swa.pt")
        swavg("average", *paths[:4], "-o", swa)
        for p in paths[4:]:
            swavg("average", "--resume", swa, p, "-o", swa, "--force")
        got = load_output(swa)
        self.assert_keys(got, whole.keys())
        for k in whole:
            self.assert_bits(got[k], whole[k], k)

    def test_damaged_record_is_refused(self):
        # A record with a field of the wrong type or out of range (edited by hand, or damaged) is
        # exit 3 naming the file and the field, never an average with wrong numbers.
        import struct
        paths = run_paths("cnn")
        good = self.path("good.safetensors")
        swavg("average", *paths[:2], "--allow-missing", "-o", good)
        with open(good, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(size))
            body = f.read()
        record = json.loads(header["__metadata__"]["swavg"])
        self.assertEqual(record["n"], 2)
        cases = [
            ({"n": -3}, "field 'n': expected an integer in [1, 9007199254740992], found -3"),
            ({"n": "2"}, "field 'n': expected an integer in [1, 9007199254740992], found \"2\""),
            ({"counts": {"fc.weight": -1}}, "field 'counts.fc.weight': expected an integer in [1, 2], found -1"),
            ({"counts": {"fc.weight": 3}}, "field 'counts.fc.weight': expected an integer in [1, 2], found 3"),
            ({"layout": 7}, "field 'layout': expected one of"),
            ({"accumulate_differs": "yes"}, "field 'accumulate_differs': expected true or false"),
        ]
        for change, message in cases:
            with self.subTest(change=change):
                bad = self.path("bad.safetensors")
                h = json.loads(json.dumps(header))
                h["__metadata__"]["swavg"] = json.dumps(dict(record, **change))
                text = json.dumps(h).encode()
                with open(bad, "wb") as f:
                    f.write(struct.pack("<Q", len(text)) + text + body)
                out = self.path("out.pt")
                p = swavg("average", "--resume", bad, paths[2], "-o", out, check=False)
                self.assert_failed(p, 3, out, bad, "swavg metadata: " + message)
        # The untouched record resumes.
        swavg("average", "--resume", good, paths[2], "-o", self.path("ok.pt"))

    def test_resume_other_mode_refused(self):
        paths = run_paths("cnn")
        ema = self.path("ema.pt")
        swavg("ema", "--decay", "0.9", *paths[:2], "-o", ema)
        out = self.path("avg.pt")
        p = swavg("average", *paths[2:], "--resume", ema, "-o", out, check=False)
        self.assertNotEqual(p.returncode, 0, "resuming an average from an EMA output should fail")
        self.assertNotEqual(p.returncode, 1, p.stderr)
        self.assertFalse(os.path.exists(out))


class Bfloat16Test(AverageTest):
    """5: bfloat16 inputs, accumulated in float32 (default), float64 and bfloat16 (native)."""

    def setUp(self):
        super().setUp()
        self.paths = run_paths("cnn_bf16")
        self.sds = [state_dict_of(p) for p in self.paths]
        self.floats = [k for k, v in self.sds[0].items() if v.is_floating_point() and not is_buffer_name(k)]

    def exact(self, k):
        """The exact mean in float64 (bf16 values convert exactly; 6 terms, no cancellation issue)."""
        return float64_weighted_mean([sd[k] for sd in self.sds], [1.0] * len(self.sds))

    def test_float32_accumulator_default(self):
        for extra in ([], ["--accumulate", "float32"]):
            got = self.average(*self.paths, *extra, "--force")
            self.assert_keys(got, self.sds[0].keys())
            for k in self.floats:
                with self.subTest(extra=extra, tensor=k):
                    self.assertEqual(got[k].dtype, torch.bfloat16)
                    # The spec: fold in float32, round to bfloat16 once at the end.
                    want = swa_fold([sd[k] for sd in self.sds], torch.float32).to(torch.bfloat16)
                    self.assert_bits(got[k], want, k)
                    ref = self.exact(k)
                    err = (got[k].double() - ref).abs()
                    self.assertTrue(bool((err <= bf16_ulp(ref)).all()), "%s: more than 1 bf16 ulp off" % k)
            for k, v in self.sds[-1].items():
                if is_buffer_name(k):
                    self.assert_bits(got[k], v, k)

    def test_float64_accumulator(self):
        got = self.average(*self.paths, "--accumulate", "float64")
        for k in self.floats:
            with self.subTest(tensor=k):
                want = swa_fold([sd[k] for sd in self.sds], torch.float64).to(torch.bfloat16)
                self.assert_bits(got[k], want, k)
                # Correctly rounded mean: within half an ulp (ties aside) of the exact mean.
                ref = self.exact(k)
                err = (got[k].double() - ref).abs()
                self.assertTrue(bool((err <= bf16_ulp(ref) / 2 * (1 + 1e-9)).all()),
                                "%s: more than half a bf16 ulp off the exact mean" % k)

    def test_native_accumulator_is_not_better(self):
        nat = self.average(*self.paths, "--accumulate", "native", out_name="native.pt")
        err_native = err_f32 = 0.0
        differs = 0
        for k in self.floats:
            with self.subTest(tensor=k):
                # Native: every operation rounds to bfloat16, as AveragedModel does on a bf16 model.
                want = swa_fold([sd[k] for sd in self.sds])
                self.assert_bits(nat[k], want, k)
                ref = self.exact(k)
                # What the default (float32) accumulator gives: checked against swavg above.
                f32 = swa_fold([sd[k] for sd in self.sds], torch.float32).to(torch.bfloat16)
                err_native += float((nat[k].double() - ref).abs().sum())
                err_f32 += float((f32.double() - ref).abs().sum())
                differs += int((nat[k].view(torch.int16) != f32.view(torch.int16)).sum())
        self.assertGreater(differs, 0, "accumulating in bfloat16 changed nothing: is it really native?")
        self.assertGreater(err_native, err_f32)

    def test_output_dtype(self):
        got = self.average(*self.paths, "--output-dtype", "float32")
        for k in self.floats:
            want = swa_fold([sd[k] for sd in self.sds], torch.float32)
            self.assert_bits(got[k], want, k)
        self.assertEqual(got["bn1.num_batches_tracked"].dtype, torch.int64)
        # float32 inputs to bfloat16: the float32 average rounded once.
        paths = run_paths("cnn")
        got = self.average(*paths, "--output-dtype", "bfloat16", out_name="to_bf16.pt")
        sds = [state_dict_of(p) for p in paths]
        for k in sds[0]:
            with self.subTest(tensor=k):
                if is_buffer_name(k):
                    v = sds[-1][k]
                    want = v.to(torch.bfloat16) if v.is_floating_point() else v
                else:
                    want = swa_fold([sd[k] for sd in sds]).to(torch.bfloat16)
                self.assert_bits(got[k], want, k)


class RulesTest(AverageTest):
    """6: --rules, --weights, integer tensors."""

    def setUp(self):
        super().setUp()
        self.paths = run_paths("cnn")
        self.sds = [state_dict_of(p) for p in self.paths]

    def avg(self, k):
        return swa_fold([sd[k] for sd in self.sds])

    def test_patterns_on_a_1mb_name(self):
        # RE2: linear in the name, whatever the pattern (std::regex overflowed its stack here).
        import resource
        long_name = "a" * (1 << 20) + ".w"
        paths = [save_state(self.path("long%d.pt" % i), {long_name: torch.full((2,), float(i)), "b": torch.ones(1)})
                 for i in range(2)]
        rules = write_rules(self.path("rules.json"), [{"match": "^(a|aa)*$", "action": "drop"},
                                                      {"match": "(a|b)*\\.w$", "action": "first"}])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = self.path("long.pt")
        p = swavg("average", *paths, "--buffer", "(a|b)*\\.w$", "--buffer", "(a+)+x", "--rules", rules, "-o", out,
                  "--json")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # CPU time: a busy machine does not fail the test
        self.assertLess((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 20)
        details = {t["name"]: t for t in json.loads(p.stdout)["details"]}
        self.assertEqual(details[long_name]["action"], "first")
        self.assertTrue(details[long_name]["buffer"])
        self.assert_bits(load_output(out)[long_name], torch.zeros(2), "the first input's")

    def test_bad_patterns_name_the_option(self):
        paths = self.paths[:2]
        out = self.path("x.pt")
        for pattern in ("(", "(?=fc)", "(a)\\1"):
            with self.subTest(pattern=pattern):
                p = swavg("average", *paths, "--buffer", pattern, "-o", out, check=False)
                self.assert_failed(p, 2, out, "--buffer: invalid regular expression '%s'" % pattern, "RE2")
                rules = write_rules(self.path("rules.json"), [{"match": pattern, "action": "drop"}])
                p = swavg("average", *paths, "--rules", rules, "-o", out, check=False)
                self.assert_failed(p, 2, out, "rules.json: rule 1: invalid regular expression")

    def test_rules(self):
        rules = write_rules(self.path("rules.json"), [
            {"match": "^bn1\\.", "action": "drop"},
            {"match": "fc\\.weight$", "action": "latest"},
            {"match": "conv1", "action": "first"},   # searched anywhere in the name
            {"match": "running_var", "action": "average"},
            {"match": "conv", "action": "drop"},     # never reached for conv1.*: first match wins
            {"match": "conv2", "action": "latest"},  # never reached: conv2 matched the rule above
        ])
        got = self.average(*self.paths, "--rules", rules)
        expected = {}
        for k in self.sds[0]:
            if k.startswith("bn1.") or k.startswith("conv2."):
                continue
            if k == "fc.weight":
                expected[k] = self.sds[-1][k]
            elif k.startswith("conv1."):
                expected[k] = self.sds[0][k]
            elif k.endswith("running_var"):
                expected[k] = self.avg(k)
            elif is_buffer_name(k):
                expected[k] = self.sds[-1][k]
            else:
                expected[k] = self.avg(k)
        self.assert_keys(got, expected.keys())
        for k, v in expected.items():
            with self.subTest(tensor=k):
                self.assert_bits(got[k], v, k)

    def test_bad_rules(self):
        out = self.path("x.pt")
        for bad in ([{"match": "(", "action": "average"}], [{"match": "a", "action": "explode"}]):
            with self.subTest(rules=bad):
                p = swavg("average", *self.paths, "--rules", write_rules(self.path("bad.json"), bad),
                          "-o", out, check=False)
                self.assert_failed(p, 2, out)

    def check_weights(self, ws, got):
        norm = [w / sum(ws) for w in ws]
        for k, v in self.sds[0].items():
            with self.subTest(weights=ws, tensor=k):
                if is_buffer_name(k):
                    self.assert_bits(got[k], self.sds[len(ws) - 1][k], k)
                    continue
                xs = [sd[k] for sd in self.sds[:len(ws)]]
                ref = float64_weighted_mean(xs, norm)
                scale = torch.stack([x.double().abs() for x in xs]).amax(0)
                err = (got[k].double() - ref).abs()
                bad = err > 1e-6 * scale + 1e-30
                self.assertFalse(bool(bad.any()), "%s: |swavg - float64 reference| %g > 1e-6 relative"
                                 % (k, (err / scale.clamp(min=1e-30)).max().item()))

    def test_weights(self):
        got = self.average(*self.paths[:4], "--weights", "1,2,3,4")
        self.check_weights([1, 2, 3, 4], got)
        # The documented fold: lerp with w_k / (w_1 + .. + w_k) (1, 2/3, 1/2, 2/5): bit-exact.
        for k, v in self.sds[0].items():
            if not is_buffer_name(k):
                self.assert_bits(got[k], lerp_fold([sd[k] for sd in self.sds[:4]], weighted_weights([1, 2, 3, 4])), k)
        # A zero weight leaves that checkpoint out (its lerp weight is 0).
        got = self.average(*self.paths[:3], "--weights", "1,0,3", out_name="zero.pt")
        self.check_weights([1, 0, 3], got)
        # ... also the first: its copy is replaced by the next (lerp weight 1 / 1).
        got = self.average(*self.paths[:3], "--weights", "0,1,3", out_name="zero_first.pt")
        self.check_weights([0, 1, 3], got)

    def test_bad_weights(self):
        out = self.path("x.pt")
        for ws in ("1,2,3", "1,-1,1,1", "0,0,0,0"):
            with self.subTest(weights=ws):
                p = swavg("average", *self.paths[:4], "--weights", ws, "-o", out, check=False)
                self.assert_failed(p, 2, out)

    def test_int_latest_and_first(self):
        ints = [k for k, v in self.sds[0].items() if not v.is_floating_point()]
        self.assertTrue(ints)
        for flag, src in ((None, -1), ("first", 0)):
            with self.subTest(int=flag):
                extra = ["--int", flag] if flag else []
                got = self.average(*self.paths, *extra, "--force")
                for k in ints:
                    self.assert_bits(got[k], self.sds[src][k], k)
                    self.assertFalse(same_bits(self.sds[0][k], self.sds[-1][k]))
        # Also an int tensor that is not a buffer by name.
        cpaths = run_paths("custom")
        got = self.average(*cpaths, "--int", "first", out_name="custom.pt")
        self.assert_bits(got["seen"], state_dict_of(cpaths[0])["seen"], "seen")

    def test_int_error(self):
        out = self.path("x.pt")
        p = swavg("average", *self.paths, "--int", "error", "-o", out, check=False)
        self.assert_failed(p, 4, out, "num_batches_tracked")
        # Equal integer values across inputs: no error.
        same = []
        for i, sd in enumerate(self.sds):
            sd = copy_state(sd)
            for k in sd:
                if k.endswith("num_batches_tracked"):
                    sd[k] = torch.tensor(7, dtype=torch.int64)
            same.append(save_state(self.path("same_%d.pt" % i), sd))
        got = self.average(*same, "--int", "error")
        for k in got:
            if k.endswith("num_batches_tracked"):
                self.assert_bits(got[k], torch.tensor(7, dtype=torch.int64), k)
            elif not is_buffer_name(k):
                self.assert_bits(got[k], self.avg(k), k)


class MismatchTest(AverageTest):
    """7: inputs that disagree: exit 4, every difference listed, nothing written; --allow-missing."""

    def setUp(self):
        super().setUp()
        self.paths = run_paths("cnn")[:4]
        self.sds = [state_dict_of(p) for p in self.paths]

    def variant(self, i, name, edit):
        sd = copy_state(self.sds[i])
        edit(sd)
        return save_state(self.path(name), {"model": sd})  # laid out as the run's checkpoints

    def test_every_difference_listed(self):
        def missing(sd):
            del sd["fc.bias"]

        def shape(sd):
            sd["fc.weight"] = torch.zeros(10, 17)

        def dtype(sd):
            sd["conv2.bias"] = sd["conv2.bias"].double()

        def extra(sd):
            sd["extra.weight"] = torch.ones(3)

        files = [self.paths[0], self.variant(1, "missing.pt", missing), self.variant(2, "shape.pt", shape),
                 self.variant(3, "dtype.pt", dtype), self.variant(3, "extra.pt", extra)]
        out = self.path("avg.pt")
        p = swavg("average", *files, "-o", out, check=False)
        self.assert_failed(p, 4, out, "missing.pt", "fc.bias", "shape.pt", "fc.weight", "17",
                           "dtype.pt", "conv2.bias", "extra.pt", "extra.weight")
        self.assertTrue("float64" in p.stderr or "double" in p.stderr, p.stderr)
        # --allow-missing does not excuse shapes or dtypes.
        p = swavg("average", *files[:4], "--allow-missing", "-o", out, check=False)
        self.assert_failed(p, 4, out, "shape.pt", "fc.weight", "dtype.pt", "conv2.bias")

    def test_allow_missing(self):
        def missing(sd):
            del sd["fc.bias"]
            del sd["bn2.running_mean"]

        files = [self.paths[0], self.variant(1, "missing.pt", missing), self.paths[2], self.paths[3]]
        out = self.path("avg.pt")
        p = swavg("average", *files, "-o", out, check=False)
        self.assert_failed(p, 4, out, "missing.pt", "fc.bias", "bn2.running_mean")
        got = self.average(*files, "--allow-missing", "--sort", "none", out_name="allowed.pt")
        self.assert_keys(got, self.sds[0].keys())
        for k in self.sds[0]:
            with self.subTest(tensor=k):
                if k == "fc.bias":  # averaged over the three that have it
                    want = swa_fold([self.sds[i][k] for i in (0, 2, 3)])
                    self.assertFalse(same_bits(want, swa_fold([sd[k] for sd in self.sds])))
                elif is_buffer_name(k):
                    want = self.sds[3][k]
                else:
                    want = swa_fold([sd[k] for sd in self.sds])
                self.assert_bits(got[k], want, k)


class LayoutTest(AverageTest):
    """8: --layout averaged-model loads into AveragedModel strictly, n_averaged = N."""

    def check(self, run):
        paths = run_paths(run)
        got = self.average(*paths, "--layout", "averaged-model", out_name=run + ".pt")
        want, _ = averaged_model_reference(run, paths, use_buffers=False)
        last = state_dict_of(paths[-1])
        plain = {k: (last[k] if is_buffer_name(k) else want[k]) for k in last}
        # n_averaged may come first (AveragedModel.state_dict's order) or last; the module's
        # tensors keep their order.
        self.assertEqual(sorted(got.keys()), sorted(["module." + k for k in plain] + ["n_averaged"]))
        self.assertEqual([k for k in got if k != "n_averaged"], ["module." + k for k in plain])
        n = got["n_averaged"]
        self.assertEqual(n.dtype, torch.int64)
        self.assertEqual(n.dim(), 0)
        self.assertEqual(int(n), len(paths))
        for k, v in plain.items():
            self.assert_bits(got["module." + k], v, k)
        avg = torch.optim.swa_utils.AveragedModel(model_for(run))
        avg.load_state_dict(got, strict=True)
        self.assertEqual(int(avg.n_averaged), len(paths))
        for k, v in avg.module.named_parameters():
            self.assert_bits(v.detach(), want[k], k)

    def test_cnn(self):
        self.check("cnn")

    def test_resnet18(self):
        self.check("resnet18")


class _Extra(torch.nn.Module):
    """A module with extra state (as Transformer Engine's layers have): _extra_state in its state dict."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.version = {"version": 3}

    def get_extra_state(self):
        return self.version

    def set_extra_state(self, state):
        self.version = state


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = _Extra()
        self.bn = torch.nn.BatchNorm1d(2)


class NamesTest(AverageTest):
    """Names as PyTorch changes them: --strip-prefix once per prefix, from every entry
    (consume_prefix_in_state_dict_if_present), and --layout averaged-model naming every entry as
    AveragedModel.state_dict() does."""

    def nets(self, prefix=""):
        torch.manual_seed(0)
        nets = [_Net() for _ in range(3)]
        paths = []
        for i, net in enumerate(nets):
            sd = net.state_dict()
            paths.append(save_state(self.path("net%d.pt" % i), {prefix + k: v for k, v in sd.items()}))
        return nets, paths

    def test_strip_prefix_once_from_every_entry(self):
        from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
        nets, paths = self.nets(prefix="model.model.")  # a Lightning module around a transformers model
        got = self.average(*paths, "--strip-prefix", "model.", out_name="stripped.pt")
        want = torch.load(paths[-1], weights_only=True)
        consume_prefix_in_state_dict_if_present(want, "model.")
        self.assertEqual(sorted(got.keys()), sorted(want.keys()))  # the tensors first, then the other entries
        self.assertEqual(got["model.a._extra_state"], {"version": 3})

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = _Net()

        Wrapper().load_state_dict(got, strict=True)
        avg = torch.optim.swa_utils.AveragedModel(nets[0])
        for net in nets:
            avg.update_parameters(net)
        self.assert_bits(got["model.a.lin.weight"], avg.module.a.lin.weight.detach(), "weight")
        # Two prefixes: each once, in the order given, as two consume_prefix_... calls.
        got = self.average(*paths, "--strip-prefix", "model.", "--strip-prefix", "model.", out_name="two.pt")
        consume_prefix_in_state_dict_if_present(want, "model.")
        self.assertEqual(sorted(got.keys()), sorted(want.keys()))
        _Net().load_state_dict(got, strict=True)

    def test_averaged_model_layout_names_every_entry(self):
        nets, paths = self.nets()
        got = self.average(*paths, "--layout", "averaged-model", out_name="am.pt")
        avg = torch.optim.swa_utils.AveragedModel(_Net())
        self.assertEqual(sorted(got.keys()), sorted(avg.state_dict().keys()))
        self.assertEqual(got["module.a._extra_state"], {"version": 3})
        avg.load_state_dict(got, strict=True)
        self.assertEqual(int(avg.n_averaged), 3)
        # Resumed: the extra state comes back under its model name, once.
        more = self.average(*paths, "--layout", "averaged-model", "--resume", self.path("am.pt"),
                            out_name="am2.pt")
        self.assertEqual(sorted(more.keys()), sorted(avg.state_dict().keys()))

    def test_exclude_leaves_out_entries(self):
        """torchtitan keeps the model's weights at the top level beside optimizer and train_state."""
        torch.manual_seed(0)
        paths = []
        for i in range(2):
            sd = {"tok.weight": torch.randn(4, 2), "out.weight": torch.randn(2, 2),
                  "optimizer": {"state": {"tok.weight": {"exp_avg": torch.randn(4, 2)}}, "lr": 0.1},
                  "train_state": {"step": 10 * (i + 1)}}
            paths.append(save_state(self.path("titan%d.pt" % i), sd))
        got = self.average(*paths, "--exclude", "optimizer", "--exclude", "train_state", out_name="titan.pt")
        self.assertEqual(sorted(got.keys()), ["out.weight", "tok.weight"])
        sds = [torch.load(p) for p in paths]  # written here (torch 1.13's weights_only refuses a float)
        self.assert_bits(got["tok.weight"], swa_fold([sd["tok.weight"] for sd in sds]), "tok.weight")
        p = swavg("average", *paths, "--exclude", "optimiser", "-o", self.path("typo.pt"), check=False)
        self.assert_failed(p, 2, self.path("typo.pt"), "--exclude optimiser", paths[0], "swavg inspect")


class SelectionTest(AverageTest):
    """9: --inputs-from, --sort, --last, --every."""

    def setUp(self):
        super().setUp()
        self.nat = {i: fixture("runs/natural/ckpt_%d.pt" % i) for i in (1, 2, 10)}

    def selected(self, *args):
        """Runs average on the natural fixtures; returns (the report's inputs, output w, output step)."""
        out = self.path("sel.pt")
        p = swavg("average", *args, "-o", out, "--force", "--json")
        got = load_output(out)
        return json.loads(p.stdout)["inputs"], got["w"], int(got["step"])

    def assert_selected(self, order, result):
        inputs, w, step = result
        self.assertEqual([os.path.basename(x) for x in inputs], ["ckpt_%d.pt" % i for i in order])
        want = swa_fold([torch.tensor([float(i), -float(i)]) for i in order])
        self.assert_bits(w, want, "w")
        self.assertEqual(step, order[-1])

    def test_sort(self):
        given = [self.nat[10], self.nat[1], self.nat[2]]
        self.assert_selected([1, 2, 10], self.selected(*given))  # step order by default
        self.assert_selected([10, 1, 2], self.selected(*given, "--sort", "none"))
        self.assert_selected([1, 2, 10], self.selected(*given, "--sort", "natural"))
        self.assert_selected([1, 10, 2], self.selected(*given, "--sort", "name"))
        copies = {}
        for t, i in enumerate((2, 10, 1)):  # modification times 2 < 10 < 1
            copies[i] = self.path("ckpt_%d.pt" % i)
            shutil.copy(self.nat[i], copies[i])
            os.utime(copies[i], (1_600_000_000 + t * 100, 1_600_000_000 + t * 100))
        self.assert_selected([2, 10, 1], self.selected(copies[1], copies[2], copies[10], "--sort", "mtime"))
        p = swavg("average", *given, "--sort", "size", "-o", self.path("x.pt"), check=False)
        self.assert_failed(p, 2, self.path("x.pt"))

    def test_inputs_from(self):
        listing = self.path("list.txt")
        with open(listing, "w") as f:
            f.write("\n".join([self.nat[2], self.nat[10], self.nat[1]]) + "\n")
        self.assert_selected([1, 2, 10], self.selected("--inputs-from", listing))
        self.assert_selected([2, 10, 1], self.selected("--inputs-from", listing, "--sort", "none"))
        self.assert_selected([1, 2, 10], self.selected("--inputs-from", listing, "--sort", "natural"))
        out = self.path("stdin.pt")
        p = swavg_input("\n".join([self.nat[10], self.nat[2]]) + "\n",
                        "average", "--inputs-from", "-", "--sort", "natural", "-o", out, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assert_selected([2, 10], (json.loads(p.stdout)["inputs"], load_output(out)["w"],
                                       int(load_output(out)["step"])))
        # With a TorchScript --model (read without LibTorch since swavg reads TorchScript itself: no
        # hand-over to swavg-torch) the paths read from stdin are used as well.
        p = swavg_input("\n".join([self.nat[10], self.nat[2]]) + "\n", "-v", "average", "--inputs-from", "-",
                        "--sort", "natural", "--model", fixture("scripted.ts"), "-o", out, "--force", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("swavg-torch", p.stderr)
        self.assert_selected([2, 10], (json.loads(p.stdout)["inputs"], load_output(out)["w"],
                                       int(load_output(out)["step"])))

    def test_step_order_is_named(self):
        """The info line, the report and the dry run say which order was folded, first and last."""
        given = [self.nat[10], self.nat[1], self.nat[2]]
        out = self.path("named.pt")
        p = swavg("average", *given, "-o", out, "--json")
        self.assertEqual(json.loads(p.stdout)["order"], "natural")
        self.assertIn("folded in natural (step) order: first %s, last %s" % (self.nat[1], self.nat[10]), p.stderr)
        p = swavg("average", *given, "-o", out, "--force", "--sort", "none")
        self.assertIn("the order given (--sort none): first %s, last %s" % (self.nat[10], self.nat[2]), p.stderr)
        p = swavg("average", *given, "-o", out, "--force", "--dry-run", "--json")
        plan = json.loads(p.stdout)
        self.assertEqual(plan["order"], "natural")
        self.assertEqual([i["path"] for i in plan["inputs"]], [self.nat[1], self.nat[2], self.nat[10]])

    def test_hugging_face_step_folders(self):
        """checkpoint-500/ checkpoint-1000/ (unpadded, as the Trainer names them): a shell glob gives
        1000 first; swavg folds 500 first, as the steps say."""
        paths = []
        for step, i in ((500, 1), (1000, 2), (1500, 10)):
            folder = self.path("run/checkpoint-%d" % step)
            os.makedirs(folder)
            shutil.copy(self.nat[i], os.path.join(folder, "pytorch_model.bin"))
            paths.append(folder + "/")
        globbed = sorted(paths)  # what bash's glob gives: checkpoint-1000/ checkpoint-1500/ checkpoint-500/
        self.assertEqual([os.path.basename(p[:-1]) for p in globbed],
                         ["checkpoint-1000", "checkpoint-1500", "checkpoint-500"])
        out = self.path("hf.pt")
        p = swavg("average", *globbed, "-o", out, "--json")
        self.assertEqual(json.loads(p.stdout)["inputs"], paths)
        got = load_output(out)
        self.assert_bits(got["w"], swa_fold([torch.tensor([float(i), -float(i)]) for i in (1, 2, 10)]), "w")
        self.assertEqual(int(got["step"]), 10)  # the latest step's entry

    def test_last_and_every(self):
        paths = run_paths("cnn")
        sds = [state_dict_of(p) for p in paths]

        def check(args, picked):
            out = self.path("le.pt")
            p = swavg("average", *paths, *args, "-o", out, "--force", "--json")
            self.assertEqual([os.path.basename(x) for x in json.loads(p.stdout)["inputs"]],
                             ["ckpt_%d.pt" % i for i in picked], args)
            got = load_output(out)
            for k in ("conv1.weight", "fc.bias"):
                self.assert_bits(got[k], swa_fold([sds[i][k] for i in picked]), "%s %s" % (args, k))
            self.assert_bits(got["bn1.running_mean"], sds[picked[-1]]["bn1.running_mean"], "buffer")

        check(["--last", "3"], [3, 4, 5])
        check(["--every", "2"], [1, 3, 5])  # the K-th, 2K-th, ...
        check(["--every", "2", "--last", "2"], [3, 5])
        check(["--inputs-from", "/dev/null", "--last", "1"], [5])
        for bad in (["--every", "0"], ["--last", "-1"]):
            p = swavg("average", *paths, *bad, "-o", self.path("bad.pt"), check=False)
            self.assert_failed(p, 2, self.path("bad.pt"))


class FormatTest(AverageTest):
    """10: safetensors output equals torch output bit for bit."""

    def test_safetensors(self):
        paths = run_paths("cnn")
        want = self.average(*paths)
        for name, extra in (("avg.safetensors", []), ("avg.bin", ["--format", "safetensors"])):
            with self.subTest(name=name):
                out = self.path(name)
                swavg("average", *paths, *extra, "-o", out)
                got, _ = load_safetensors(out)
                self.assertEqual(sorted(got), sorted(want))
                for k in want:
                    self.assert_bits(got[k], want[k], k)

    def test_safetensors_resume(self):
        # An average written as safetensors (n and mode in __metadata__) can be resumed.
        paths = run_paths("cnn")
        ref, _ = averaged_model_reference("cnn", paths, use_buffers=False)
        want = {k: (state_dict_of(paths[-1])[k] if is_buffer_name(k) else v) for k, v in ref.items()}
        first = self.path("first.safetensors")
        swavg("average", *paths[:3], "-o", first)
        rest = self.path("rest.pt")
        swavg("average", *paths[3:], "--resume", first, "-o", rest)
        got = load_output(rest)
        self.assert_keys(got, want.keys())
        for k in want:
            self.assert_bits(got[k], want[k], k)


class NonFiniteTest(AverageTest):
    """11: NaN / inf in an input: exit 3 naming file and tensor, unless --allow-nonfinite."""

    def test_nan_and_inf(self):
        paths = run_paths("cnn")[:3]
        sds = [state_dict_of(p) for p in paths]
        bad = copy_state(sds[1])
        bad["conv2.weight"][0, 0, 0, 0] = float("nan")
        bad["fc.bias"][3] = float("inf")
        badpath = save_state(self.path("poisoned.pt"), {"model": bad})
        files = [paths[0], badpath, paths[2]]
        out = self.path("avg.pt")
        p = swavg("average", *files, "-o", out, check=False)
        self.assert_failed(p, 3, out, "poisoned.pt", "conv2.weight")
        got = self.average(*files, "--allow-nonfinite", "--sort", "none", out_name="allowed.pt")
        for k in sds[0]:
            if is_buffer_name(k):
                continue
            want = swa_fold([sds[0][k], bad[k], sds[2][k]])
            self.assertTrue(nan_equal(got[k], want), k)
        self.assertTrue(bool(torch.isnan(got["conv2.weight"][0, 0, 0, 0])))
        self.assertTrue(bool(torch.isnan(got["fc.bias"][3])))  # inf - inf after the inf is folded in


class ReportTest(AverageTest):
    """12: --json on stdout, --report to a file."""

    def test_report(self):
        paths = run_paths("cnn")
        out = self.path("avg.pt")
        report_path = self.path("report.json")
        p = swavg("average", *paths, "-o", out, "--json", "--report", report_path)
        on_stdout = json.loads(p.stdout)
        with open(report_path) as f:
            in_file = json.load(f)
        sd = state_dict_of(paths[0])
        for r in (on_stdout, in_file):
            self.assertEqual(r["mode"], "swa")
            self.assertEqual(r["n"], 6)
            self.assertEqual([os.path.realpath(x) for x in r["inputs"]], [os.path.realpath(x) for x in paths])
            self.assertEqual(r["tensors"], len(sd))
            self.assertEqual(sorted(r["buffers"]), sorted(k for k in sd if is_buffer_name(k)))
            self.assertEqual(r["rules"], [])
            param_bytes = sum(v.numel() * v.element_size() for k, v in sd.items() if not is_buffer_name(k))
            self.assertGreaterEqual(r["bytes_read"], param_bytes * len(paths))
            self.assertLessEqual(r["bytes_read"], sum(os.path.getsize(x) for x in paths))
            all_bytes = sum(v.numel() * v.element_size() for v in sd.values())
            self.assertGreaterEqual(r["bytes_written"], all_bytes)
            self.assertLessEqual(r["bytes_written"], os.path.getsize(out))
            self.assertIsInstance(r["wall_time_s"], (int, float))
            self.assertGreaterEqual(r["wall_time_s"], 0)
        self.assertEqual({k: v for k, v in on_stdout.items() if k != "wall_time_s"},
                         {k: v for k, v in in_file.items() if k != "wall_time_s"})

    def test_report_rules_and_weights(self):
        paths = run_paths("cnn")[:3]
        rules = write_rules(self.path("rules.json"), [{"match": "^fc\\.", "action": "drop"}])
        p = swavg("average", *paths, "--weights", "1,1,2", "--rules", rules, "-o", self.path("w.pt"), "--json")
        r = json.loads(p.stdout)
        self.assertEqual(r["mode"], "weighted")
        self.assertEqual(r["n"], 3)
        self.assertEqual(r["tensors"], len(state_dict_of(paths[0])) - 2)
        self.assertTrue(r["rules"], "the drop rule was applied but the report lists no rules")
        def strings(x):
            if isinstance(x, str):
                yield x
            elif isinstance(x, dict):
                for v in x.values():
                    yield from strings(v)
            elif isinstance(x, list):
                for v in x:
                    yield from strings(v)
        self.assertIn("^fc\\.", list(strings(r["rules"])), "the report should name the rule's pattern")


class UsageTest(AverageTest):
    """Output rules, bad usage, devices."""

    def test_existing_output_and_force(self):
        paths = run_paths("cnn")[:2]
        out = self.path("avg.pt")
        with open(out, "w") as f:
            f.write("keep me")
        p = swavg("average", *paths, "-o", out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "keep me")
        swavg("average", *paths, "-o", out, "--force")
        self.assert_bits(load_output(out)["fc.bias"], swa_fold([state_dict_of(x)["fc.bias"] for x in paths]), "fc.bias")

    def test_output_is_input(self):
        src = run_paths("cnn")[:2]
        a, b = self.path("a.pt"), self.path("b.pt")
        shutil.copy(src[0], a)
        shutil.copy(src[1], b)
        p = swavg("average", a, b, "-o", b, "--force", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertTrue(same_bits(torch.load(b, weights_only=False)["model"]["fc.bias"], state_dict_of(src[1])["fc.bias"]))

    def test_bad_usage(self):
        paths = run_paths("cnn")[:2]
        out = self.path("x.pt")
        for args in ([*paths], ["-o", out], [*paths, "-o", out, "--decay", "0.9"],
                     [*paths, "-o", out, "--bogus"]):
            with self.subTest(args=args[len(paths):]):
                p = swavg("average", *args, check=False)
                self.assert_failed(p, 2, out)

    def test_missing_input(self):
        out = self.path("x.pt")
        p = swavg("average", run_paths("cnn")[0], self.path("nope.pt"), "-o", out, check=False)
        self.assert_failed(p, 5, out, "nope.pt")

    def test_device(self):
        paths = run_paths("cnn")
        out = self.path("cuda.pt")
        p = swavg("average", *paths, "--device", "cuda", "-o", out, check=False)
        if torch.cuda.is_available() and p.returncode == 0:
            # AveragedModel on the GPU: PyTorch 2.x folds there with get_swa_multi_avg_fn's
            # _foreach_lerp_, which swavg-torch runs on CUDA too, so the parameters match bit for bit.
            got = load_output(out)
            model = model_for("cnn").cuda()
            avg = torch.optim.swa_utils.AveragedModel(model, use_buffers=False)
            for x in paths:
                model.load_state_dict(state_dict_of(x))
                avg.update_parameters(model)
            for k, v in avg.module.named_parameters():
                self.assertTrue(same_bits(got[k], v.detach().cpu()), k)
        else:
            self.assertNotIn(p.returncode, (0, 1), p.stderr)
            self.assertIn("cuda", p.stderr.lower())
            self.assertFalse(os.path.exists(out))
        p = swavg("average", *paths, "--device", "tpu", "-o", out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)


if __name__ == "__main__":
    unittest.main()
