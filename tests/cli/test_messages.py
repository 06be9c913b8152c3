"""One message style: every line swavg writes to stderr for a bad command line or a bad input starts
`swavg: error:`, the exit code is the one the README's table gives, and the message names what it
should (the option, the file, the tensor) and what to do. CLI11's parse errors are wrapped the same
way. --help and --version go to stdout with exit 0. Info lines are sentences: a worker's end line is
checked word for word, and the per-file `not copied` lines of a folder output are -v detail only.

References: the exit codes of the README and util/error.h; the inputs are written by torch.save and
safetensors' save_file.
"""
import json
import os
import pty
import re
import shutil
import subprocess
import tempfile
import unittest

import torch
from safetensors.torch import save_file

from common import SWAVG, TempDirTest, swavg

SUBCOMMANDS = ["average", "ema", "inspect", "convert", "update-bn", "finalize", "posthoc-ema", "watch", "watch average",
               "watch ema"]


def error_lines_only(test, p, where):
    """Every non-empty stderr line is an error line (or CLI11's follow-up hint); nothing on stdout."""
    lines = [line for line in p.stderr.splitlines() if line.strip() and not line.startswith("swavg: progress: ")]
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
             ["--sort: expected one of {none,name,natural,mtime,step}, got 'size'"]),
            (["average", a, b, "--null", "-o", out], 2, ["--null needs --inputs-from"]),
            (["average", a, b, "--shard", "", "-o", out], 2, ["--shard", "expected a value, got an empty string"]),
            (["average", a, b, "--weights", "1,x", "-o", out], 2, ["--weights: expected a number, got 'x' in '1,x'", "or a recipe: sma, wma"]),
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
        self.assertIn("the subcommands are average, ema, inspect, convert, update-bn, finalize, posthoc-ema, watch, "
                      "completion;", p.stderr)
        self.assertNotIn("help-man", p.stderr)  # hidden: the build runs it

    def test_help_and_version_go_to_stdout(self):
        for argv in [["--help"], ["-h"], ["--version"]] + [[*s.split(), "--help"] for s in SUBCOMMANDS]:
            with self.subTest(argv=argv):
                p = swavg(*argv, check=False)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stderr, "")
                self.assertTrue(p.stdout.strip())
        self.assertTrue(swavg("--version").stdout.startswith("swavg "))
        self.assertIn("--null", swavg("average", "--help").stdout)


def run_in_terminal(argv, env=None, columns=100):
    """Runs swavg with stderr (and stdin) on a pseudo-terminal `columns` wide; returns (exit code, stderr)."""
    import fcntl
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    p = subprocess.Popen([SWAVG, *argv], stdin=slave, stdout=subprocess.PIPE, stderr=slave,
                         env=dict(os.environ, **(env or {})))
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    code = p.wait(timeout=600)
    p.stdout.close()
    os.close(master)
    return code, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


