"""Writes to stdout are checked everywhere (issue 29, item 6; util/standard_output.h): --help,
--version, the completion scripts, the man page, reports (--json), the dry-run plan and inspect.
A failed write (stdout on /dev/full) is exit 5 naming stdout; a reader that went away (a closed
pipe: `swavg ... | head -1`) ends the run quietly with exit 0, its output published as without
--json."""
import os
import subprocess
import unittest

import torch
from safetensors.torch import save_file

from common import SWAVG, TempDirTest


class Stdout(TempDirTest):
    def setUp(self):
        super().setUp()
        self.inputs = []
        for i in range(2):
            p = self.path("c%d.safetensors" % i)
            save_file({"w": torch.full((300, 300), float(i))}, p)
            self.inputs.append(p)

    def commands(self):
        return [["--help"], ["--version"], ["average", "--help"], ["completion", "bash"], ["completion", "zsh"],
                ["completion", "fish"], ["help-man"], ["inspect", self.inputs[0]],
                ["average", *self.inputs, "-o", self.path("d.pt"), "--dry-run"],
                ["average", *self.inputs, "-o", self.path("d.pt"), "--dry-run", "--json"],
                ["average", *self.inputs, "-o", self.path("j.pt"), "--json", "--force"]]

    def test_full_device(self):
        for args in self.commands():
            with self.subTest(args=args[:2]):
                with open("/dev/full", "w") as full:
                    p = subprocess.run([SWAVG, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=600)
                self.assertEqual(p.returncode, 5, "%s: exit %d\n%s" % (args, p.returncode, p.stderr))
                self.assertIn("stdout", p.stderr)
                self.assertIn("No space left on device", p.stderr)

    def test_closed_pipe(self):
        for args in self.commands():
            with self.subTest(args=args[:2]):
                r, w = os.pipe()
                os.close(r)
                p = subprocess.run([SWAVG, *args], stdout=w, stderr=subprocess.PIPE, text=True, timeout=600)
                os.close(w)
                self.assertEqual(p.returncode, 0, "%s: exit %d\n%s" % (args, p.returncode, p.stderr))
                self.assertNotIn("error", p.stderr)
        # The real run's output is there, whole.
        self.assertTrue(torch.equal(torch.load(self.path("j.pt"), weights_only=True)["w"],
                                    torch.full((300, 300), 0.5)))

    def test_head(self):
        """`swavg ... | head -1` through a shell: exit 0 from swavg, one line printed."""
        p = subprocess.run(["bash", "-c", 'set -o pipefail; "$0" "$@" | head -1', SWAVG, "help-man"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), 1)


if __name__ == "__main__":
    unittest.main()
