"""Pipeline faults: an input that changes while swavg has it mapped, paths that collide, outputs that
are not regular files, reports and stdout that cannot be written, and temp files of live and killed
runs. None of them crashes swavg or loses a file:

- an input truncated or rewritten (torch.save reopens it with "wb") while mapped is exit 5,
  "<file>: changed while being read", never SIGBUS, with no temp file and the earlier output intact.
  The faults are made deterministic by stopping swavg (SIGSTOP) once it has mapped the input;
- --report may not be -o or --resume (also through symlinks and hard links), refused (exit 2) before
  anything is read; -o may be --resume (the rolling EMA);
- a report into a missing folder is exit 5 before anything is read; outputs and reports that exist
  and are not regular files (FIFO, socket, /dev/null, /dev/full) are refused even with --force
  (exit 2), and the device or FIFO is left as it was;
- --json to a full device is exit 5, to a closed pipe a quiet exit 0, never death by SIGPIPE;
- a temp file is removed by the next run only when no process holds its lock: a killed run's is, a
  stopped (live) run's is not, whatever pid its name carries.
"""
import collections
import fcntl
import io
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import unittest

import torch

from common import SWAVG, TempDirTest, swavg

BIG_ELEMENTS = 48 << 20  # float32: 192 MiB per checkpoint, time enough to stop swavg mid-fold
# The ATen fold reads the mapped inputs too (from its own threads): run it in swavg-torch itself, as
# swavg would hand the job over by exec after mapping the inputs once already.
SWAVG_TORCH = os.path.join(os.path.dirname(SWAVG), "swavg-torch")


def temp_files(folder):
    return sorted(n for n in os.listdir(folder) if ".swavg-tmp-" in n)


def locked(path):
    """Whether a run holds the temp file's lock (atomic_file creates it, then locks it: a run stopped
    in between holds none, and another run's cleaner may rightly remove it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def maps(pid):
    try:
        with open("/proc/%d/maps" % pid) as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def save_as_trainer(obj, path):
    """torch.save(obj, path) as far as the file is concerned (opened "wb", truncated, rewritten), with
    an archive name that does not depend on the file's name, so that a rewrite keeps the size."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with open(path, "wb") as f:
        f.write(buffer.getbuffer())


def wait_stopped(pid):
    deadline = time.time() + 600  # a guard against a hang only: a busy machine is slow, not wrong
    while time.time() < deadline:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        time.sleep(0.001)
    raise AssertionError("swavg did not stop")


