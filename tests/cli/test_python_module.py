"""The `swavg` Python module (python/swavg/) without a build: keyword options to flags, paths that
begin with '-', where the report comes from, and which exception each exit code raises, against a
stand-in binary (SWAVG_BIN) that records its arguments and answers as told."""
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
    if "--json" in args and code == 0:
        print(json.dumps({"printed": True}))
    if code:
        print("info line", file=sys.stderr)
        print("swavg: error: told to fail with %%d" %% code, file=sys.stderr)
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
        self.saved = {k: os.environ.get(k) for k in ("SWAVG_BIN", "FAKE_ARGS", "FAKE_EXIT", "FAKE_REPORT")}
        os.environ.update(SWAVG_BIN=fake, FAKE_ARGS=self.args_file, FAKE_EXIT="0", FAKE_REPORT="1")

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
            self.assertEqual(str(e), "swavg: error: told to fail with %d" % code)
            self.assertEqual(e.report, {"fake": True, "code": code})
            self.assertEqual(e.command[:4], ["average", "a.pt", "-o", "out.pt"])

    def test_unknown_exit_code_and_no_report(self):
        os.environ.update(FAKE_EXIT="7", FAKE_REPORT="0")
        with self.assertRaises(swavg.SwavgError) as caught:
            swavg.average(["a.pt"], "out.pt")
        self.assertIs(type(caught.exception), swavg.SwavgError)
        self.assertEqual(caught.exception.exit_code, 7)
        self.assertIsNone(caught.exception.report)

    def test_message_without_the_error_prefix(self):
        # A parse error of CLI11's as swavg prints it today: the message, then a hint.
        e = swavg.UsageError(2, "The following argument was not expected: --bogus\nRun with --help for more information.\n")
        self.assertEqual(str(e), "The following argument was not expected: --bogus")
        self.assertEqual(str(swavg.SwavgError(9, "")), "swavg exited 9")

    def test_no_binary(self):
        os.environ["SWAVG_BIN"] = os.path.join(self.tmp, "missing")
        with self.assertRaises(FileNotFoundError):
            swavg.run(["--version"])


if __name__ == "__main__":
    unittest.main()
