"""The `swavg` Python module (python/swavg/). Against a stand-in binary that records its arguments and
answers as told: keyword options to flags, paths that begin with '-', where the report comes from,
which exception each exit code raises and its message, progress passed through. Against the real
binary ($SWAVG_BIN, as ctest sets it) and real torch: every helper, average and ema bit for bit with
AveragedModel, update_bn from an nn.Module and batches against torch.optim.swa_utils.update_bn, and
the message of every exception."""
import io
import json
import os
import shutil
import stat
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "python"))
import swavg  # noqa: E402

REAL_BIN = os.environ.get("SWAVG_BIN")

# Writes its arguments to $FAKE_ARGS, a report {"fake": true} to the file after --report (or on stdout
# after --json), "swavg: error: ..." on stderr, and exits with $FAKE_EXIT.
FAKE = textwrap.dedent("""\
    #!%s
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_ARGS"], "w") as f:
        json.dump(args, f)
    code = int(os.environ.get("FAKE_EXIT", "0"))
    if "--report" in args and os.environ.get("FAKE_REPORT", "1") == "1":
        with open(args[args.index("--report") + 1], "w") as f:
            json.dump({"fake": True, "code": code}, f)
    if "--status" in args:
        with open(args[args.index("--status") + 1], "w") as f:
            json.dump({"fake_status": True}, f)
    if "--json" in args and code == 0:
        print(json.dumps({"printed": True}))
    print("swavg: info: working", file=sys.stderr)
    if code:
        print("swavg: error: told to fail with %%d" %% code, file=sys.stderr)
        if os.environ.get("FAKE_HINT"):
            print(os.environ["FAKE_HINT"], file=sys.stderr)
    sys.exit(code)
""") % sys.executable


class OptionArgsTest(unittest.TestCase):
    def test_values(self):
        self.assertEqual(swavg.option_args({"decay": 0.999}), ["--decay", "0.999"])
        self.assertEqual(swavg.option_args({"max_shard_size": "5GB"}), ["--max-shard-size", "5GB"])
        self.assertEqual(swavg.option_args({"last": 3}), ["--last", "3"])
        self.assertEqual(swavg.option_args({"o": "x.pt"}), ["-o", "x.pt"])
        self.assertEqual(swavg.option_args({"resume": PathLikeText("a/b.pt")}), ["--resume", "a/b.pt"])
        # repr: the shortest text that reads back as the same double.
        self.assertEqual(swavg.option_args({"decay": 0.1 + 0.2}), ["--decay", "0.30000000000000004"])
        self.assertEqual(swavg.option_args({"min_decay": 1e-05}), ["--min-decay", "1e-05"])

    def test_booleans_and_none(self):
        self.assertEqual(swavg.option_args({"force": True, "allow_missing": True}), ["--force", "--allow-missing"])
        self.assertEqual(swavg.option_args({"force": False, "key": None}), [])

    def test_lists(self):
        self.assertEqual(swavg.option_args({"strip_prefix": ["module.", "_orig_mod."]}),
                         ["--strip-prefix", "module.", "--strip-prefix", "_orig_mod."])
        self.assertEqual(swavg.option_args({"buffer": ("a",)}), ["--buffer", "a"])
        self.assertEqual(swavg.option_args({"strip_prefix": []}), [])
        self.assertEqual(swavg.option_args({"weights": [1, 2.5, 1]}), ["--weights", "1,2.5,1"])
        # several weightings, one output each: strings and lists repeat the flag
        self.assertEqual(swavg.option_args({"weights": ["sma", [1, 2, 1], "wsm:cosine"]}),
                         ["--weights", "sma", "--weights", "1,2,1", "--weights", "wsm:cosine"])
        self.assertEqual(swavg.option_args({"weights": "wma"}), ["--weights", "wma"])
        self.assertEqual(swavg.option_args({"decay": [0.9, 0.99]}), ["--decay", "0.9", "--decay", "0.99"])
        self.assertEqual(swavg.option_args({"shape": (3, 32, 32)}), ["--shape", "3,32,32"])
        self.assertEqual(swavg.option_args({"snapshot_times": [10, 20]}), ["--snapshot-times", "10,20"])
        self.assertEqual(swavg.option_args({"snapshot_sigmas": [0.05]}), ["--snapshot-sigmas", "0.05"])

    def test_refused_values(self):
        with self.assertRaises(TypeError):
            swavg.option_args({"weights": [1, True]})
        with self.assertRaises(TypeError):
            swavg.option_args({"key": {"a": 1}})

    def test_error_classes(self):
        want = {1: swavg.InternalError, 2: swavg.UsageError, 3: swavg.InputError, 4: swavg.MismatchError,
                5: swavg.StorageError, 6: swavg.IncompleteError}
        for code, cls in want.items():
            self.assertEqual(cls.exit_code, code)
            self.assertTrue(issubclass(cls, swavg.SwavgError))
        self.assertIs(swavg.IOError_, swavg.StorageError)