class FaultTest(TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="swavg-faults-")
        g = torch.Generator().manual_seed(0)
        cls.small = os.path.join(cls.shared, "small.pt")
        cls.small2 = os.path.join(cls.shared, "small2.pt")
        torch.save(collections.OrderedDict(w=torch.randn(64, 64, generator=g), b=torch.randn(64, generator=g)), cls.small)
        torch.save(collections.OrderedDict(w=torch.randn(64, 64, generator=g), b=torch.randn(64, generator=g)), cls.small2)
        cls.big = os.path.join(cls.shared, "big.pt")
        save_as_trainer(collections.OrderedDict(w=torch.ones(BIG_ELEMENTS), v=torch.ones(BIG_ELEMENTS // 4)), cls.big)
        cls.big_complex = os.path.join(cls.shared, "big_complex.pt")
        save_as_trainer(collections.OrderedDict(w=torch.ones(BIG_ELEMENTS // 2, dtype=torch.complex64)), cls.big_complex)
        cls.bad = os.path.join(cls.shared, "bad.pt")  # read first, it would be exit 3
        with open(cls.bad, "wb") as f:
            f.write(b"PK\x03\x04 not really a checkpoint" * 10)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    def big_copy(self, name, source=None):
        path = self.path(name)
        shutil.copyfile(source or self.big, path)
        return path

    # --- inputs that change while mapped ---------------------------------------------------------

    def run_stopped(self, args, mapped, change, binary=SWAVG):
        """Starts swavg, stops it once all of `mapped` are in its memory map, calls change(), resumes it."""
        for attempt in range(3):
            p = subprocess.Popen([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            stopped = False
            while p.poll() is None:
                m = maps(p.pid)
                if all(os.path.realpath(x) in m for x in mapped):
                    p.send_signal(signal.SIGSTOP)
                    stopped = True
                    break
                time.sleep(0.0005)
            if not stopped:
                p.communicate()
                continue
            wait_stopped(p.pid)
            change()
            p.send_signal(signal.SIGCONT)
            out, err = p.communicate(timeout=600)
            return p.returncode, out, err
        self.fail("swavg finished before it could be stopped, 3 times")

    def check_changed(self, rc, err, changed, out, before, why):
        self.assertNotEqual(rc, -signal.SIGBUS, "killed by SIGBUS:\n" + err)
        self.assertEqual(rc, 5, err)
        self.assertIn("%s: changed while being read (%s" % (changed, why), err)
        self.assertEqual(temp_files(self.tmp), [], "a temp file was left")
        if before is None:
            self.assertFalse(os.path.lexists(out), "an output made from a changed input appeared")
        else:
            self.assertEqual(read(out), before, "the earlier output changed")

    def test_input_truncated_while_folded(self):
        """Truncated after both are mapped (the fold reads it next): SIGBUS guarded, exit 5."""
        cases = [("native", SWAVG, self.big, [], False), ("native", SWAVG, self.big, [], True)]
        if os.path.exists(SWAVG_TORCH):  # complex64: averaged by ATen, not by swavg's own loops
            cases.append(("aten", SWAVG_TORCH, self.big_complex, [], True))
        for fold, binary, source, extra, earlier in cases:
            with self.subTest(fold=fold, earlier_output=earlier):
                a, b = self.big_copy("a.pt", source), self.big_copy("b.pt", source)
                out = self.path("avg.pt")
                before = None
                if earlier:
                    swavg("convert", self.small, "-o", out, "--force")
                    before = read(out)
                rc, _, err = self.run_stopped(["average", a, b, "-o", out, "--force", *extra], [a, b],
                                              lambda: os.truncate(a, 4096), binary)
                self.check_changed(rc, err, a, out, before, "it shrank")
                for p in (a, b):
                    os.remove(p)

    def test_input_truncated_while_loaded(self):
        """Truncated as soon as it is mapped, before its ZIP directory is read: the error its zeros
        cause is reported as the change."""
        a, b = self.big_copy("a.pt"), self.big_copy("b.pt")
        out = self.path("avg.pt")
        rc, _, err = self.run_stopped(["average", a, b, "-o", out], [a], lambda: os.truncate(a, 0))
        self.check_changed(rc, err, a, out, None, "it shrank")

    def test_input_rewritten_by_torch_save(self):
        """The trainer saves again: torch.save truncates and rewrites the file. Same size (same
        shapes): only the mtime tells; smaller: the mapping faults."""
        for name, tensors, why in (
                ("same size", lambda: collections.OrderedDict(w=torch.zeros(BIG_ELEMENTS), v=torch.zeros(BIG_ELEMENTS // 4)),
                 "it was modified"),
                ("smaller", lambda: collections.OrderedDict(w=torch.zeros(16), v=torch.zeros(4)), "it shrank")):
            with self.subTest(rewrite=name):
                a, b = self.big_copy("a.pt"), self.big_copy("b.pt")
                size = os.path.getsize(a)
                out = self.path("ema.pt")
                swavg("convert", self.small, "-o", out, "--force")
                before = read(out)
                rc, _, err = self.run_stopped(["ema", "--decay", "0.5", a, b, "-o", out, "--force"], [a, b],
                                              lambda: save_as_trainer(tensors(), a))
                if name == "same size":
                    self.assertEqual(os.path.getsize(a), size, "the rewrite was meant to keep the size")
                self.check_changed(rc, err, a, out, before, why)
                for p in (a, b):
                    os.remove(p)

    def test_input_replaced_by_rename(self):
        a, b = self.big_copy("a.pt"), self.big_copy("b.pt")
        out = self.path("avg.pt")

        def replace():
            torch.save(collections.OrderedDict(w=torch.zeros(4)), self.path("new.pt"))
            os.replace(self.path("new.pt"), b)

        rc, _, err = self.run_stopped(["average", a, b, "-o", out], [a, b], replace)
        self.check_changed(rc, err, b, out, None, "it was replaced by another file")

    def test_convert_of_truncated_input(self):
        """convert writes tensor bytes straight from the mapping: write() fails with EFAULT, which is
        the input changing too."""
        a = self.big_copy("a.pt")
        out = self.path("out.safetensors")
        rc, _, err = self.run_stopped(["convert", a, "-o", out], [a], lambda: None)
        self.assertEqual(rc, 0, err)  # the control: stopping and resuming alone changes nothing
        os.remove(out)
        rc, _, err = self.run_stopped(["convert", a, "-o", out], [a], lambda: os.truncate(a, 1 << 20))
        self.check_changed(rc, err, a, out, None, "it shrank")

    # --- paths that collide ------------------------------------------------------------------------

    def refused(self, args, message, code=2):
        p = swavg(*args, check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        self.assertIn(message, p.stderr)
        self.assertEqual(p.stdout, "")
        return p

    def test_report_output_resume_collisions(self):
        """--report vs -o and --report vs --resume, as the same name, a symlink, a hard link, a
        relative path through another folder; refused before anything is read (bad.pt would be exit 3)."""
        os.mkdir(self.path("sub"))
        resume = self.path("resume.pt")
        shutil.copyfile(self.bad, resume)
        out = self.path("out.pt")
        with open(out, "wb") as f:
            f.write(b"precious")
        os.symlink(out, self.path("out-link.pt"))
        os.link(out, self.path("out-hard.pt"))
        os.symlink(resume, self.path("resume-link.pt"))
        os.link(resume, self.path("resume-hard.pt"))
        not_yet = self.path("new.pt")  # neither exists yet: compared by resolved path
        cases = [
            (["-o", out, "--report", out], "--report and -o name the same file"),
            (["-o", out, "--report", self.path("out-link.pt")], "--report and -o name the same file"),
            (["-o", out, "--report", self.path("out-hard.pt")], "--report and -o name the same file"),
            (["-o", not_yet, "--report", self.path("sub/../new.pt")], "--report and -o name the same file"),
            (["-o", self.path("o2.pt"), "--resume", resume, "--report", resume], "--report and --resume name the same file"),
            (["-o", self.path("o2.pt"), "--resume", resume, "--report", self.path("resume-link.pt")],
             "--report and --resume name the same file"),
            (["-o", self.path("o2.pt"), "--resume", resume, "--report", self.path("resume-hard.pt")],
             "--report and --resume name the same file"),
            (["-o", self.path("o2.pt"), "--report", self.bad], "the output is the input"),
        ]
        for args, message in cases:
            for command in (["average", self.bad, self.small], ["ema", "--decay", "0.9", self.bad, self.small]):
                with self.subTest(args=args, command=command[0]):
                    self.refused([*command, *args, "--force"], message)
                    self.assertEqual(read(out), b"precious")
                    self.assertFalse(os.path.exists(not_yet))
        self.assertEqual(temp_files(self.tmp), [])

    def test_resume_may_be_the_output(self):
        out = self.path("ema.pt")
        swavg("ema", "--decay", "0.5", self.small, "-o", out)
        swavg("ema", "--decay", "0.5", "--resume", out, self.small2, "-o", out, "--force", "--report", self.path("r.json"))
        swavg("ema", "--decay", "0.5", self.small, self.small2, "-o", self.path("one-run.pt"))
        self.assertTrue(torch.equal(torch.load(out)["w"], torch.load(self.path("one-run.pt"))["w"]))

    # --- reports and outputs that cannot be written -----------------------------------------------

    def test_report_into_missing_folder(self):
        out = self.path("avg.pt")
        swavg("convert", self.small, "-o", out)
        before = read(out)
        # bad.pt: exit 3 had it been read; the folder is checked first.
        self.refused(["average", self.small, self.bad, "-o", out, "--force", "--report", self.path("nowhere/r.json")],
                     "does not exist", code=5)
        self.assertEqual(read(out), before)
        self.assertEqual(temp_files(self.tmp), [])

    def test_report_and_output_not_regular_files(self):
        out = self.path("avg.pt")
        swavg("convert", self.small, "-o", out)
        before = read(out)
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        sock = self.path("sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(sock)
        self.addCleanup(s.close)
        for target, what in ((fifo, "a FIFO"), (sock, "a socket"), ("/dev/null", "is in /dev"),
                             ("/dev/full", "is in /dev"), ("/dev/stdout", "is in /dev"), ("/dev/fd/1", "is in /proc/"),
                             ("/dev/new.pt", "is in /dev"), ("/proc/self/fd/2", "is in /proc/")):
            with self.subTest(target=target):
                # bad.pt: exit 3 had anything been read, so nothing is written even if the check broke.
                self.refused(["average", self.small, self.bad, "-o", out, "--force", "--report", target],
                             what)
                self.refused(["average", self.small, self.bad, "-o", target, "--force"], what)
                self.refused(["convert", self.bad, "-o", target, "--force"], what)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        self.assertTrue(stat.S_ISSOCK(os.lstat(sock).st_mode))
        self.assertTrue(stat.S_ISCHR(os.stat("/dev/null").st_mode))
        self.assertTrue(stat.S_ISCHR(os.stat("/dev/full").st_mode))
        self.assertEqual(read(out), before)
        self.assertEqual(temp_files(self.tmp), [])
        self.assertEqual([n for n in os.listdir("/dev") if ".swavg-tmp-" in n], [])
        self.assertFalse(os.path.lexists("/dev/new.pt"))

    @unittest.skipUnless(os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK), "no writable /dev/shm")
    def test_dev_shm_is_a_folder_like_others(self):
        out = tempfile.mktemp(prefix="swavg-faults-", suffix=".pt", dir="/dev/shm")
        self.addCleanup(lambda: os.path.lexists(out) and os.remove(out))
        swavg("convert", self.small, "-o", out)
        self.assertTrue(torch.equal(torch.load(out)["w"], torch.load(self.small)["w"]))

    def test_report_is_written_atomically(self):
        report = self.path("r.json")
        with open(report, "w") as f:
            f.write("old")
        os.link(report, self.path("r-hard.json"))
        swavg("average", self.small, self.small2, "-o", self.path("avg.pt"), "--report", report)
        # Replaced by a rename, not rewritten in place: the other link keeps the old bytes.
        self.assertEqual(read(self.path("r-hard.json")), b"old")
        self.assertIn(b'"mode"', read(report))
        self.assertEqual(temp_files(self.tmp), [])

    def test_json_to_full_device(self):
        out = self.path("avg.pt")
        with open("/dev/full", "w") as full:
            p = subprocess.run([SWAVG, "average", self.small, self.small2, "-o", out, "--json"], stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=600)
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertIn("stdout", p.stderr)
        self.assertIn("No space left on device", p.stderr)
        with open("/dev/full", "w") as full:
            p = subprocess.run([SWAVG, "inspect", self.small], stdout=full, stderr=subprocess.PIPE, text=True, timeout=600)
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertIn("No space left on device", p.stderr)

    def test_json_to_closed_pipe(self):
        for args in (["average", self.small, self.small2, "-o", self.path("avg.pt"), "--force", "--json"],
                     ["inspect", self.small]):
            with self.subTest(args=args[0]):
                # subprocess restores SIGPIPE's default in the child: swavg must handle it itself.
                r, w = os.pipe()
                os.close(r)
                p = subprocess.run([SWAVG, *args], stdout=w, stderr=subprocess.PIPE, text=True, timeout=600)
                os.close(w)
                # The reader has gone: quietly, exit 0, as Unix tools end (issue 29, item 6).
                self.assertEqual(p.returncode, 0, "exit %d\n%s" % (p.returncode, p.stderr))
                self.assertEqual(p.stderr.count("error"), 0, p.stderr)

    # --- temp files of live and killed runs -------------------------------------------------------

    def fake_temp(self, target, pid):
        path = os.path.join(os.path.dirname(target), ".%s.swavg-tmp-%d-123" % (os.path.basename(target), pid))
        with open(path, "wb") as f:
            f.write(b"partial")
        return path

    def test_temp_files_held_by_a_lock_not_a_pid(self):
        out = self.path("avg.pt")
        # Unlocked but named after a live pid (ours; as a pid from another pid namespace would be): stale.
        stale = self.fake_temp(out, os.getpid())
        # Locked by a live process, named after a pid that does not exist here: kept.
        held = self.fake_temp(out, 2 ** 22 + 1)
        holder = open(held, "rb")
        fcntl.flock(holder, fcntl.LOCK_EX)
        try:
            swavg("average", self.small, self.small2, "-o", out)
            self.assertFalse(os.path.exists(stale), "an unlocked temp file was kept")
            self.assertTrue(os.path.exists(held), "a locked temp file was removed")
        finally:
            holder.close()
        swavg("average", self.small, self.small2, "-o", out, "--force")
        self.assertEqual(temp_files(self.tmp), [])

    def test_temp_file_of_a_stopped_run_is_kept_of_a_killed_run_removed(self):
        out = self.path("out.pt")
        for kill in (False, True):
            with self.subTest(killed=kill):
                p = subprocess.Popen([SWAVG, "convert", self.big, "-o", out, "--force"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
                temps = []
                while p.poll() is None and not temps:
                    temps = [t for t in temp_files(self.tmp) if locked(os.path.join(self.tmp, t))]
                    time.sleep(0.0005)
                self.assertEqual(len(temps), 1, "swavg finished before its locked temp file was seen")
                p.send_signal(signal.SIGKILL if kill else signal.SIGSTOP)
                if kill:
                    p.wait()
                else:
                    wait_stopped(p.pid)
                swavg("convert", self.small, "-o", out, "--force")
                self.assertTrue(torch.equal(torch.load(out)["w"], torch.load(self.small)["w"]))
                if kill:
                    self.assertEqual(temp_files(self.tmp), [], "the killed run's temp file was kept")
                    p.stderr.close()
                else:
                    self.assertEqual(temp_files(self.tmp), temps, "the stopped run's temp file was removed")
                    p.send_signal(signal.SIGCONT)
                    _, err = p.communicate(timeout=600)
                    self.assertEqual(p.returncode, 0, err)
                    self.assertEqual(temp_files(self.tmp), [])
                    self.assertEqual(torch.load(out)["v"].shape, (BIG_ELEMENTS // 4,))


if __name__ == "__main__":
    unittest.main(verbosity=1)
