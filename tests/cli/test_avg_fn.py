"""swavg average --avg-fn / --multi-avg-fn against real PyTorch.

--avg-fn is compared bit for bit with torch.optim.swa_utils.AveragedModel(model, avg_fn=f) in the
PyTorch installed here (1.13), --multi-avg-fn with the same Python function applied to lists as
PyTorch 2.x's AveragedModel(multi_avg_fn=f) applies it. Fixtures (a small net with BatchNorm, four
checkpoints, in float32, float16 and bfloat16) and the TorchScript functions are made here with
fixed seeds.
"""
import copy
import hashlib
import json
import os
import subprocess
import unittest
from typing import List

import torch
from torch import Tensor, nn

from common import SWAVG, TempDirTest, same_bits, swavg

CHECKPOINTS = 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.bn = nn.BatchNorm1d(32)
        self.fc2 = nn.Linear(32, 8)


def schedule_avg(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
    """A schedule weight 2 / (n + 2) for the new checkpoint: num_averaged matters."""
    return averaged + (current - averaged) * 2 / (num_averaged + 2)


def mutates_current(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
    """Writes into `current` (the mapped input in swavg, the model's parameter in PyTorch)."""
    current.sub_(averaged)
    return averaged + current * 2 / (num_averaged + 2)


def swa_avg(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
    return averaged + (current - averaged) / (num_averaged + 1)


class ScheduleModule(nn.Module):
    def forward(self, averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
        return averaged * 0.75 + current * 0.25 + num_averaged * 1e-3


class MultiSchedule(nn.Module):
    """Updates the lists in place; the offset by list position makes the order matter."""

    def forward(self, averaged: List[Tensor], current: List[Tensor], num_averaged: Tensor) -> None:
        for i in range(len(averaged)):
            a = averaged[i]
            a.copy_(a + (current[i] - a) * 2 / (num_averaged + 2))
            if a.is_floating_point():
                a.add_(i * 1e-3)


class MultiRaises(nn.Module):
    def forward(self, averaged: List[Tensor], current: List[Tensor], num_averaged: Tensor) -> None:
        if int(num_averaged) == 2:
            raise RuntimeError("no third checkpoint")


def arity_two(averaged: Tensor, current: Tensor) -> Tensor:
    return averaged + current


def returns_list(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> List[Tensor]:
    return [averaged, current]


def bad_shape(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
    return torch.zeros(3, 5, 7)


def checkpoint_state(i, dtype):
    torch.manual_seed(1000 + i)
    net = Net()
    with torch.no_grad():
        net.bn.running_mean.normal_()
        net.bn.running_var.uniform_(0.5, 2.0)
        net.bn.weight.normal_()
        net.bn.num_batches_tracked.fill_(10 * i + 3)
    return net.to(dtype).state_dict()


def net_from(sd):
    net = Net().to(sd["fc1.weight"].dtype)
    net.load_state_dict(sd)
    return net


# AveragedModel(use_buffers=False) keeps the buffers it deep-copied from the first model in
# PyTorch 1.13 (--buffers first) and copies the latest model's in at every update in 2.x (--buffers
# latest): the tests compare with the torch they run under.
USE_BUFFERS_FALSE = "first" if torch.__version__.startswith("1.") else "latest"

def averaged_model_reference(states, fn, use_buffers):
    """AveragedModel(model, avg_fn=fn) updated with each checkpoint: the running torch's own code."""
    models = [net_from(sd) for sd in states]
    avg = torch.optim.swa_utils.AveragedModel(models[0], avg_fn=fn, use_buffers=use_buffers)
    for m in models:
        avg.update_parameters(m)
    return avg.module.state_dict()


def multi_reference(states, fn, names, integer_names):
    """PyTorch 2.x's update_parameters with multi_avg_fn: copy the first, then one call per later
    checkpoint with the lists (floating tensors in state-dict order, then the integer ones)."""
    averaged = {k: states[0][k].clone() for k in names}
    for n, sd in enumerate(states[1:], start=1):
        for group in ([k for k in names if k not in integer_names], [k for k in names if k in integer_names]):
            if group:
                fn([averaged[k] for k in group], [sd[k] for k in group], torch.tensor(n))
    return averaged


class AvgFnTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.fns = {}
        for name, f in [("schedule", schedule_avg), ("swa", swa_avg), ("mutates", mutates_current), ("arity", arity_two),
                        ("returns_list", returns_list), ("bad_shape", bad_shape)]:
            self.fns[name] = self.path(name + ".ts")
            torch.jit.script(f).save(self.fns[name])
        self.fns["module"] = self.path("module.ts")
        torch.jit.script(ScheduleModule()).save(self.fns["module"])
        self.fns["multi"] = self.path("multi.ts")
        torch.jit.script(MultiSchedule()).save(self.fns["multi"])
        self.fns["multi_raises"] = self.path("multi_raises.ts")
        torch.jit.script(MultiRaises()).save(self.fns["multi_raises"])

    def checkpoints(self, dtype):
        states, paths = [], []
        for i in range(CHECKPOINTS):
            sd = checkpoint_state(i, dtype)
            path = self.path("ckpt_%s_%d.pt" % (str(dtype).split(".")[-1], i))
            torch.save(sd, path)
            states.append(sd)
            paths.append(path)
        return states, paths

    def average(self, *args, out="avg.pt"):
        path = self.path(out)
        swavg("average", *args, "-o", path)
        return torch.load(path, weights_only=True)

    def assert_all_bits(self, got, want, names=None):
        names = list(want) if names is None else names
        for k in names:
            self.assertIn(k, got)
            self.assertTrue(same_bits(got[k], want[k]), "tensor %s: %s vs %s" % (k, got[k], want[k]))

    def assert_refused(self, args, code, *needles, out="refused.pt"):
        path = self.path(out)
        p = swavg("average", *args, "-o", path, check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        for needle in needles:
            self.assertIn(needle, p.stderr)
        self.assertFalse(os.path.exists(path), "an output was written")
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith(out)], [])
        return p


class AveragedModelTest(AvgFnTest):
    def check(self, dtype, use_buffers):
        states, paths = self.checkpoints(dtype)
        buffers = "average" if use_buffers else USE_BUFFERS_FALSE
        got = self.average("--avg-fn", self.fns["schedule"], "--buffers", buffers, *paths)
        want = averaged_model_reference(states, schedule_avg, use_buffers)
        self.assertEqual(list(got), list(want))
        self.assert_all_bits(got, want)
        for k, t in got.items():
            self.assertEqual(t.dtype, states[0][k].dtype, k)
        # The check can fail: num_averaged off by one gives other bits.
        off = averaged_model_reference(states, lambda a, c, n: schedule_avg(a, c, n + 1), use_buffers)
        self.assertFalse(same_bits(got["fc1.weight"], off["fc1.weight"]))
        return got

    def test_float32(self):
        self.check(torch.float32, use_buffers=False)

    def test_float16(self):
        self.check(torch.float16, use_buffers=False)

    def test_bfloat16(self):
        self.check(torch.bfloat16, use_buffers=False)

    def test_float32_use_buffers(self):
        got = self.check(torch.float32, use_buffers=True)
        self.assertEqual(got["bn.num_batches_tracked"].dtype, torch.int64)

    def test_float16_use_buffers(self):
        self.check(torch.float16, use_buffers=True)

    def test_bfloat16_use_buffers(self):
        self.check(torch.bfloat16, use_buffers=True)

    def test_buffers_latest_takes_the_last_checkpoints(self):
        states, paths = self.checkpoints(torch.float32)
        got = self.average("--avg-fn", self.fns["schedule"], "--device", "cpu", *paths)
        want = averaged_model_reference(states, schedule_avg, use_buffers=False)
        params = [k for k, _ in net_from(states[0]).named_parameters()]
        self.assert_all_bits(got, want, params)
        for k in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):
            self.assertTrue(same_bits(got[k], states[-1][k]), k)

    def test_module_form(self):
        states, paths = self.checkpoints(torch.float32)
        got = self.average("--avg-fn", self.fns["module"], "--buffers", USE_BUFFERS_FALSE, *paths)
        self.assert_all_bits(got, averaged_model_reference(states, ScheduleModule(), use_buffers=False))

    def test_a_function_writing_into_current(self):
        states, paths = self.checkpoints(torch.float32)
        got = self.average("--avg-fn", self.fns["mutates"], "--buffers", USE_BUFFERS_FALSE, *paths)
        self.assert_all_bits(got, averaged_model_reference(states, mutates_current, use_buffers=False))
        for i, path in enumerate(paths):
            self.assertTrue(same_bits(torch.load(path)["fc1.weight"], checkpoint_state(i, torch.float32)["fc1.weight"]))

    def test_the_default_function_is_swavg_average(self):
        states, paths = self.checkpoints(torch.float32)
        got = self.average("--avg-fn", self.fns["swa"], "--buffers", USE_BUFFERS_FALSE, *paths, out="fn.pt")
        self.assert_all_bits(got, averaged_model_reference(states, None, use_buffers=False))
        plain = self.average("--buffers", USE_BUFFERS_FALSE, *paths, out="plain.pt")
        self.assert_all_bits(got, plain)

    def test_accumulate_float32(self):
        states, paths = self.checkpoints(torch.float16)
        got = self.average("--avg-fn", self.fns["schedule"], "--buffers", USE_BUFFERS_FALSE, "--accumulate", "float32", *paths)
        wide = averaged_model_reference([{k: v.float() if v.is_floating_point() else v for k, v in sd.items()}
                                         for sd in states], schedule_avg, use_buffers=False)
        want = {k: v.half() if v.is_floating_point() else v for k, v in wide.items()}
        self.assert_all_bits(got, want)
        native = averaged_model_reference(states, schedule_avg, use_buffers=False)
        self.assertFalse(all(same_bits(native[k], want[k]) for k in want), "float32 accumulation changes nothing")

    def test_report_names_the_function(self):
        _, paths = self.checkpoints(torch.float32)
        report = self.path("report.json")
        self.average("--avg-fn", self.fns["schedule"], "--report", report, *paths)
        with open(report) as f:
            r = json.load(f)
        with open(self.fns["schedule"], "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(r["avg_fn"], {"option": "--avg-fn", "path": self.fns["schedule"], "sha256": digest})
        self.assertEqual({t["name"]: t["accumulate"] for t in r["details"]}["fc1.weight"], "float32")


class ResumeTest(AvgFnTest):
    def check_resume(self, dtype, *extra):
        _, paths = self.checkpoints(dtype)
        fn = ("--avg-fn", self.fns["schedule"], *extra)
        whole = self.average(*fn, *paths, out="whole.pt")
        self.average(*fn, *paths[:2], out="half.pt")
        resumed = self.average(*fn, "--resume", self.path("half.pt"), *paths[2:], out="resumed.pt")
        self.assert_all_bits(resumed, whole)

    def test_resume_equals_one_run_float32(self):
        self.check_resume(torch.float32, "--buffers", "average")

    def test_resume_equals_one_run_bfloat16(self):
        self.check_resume(torch.bfloat16)

    def test_resume_multi_equals_one_run(self):
        _, paths = self.checkpoints(torch.float32)
        fn = ("--multi-avg-fn", self.fns["multi"], "--buffers", "average")
        whole = self.average(*fn, *paths, out="whole.pt")
        self.average(*fn, *paths[:1], out="one.pt")
        resumed = self.average(*fn, "--resume", self.path("one.pt"), *paths[1:], out="resumed.pt")
        self.assert_all_bits(resumed, whole)

    def test_resume_with_another_function_is_refused(self):
        _, paths = self.checkpoints(torch.float32)
        self.average("--avg-fn", self.fns["schedule"], *paths[:2], out="half.pt")
        half = self.path("half.pt")
        self.assert_refused(["--avg-fn", self.fns["module"], "--resume", half, *paths[2:]], 2,
                            "cannot resume it with --avg-fn " + self.fns["module"])
        self.assert_refused(["--resume", half, *paths[2:]], 2, "was made with --avg-fn " + self.fns["schedule"],
                            "swavg's own average")
        self.average(*paths[:2], out="plain.pt")
        self.assert_refused(["--avg-fn", self.fns["schedule"], "--resume", self.path("plain.pt"), *paths[2:]], 2,
                            "was made with swavg's own average")


class MultiAvgFnTest(AvgFnTest):
    def check(self, dtype, use_buffers):
        states, paths = self.checkpoints(dtype)
        args = ["--multi-avg-fn", self.fns["multi"]] + (["--buffers", "average"] if use_buffers else [])
        got = self.average(*args, *paths)
        net = net_from(states[0])
        names = [k for k in states[0] if use_buffers or k in dict(net.named_parameters())]
        integers = {k for k in names if not states[0][k].is_floating_point()}
        want = multi_reference(states, MultiSchedule(), names, integers)
        self.assert_all_bits(got, want, names)
        off = multi_reference(states, lambda a, c, n: MultiSchedule()(a, c, n + 1), names, integers)
        self.assertFalse(same_bits(got["fc2.bias"], off["fc2.bias"]))
        if not use_buffers:
            self.assertTrue(same_bits(got["bn.running_mean"], states[-1]["bn.running_mean"]))

    def test_float32(self):
        self.check(torch.float32, use_buffers=False)

    def test_float32_use_buffers(self):
        self.check(torch.float32, use_buffers=True)

    def test_float16_use_buffers(self):
        self.check(torch.float16, use_buffers=True)

    def test_bfloat16(self):
        self.check(torch.bfloat16, use_buffers=False)

    def test_missing_tensors_are_refused(self):
        states, paths = self.checkpoints(torch.float32)
        sd = dict(states[1])
        del sd["fc2.bias"]
        torch.save(sd, paths[1])
        self.assert_refused(["--multi-avg-fn", self.fns["multi"], "--allow-missing", *paths], 2,
                            "needs every averaged tensor in every input")


class RefusedTest(AvgFnTest):
    def setUp(self):
        super().setUp()
        _, self.inputs = self.checkpoints(torch.float32)

    def test_not_torchscript(self):
        text = self.path("fn.py")
        with open(text, "w") as f:
            f.write("def f(a, b, n):\n    return a\n")
        self.assert_refused(["--avg-fn", text, *self.inputs], 2, "--avg-fn " + text, "expected TorchScript with "
                            "forward(Tensor averaged, Tensor current, Tensor num_averaged) -> Tensor")

    def test_a_checkpoint(self):
        self.assert_refused(["--avg-fn", self.inputs[0], *self.inputs[1:]], 2, "--avg-fn " + self.inputs[0],
                            "found a torch.save checkpoint")

    @unittest.skipUnless(hasattr(torch, "export"), "this torch has no torch.export (Debian's 1.13)")
    def test_an_exported_program(self):
        # A torch.export program of an averaging function: refused with the reason (docs/update-bn.md).
        class Lerp(nn.Module):
            def forward(self, averaged, current, num_averaged):
                return averaged + (current - averaged) / (num_averaged + 1)
        program = self.path("lerp.pt2")
        t = torch.ones(3, 4)
        torch.export.save(torch.export.export(Lerp(), (t, t, torch.tensor(1))), program)
        self.assert_refused(["--avg-fn", program, *self.inputs], 2, "--avg-fn " + program,
                            "found a torch.export program, which is fixed to its example inputs' number, ranks and "
                            "dtypes")

    def test_a_scripted_model(self):
        model = self.path("linear.ts")
        torch.jit.script(nn.Linear(3, 4)).save(model)
        self.assert_refused(["--avg-fn", model, *self.inputs], 2, "--avg-fn " + model,
                            "found forward(Tensor input) -> Tensor")

    def test_wrong_arity(self):
        self.assert_refused(["--avg-fn", self.fns["arity"], *self.inputs], 2,
                            "found forward(Tensor averaged, Tensor current) -> Tensor")

    def test_wrong_return_type(self):
        self.assert_refused(["--avg-fn", self.fns["returns_list"], *self.inputs], 2,
                            "found forward(Tensor averaged, Tensor current, Tensor num_averaged) -> List[Tensor]")

    def test_a_tensor_function_as_a_list_function(self):
        self.assert_refused(["--multi-avg-fn", self.fns["schedule"], *self.inputs], 2,
                            "expected TorchScript with forward(List[Tensor] averaged, List[Tensor] current, "
                            "Tensor num_averaged) -> None")

    def test_a_list_function_as_a_tensor_function(self):
        self.assert_refused(["--avg-fn", self.fns["multi"], *self.inputs], 2,
                            "found forward(List[Tensor] averaged, List[Tensor] current, Tensor num_averaged) -> None")

    def test_output_is_the_function_with_update_bn(self):
        with open(self.fns["schedule"], "rb") as f:
            before = f.read()
        model = self.path("net.ts")
        torch.jit.script(nn.Sequential(nn.Linear(16, 8))).save(model)
        p = swavg("average", "--avg-fn", self.fns["schedule"], *self.inputs, "--update-bn", "--model", model,
                  "--data", self.inputs[0], "-o", self.fns["schedule"], "--force", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("swavg never overwrites its inputs", p.stderr)
        with open(self.fns["schedule"], "rb") as f:
            self.assertEqual(f.read(), before)

    def test_missing_file(self):
        missing = self.path("missing.ts")
        self.assert_refused(["--avg-fn", missing, *self.inputs], 5, "--avg-fn " + missing)

    def test_both_options(self):
        self.assert_refused(["--avg-fn", self.fns["schedule"], "--multi-avg-fn", self.fns["multi"], *self.inputs], 2,
                            "give one of them")

    def test_with_weights(self):
        self.assert_refused(["--avg-fn", self.fns["schedule"], "--weights", "1,1,1,1", *self.inputs], 2,
                            "cannot be combined with --weights")

    def test_with_ema(self):
        out = self.path("ema.pt")
        p = swavg("ema", "--decay", "0.9", "--avg-fn", self.fns["schedule"], *self.inputs, "-o", out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--avg-fn", p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_output_is_the_function(self):
        with open(self.fns["schedule"], "rb") as f:
            before = f.read()
        p = swavg("average", "--avg-fn", self.fns["schedule"], *self.inputs, "-o", self.fns["schedule"], "--force",
                  check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("swavg never overwrites its inputs", p.stderr)
        with open(self.fns["schedule"], "rb") as f:
            self.assertEqual(f.read(), before)

    def test_function_failing_at_run_time(self):
        self.assert_refused(["--avg-fn", self.fns["bad_shape"], *self.inputs], 3,
                            "--avg-fn " + self.fns["bad_shape"], "the function failed on tensor 'fc1.weight'")

    def test_list_function_failing_at_run_time(self):
        self.assert_refused(["--multi-avg-fn", self.fns["multi_raises"], *self.inputs], 3,
                            "--multi-avg-fn " + self.fns["multi_raises"],
                            "the function failed on checkpoint 3 (floating tensors)", "no third checkpoint")


class MultiTransposes(nn.Module):
    """Re-strides each 2-D average in place and writes through the view: with AveragedModel's detached
    aliases the average ends up the current checkpoint's, not transposed."""

    def forward(self, averaged: List[Tensor], current: List[Tensor], num_averaged: Tensor) -> None:
        for i in range(len(averaged)):
            a = averaged[i]
            if a.dim() == 2:
                a.t_()
                a.copy_(current[i].t())
            else:
                a.copy_(current[i])


class MultiResizes(nn.Module):
    def forward(self, averaged: List[Tensor], current: List[Tensor], num_averaged: Tensor) -> None:
        for a in averaged:
            a.resize_([a.numel() * 2])


class MultiShrinks(nn.Module):
    def forward(self, averaged: List[Tensor], current: List[Tensor], num_averaged: Tensor) -> None:
        for a in averaged:
            a.resize_([1])


class MultiRetypes(nn.Module):
    def forward(self, averaged: List[Tensor], current: List[Tensor], num_averaged: Tensor) -> None:
        for a in averaged:
            a.set_(a.double())


def transposes(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
    if averaged.dim() == 2:
        averaged.t_()
    return current


def resizes(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
    averaged.resize_([averaged.numel() + 1])
    return current


def returns_float64(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
    return (averaged.double() + current.double()) / 3


def makes_nan(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
    if int(num_averaged) == 2:
        return torch.full_like(averaged, float("nan"))
    return averaged + (current - averaged) / (num_averaged + 1)


class MultiMakesNan(nn.Module):
    def forward(self, averaged: List[Tensor], current: List[Tensor], num_averaged: Tensor) -> None:
        for a in averaged:
            a.fill_(float("inf"))


def real_averaged_model(states, **fn):
    """torch.optim.swa_utils.AveragedModel(first, **fn) (use_buffers=False) updated with each checkpoint."""
    models = [net_from(sd) for sd in states]
    avg = torch.optim.swa_utils.AveragedModel(models[0], use_buffers=False, **fn)
    for m in models:
        avg.update_parameters(m)
    return avg.module.state_dict()


@unittest.skipIf(torch.__version__.startswith("1."), "multi_avg_fn is PyTorch 2.x's")
class AliasTest(AvgFnTest):
    """The function sees detached aliases of the averages, as AveragedModel passes them; a call that
    changes an average itself (its size, dtype, storage) is refused, naming the function and tensor."""

    def script(self, name, f):
        path = self.path(name + ".ts")
        torch.jit.script(f).save(path)
        return path

    def test_an_in_place_transpose_is_averaged_model_s_result(self):
        states, paths = self.checkpoints(torch.float32)
        fn = self.script("transposes", MultiTransposes())
        got = self.average("--multi-avg-fn", fn, "--buffers", "latest", *paths)
        want = real_averaged_model(states, multi_avg_fn=torch.jit.script(MultiTransposes()))
        self.assertEqual(list(got), list(want))
        self.assert_all_bits(got, want)
        self.assertTrue(same_bits(got["fc1.weight"], states[-1]["fc1.weight"]))  # not transposed

    def test_an_in_place_transpose_in_avg_fn(self):
        states, paths = self.checkpoints(torch.float32)
        fn = self.script("transposes_one", transposes)
        got = self.average("--avg-fn", fn, "--buffers", "latest", *paths)
        self.assert_all_bits(got, real_averaged_model(states, avg_fn=transposes))

    def test_a_result_in_another_dtype_is_cast_as_copy_casts(self):
        states, paths = self.checkpoints(torch.float32)
        fn = self.script("float64", returns_float64)
        got = self.average("--avg-fn", fn, "--buffers", "latest", *paths)
        want = real_averaged_model(states, avg_fn=returns_float64)
        self.assert_all_bits(got, want)
        self.assertEqual(got["fc1.weight"].dtype, torch.float32)

    def test_a_resize_is_refused(self):
        _, paths = self.checkpoints(torch.float32)
        for name, f, what in [("grows", MultiResizes(), "it was resized from [32, 16] to [1024]"),
                              ("shrinks", MultiShrinks(), "it was resized from [32, 16] to [1]")]:
            with self.subTest(name):
                fn = self.script(name, f)
                self.assert_refused(["--multi-avg-fn", fn, *paths], 3, "--multi-avg-fn " + fn,
                                    "the function changed the average of tensor 'fc1.weight' in place at checkpoint 2",
                                    what, "expected shape [32, 16], dtype Float, device cpu")
        fn = self.script("resizes", resizes)
        self.assert_refused(["--avg-fn", fn, *paths], 3, "--avg-fn " + fn,
                            "the function changed the average of tensor 'fc1.weight' in place at checkpoint 2",
                            "it was resized from [32, 16] to [513]")

    def test_another_storage_or_dtype_is_refused(self):
        _, paths = self.checkpoints(torch.float32)
        fn = self.script("retypes", MultiRetypes())
        p = self.assert_refused(["--multi-avg-fn", fn, *paths], 3, "--multi-avg-fn " + fn,
                                "the function changed the average of tensor 'fc1.weight' in place at checkpoint 2")
        self.assertTrue("its dtype changed" in p.stderr or "other storage" in p.stderr, p.stderr)

    def test_nan_from_the_function_is_named_as_the_function_s(self):
        states, paths = self.checkpoints(torch.float32)
        fn = self.script("nan", makes_nan)
        p = self.assert_refused(["--avg-fn", fn, *paths], 3, "--avg-fn " + fn,
                                "the function produced NaN or Inf values in tensor 'fc1.weight' at checkpoint 3, "
                                "from finite inputs", "--allow-nonfinite")
        self.assertNotIn("overflowed", p.stderr)
        got = self.average("--avg-fn", fn, "--buffers", "latest", "--allow-nonfinite", *paths)
        self.assert_all_bits(got, real_averaged_model(states, avg_fn=makes_nan))
        multi = self.script("multi_nan", MultiMakesNan())
        p = self.assert_refused(["--multi-avg-fn", multi, *paths], 3, "--multi-avg-fn " + multi,
                                "the function produced NaN or Inf values in tensor 'fc1.weight' at checkpoint 2")
        self.assertNotIn("overflowed", p.stderr)

    def test_nan_from_an_input_is_the_input_s(self):
        states, paths = self.checkpoints(torch.float32)
        sd = dict(states[1])
        sd["fc1.weight"] = sd["fc1.weight"].clone()
        sd["fc1.weight"][0, 0] = float("nan")
        torch.save(sd, paths[1])
        fn = self.script("swa_fn", swa_avg)
        p = self.assert_refused(["--avg-fn", fn, *paths], 3, "tensor 'fc1.weight' has NaN or Inf values in " + paths[1])
        self.assertNotIn("the function produced", p.stderr)


class UnsafeFileTest(AvgFnTest):
    """--avg-fn names a file swavg reads whole: a FIFO or a device is refused before any read (a read
    would hang, or never end), and so is a file past the size bound."""

    def setUp(self):
        super().setUp()
        _, self.inputs = self.checkpoints(torch.float32)

    def refused(self, option, path, code, *needles):
        out = self.path("out.pt")
        p = subprocess.run([SWAVG, "average", option, path, *self.inputs, "-o", out], capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(p.returncode, code, p.stderr)
        for needle in needles:
            self.assertIn(needle, p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_a_fifo(self):
        fifo = self.path("fn.fifo")
        os.mkfifo(fifo)
        for option in ("--avg-fn", "--multi-avg-fn"):
            self.refused(option, fifo, 3, option + " " + fifo, "expected a regular file but it is a FIFO")

    def test_dev_zero(self):
        self.refused("--avg-fn", "/dev/zero", 3, "--avg-fn /dev/zero", "expected a regular file but it is a device")

    def test_the_size_bound_at_its_edge(self):
        at, past = self.path("at.ts"), self.path("past.ts")
        for path, size in ((at, 67108864), (past, 67108865)):
            with open(path, "wb") as f:
                f.truncate(size)
        self.refused("--avg-fn", at, 2, "--avg-fn " + at, "expected TorchScript")
        self.refused("--avg-fn", past, 3, "--avg-fn " + past,
                     "67108865 bytes, more than the 67108864 bytes an averaging function may hold")


if __name__ == "__main__":
    unittest.main()