class PathLikeText:
    def __init__(self, text):
        self.text = text

    def __fspath__(self):
        return self.text


class FakeBinaryTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="swavg-py-test-")
        fake = os.path.join(self.tmp, "swavg")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        self.args_file = os.path.join(self.tmp, "args.json")
        self.saved = {k: os.environ.get(k) for k in ("SWAVG_BIN", "FAKE_ARGS", "FAKE_EXIT", "FAKE_REPORT", "FAKE_HINT")}
        os.environ.update(SWAVG_BIN=fake, FAKE_ARGS=self.args_file, FAKE_EXIT="0", FAKE_REPORT="1", FAKE_HINT="")

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.tmp, ignore_errors=True)

    def args(self):
        with open(self.args_file) as f:
            return json.load(f)

    def test_binary_from_env(self):
        self.assertEqual(swavg.binary(), os.path.join(self.tmp, "swavg"))

    def test_average(self):
        report = swavg.average(["a.pt", "-b.pt"], "out.pt", weights=[1, 3], force=True)
        self.assertEqual(report, {"fake": True, "code": 0})
        args = self.args()
        self.assertEqual(args[:9], ["average", "a.pt", "./-b.pt", "-o", "out.pt", "--weights", "1,3", "--force",
                                    "--report"])
        self.assertEqual(len(args), 10)
        self.assertFalse(os.path.exists(args[9]), "the temporary report was left behind")

    def test_one_input_is_not_split_into_letters(self):
        swavg.average("ckpt.pt", "out.pt")
        self.assertEqual(self.args()[:4], ["average", "ckpt.pt", "-o", "out.pt"])

    def test_ema(self):
        swavg.ema(["a.pt", "b.pt"], "out.pt", decay=0.999, warmup="torch_ema")
        self.assertEqual(self.args()[:9], ["ema", "a.pt", "b.pt", "-o", "out.pt", "--decay", "0.999", "--warmup",
                                           "torch_ema"])
        swavg.ema(["a.pt"], "out.pt", power_sigma_rel=0.05)
        self.assertEqual(self.args()[:6], ["ema", "a.pt", "-o", "out.pt", "--power-sigma-rel", "0.05"])

    def test_watch(self):
        status = swavg.watch("run", "ema.pt", decay=[0.9, 0.99], once=True, idle_timeout=60)
        self.assertEqual(status, {"fake_status": True})
        self.assertEqual(self.args(), ["watch", "ema", "run", "-o", "ema.pt", "--status", "ema.pt.watch.json",
                                       "--decay", "0.9", "--decay", "0.99", "--once", "--idle-timeout", "60"])
        swavg.watch("run/", "swa/", status="s.json")
        self.assertEqual(self.args(), ["watch", "average", "run/", "-o", "swa/", "--status", "s.json"])

    def test_update_bn(self):
        swavg.update_bn("net.ts", "train.npy", "bn.pt", checkpoint="swa.pt", batch_size=128, device="cuda")
        self.assertEqual(self.args()[:14],
                         ["update-bn", "--model", "net.ts", "--checkpoint", "swa.pt", "--data", "train.npy", "-o",
                          "bn.pt", "--batch-size", "128", "--device", "cuda", "--report"])
        swavg.update_bn("net.ts", "train.npy", save_module="net_bn.ts")
        self.assertEqual(self.args()[:7], ["update-bn", "--model", "net.ts", "--data", "train.npy", "--save-module",
                                           "net_bn.ts"])

    def test_run_with_own_report_file(self):
        mine = os.path.join(self.tmp, "mine.json")
        self.assertEqual(swavg.run(["-v", "average", "a.pt", "-o", "o.pt", "--report", mine]),
                         {"fake": True, "code": 0})
        self.assertEqual(self.args(), ["-v", "average", "a.pt", "-o", "o.pt", "--report", mine])
        self.assertTrue(os.path.exists(mine))

    def test_run_json_on_stdout(self):
        self.assertEqual(swavg.run(["inspect", "a.pt"]), {"printed": True})
        self.assertEqual(self.args(), ["inspect", "a.pt", "--json"])
        self.assertEqual(swavg.run(["finalize", "out/", "--json"]), {"printed": True})
        self.assertEqual(self.args(), ["finalize", "out/", "--json"])

    def test_run_without_report(self):
        self.assertIsNone(swavg.run(["convert", "a.pt", "-o", "b.safetensors"]))
        self.assertEqual(self.args(), ["convert", "a.pt", "-o", "b.safetensors"])

    def test_exit_codes(self):
        want = {1: swavg.InternalError, 2: swavg.UsageError, 3: swavg.InputError, 4: swavg.MismatchError,
                5: swavg.StorageError, 6: swavg.IncompleteError}
        for code, cls in want.items():
            os.environ["FAKE_EXIT"] = str(code)
            with self.subTest(code=code), self.assertRaises(cls) as caught:
                swavg.average(["a.pt"], "out.pt")
            e = caught.exception
            self.assertIs(type(e), cls)
            self.assertEqual(e.exit_code, code)
            self.assertIn("swavg: error: told to fail with %d" % code, e.stderr)
            self.assertEqual(str(e), "told to fail with %d" % code)
            self.assertIsNone(e.hint)
            self.assertIn("swavg: info: working", e.stderr)
            self.assertEqual(e.report, {"fake": True, "code": code})
            self.assertEqual(e.command[:4], ["average", "a.pt", "-o", "out.pt"])

    def test_unknown_exit_code_and_no_report(self):
        os.environ.update(FAKE_EXIT="7", FAKE_REPORT="0")
        with self.assertRaises(swavg.SwavgError) as caught:
            swavg.average(["a.pt"], "out.pt")
        self.assertIs(type(caught.exception), swavg.SwavgError)
        self.assertEqual(caught.exception.exit_code, 7)
        self.assertIsNone(caught.exception.report)

    def test_message_is_the_cause_not_the_hint(self):
        os.environ.update(FAKE_EXIT="2", FAKE_HINT="Run with --help for more information.")
        with self.assertRaises(swavg.UsageError) as caught:
            swavg.average(["a.pt"], "out.pt", progress=False)
        self.assertEqual(str(caught.exception), "told to fail with 2")
        self.assertEqual(caught.exception.hint, "Run with --help for more information.")

    def test_message_of_several_lines(self):
        stderr = ("swavg: info: reading 2 inputs\n"
                  "swavg: error: inputs disagree (2 differences):\n"
                  "swavg: error:   b.pt: fc.weight: shape [3, 4], a.pt [4, 4]\n"
                  "swavg: error:   b.pt: fc.bias missing\n"
                  "swavg: hint: --allow-missing averages each tensor over the inputs that have it\n")
        e = swavg.MismatchError(4, stderr)
        self.assertEqual(str(e), "inputs disagree (2 differences):\n  b.pt: fc.weight: shape [3, 4], a.pt [4, 4]\n"
                                 "  b.pt: fc.bias missing")
        self.assertEqual(e.hint, "--allow-missing averages each tensor over the inputs that have it")
        self.assertEqual(e.stderr, stderr)

    def test_message_without_the_error_prefix(self):
        # A parse error of CLI11's as older swavg printed it: the message, then a hint.
        e = swavg.UsageError(2, "The following argument was not expected: --bogus\nRun with --help for more information.\n")
        self.assertEqual(str(e), "The following argument was not expected: --bogus")
        self.assertEqual(e.hint, "Run with --help for more information.")
        self.assertEqual(str(swavg.SwavgError(9, "")), "swavg exited 9")
        self.assertEqual(str(swavg.SwavgError(9, "swavg: info: only info\n")), "swavg exited 9")

    def test_progress_passed_through(self):
        seen = io.StringIO()
        saved, sys.stderr = sys.stderr, seen
        try:
            swavg.average(["a.pt"], "out.pt")
        finally:
            sys.stderr = saved
        self.assertEqual(seen.getvalue(), "swavg: info: working\n")
        seen = io.StringIO()
        saved, sys.stderr = sys.stderr, seen
        try:
            swavg.average(["a.pt"], "out.pt", progress=False)
        finally:
            sys.stderr = saved
        self.assertEqual(seen.getvalue(), "")

    def test_progress_callback(self):
        lines = []
        os.environ["FAKE_EXIT"] = "3"
        with self.assertRaises(swavg.InputError) as caught:
            swavg.ema(["a.pt"], "out.pt", decay=0.9, progress=lines.append)
        self.assertEqual(lines, ["swavg: info: working", "swavg: error: told to fail with 3"])
        self.assertEqual(caught.exception.stderr, "swavg: info: working\nswavg: error: told to fail with 3\n")

    def test_dry_run_returns_the_plan(self):
        self.assertEqual(swavg.average(["a.pt", "b.pt"], "out.pt", sort="natural", dry_run=True), {"printed": True})
        self.assertEqual(self.args(), ["average", "a.pt", "b.pt", "-o", "out.pt", "--sort", "natural", "--dry-run",
                                       "--json"])
        self.assertEqual(swavg.ema(["a.pt"], "out.pt", decay=0.9, dry_run=True), {"printed": True})
        self.assertEqual(self.args(), ["ema", "a.pt", "-o", "out.pt", "--decay", "0.9", "--dry-run", "--json"])
        self.assertEqual(swavg.convert("a.pt", "b/", max_shard_size="2MB", dry_run=True), {"printed": True})
        self.assertEqual(self.args(), ["convert", "a.pt", "-o", "b/", "--max-shard-size", "2MB", "--dry-run",
                                       "--json"])
        self.assertEqual(swavg.posthoc_ema(["s-1-0.05.pt"], "o.pt", 0.1, dry_run=True), {"printed": True})
        self.assertEqual(self.args(), ["posthoc-ema", "s-1-0.05.pt", "-o", "o.pt", "--sigma-rel", "0.1", "--dry-run",
                                       "--json"])

    def test_every_helper(self):
        swavg.posthoc_ema(["s-1-0.05.pt", "s-2-0.05.pt"], "o-{sigma_rel}.pt", [0.05, 0.1], at=2)
        self.assertEqual(self.args()[:11], ["posthoc-ema", "s-1-0.05.pt", "s-2-0.05.pt", "-o", "o-{sigma_rel}.pt",
                                            "--sigma-rel", "0.05", "--sigma-rel", "0.1", "--at", "2"])
        self.assertEqual(self.args()[11], "--report")
        self.assertEqual(swavg.inspect("-x.pt", key="model"), {"printed": True})
        self.assertEqual(self.args(), ["inspect", "./-x.pt", "--key", "model", "--json"])
        self.assertIsNone(swavg.convert("a.pt", "b.safetensors", strip_prefix=["module."], force=True))
        self.assertEqual(self.args(), ["convert", "a.pt", "-o", "b.safetensors", "--strip-prefix", "module.",
                                       "--force"])
        self.assertEqual(swavg.finalize("out/", no_verify=True), {"printed": True})
        self.assertEqual(self.args(), ["finalize", "out/", "--no-verify", "--json"])
        swavg.ema(["b.pt", "a.pt"], "o.pt", decay=0.5, sort="none")
        self.assertEqual(self.args()[:8], ["ema", "b.pt", "a.pt", "-o", "o.pt", "--decay", "0.5", "--sort"])

    def test_no_binary(self):
        os.environ["SWAVG_BIN"] = os.path.join(self.tmp, "missing")
        with self.assertRaises(FileNotFoundError):
            swavg.run(["--version"])


