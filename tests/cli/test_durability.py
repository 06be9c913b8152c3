"""Durability of outputs: swavg writes a temp file in the target folder, fsyncs it, renames it into
place and fsyncs the folder, so that

- a run killed with SIGKILL mid-write leaves any earlier output intact, and the next run writing the
  same target removes the stray temp file, which the run held locked (flock) while it lived;
- a file-size limit (ulimit -f) gives a clear error (exit 5) and no output, not a SIGXFSZ kill;
- an output that is an input (also through a symlink or a hard link) is refused (exit 2) before
  anything is read, even with --force;
- an existing output is replaced only with --force.
"""
import collections
import fcntl
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import torch

from common import SWAVG, TempDirTest, swavg

BIG_ELEMENTS = 96 << 20  # float32: a 384 MiB checkpoint, slow enough to write that a kill lands mid-write


def temp_files(folder):
    return sorted(n for n in os.listdir(folder) if ".swavg-tmp-" in n)


def read(path):
    with open(path, "rb") as f:
        return f.read()


class DurabilityTest(TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="swavg-durability-")
        cls.small = os.path.join(cls.shared, "small.pt")
        cls.small2 = os.path.join(cls.shared, "small2.pt")
        cls.big = os.path.join(cls.shared, "big.pt")
        g = torch.Generator().manual_seed(0)
        torch.save(collections.OrderedDict(w=torch.randn(64, 64, generator=g), b=torch.randn(64, generator=g)), cls.small)
        torch.save(collections.OrderedDict(w=torch.randn(64, 64, generator=g), b=torch.randn(64, generator=g)), cls.small2)
        torch.save(collections.OrderedDict(w=torch.ones(BIG_ELEMENTS)), cls.big)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    def assert_locked(self, path):
        """The live run holds its temp file's lock: another process cannot take it."""
        with open(path, "rb") as f:
            with self.assertRaises(BlockingIOError, msg="a live run's temp file is not locked"):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def kill_mid_write(self, args, out):
        """Starts swavg, SIGKILLs it once its temp file beside `out` has grown, returns the temp files."""
        folder = os.path.dirname(out)
        for attempt in range(3):
            p = subprocess.Popen([SWAVG, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            killed = False
            deadline = time.time() + 300
            while p.poll() is None and time.time() < deadline:
                temps = temp_files(folder)
                if temps:
                    try:
                        size = os.path.getsize(os.path.join(folder, temps[0]))
                    except FileNotFoundError:
                        size = 0
                    if size >= 8 << 20:
                        self.assert_locked(os.path.join(folder, temps[0]))
                        p.send_signal(signal.SIGKILL)
                        killed = True
                        break
                time.sleep(0.001)
            p.wait()
            p.stderr.close()
            if killed:
                self.assertEqual(p.returncode, -signal.SIGKILL)
                return temp_files(folder)
        self.fail("swavg finished before it could be killed mid-write, 3 times")

    def test_sigkill_mid_write_keeps_earlier_output(self):
        out = self.path("avg.pt")
        swavg("convert", self.small, "-o", out)
        before = read(out)
        stray = self.kill_mid_write(["convert", self.big, "-o", out, "--force"], out)
        self.assertEqual(len(stray), 1, "a killed run leaves its temp file (and only that)")
        self.assertEqual(read(out), before, "the earlier output changed")
        torch.load(out)  # still a whole checkpoint
        # The next run writing the same target removes the stray temp file.
        swavg("convert", self.small2, "-o", out, "--force")
        self.assertEqual(temp_files(self.tmp), [])
        self.assertTrue(torch.equal(torch.load(out)["w"], torch.load(self.small2)["w"]))

    def test_sigkill_mid_write_without_earlier_output(self):
        out = self.path("avg.pt")
        stray = self.kill_mid_write(["average", self.big, self.big, "-o", out], out)
        self.assertEqual(len(stray), 1)
        self.assertFalse(os.path.lexists(out), "a partial output appeared under the target name")
        swavg("average", self.small, self.small2, "-o", out)
        self.assertEqual(temp_files(self.tmp), [])
        torch.load(out)

    def test_report_reserved_before_hand_over(self):
        """A run handed over to swavg-torch (complex tensors) drops its report's reservation before
        the exec: swavg-torch does not find it as a temp file of a killed run, and none is left."""
        for i in range(2):
            torch.save({"z": torch.full((3,), complex(i, -i), dtype=torch.complex64)}, self.path(f"c{i}.pt"))
        p = swavg("-v", "average", self.path("c0.pt"), self.path("c1.pt"), "-o", self.path("avg.pt"),
                  "--report", self.path("r.json"))
        self.assertIn("swavg-torch", p.stderr)  # handed over
        self.assertNotIn("removed a temp file", p.stderr)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["avg.pt", "c0.pt", "c1.pt", "r.json"])

    def test_file_size_limit(self):
        out = self.path("out.pt")
        limit = 1 << 20

        def set_limit():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        for args in (["convert", self.big, "-o", out], ["average", self.big, self.big, "-o", out],
                     ["convert", self.big, "-o", self.path("out.safetensors")]):
            with self.subTest(args=args[0]):
                # subprocess restores SIGXFSZ to its default in the child: swavg must handle it itself.
                p = subprocess.run([SWAVG, *args], capture_output=True, text=True, preexec_fn=set_limit, timeout=600)
                self.assertEqual(p.returncode, 5, "exit %d (%s)\n%s" % (p.returncode, "killed by a signal" if p.returncode < 0 else "",
                                                                         p.stderr))
                self.assertIn("File too large", p.stderr)
                self.assertIn(args[-1], p.stderr)
                self.assertEqual(p.stdout, "")
                self.assertEqual(os.listdir(self.tmp), [], "an output or temp file was left")

    def check_refused_before_reading(self, args, message):
        p = swavg(*args, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(message, p.stderr)
        self.assertEqual(p.stdout, "")

    def test_output_is_input(self):
        # The input is malformed: had swavg read it first, it would exit 3, not 2.
        bad = self.path("bad.pt")
        content = b"PK\x03\x04 not really a checkpoint" * 10
        with open(bad, "wb") as f:
            f.write(content)
        os.symlink(bad, self.path("symlink.pt"))
        os.link(bad, self.path("hardlink.pt"))
        os.mkdir(self.path("sub"))
        os.symlink("../bad.pt", self.path("sub/relative.pt"))
        for out in ("bad.pt", "symlink.pt", "hardlink.pt", "sub/relative.pt"):
            out = self.path(out)
            for force in ([], ["--force"]):
                with self.subTest(output=out, force=force):
                    self.check_refused_before_reading(["convert", bad, "-o", out, *force], "the output is the input")
                    self.check_refused_before_reading(["average", self.small, bad, "-o", out, *force],
                                                      "the output is the input")
                    self.check_refused_before_reading(["ema", "--decay", "0.9", bad, self.small, "-o", out, *force],
                                                      "the output is the input")
                    self.assertEqual(read(bad), content)
        self.assertEqual(temp_files(self.tmp), [])

    def test_existing_output_needs_force(self):
        out = self.path("out.pt")
        with open(out, "wb") as f:
            f.write(b"precious")
        for args in (["convert", self.small, "-o", out], ["average", self.small, self.small2, "-o", out]):
            with self.subTest(args=args[0]):
                self.check_refused_before_reading(args, "pass --force")
                self.assertEqual(read(out), b"precious")
        swavg("convert", self.small, "-o", out, "--force")
        self.assertTrue(torch.equal(torch.load(out)["w"], torch.load(self.small)["w"]))
        self.assertEqual(sorted(os.listdir(self.tmp)), ["out.pt"])

    def test_output_folder_missing_or_output_a_directory(self):
        p = swavg("convert", self.small, "-o", self.path("nowhere/out.pt"), check=False)
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertIn("does not exist", p.stderr)
        # An existing folder is a folder output (-o DIR/): a Hugging Face folder is written into it.
        os.mkdir(self.path("dir.pt"))
        swavg("convert", self.small, "-o", self.path("dir.pt"), "--force")
        self.assertEqual(os.listdir(self.path("dir.pt")), ["model.safetensors"])

    @unittest.skipUnless(shutil.which("strace"), "strace is not installed")
    def test_fsync_rename_fsync_order(self):
        """The temp file is fsynced before the rename and the folder after it."""
        out = self.path("out.pt")
        log = self.path("strace.log")
        p = subprocess.run(["strace", "-f", "-s", "4096", "-o", log, "-e", "trace=openat,fsync,fdatasync,rename,renameat,renameat2,close",
                            SWAVG, "convert", self.small, "-o", out], capture_output=True, text=True, timeout=600)
        if p.returncode != 0 and "ptrace" in p.stderr:
            self.skipTest("ptrace is not permitted here")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(log) as f:
            calls = f.read().splitlines()
        os.remove(log)

        def index(pred, what):
            for i, line in enumerate(calls):
                if pred(line):
                    return i
            self.fail("no %s in the trace:\n%s" % (what, "\n".join(calls[-30:])))

        rename = index(lambda l: "rename" in l and ".swavg-tmp-" in l and out in l, "rename of the temp file")
        temp_fd = None
        for line in calls[:rename]:
            if "openat(" in line and ".swavg-tmp-" in line and "O_CREAT" in line:
                temp_fd = line.rsplit("=", 1)[1].strip()
        self.assertIsNotNone(temp_fd)
        self.assertTrue(any(("fsync(%s)" % temp_fd) in l or ("fdatasync(%s)" % temp_fd) in l for l in calls[:rename]),
                        "the temp file is not fsynced before the rename")
        dir_fds = [l.rsplit("=", 1)[1].strip() for l in calls[rename:] if "openat(" in l and "O_DIRECTORY" in l
                   and "= -1" not in l]
        self.assertTrue(any(("fsync(%s)" % fd) in l for fd in dir_fds for l in calls[rename:]),
                        "the folder is not fsynced after the rename")


if __name__ == "__main__":
    unittest.main(verbosity=1)
