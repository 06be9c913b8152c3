"""swavg watch: checkpoints folded while a trainer writes and rotates them.

- Beside trainers (tests/cli/fake_trainer.py: pt, safetensors, Hugging Face Trainer folders and DCP
  folders written slowly, by rename or in place, rotated with keep=2; tests/cli/watch_trainer.py: a
  real transformers.Trainer with save_total_limit=2), the watcher SIGKILLed at random moments and
  restarted: its final average equals torch.optim.swa_utils.AveragedModel over every checkpoint the
  run wrote, bit for bit.
- SIGKILL while each checkpoint is being folded, and just after each output is replaced: the final
  output is byte-identical to one `swavg ema` over the same files in step order.
- Half-written checkpoints (cut short, a DCP folder before .metadata, a Trainer folder before
  trainer_state.json) are never read as whole; deleted ones are reported, never folded half.
- Passed over with reasons, stops (--until-step, --idle-timeout, SIGTERM), flat memory over hundreds
  of checkpoints, several decays, the report, and the refusals.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import unittest

import torch
from safetensors.torch import load_file

from common import SWAVG, TempDirTest, same_bits, swavg
from peak_rss import peak_rss

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fake_trainer  # noqa: E402

FAST = ["--poll", "0.05", "--settle", "0.1", "-q"]


def load_any(path):
    if path.endswith(".safetensors"):
        return load_file(path)
    return torch.load(path, weights_only=True)


def write(run, kind, step, seed, **kw):
    """fake_trainer.write_checkpoint into `run` (made when missing)."""
    os.makedirs(run, exist_ok=True)
    return fake_trainer.write_checkpoint(run, kind, step, seed, **kw)


def status_of(out):
    with open(out + ".watch.json") as f:
        return json.load(f)


class WatchTest(TempDirTest):
    def trainer(self, run, *args):
        """Starts fake_trainer.py writing into `run`; returns the process."""
        return subprocess.Popen([sys.executable, os.path.join(HERE, "fake_trainer.py"), "--output-dir", run,
                                 "--quiet", *map(str, args)])

    def watch(self, *args, check=True):
        return swavg("watch", *args, check=check)

    def watch_with_kills(self, trainer, args, seed, low=0.2, high=1.2):
        """Runs `swavg watch ARGS` while `trainer` lives, SIGKILLing it after a random time and
        restarting it; returns how many times it was killed."""
        rng = random.Random(seed)
        kills = 0
        while trainer.poll() is None:
            p = subprocess.Popen([SWAVG, "watch", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                p.wait(timeout=rng.uniform(low, high))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                kills += 1
            else:
                self.fail("the watcher stopped by itself (%d): %s" % (p.returncode, p.stderr.read().decode()))
            finally:
                p.stderr.close()
        self.assertEqual(trainer.wait(), 0)
        return kills

    def assert_params_equal(self, out, expected, params):
        got = load_any(out)
        for name in params:
            self.assertTrue(same_bits(got[name], expected[name]), name)

    # --- beside trainers ------------------------------------------------------------------------

    def test_beside_a_rotating_trainer_killed_anywhere(self):
        """keep=2: each checkpoint lives two saves; the watcher, killed and restarted at random,
        still folds every one exactly once, in step order."""
        cases = [("pt", "direct", "ema", ".pt"), ("safetensors", "rename", "average", ".safetensors"),
                 ("hf", "direct", "average", ".safetensors"), ("dcp", "direct", "ema", ".pt")]
        for i, (kind, mode, fold, ext) in enumerate(cases):
            with self.subTest(kind=kind, mode=mode, fold=fold):
                run, out, ref = self.path("run-" + kind), self.path("avg-" + kind + ext), self.path("ref-" + kind)
                t = self.trainer(run, "--kind", kind, "--steps", 10, "--keep", 2, "--chunk-bytes", 400,
                                 "--chunk-delay", 0.02, "--interval", 0.3, "--write-mode", mode, "--reference",
                                 ref, "--ema-decay", 0.9)
                decay = ["--decay", "0.9"] if fold == "ema" else []
                args = [fold, *decay, run, "-o", out, *FAST]
                kills = self.watch_with_kills(t, args, seed=i)
                self.watch(fold, *decay, run, "-o", out, "--once", "--settle", "0", "-q")
                reference = torch.load(ref, weights_only=False)
                expected = reference["ema"][0.9] if fold == "ema" else reference["swa"]
                self.assert_params_equal(out, expected, reference["params"])
                status = status_of(out)
                self.assertEqual([f["step"] for f in status["folded"]], reference["steps"], "killed %d times" % kills)
                self.assertEqual(status["missed"], [])
                self.assertEqual(status["state"], "stopped")
                self.assertEqual(status["stopped_by"], "--once")

    def test_real_trainer_with_save_total_limit(self):
        """A real transformers.Trainer(save_total_limit=2) and AveragedModel over every checkpoint
        it saved (its callback's reference), the watcher killed and restarted at random."""
        run, out, ref = self.path("out"), self.path("swa.safetensors"), self.path("ref.safetensors")
        t = subprocess.Popen([sys.executable, os.path.join(HERE, "watch_trainer.py"), "--output-dir", run,
                              "--max-steps", "8", "--keep", "2", "--step-delay", "0.4", "--reference", ref],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.watch_with_kills(t, ["average", run, "-o", out, *FAST], seed=7, low=0.5, high=2.5)
        self.watch("average", run, "-o", out, "--once", "-q")
        expected = load_file(ref)
        got = load_file(out)
        self.assertEqual(sorted(got), sorted(expected))
        for name in expected:
            self.assertTrue(same_bits(got[name], expected[name]), name)
        with open(ref + ".json") as f:
            steps = json.load(f)["steps"]
        status = status_of(out)
        self.assertEqual([f["step"] for f in status["folded"]], steps)
        self.assertEqual(status["missed"], [])
        self.assertEqual(len(os.listdir(run)), 2)  # the trainer rotated the rest away

    # --- SIGKILL at every fold ------------------------------------------------------------------

    def test_sigkill_while_each_checkpoint_is_folded_is_byte_identical(self):
        run, out = self.path("run"), self.path("ema.pt")
        steps = list(range(1, 7))
        for s in steps:  # 8 MiB each: a fold long enough to be killed in
            write(run, "pt", s, seed=3, width=1 << 19)
        args = ["ema", "--decay", "0.9", run, "-o", out, "--poll", "0.02", "--settle", "0", "-q"]
        for s in steps:
            for moment in ("folding", "replaced"):
                before = os.stat(out).st_mtime_ns if os.path.exists(out) else None
                p = subprocess.Popen([SWAVG, "watch", *args], stderr=subprocess.DEVNULL)
                deadline = time.time() + 60
                while time.time() < deadline:
                    if moment == "folding":
                        try:
                            st = status_of(out)
                        except (OSError, ValueError):
                            continue
                        if (st.get("folding") or {}).get("step") is not None:
                            break
                    elif os.path.exists(out) and os.stat(out).st_mtime_ns != before:
                        break
                p.kill()
                p.wait()
        self.watch(*args[:-1], "--once", "-q")
        paths = [os.path.join(run, fake_trainer.checkpoint_name("pt", s)) for s in steps]
        swavg("ema", "--decay", "0.9", "--sort", "none", *paths, "-o", self.path("one.pt"), "-q")
        with open(out, "rb") as a, open(self.path("one.pt"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertEqual([n for n in os.listdir(self.tmp) if ".swavg-tmp-" in n], [])
        self.assertEqual([f["step"] for f in status_of(out)["folded"]], steps)

    # --- half-written, deleted, passed over -----------------------------------------------------

    def test_half_written_checkpoints_wait_then_fold_in_step_order(self):
        run, out = self.path("run"), self.path("swa.pt")
        os.makedirs(run)
        full = write(self.path("staging"), "pt", 1, seed=1)
        with open(full, "rb") as f:
            data = f.read()
        with open(os.path.join(run, "ckpt_1.pt"), "wb") as f:
            f.write(data[:len(data) - 30])  # cut before its ZIP end records
        hf = write(run, "hf", 2, seed=1)
        os.rename(os.path.join(hf, "trainer_state.json"), self.path("state.json"))
        dcp = os.path.join(run, "step-3")
        fake_trainer.write_dcp_without_metadata(dcp, fake_trainer.state_at(3, 1))
        write(run, "pt", 4, seed=1)
        self.watch("average", run, "-o", out, "--once", "--settle", "0", "-q")
        # Nothing folded: ckpt_4 waits behind the three unfinished ones (step order before speed).
        self.assertFalse(os.path.exists(out))
        waiting = {os.path.basename(w["path"]): w["for"] for w in status_of(out)["waiting"]}
        self.assertEqual(sorted(waiting), ["checkpoint-2", "ckpt_1.pt", "step-3"])
        self.assertIn("trainer_state.json", waiting["checkpoint-2"])
        self.assertIn(".metadata", waiting["step-3"])
        with open(os.path.join(run, "ckpt_1.pt"), "wb") as f:
            f.write(data)
        os.rename(self.path("state.json"), os.path.join(hf, "trainer_state.json"))
        fake_trainer.restore_dcp_metadata(dcp)
        self.watch("average", run, "-o", out, "--once", "--settle", "0", "-q")
        self.assertEqual([f["step"] for f in status_of(out)["folded"]], [1, 2, 3, 4])
        reference = fake_trainer.reference([1, 2, 3, 4], seed=1)
        self.assert_params_equal(out, reference["swa"], reference["params"])

    def test_deleted_checkpoints_are_reported_never_folded_half(self):
        run, out = self.path("run"), self.path("swa.safetensors")
        for s in (1, 2, 4):  # the Trainer saves every step: checkpoint-3 came and went unseen
            write(run, "hf", s, seed=2, save_every=1)
        half = os.path.join(run, "checkpoint-5")
        write(run, "hf", 5, seed=2, save_every=1)
        os.remove(os.path.join(half, "trainer_state.json"))
        p = subprocess.Popen([SWAVG, "watch", "average", run, "-o", out, *FAST, "--idle-timeout", "1.5"])
        deadline = time.time() + 30
        while time.time() < deadline and not (os.path.exists(out + ".watch.json") and status_of(out)["last_step"] == 4):
            time.sleep(0.05)
        shutil.rmtree(half)  # rotated away before it was whole
        self.assertEqual(p.wait(timeout=60), 0)
        status = status_of(out)
        self.assertEqual([f["step"] for f in status["folded"]], [1, 2, 4])
        missed = status["missed"]
        self.assertIn({"path": half, "why": "deleted before it was whole (it was waiting for trainer_state.json, "
                                            "which the Trainer writes last)"}, missed)
        self.assertTrue(any(m.get("step") == 3 and "save_steps" in m["why"] for m in missed), missed)
        reference = fake_trainer.reference([1, 2, 4], seed=2)
        self.assert_params_equal(out, reference["swa"], reference["params"])

    def test_missed_steps_are_bounded_by_the_list_not_by_a_step(self):
        """A trainer_state.json may declare any global_step: the gaps are counted, never walked."""
        run, out = self.path("run"), self.path("swa.safetensors")
        folder = write(run, "hf", 1, seed=2, save_every=1)
        state_path = os.path.join(folder, "trainer_state.json")
        with open(state_path) as f:
            state = json.load(f)
        state["global_step"] = 1 << 62
        os.rename(folder, os.path.join(run, "checkpoint-%d" % (1 << 62)))
        with open(os.path.join(run, "checkpoint-%d" % (1 << 62), "trainer_state.json"), "w") as f:
            json.dump(state, f)
        write(run, "hf", 1, seed=2, save_every=1)
        start = time.process_time()
        self.watch("average", run, "-o", out, "--once", "--settle", "0", "-q")
        self.assertLess(time.process_time() - start, 5)
        missed = status_of(out)["missed"]
        self.assertEqual(len(missed), 1001)
        self.assertEqual([m["step"] for m in missed[:3]], [2, 3, 4])
        self.assertEqual(missed[-1], {"more": (1 << 62) - 2 - 1000})
        self.assertEqual([f["step"] for f in status_of(out)["folded"]], [1, 1 << 62])

    def test_a_restart_with_another_spelling_of_the_folder_folds_nothing_twice(self):
        run, out = self.path("run"), self.path("swa.pt")
        for s in (1, 2):
            write(run, "pt", s, seed=3)
        self.watch("average", run, "-o", out, "--once", "--settle", "0", "-q")
        os.symlink(run, self.path("link"))
        write(run, "pt", 3, seed=3)
        self.watch("average", self.path("link") + "/./", "-o", out, "--once", "--settle", "0", "-q")
        self.assertEqual([f["step"] for f in status_of(out)["folded"]], [1, 2, 3])
        reference = fake_trainer.reference([1, 2, 3], seed=3)
        self.assert_params_equal(out, reference["swa"], reference["params"])

    def test_passed_over_with_reasons(self):
        run, out = self.path("run"), self.path("swa.pt")
        for s in (100, 200, 300, 400):
            write(run, "pt", s, seed=4)
        shutil.copy(os.path.join(run, "ckpt_400.pt"), os.path.join(run, "last.pt"))  # no step anywhere
        self.watch("average", run, "-o", out, "--once", "--settle", "0", "--from-step", 200, "--to-step", 300, "-q")
        status = status_of(out)
        self.assertEqual([f["step"] for f in status["folded"]], [200, 300])
        why = {os.path.basename(s["path"]): s["why"] for s in status["skipped"]}
        self.assertIn("before --from-step 200", why["ckpt_100.pt"])
        self.assertIn("after --to-step 300", why["ckpt_400.pt"])
        self.assertIn("no step", why["last.pt"])
        # Written late: a step before the last one folded is never folded out of order.
        write(run, "pt", 250, seed=4)
        self.watch("average", run, "-o", out, "--once", "--settle", "0", "--from-step", 200, "--to-step", 300, "-q")
        status = status_of(out)
        self.assertEqual([f["step"] for f in status["folded"]], [200, 300])
        why = {os.path.basename(s["path"]): s["why"] for s in status["skipped"]}
        self.assertIn("step 250 is not after step 300", why["ckpt_250.pt"])

    # --- stopping, outputs, reports ---------------------------------------------------------------

    def test_until_step_idle_timeout_and_sigterm(self):
        run = self.path("run")
        for s in range(1, 6):
            write(run, "pt", s, seed=5)
        out = self.path("a.pt")
        self.watch("average", run, "-o", out, "--until-step", 3, *FAST)
        self.assertEqual(status_of(out)["last_step"], 3)
        self.assertIn("--until-step 3", status_of(out)["stopped_by"])
        out = self.path("b.pt")
        self.watch("average", run, "-o", out, "--idle-timeout", 0.5, *FAST)
        self.assertEqual(status_of(out)["last_step"], 5)
        self.assertIn("--idle-timeout", status_of(out)["stopped_by"])
        out = self.path("c.pt")
        p = subprocess.Popen([SWAVG, "watch", "average", run, "-o", out, *FAST], stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while time.time() < deadline and not (os.path.exists(out + ".watch.json") and status_of(out)["last_step"] == 5):
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual((status_of(out)["state"], status_of(out)["stopped_by"]), ("stopped", "SIGTERM"))
        self.assertEqual(torch.load(out)["layer.bias"].shape, (8,))

    def test_waits_for_the_run_folder_to_appear(self):
        run, out = self.path("later/run"), self.path("swa.pt")
        p = subprocess.Popen([SWAVG, "watch", "average", run, "-o", out, *FAST, "--until-step", "2"])
        time.sleep(0.5)
        self.assertIsNone(p.poll())
        for s in (1, 2):
            write(run, "pt", s, seed=6)
        self.assertEqual(p.wait(timeout=60), 0)
        self.assertEqual(status_of(out)["last_step"], 2)

    def test_several_decays_and_the_report(self):
        run = self.path("run")
        for s in range(1, 5):
            write(run, "safetensors", s, seed=8)
        report = self.path("report.json")
        self.watch("ema", "--decay", "0.9", "--decay", "0.99", run, "-o", self.path("ema-{decay}.safetensors"),
                   "--once", "--settle", "0", "--report", report, "-q")
        paths = [os.path.join(run, fake_trainer.checkpoint_name("safetensors", s)) for s in range(1, 5)]
        for d in ("0.9", "0.99"):
            swavg("ema", "--decay", d, "--sort", "none", *paths, "-o", self.path("one-%s.safetensors" % d), "-q")
            with open(self.path("ema-%s.safetensors" % d), "rb") as a, open(self.path("one-%s.safetensors" % d), "rb") as b:
                self.assertEqual(a.read(), b.read(), d)
        with open(report) as f:
            r = json.load(f)
        self.assertEqual(r["n"], 4)
        self.assertEqual(r["inputs"], [paths[-1]])
        self.assertEqual(r["resume"], self.path("ema-0.99.safetensors"))

    def test_a_folder_output_is_one_runs_folder(self):
        """-o DIR/: a Hugging Face folder, rolled over fold after fold, byte for byte one run's."""
        run = self.path("run")
        for s in (1, 2, 3):
            write(run, "hf", s, seed=11, save_every=1)
        out = self.path("swa") + "/"
        self.watch("average", run, "-o", out, "--once", "--settle", "0", "-q")
        self.assertEqual(status_of(self.path("swa"))["last_step"], 3)
        paths = [os.path.join(run, "checkpoint-%d" % s) for s in (1, 2, 3)]
        swavg("average", "--sort", "none", *paths, "-o", self.path("one") + "/", "-q")
        self.assertEqual(sorted(os.listdir(self.path("swa"))), sorted(os.listdir(self.path("one"))))
        for name in os.listdir(self.path("one")):
            with open(os.path.join(self.path("swa"), name), "rb") as a, open(os.path.join(self.path("one"), name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_the_status_lists_the_latest_100_folded(self):
        run, out = self.path("run"), self.path("swa.safetensors")
        for s in range(1, 102):
            write(run, "safetensors", s, seed=12, width=2)
        self.watch("average", run, "-o", out, "--once", "--settle", "0", "--until-step", 100, "-q")
        status = status_of(out)
        self.assertEqual((status["folded_count"], [f["step"] for f in status["folded"]]), (100, list(range(1, 101))))
        self.watch("average", run, "-o", out, "--once", "--settle", "0", "-q")
        status = status_of(out)
        self.assertEqual((status["folded_count"], [f["step"] for f in status["folded"]]), (101, list(range(2, 102))))
        self.assertEqual(status["outputs"][0]["n"], 101)

    def test_names_from_the_folder_are_escaped_in_the_log(self):
        """A name in the run's folder is bytes from whoever wrote it: a terminal escape in it is printed escaped."""
        run, out = self.path("run"), self.path("swa.pt")
        write(run, "pt", 1, seed=13)
        shutil.copy(os.path.join(run, "ckpt_1.pt"), os.path.join(run, "\x1b[Hlast.pt"))
        p = subprocess.run([SWAVG, "watch", "average", run, "-o", out, "--once", "--settle", "0"], capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(b"\x1b", p.stderr)
        self.assertIn(b"passed over: no step", p.stderr)

    def test_option_edges(self):
        run = self.path("run")
        os.makedirs(run)
        i64 = str(2 ** 63 - 1)
        cases = [
            (["--poll", "4.9e-324"], 0, ()),
            (["--poll", "0"], 2, ("--poll", "seconds > 0, got '0'")),
            (["--poll", "inf"], 2, ("--poll", "finite")),
            (["--settle", "0"], 0, ()),
            (["--settle", "-4.9e-324"], 2, ("--settle", "seconds >= 0")),
            (["--settle", "nan"], 2, ("--settle",)),
            (["--stall-timeout", "0"], 0, ()),
            (["--stall-timeout", "-4.9e-324"], 2, ("--stall-timeout", "seconds >= 0")),
            (["--idle-timeout", "0"], 0, ()),
            (["--idle-timeout", "-4.9e-324"], 2, ("--idle-timeout", "seconds >= 0")),
            (["--idle-timeout", "1.5x"], 2, ("--idle-timeout", "got '1.5x'")),
            (["--until-step", "0"], 0, ()),
            (["--until-step", "-1"], 2, ("--until-step", "[0, %s]" % i64)),
            (["--until-step", i64], 0, ()),
            (["--until-step", str(2 ** 63)], 2, ("--until-step", "[0, %s]" % i64)),
            (["--from-step", "2", "--to-step", "2"], 0, ()),
            (["--from-step", "2", "--to-step", "1"], 2, ("--from-step 2 is past --to-step 1",)),
        ]
        for args, code, needles in cases:
            with self.subTest(args=args):
                p = self.watch("average", run, "-o", self.path("e.pt"), "--once", *args, check=False)
                self.assertEqual(p.returncode, code, p.stderr)
                for n in needles:
                    self.assertIn(n, p.stderr)

    def test_flat_memory_over_hundreds_of_checkpoints(self):
        """Peak RSS over 300 checkpoints within 4 MiB of that over 30 (each 1 MiB)."""
        peaks = {}
        for n in (30, 300):
            run = self.path("run%d" % n)
            for s in range(1, n + 1):
                write(run, "safetensors", s, seed=9, width=1 << 16)
            peaks[n] = peak_rss("watch", "average", run, "-o", self.path("swa%d.safetensors" % n), "--once",
                                "--settle", "0", "-q")
            self.assertEqual(status_of(self.path("swa%d.safetensors" % n))["outputs"][0]["n"], n)
        self.assertLess(peaks[300], peaks[30] + (4 << 20), peaks)

    def test_refusals(self):
        run = self.path("run")
        write(run, "pt", 1, seed=10)
        cases = [
            (["average", run, "-o", os.path.join(run, "swa.pt")], 2, "inside"),
            (["average", run, "-o", os.path.join(run, "swa") + "/"], 2, "inside the input folder"),
            (["average", run, "-o", self.path("x.pt"), "--status", self.path("x.pt")], 2, "--status"),
            (["average", os.path.join(run, "ckpt_1.pt"), "-o", self.path("y.pt"), "--once"], 2, "not a folder"),
            (["ema", run, "-o", self.path("z.pt")], 2, "--decay"),
            (["average", "--weights", "1", run, "-o", self.path("w.pt")], 2, "--weights: a weighted average's"),
            (["average", run, "-o", self.path("v.pt"), "--every", "2"], 2, "'swavg watch average --help'"),
        ]
        for args, code, text in cases:
            with self.subTest(args=args):
                p = self.watch(*args, check=False)
                self.assertEqual(p.returncode, code, p.stderr)
                self.assertIn(text, p.stderr)
                self.assertTrue(p.stderr.startswith("swavg: error:"), p.stderr)
        # A restart with another decay would not be one run's average.
        self.watch("ema", "--decay", "0.9", run, "-o", self.path("e.pt"), "--once", "--settle", "0", "-q")
        p = self.watch("ema", "--decay", "0.99", run, "-o", self.path("e.pt"), "--once", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("was made with --decay 0.9, not 0.99", p.stderr)
        # bfloat16 with a float32 accumulator: each fold would restart from rounded values.
        bf = self.path("bf")
        os.makedirs(bf)
        torch.save({"w": torch.ones(4, dtype=torch.bfloat16)}, os.path.join(bf, "ckpt_1.pt"))
        p = self.watch("average", bf, "-o", self.path("bf.pt"), "--once", "--settle", "0", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--output-dtype float32", p.stderr)
        self.assertFalse(os.path.exists(self.path("bf.pt")))
        self.watch("average", bf, "-o", self.path("bf.pt"), "--once", "--settle", "0", "--output-dtype", "float32", "-q")


if __name__ == "__main__":
    unittest.main()