# --- the real binary and real torch -----------------------------------------------------------------
class Net(object):
    """Builds the small models of the real tests (torch is imported only by them)."""

    @staticmethod
    def mlp():
        import torch
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                   torch.nn.Linear(8, 3))

    @staticmethod
    def cnn():
        import torch
        return torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.BatchNorm2d(6), torch.nn.ReLU(),
                                   torch.nn.Conv2d(6, 4, 3), torch.nn.BatchNorm2d(4, momentum=0.3),
                                   torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 5))


def CumSum():
    """A module whose forward runs aten.cumsum, an operator off swavg's list for programs."""
    import torch

    class _CumSum(torch.nn.Module):
        def forward(self, x):
            return x.cumsum(1)

    return _CumSum()


class VarArgs(object):
    """A module torch.jit.script cannot compile (*args) but torch.jit.trace can."""

    @staticmethod
    def make():
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Net.cnn()

            def forward(self, *xs):
                return self.net(xs[0])

        return Wrapped()


@unittest.skipIf(REAL_BIN is None, "needs SWAVG_BIN, the built swavg (ctest sets it): "
                                   "SWAVG_BIN=build/swavg python tests/cli/test_python_module.py")
class RealBinaryTest(unittest.TestCase):
    """Every helper against the built swavg and real torch."""

    def setUp(self):
        import torch
        self.torch = torch
        self.tmp = tempfile.mkdtemp(prefix="swavg-py-real-")
        self.saved = os.environ.get("SWAVG_BIN")
        os.environ["SWAVG_BIN"] = REAL_BIN

    def tearDown(self):
        os.environ["SWAVG_BIN"] = self.saved if self.saved is not None else REAL_BIN
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def checkpoints(self, steps=(10, 2, 1)):
        """Training checkpoints step_<s>.pt of the MLP (weights and BatchNorm statistics differ), returned
        in the order given, and the state dicts by step."""
        torch = self.torch
        paths, by_step = [], {}
        for s in steps:
            torch.manual_seed(s)
            model = Net.mlp()
            with torch.no_grad():
                model[1].running_mean.normal_()
                model[1].running_var.uniform_(0.5, 2)
                model[1].num_batches_tracked.fill_(s * 7)
            sd = model.state_dict()
            paths.append(self.path("step_%d.pt" % s))
            torch.save(sd, paths[-1])
            by_step[s] = sd
        return paths, by_step

    def averaged_model(self, sds, **kwargs):
        """torch.optim.swa_utils.AveragedModel updated with each state dict in turn."""
        torch = self.torch
        model = Net.mlp()
        avg = torch.optim.swa_utils.AveragedModel(model, **kwargs)
        for sd in sds:  # the first update copies, as swavg copies the first checkpoint
            model.load_state_dict(sd)
            avg.update_parameters(model)
        return avg.module.state_dict()

    def assert_bits(self, found, want):
        self.assertEqual(list(found), list(want))
        for name in want:
            a, b = found[name], want[name]
            self.assertEqual((a.dtype, a.shape), (b.dtype, b.shape), name)
            if a.is_floating_point():
                a, b = a.view(self.torch.int32), b.view(self.torch.int32)
            self.assertTrue(self.torch.equal(a, b), "%s differs:\n%s\n%s" % (name, found[name], want[name]))

    def test_average_is_averaged_model_in_step_order(self):
        paths, sds = self.checkpoints()
        out = self.path("swa.pt")
        report = swavg.average(paths, out, sort="natural", progress=False)
        self.assertEqual(report["n"], 3)
        self.assert_bits(self.torch.load(out, weights_only=True), self.averaged_model([sds[1], sds[2], sds[10]]))
        # sort="none": the list's order, here 10, 2, 1.
        report = swavg.average(paths, out, sort="none", force=True, progress=False)
        self.assert_bits(self.torch.load(out, weights_only=True), self.averaged_model([sds[10], sds[2], sds[1]]))

    def test_ema_is_get_ema_multi_avg_fn(self):
        torch = self.torch
        paths, sds = self.checkpoints((3, 20, 1, 100))
        out = self.path("ema.safetensors")
        swavg.ema(paths, out, decay=0.9, sort="natural", progress=False)
        from safetensors.torch import load_file
        want = self.averaged_model([sds[1], sds[3], sds[20], sds[100]],
                                   multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
        self.assert_bits(load_file(out), want)

    def test_watch_folds_a_run_as_one_ema(self):
        paths, sds = self.checkpoints((3, 20, 1, 100))
        run = self.path("run")
        os.makedirs(run)
        for p in paths:
            shutil.move(p, run)
        out = self.path("ema.safetensors")
        status = swavg.watch(run, out, decay=0.9, once=True, settle=0, progress=False)
        self.assertEqual([f["step"] for f in status["folded"]], [1, 3, 20, 100])
        from safetensors.torch import load_file
        want = self.averaged_model([sds[1], sds[3], sds[20], sds[100]],
                                   multi_avg_fn=self.torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
        self.assert_bits(load_file(out), want)

    def test_dry_run_returns_the_plan_and_writes_nothing(self):
        paths, _ = self.checkpoints()
        out = self.path("swa.pt")
        plan = swavg.average(paths, out, sort="natural", dry_run=True, progress=False)
        self.assertIs(plan["dry_run"], True)
        self.assertEqual([i["path"] for i in plan["inputs"]], [self.path("step_%d.pt" % s) for s in (1, 2, 10)])
        self.assertEqual(plan["n"], 3)
        self.assertFalse(os.path.exists(out))
        plan = swavg.convert(paths[0], self.path("w/"), max_shard_size="200", dry_run=True, progress=False)
        self.assertIs(plan["dry_run"], True)
        self.assertGreater(len(plan["output"]["files"]), 1)
        self.assertFalse(os.path.exists(self.path("w")))

    def test_inspect_returns_a_dict(self):
        paths, sds = self.checkpoints((1,))
        info = swavg.inspect(paths[0])
        self.assertIsInstance(info, dict)
        self.assertEqual([t["name"] for t in info["tensors"]], list(sds[1]))
        self.assertEqual([t["shape"] for t in info["tensors"]], [list(t.shape) for t in sds[1].values()])

    def test_convert(self):
        paths, sds = self.checkpoints((1,))
        torch = self.torch
        torch.save({"epoch": 3, "model": {"module." + k: v for k, v in sds[1].items()}}, self.path("wrapped.pt"))
        out = self.path("w.safetensors")
        self.assertIsNone(swavg.convert(self.path("wrapped.pt"), out, key="model", strip_prefix="module.",
                                        progress=False))
        from safetensors.torch import load_file
        self.assert_bits(load_file(out), sds[1])

    def test_posthoc_ema_against_edm2s_solve(self):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from test_posthoc_ema import solve_posthoc_coefficients
        torch = self.torch
        profiles = [(t, s) for t in (100, 200, 300) for s in (0.05, 0.10)]
        sds, paths = [], []
        for i, (t, s) in enumerate(profiles):
            torch.manual_seed(100 + i)
            sds.append({"w": torch.randn(5, 3), "b": torch.randn(3)})
            paths.append(self.path("snap-%07d-%.3f.pt" % (t, s)))
            torch.save(sds[-1], paths[-1])
        out = self.path("ema.pt")
        report = swavg.posthoc_ema(paths, out, 0.07, progress=False)
        self.assertIsInstance(report, dict)
        x = solve_posthoc_coefficients([p[0] for p in profiles], [p[1] for p in profiles], 300, 0.07)[:, 0]
        found = torch.load(out, weights_only=True)
        for name in ("w", "b"):
            want = sum(float(xi) * sd[name].double() for xi, sd in zip(x, sds))
            torch.testing.assert_close(found[name].double(), want, rtol=1e-6, atol=1e-6)
        plan = swavg.posthoc_ema(paths, self.path("e-{sigma_rel}.pt"), [0.05, 0.15], dry_run=True, progress=False)
        self.assertEqual(len(plan["output"]["files"]), 2)
        self.assertFalse(os.path.exists(self.path("e-0.05.pt")))

    def test_finalize_after_every_worker(self):
        paths, _ = self.checkpoints()
        out = self.path("swa/")
        swavg.average(paths, out, max_shard_size="200", shard="0/2", progress=False)
        with self.assertRaises(swavg.IncompleteError) as caught:
            swavg.finalize(out, progress=False)
        e = caught.exception
        self.assertEqual(e.exit_code, 6)
        self.assertFalse(str(e).startswith("swavg:"), str(e))
        self.assertIn("swavg: error:", e.stderr)
        self.assertIn(str(e).splitlines()[0], e.stderr)
        swavg.average(paths, out, max_shard_size="200", shard="1/2", progress=False)
        report = swavg.finalize(out, progress=False)
        self.assertIsInstance(report, dict)
        swavg.average(paths, self.path("plain/"), max_shard_size="200", progress=False)
        names = sorted(os.listdir(self.path("plain")))
        self.assertGreater(len(names), 2)
        self.assertEqual(sorted(os.listdir(out)), names)
        for name in names:
            with open(os.path.join(out, name), "rb") as a, open(self.path("plain/" + name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_progress_lines_reach_a_callback(self):
        paths, _ = self.checkpoints()
        lines = []
        swavg.average(paths, self.path("swa.pt"), progress=lines.append)
        self.assertTrue(any(line.startswith("swavg: info:") for line in lines), lines)
        self.assertTrue(all(line and "\n" not in line and "\r" not in line for line in lines), lines)

    def test_messages_of_each_exception(self):
        torch = self.torch
        paths, sds = self.checkpoints((1, 2))
        missing = self.path("nothere.pt")
        cases = [
            (swavg.StorageError, lambda: swavg.average([paths[0], missing], self.path("o.pt"), progress=False),
             missing),
            (swavg.UsageError, lambda: swavg.average(paths, self.path("o.pt"), bogus_option=1, progress=False),
             "--bogus-option"),
            (swavg.UsageError, lambda: swavg.ema(paths, self.path("o.pt"), decay=1.5, progress=False), "--decay"),
        ]
        with open(self.path("junk.pt"), "wb") as f:
            f.write(b"PK\x03\x04 not a zip at all" * 4)
        cases.append((swavg.InputError, lambda: swavg.inspect(self.path("junk.pt")), "junk.pt"))
        other = {k: v for k, v in sds[2].items() if k != "3.bias"}
        torch.save(other, self.path("other.pt"))
        cases.append((swavg.MismatchError,
                      lambda: swavg.average([paths[0], self.path("other.pt")], self.path("o.pt"), progress=False),
                      "3.bias"))
        for cls, call, named in cases:
            with self.subTest(cls=cls.__name__, named=named), self.assertRaises(cls) as caught:
                call()
            e = caught.exception
            self.assertIs(type(e), cls)
            self.assertEqual(e.exit_code, cls.exit_code)
            message = str(e)
            self.assertIn(named, message)
            self.assertNotIn("swavg: error:", message)
            self.assertNotIn("Run with --help", message)
            # The message is the error lines, each as printed after its prefix.
            want = [line[len("swavg: error: "):] for line in e.stderr.splitlines() if line.startswith("swavg: error:")]
            self.assertEqual(message.splitlines(), want)
        self.assertFalse(os.path.exists(self.path("o.pt")))

    def update_bn_reference(self, model, batches):
        """torch.optim.swa_utils.update_bn on a copy of the model."""
        import copy
        ref = copy.deepcopy(model)
        self.torch.optim.swa_utils.update_bn(batches, ref)
        return ref.state_dict()

    def assert_bn(self, found, want):
        torch = self.torch
        self.assertEqual(list(found), list(want))
        for name, w in want.items():
            f = found[name]
            if name.endswith(("running_mean", "running_var")):
                torch.testing.assert_close(f, w, rtol=1e-5, atol=1e-6, msg=name)
            else:
                self.assertTrue(torch.equal(f, w), name)

    def batches(self, sizes=(16, 16, 8), seed=5):
        torch = self.torch
        torch.manual_seed(seed)
        return [(torch.randn(n, 3, 8, 8) * 2 + 0.5, torch.zeros(n, dtype=torch.long)) for n in sizes]

    def test_update_bn_from_a_module_and_a_loader(self):
        torch = self.torch
        torch.manual_seed(0)
        model = Net.cnn().eval()
        batches = self.batches()
        want = self.update_bn_reference(model, batches)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        self.assertFalse(all(torch.equal(before[k], want[k]) for k in want))
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.cat([b[0] for b in batches]),
                                                                              torch.cat([b[1] for b in batches])),
                                             batch_size=16)
        report = swavg.update_bn(model, loader, progress=False)
        self.assertEqual(report["batches"], 3)
        self.assert_bn(model.state_dict(), want)
        self.assertFalse(model.training, "the module's mode changed")
        self.assertEqual(model[4].momentum, 0.3)

    def test_update_bn_from_a_tensor_into_a_file_with_a_checkpoint(self):
        torch = self.torch
        torch.manual_seed(1)
        model, weights = Net.cnn(), Net.cnn()
        torch.save(weights.state_dict(), self.path("swa.pt"))
        samples = torch.cat([b for b, _ in self.batches((16, 16, 16, 4), seed=7)])
        weights_copy = Net.cnn()
        weights_copy.load_state_dict(weights.state_dict())
        want = self.update_bn_reference(weights_copy, [samples[i:i + 16] for i in range(0, len(samples), 16)])
        out = self.path("swa_bn.safetensors")
        swavg.update_bn(model, samples, out, checkpoint=self.path("swa.pt"), batch_size=16, progress=False)
        from safetensors.torch import load_file
        self.assert_bn(load_file(out), want)
        self.assert_bn(model.state_dict(), want)  # the module: the checkpoint's weights, fresh statistics

    def test_update_bn_exports_the_module(self):
        # An nn.Module that torch.export takes goes to swavg as a program: update_bn's statistics bit
        # for bit (with as many threads on both sides), the output in the module's own order.
        torch = self.torch
        torch.manual_seed(4)
        model = Net.cnn()
        batches = [b for b, _ in self.batches((16, 16, 8), seed=9)]
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            want = self.update_bn_reference(model, batches)
            out = self.path("exported_bn.pt")
            report = swavg.update_bn(model, iter(batches), out, progress=False)
        finally:
            torch.set_num_threads(threads)
            del os.environ["OMP_NUM_THREADS"]
        self.assertTrue(report["model"].endswith(".pt2"), report["model"])
        found = torch.load(out, weights_only=True)
        self.assertEqual(list(found), list(want))
        for name, w in want.items():
            self.assertTrue(torch.equal(found[name], w), name)
            self.assertTrue(torch.equal(model.state_dict()[name], w), name)

    def test_update_bn_scripts_what_it_cannot_run_as_a_program(self):
        # momentum=None does not export; cumsum exports but is off swavg's list: TorchScript then.
        torch = self.torch
        for momentum, tail in ((None, torch.nn.Identity()), (0.1, CumSum())):
            model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4, momentum=momentum), tail)
            batches = [b for b, _ in self.batches((8, 8), seed=11)]
            want = self.update_bn_reference(model, batches)
            report = swavg.update_bn(model, iter(batches), progress=False)
            self.assertTrue(report["model"].endswith(".ts"), report["model"])
            self.assert_bn(model.state_dict(), want)

    def test_update_bn_traces_what_it_cannot_script(self):
        torch = self.torch
        torch.manual_seed(2)
        model = VarArgs.make()
        with self.assertRaises(Exception):
            torch.jit.script(model)
        batches = [b for b, _ in self.batches((8, 8, 8))]
        want = self.update_bn_reference(model, batches)
        swavg.update_bn(model, iter(batches), progress=False)
        self.assert_bn(model.state_dict(), want)
        with self.assertRaises(TypeError) as caught:
            swavg.update_bn(VarArgs.make(), self.path("data.npy"), progress=False)
        self.assertIn("torch.jit.script could not compile", str(caught.exception))

    def test_update_bn_from_paths(self):
        torch = self.torch
        import numpy as np
        torch.manual_seed(3)
        model = Net.cnn()
        torch.jit.save(torch.jit.script(model), self.path("net.ts"))
        samples = torch.randn(40, 3, 8, 8)
        np.save(self.path("data.npy"), samples.numpy())
        want = self.update_bn_reference(model, [samples[i:i + 16] for i in range(0, 40, 16)])
        swavg.update_bn(self.path("net.ts"), self.path("data.npy"), self.path("bn.pt"), batch_size=16,
                        progress=False)
        self.assert_bn(torch.load(self.path("bn.pt"), weights_only=True), want)

    def test_update_bn_refuses_batches_it_cannot_replay(self):
        torch = self.torch
        model = Net.cnn()
        uneven = [torch.randn(8, 3, 8, 8), torch.randn(4, 3, 8, 8), torch.randn(8, 3, 8, 8)]
        with self.assertRaises(ValueError) as caught:
            swavg.update_bn(model, uneven, progress=False)
        self.assertIn("batch 1 has 4 samples but batch 0 has 8", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            swavg.update_bn(model, [torch.randn(4, 3, 8, 8), torch.randn(8, 3, 8, 8)], progress=False)
        self.assertIn("batch 1 has 8 samples, more than batch 0's 4", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            swavg.update_bn(model, [torch.randn(4, 3, 8, 8), torch.randn(4, 3, 8, 9)], progress=False)
        self.assertIn("batch 1 holds samples of float32 (3, 8, 9)", str(caught.exception))
        with self.assertRaises(TypeError):
            swavg.update_bn(model, [torch.randn(4, 3, 8, 8)], batch_size=4, progress=False)
        with self.assertRaises(TypeError):
            swavg.update_bn(model, [{"x": torch.randn(4, 3, 8, 8)}], progress=False)
        with self.assertRaises(ValueError):
            swavg.update_bn(model, [], progress=False)


if __name__ == "__main__":
    unittest.main()
