"""One message style: every line swavg writes to stderr for a bad command line or a bad input starts
`swavg: error:`, the exit code is the one the README's table gives, and the message names what it
should (the option, the file, the tensor) and what to do. CLI11's parse errors are wrapped the same
way. --help and --version go to stdout with exit 0. Info lines are sentences: a worker's end line is
checked word for word, and the per-file `not copied` lines of a folder output are -v detail only.

References: the exit codes of the README and util/error.h; the inputs are written by torch.save and
safetensors' save_file.
"""
import os
import shutil
import tempfile
import unittest

import torch
from safetensors.torch import save_file

from common import SWAVG, TempDirTest, swavg

SUBCOMMANDS = ["average", "ema", "inspect", "convert", "update-bn", "finalize", "posthoc-ema"]


def error_lines_only(test, p, where):
    """Every non-empty stderr line is an error line (or CLI11's follow-up hint); nothing on stdout."""
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    test.assertTrue(lines, "%s: nothing on stderr" % where)
    for line in lines:
        test.assertTrue(line.startswith("swavg: error: ") or line.startswith("Run with --help"),
                        "%s: a line not in the error style: %r\n%s" % (where, line, p.stderr))
    test.assertEqual(p.stdout, "", where)


class MessagesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-messages-")
        d = cls.tmp
        g = torch.Generator().manual_seed(22)
        torch.save({"w": torch.randn(4, generator=g), "b": torch.randn(2, generator=g)}, os.path.join(d, "a.pt"))
        torch.save({"w": torch.randn(4, generator=g), "b": torch.randn(2, generator=g)}, os.path.join(d, "b.pt"))
        torch.save({"w": torch.randn(5, generator=g), "b": torch.randn(2, generator=g)}, os.path.join(d, "wide.pt"))
        with open(os.path.join(d, "corrupt.pt"), "wb") as f:
            f.write(b"PK\x03\x04 this is not a checkpoint")
        with open(os.path.join(d, "exists.pt"), "wb") as f:
            f.write(b"keep me")
        os.mkdir(os.path.join(d, "notajob"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def p(self, name):
        return os.path.join(self.tmp, name)

    def rows(self):
        """(argv, exit code, texts the message must hold): bad command lines of every subcommand."""
        a, b, wide, corrupt = self.p("a.pt"), self.p("b.pt"), self.p("wide.pt"), self.p("corrupt.pt")
        out, missing, exists = self.p("out.pt"), self.p("missing.pt"), self.p("exists.pt")
        return [
            # the command itself
            ([], 2, ["no subcommand given", "average", "finalize", "swavg --help"]),
            (["averag", a], 2, ["unknown subcommand 'averag' (did you mean 'average'?)", "swavg --help"]),
            (["--bogus"], 2, ["unknown option '--bogus'", "swavg --help"]),
            (["-v", "-q", "bogus-command"], 2, ["unknown subcommand 'bogus-command'"]),
            # average: CLI11's parse errors
            (["average", a, b, "--bogus", "-o", out], 2,
             ["unknown option '--bogus' for 'swavg average'; run 'swavg average --help' for its options"]),
            (["average", a, b, "--evry", "2", "-o", out], 2, ["unknown option '--evry' for 'swavg average' (did you mean '--every'?)"]),
            (["average", a, b, "--bogus=1", "--wrong", "-o", out], 2, ["unknown options '--bogus=1', '--wrong'"]),
            (["average", a, b, "--every", "0", "-o", out], 2, ["--every: expected an integer in [1, 2147483647], got '0'"]),
            (["average", a, b, "--every", "2147483648", "-o", out], 2, ["--every", "got '2147483648'"]),
            (["average", a, b, "--last", "x", "-o", out], 2, ["--last: expected an integer in [1, 2147483647], got 'x'"]),
            (["average", a, b, "-o", out, "--every"], 2, ["--every: the value is missing (expected INT:[1, 2147483647])", "swavg average --help"]),
            (["average", a, b], 2, ["'swavg average' needs -o,--output", "swavg average --help"]),
            (["average", a, b, "--sort", "size", "-o", out], 2,
             ["--sort: expected one of {none,name,natural,mtime}, got 'size'"]),
            (["average", a, b, "--null", "-o", out], 2, ["--null needs --inputs-from"]),
            (["average", a, b, "--shard", "", "-o", out], 2, ["--shard", "expected a value, got an empty string"]),
            (["average", a, b, "--weights", "1,x", "-o", out], 2, ["--weights: expected a number, got '1,x'"]),
            (["average", a, b, "--shard-count", "x", "-o", self.p("dir") + "/"], 2,
             ["--shard-count: expected an integer, got 'x'"]),
            # average: swavg's own checks
            (["average", a, b, "--shard", "0/2", "--shard-count", "2", "-o", self.p("dir") + "/"], 2,
             ["--shard I/N and --shard-count N exclude each other"]),
            (["average", a, b, "--shard", "2/2", "-o", self.p("dir") + "/"], 2, ["--shard 2/2", "from 0 to 1"]),
            (["average", "-o", out], 2, ["no input checkpoints given", "--inputs-from"]),
            (["average", a, b, "--every", "3", "-o", out], 2, ["--every 3 keeps none of the 2 inputs given"]),
            (["average", a, missing, "-o", out], 5, [missing]),
            (["average", a, corrupt, "-o", out], 3, [corrupt]),
            (["average", a, wide, "-o", out], 4, ["'w'", wide, "[4]", "[5]"]),
            (["average", a, b, "-o", exists], 2, [exists, "--force"]),
            (["average", a, b, "-o", a, "--force"], 2, [a]),
            # ema
            (["ema", a, b, "-o", out], 2, ["ema needs --decay D or --power-sigma-rel S"]),
            (["ema", a, b, "--decay", "2", "-o", out], 2, ["--decay", "2"]),
            (["ema", a, b, "--decay", "abc", "-o", out], 2, ["--decay: expected a number, got 'abc'"]),
            (["ema", a, b, "--decay", "0.9", "--warmup", "linear", "-o", out], 2,
             ["--warmup: expected one of {none,torch_ema,power}, got 'linear'"]),
            (["ema", a, b, "--decay", "0.9", "--bogus", "-o", out], 2, ["unknown option '--bogus' for 'swavg ema'"]),
            # posthoc-ema
            (["posthoc-ema", a, b, "--sigma-rel", "abc", "--snapshot-times", "1,2", "--snapshot-sigmas", "0.05", "-o",
              out], 2, ["--sigma-rel: expected a number, got 'abc'"]),
            (["posthoc-ema", a, b, "--sigma-rel", "0.1", "-o", out], 2, [a, "--snapshot-times"]),
            (["posthoc-ema", a, b, "--sigma-rel", "0.1"], 2, ["'swavg posthoc-ema' needs -o,--output"]),
            (["posthoc-ema", "--sigma-rel", "0.1", "-o", out], 2, ["posthoc-ema needs snapshots"]),
            # convert
            (["convert", "-o", out], 2, ["'swavg convert' needs the argument 'input'", "swavg convert --help"]),
            (["convert", a, b, "-o", out], 2,
             ["unexpected argument '%s' for 'swavg convert'" % b, "swavg convert --help"]),
            (["convert", a, "--format", "onnx", "-o", out], 2, ["--format: expected one of {torch,safetensors,dcp}, got 'onnx'"]),
            (["convert", corrupt, "-o", out], 3, [corrupt]),
            (["convert", missing, "-o", out], 5, [missing]),
            # inspect
            (["inspect"], 2, ["'swavg inspect' needs the argument 'input'"]),
            (["inspect", a, b], 2, ["unexpected argument '%s' for 'swavg inspect'" % b]),
            (["inspect", a, "--jsn"], 2, ["unknown option '--jsn' for 'swavg inspect'", "did you mean '--json'?"]),
            (["inspect", corrupt], 3, [corrupt]),
            (["inspect", missing], 5, [missing]),
            # update-bn
            (["update-bn", "--data", a, "-o", out], 2, ["'swavg update-bn' needs --model"]),
            (["update-bn", "--model", a, "--data", a, "--batch-size", "0", "-o", out], 2,
             ["--batch-size: expected an integer in [1, 9223372036854775807], got '0'"]),
            # finalize
            (["finalize"], 2, ["'swavg finalize' needs the argument 'output'"]),
            (["finalize", self.p("x") + "/", self.p("y") + "/"], 2, ["unexpected argument"]),
            (["finalize", self.p("notajob") + "/"], None, [self.p("notajob")]),
        ]

    def test_bad_command_lines(self):
        for argv, code, texts in self.rows():
            with self.subTest(argv=argv):
                p = swavg(*argv, check=False)
                if code is None:
                    self.assertNotEqual(p.returncode, 0, p.stderr)
                    self.assertLess(p.returncode, 7, p.stderr)
                else:
                    self.assertEqual(p.returncode, code, p.stderr)
                error_lines_only(self, p, argv)
                for text in texts:
                    self.assertIn(text, p.stderr)
                self.assertNotIn("Run with --help", p.stderr)  # the message says which --help
                self.assertFalse(os.path.exists(self.p("out.pt")), argv)
        with open(self.p("exists.pt"), "rb") as f:
            self.assertEqual(f.read(), b"keep me")

    def test_the_subcommands_listed_are_the_visible_ones(self):
        p = swavg("bogus-command", check=False)
        self.assertIn("the subcommands are average, ema, inspect, convert, update-bn, finalize, posthoc-ema, "
                      "completion;", p.stderr)
        self.assertNotIn("help-man", p.stderr)  # hidden: the build runs it

    def test_help_and_version_go_to_stdout(self):
        for argv in [["--help"], ["-h"], ["--version"]] + [[s, "--help"] for s in SUBCOMMANDS]:
            with self.subTest(argv=argv):
                p = swavg(*argv, check=False)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stderr, "")
                self.assertTrue(p.stdout.strip())
        self.assertTrue(swavg("--version").stdout.startswith("swavg "))
        self.assertIn("--null", swavg("average", "--help").stdout)


class InfoLinesTest(TempDirTest):
    def setUp(self):
        super().setUp()
        g = torch.Generator().manual_seed(5)
        self.folders = []
        for name in ("step-1", "step-2"):
            folder = self.path(name)
            os.mkdir(folder)
            save_file({"w": torch.randn(64, generator=g), "v": torch.randn(64, generator=g)},
                      os.path.join(folder, "model.safetensors"))
            with open(os.path.join(folder, "config.json"), "w") as f:
                f.write("{}")
            self.folders.append(folder)

    def test_the_worker_end_line(self):
        out = self.path("avg")
        for i, files in ((0, "2 files"), (1, "1 file")):
            p = swavg("average", *self.folders, "-o", out + "/", "--max-shard-size", "300", "--shard", "%d/2" % i)
            self.assertIn(
                "swavg: info: worker %d of 2 is done: %s written to %s.partial/; once each of the 2 workers is done, "
                "run `swavg finalize %s/` to publish the folder\n" % (i, files, out, out), p.stderr)

    def test_files_not_copied_are_debug_detail(self):
        out = self.path("avg")
        p = swavg("average", *self.folders, "-o", out + "/")
        self.assertNotIn("not copied", p.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["config.json", "model.safetensors"])
        p = swavg("-v", "average", *self.folders, "-o", out + "/", "--force")
        self.assertIn("swavg: debug: %s/model.safetensors: not copied" % self.folders[1], p.stderr)


if __name__ == "__main__":
    unittest.main()
