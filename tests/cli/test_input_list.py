"""--inputs-from lists: one path per line, byte for byte but for the line end (a '\\n', and one '\\r'
before it or ending the last line); no comments and no trimming, so files named `#1.pt`, ` a.pt `
or `   ` are listed as they are; empty lines skipped; a NUL byte refused (exit 2, naming the list and
the line). --null reads NUL-separated lists (find -print0) with every record verbatim.

References: the files themselves (the report's `inputs` must be exactly the names written) and
find(1)'s -print0 for NUL-separated lists.
"""
import json
import os
import shutil
import subprocess

import torch

from common import SWAVG, TempDirTest

TIMEOUT_S = 600
ODD_NAMES = ["#1.pt", "# notes.pt", " a.pt ", "a b.pt", "   ", "\tt.pt", "-dash.pt"]


class InputListTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.d = self.path("ckpts")
        os.mkdir(self.d)
        self.src = os.path.join(self.d, "plain.pt")
        torch.save({"w": torch.arange(4, dtype=torch.float32)}, self.src)

    def make(self, *names):
        for n in names:
            shutil.copy(self.src, os.path.join(self.d, n))

    def run_list(self, data, *args, stdin=False):
        """swavg average with the list `data` (bytes) from a file (or stdin), in the folder of the inputs."""
        listed = self.path("list")
        with open(listed, "wb") as f:
            f.write(data)
        # --sort none: the list's own order is what these tests read back.
        argv = [SWAVG, "average", "--inputs-from", "-" if stdin else listed, "--sort", "none", *args, "-o",
                self.path("out.pt"), "--force", "--json"]
        with open(listed if stdin else os.devnull, "rb") as f:
            return subprocess.run(argv, stdin=f, cwd=self.d, capture_output=True, timeout=TIMEOUT_S)

    def inputs_of(self, p):
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        return json.loads(p.stdout)["inputs"]

    def refused(self, p, *texts):
        stderr = p.stderr.decode(errors="replace")
        self.assertEqual(p.returncode, 2, stderr)
        for line in stderr.splitlines():
            self.assertTrue(line.startswith("swavg: error: "), line)
        for t in texts:
            self.assertIn(t, stderr)
        self.assertFalse(os.path.exists(self.path("out.pt")))

    def test_lines_are_paths_byte_for_byte(self):
        self.make(*ODD_NAMES)
        data = "\n".join(ODD_NAMES).encode() + b"\n"
        for stdin in (False, True):
            with self.subTest(stdin=stdin):
                self.assertEqual(self.inputs_of(self.run_list(data, stdin=stdin)), ODD_NAMES)

    def test_line_ends_and_empty_lines(self):
        self.make("a.pt", "b.pt", "c.pt")
        cases = [
            (b"a.pt\r\nb.pt\r\n", ["a.pt", "b.pt"]),  # CRLF
            (b"a.pt\nb.pt", ["a.pt", "b.pt"]),  # the last line without a newline
            (b"a.pt\nb.pt\r", ["a.pt", "b.pt"]),  # nor with one, after a '\r'
            (b"\n\na.pt\n\r\n\nc.pt\n\n", ["a.pt", "c.pt"]),  # empty lines skipped
        ]
        for data, want in cases:
            with self.subTest(data=data):
                self.assertEqual(self.inputs_of(self.run_list(data)), want)

    def test_an_empty_list_is_refused(self):
        for data in (b"", b"\n", b"\r\n\n"):
            with self.subTest(data=data):
                self.refused(self.run_list(data), "no input checkpoints given", self.path("list"), "holds no path")
        self.refused(self.run_list(b"", "--null"), "holds no path (read NUL-separated")

    def test_a_nul_byte_is_refused_with_its_line(self):
        self.make("a.pt", "b.pt")
        cases = [
            (b"\0a.pt\n", "line 1 holds a NUL byte (at byte 1 of the line)"),  # the first byte
            (b"a.pt\nb.pt\n\0", "line 3 holds a NUL byte (at byte 1 of the line)"),  # the last byte
            (b"a.pt\0b.pt\0", "line 1 holds a NUL byte (at byte 5 of the line)"),  # find -print0 without --null
            (b"a.pt\n\nb.pt\0\n", "line 3 holds a NUL byte (at byte 5 of the line)"),
        ]
        for data, where in cases:
            for stdin in (False, True):
                with self.subTest(data=data, stdin=stdin):
                    name = "-" if stdin else self.path("list")
                    self.refused(self.run_list(data, stdin=stdin), "--inputs-from %s: %s" % (name, where), "--null")

    def test_null_separated_records_are_verbatim(self):
        names = ODD_NAMES + ["new\nline.pt", "cr.pt\r", "a.pt"]
        self.make(*names)
        cases = [
            (b"\0".join(n.encode() for n in names) + b"\0", names),  # a trailing NUL
            (b"\0".join(n.encode() for n in names), names),  # and without one
            (b"\0a.pt\0\0#1.pt\0", ["a.pt", "#1.pt"]),  # empty records: first, between two NULs
            (b"a.pt\n\0", None),  # a newline is part of the name: "a.pt\n" does not exist
        ]
        for data, want in cases:
            for stdin in (False, True):
                with self.subTest(data=data, stdin=stdin):
                    p = self.run_list(data, "--null", stdin=stdin)
                    if want is None:
                        self.assertEqual(p.returncode, 5, p.stderr)
                    else:
                        self.assertEqual(self.inputs_of(p), want)

    def test_find_print0_pipes_into_null(self):
        names = ["#1.pt", "  a.pt", "b .pt", "new\nline.pt"]
        self.make(*names)
        os.remove(self.src)
        p = subprocess.run(["bash", "-c", 'find . -name "*.pt" -print0 | "$0" average --inputs-from - --null '
                            '--sort name -o "$1" --json', SWAVG, self.path("out.pt")],
                           cwd=self.d, capture_output=True, timeout=TIMEOUT_S)
        self.assertEqual(self.inputs_of(p), sorted("./" + n for n in names))

    def test_the_list_read_from_stdin_goes_on_to_swavg_torch_as_read(self):
        # --avg-fn needs LibTorch: swavg hands the job to swavg-torch with the list it read.
        fn = self.path("avg.ts")
        torch.jit.script(AvgFn()).save(fn)
        names = ["new\nline.pt", "cr.pt\r", " a.pt "]
        self.make(*names)
        for null, data, want in ((True, b"\0".join(n.encode() for n in names), names),
                                 (False, b"#1.pt\r\n a.pt \n", ["#1.pt", " a.pt "])):
            self.make("#1.pt")
            with self.subTest(null=null):
                extra = ["--null"] if null else []
                p = self.run_list(data, *extra, "--avg-fn", fn, stdin=True)
                if p.returncode != 0 and b"swavg-torch" in p.stderr and b"could not be started" in p.stderr:
                    self.skipTest("swavg-torch is not built")
                self.assertEqual(self.inputs_of(p), want)


class AvgFn(torch.nn.Module):
    def forward(self, averaged: torch.Tensor, current: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return averaged + (current - averaged) / (n + 1)


if __name__ == "__main__":
    import unittest

    unittest.main()