class FixMessagesTest(TempDirTest):
    """Messages that say the fix: a prefix difference names the --strip-prefix, different models are
    said to be, --allow-missing is offered for a partial overlap only; an unexpanded glob, a decay
    typed without its "0."; numbers echoed as typed; --help that fits and offers what it accepts."""

    def setUp(self):
        super().setUp()
        g = torch.Generator().manual_seed(31)
        self.a = self.path("a.pt")
        names = ["layer%d.weight" % i for i in range(17)]
        torch.save({n: torch.randn(3, generator=g) for n in names}, self.a)
        self.prefixed = self.path("b.safetensors")
        save_file({"model." + n: torch.randn(3, generator=g) for n in names}, self.prefixed)
        self.other = self.path("other.pt")
        torch.save({"encoder.%d" % i: torch.randn(2, generator=g) for i in range(17)}, self.other)
        self.partial = self.path("partial.pt")
        torch.save({n: torch.randn(3, generator=g) for n in names[:15]}, self.partial)
        self.out = self.path("out.pt")

    def check(self, argv, code, texts, absent=()):
        p = swavg(*argv, check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        error_lines_only(self, p, argv)
        for text in texts:
            self.assertIn(text, p.stderr)
        for text in absent:
            self.assertNotIn(text, p.stderr)
        return p.stderr

    def test_a_prefix_difference_names_the_strip_prefix(self):
        err = self.check(["average", self.a, self.prefixed, "-o", self.out], 4,
                         ["the tensor names of %s are those of %s with the prefix 'model.': pass --strip-prefix model."
                          % (self.prefixed, self.a)], ["--allow-missing"])
        self.assertIn("... (34 in all)", err)  # 2 x 17 names, 20 listed
        self.assertEqual(err.count("is missing"), 20)
        swavg("average", self.a, self.prefixed, "--strip-prefix", "model.", "-o", self.out)  # the fix works

    def test_the_whole_list_goes_to_the_report(self):
        report = self.path("report.json")
        for command in (["average"], ["ema", "--decay", "0.9"]):
            with self.subTest(command=command[0]):
                err = self.check([*command, self.a, self.prefixed, "-o", self.out, "--report", report], 4,
                                 ["... (34 in all)"])
                with open(report) as f:
                    got = json.load(f)
                self.assertEqual(list(got), ["error"])
                self.assertEqual(got["error"]["exit_code"], 4)
                message = got["error"]["message"]
                self.assertTrue(message.startswith("the inputs disagree (34 differences):"), message)
                self.assertIn(message.splitlines()[0], err)
                self.assertIn("... (34 in all)", message)
                details = got["error"]["details"]
                self.assertEqual(len(details), 34)
                for n in range(17):
                    self.assertEqual(sum(("'layer%d.weight'" % n) in d for d in details), 1, details)
                    self.assertEqual(sum(("'model.layer%d.weight'" % n) in d for d in details), 1, details)
                self.assertFalse(os.path.exists(self.out))
                os.remove(report)

    def test_different_models_are_said_to_be(self):
        self.check(["average", self.a, self.other, "-o", self.out], 4,
                   ["%s and %s look like different models (0 of their tensor names in common)" % (self.a, self.other)],
                   ["--allow-missing", "--strip-prefix"])

    def test_allow_missing_for_a_partial_overlap_only(self):
        self.check(["average", self.a, self.partial, "-o", self.out], 4,
                   ["%s lacks 2 of the tensors of %s: pass --allow-missing" % (self.partial, self.a)])
        self.check(["average", self.a, self.path("wide.pt"), "-o", self.out], 5, [])  # (missing file)
        wide = self.path("wide.pt")
        torch.save({"layer%d.weight" % i: torch.zeros(4 if i == 0 else 3) for i in range(17)}, wide)
        self.check(["average", self.a, wide, "-o", self.out], 4, ["expected shape [3]"], ["--allow-missing"])

    def test_an_unexpanded_glob_is_named(self):
        pattern = self.path("nothere/ckpt_*.pt")
        self.check(["average", pattern, "-o", self.out], 5,
                   ["%s: no such file: this looks like a file pattern, and the shell found no file matching it"
                    % pattern])
        self.check(["average", self.path("nothere/ckpt_1.pt"), "-o", self.out], 5, ["No such file"],
                   ["pattern"])

    def test_did_you_mean_a_decay(self):
        self.check(["ema", self.a, self.a, "--decay", "999", "-o", self.out], 2,
                   ["--decay: expected a value in [0, 1], got 999 (did you mean 0.999?)"])
        self.check(["ema", self.a, self.a, "--decay", "1.5", "-o", self.out], 2, ["got 1.5"], ["did you mean"])

    def test_numbers_echoed_as_typed(self):
        self.check(["ema", self.a, self.a, "--decay", "0.999", "--warmup", "power", "--min-decay", "0.9999",
                    "-o", self.out], 2,
                   ["--min-decay: expected a value in [0, --decay] = [0, 0.999], got 0.9999"], ["0.9999000"])

    def test_help_fits_the_width_and_names_the_program(self):
        for columns in (80, 120):
            with self.subTest(columns=columns):
                p = subprocess.run([SWAVG, "average", "--help"], capture_output=True, text=True, timeout=60,
                                   env=dict(os.environ, COLUMNS=str(columns)))
                self.assertEqual(p.returncode, 0)
                self.assertTrue(p.stdout.startswith("swavg: average") or "Usage: swavg average" in p.stdout)
                self.assertIn("Usage: swavg average [OPTIONS]", p.stdout)
                # The examples are commands, kept whole to be copied.
                long = [line for line in p.stdout.splitlines() if len(line) >= columns and
                        not line.startswith("  swavg ")]
                self.assertEqual(long, [])
                null = [line for line in p.stdout.splitlines() if line.startswith("  --null")]
                self.assertEqual(len(null), 1)
                self.assertNotIn("Needs:", p.stdout)
        self.assertIn("(needs --inputs-from)", p.stdout)
        self.assertIn("Usage: swavg [OPTIONS] SUBCOMMAND", swavg("--help").stdout)

    def test_every_format_offered_is_accepted(self):
        text = swavg("update-bn", "--help").stdout
        self.assertNotIn("dcp", text)
        self.check(["update-bn", "--model", self.a, "--data", self.a, "--format", "dcp", "-o", self.out], 2,
                   ["--format: expected one of {torch,safetensors}, got 'dcp'"])


class OutputStyleTest(TempDirTest):
    """--progress, $SWAVG_PROGRESS, --color and NO_COLOR on the lines swavg prints."""

    def setUp(self):
        super().setUp()
        g = torch.Generator().manual_seed(29)
        self.inputs = []
        for i in range(3):
            path = self.path("ckpt_%d.pt" % i)
            torch.save({"w": torch.randn(1000, generator=g), "b": torch.randn(10, generator=g)}, path)
            self.inputs.append(path)
        self.out = self.path("avg.pt")

    def average(self, *extra, env=None):
        return subprocess.run([SWAVG, "average", *self.inputs, "-o", self.out, "--force", *extra],
                              capture_output=True, text=True, timeout=600, env=dict(os.environ, **(env or {})))

    def test_lines_off_a_terminal(self):
        p = self.average()
        self.assertEqual(p.returncode, 0, p.stderr)
        for line in ("swavg: progress: opening 3 inputs started: 3 checkpoints\n",
                     "swavg: progress: folding started: ", "swavg: progress: folding done in 0:00: ",
                     "swavg: progress: writing avg.pt started\n"):
            self.assertIn(line, p.stderr)
        self.assertRegex(p.stderr, r"swavg: progress: folding started: [0-9.]+ kB, 2 tensors\n")
        self.assertNotIn("\r", p.stderr)
        for line in p.stderr.splitlines():
            self.assertRegex(line, r"^swavg: (progress|info): ")

    def test_off_quiet_and_the_environment(self):
        for extra, env in ((["--progress", "off"], {}), (["-q"], {}), ([], {"SWAVG_PROGRESS": "off"}),
                           (["--progress", "off"], {"SWAVG_PROGRESS": "lines"})):
            with self.subTest(extra=extra, env=env):
                p = self.average(*extra, env=env)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertNotIn("progress", p.stderr)
        p = self.average(env={"SWAVG_PROGRESS": "fancy"})
        self.assertEqual(p.returncode, 2)
        self.assertIn("--progress: expected one of {auto,bar,lines,off}, got 'fancy'", p.stderr)

    def test_a_bar_on_a_terminal_never_runs_into_a_log_line(self):
        code, err = run_in_terminal(["average", *self.inputs, "-o", self.out, "--force"], columns=70)
        self.assertEqual(code, 0, err)
        self.assertIn("\r", err)
        self.assertIn("folding", err)
        self.assertNotIn("swavg: progress:", err)
        # Every log line starts a line: the bar was erased before it.
        for m in re.finditer("swavg: ", err):
            self.assertIn(err[m.start() - 1] if m.start() else "\n", "\n\r", err)
        for segment in re.split("[\r\n]", err):  # the bars: within the terminal's 70 columns
            if not segment.startswith("swavg: "):
                self.assertLess(len(segment.rstrip()), 70, segment)
        # Forced with --progress bar off a terminal too.
        p = subprocess.run([SWAVG, "average", *self.inputs, "-o", self.out, "--force", "--progress", "bar"],
                           capture_output=True, timeout=600)
        self.assertIn(b"\rfolding", p.stderr)

    def test_no_color_and_color_options(self):
        bad = ["average", self.inputs[0], "--bogus", "-o", self.out]
        code, err = run_in_terminal(bad)
        self.assertEqual(code, 2)
        self.assertIn("\x1b[", err)  # a terminal: coloured
        for env, extra in (({"NO_COLOR": "1"}, []), ({}, ["--color", "never"]), ({"TERM": "dumb"}, [])):
            with self.subTest(env=env, extra=extra):
                code, err = run_in_terminal(extra + bad, env=env)
                self.assertEqual(code, 2)
                self.assertIn("swavg: error: unknown option '--bogus'", err)
                self.assertNotIn("\x1b", err)
        code, err = run_in_terminal(["average", *self.inputs, "-o", self.out, "--force"], env={"NO_COLOR": "1"})
        self.assertEqual(code, 0, err)
        self.assertNotIn("\x1b", err)
        # An empty NO_COLOR is unset; --color always colours a pipe.
        code, err = run_in_terminal(bad, env={"NO_COLOR": ""})
        self.assertIn("\x1b[", err)
        p = swavg("--color", "always", *bad, check=False)
        self.assertIn("swavg: \x1b[1m\x1b[31merror\x1b[0m: unknown option", p.stderr)
        self.assertNotIn("\x1b", swavg(*bad, check=False).stderr)


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
