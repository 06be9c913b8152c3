"""configs/kubernetes/watch-sidecar.yaml and configs/slurm/watch.sbatch, run without Kubernetes or
Slurm beside fake_trainer.py (safetensors checkpoints, rotated to the last 2): the sidecar's command
from the YAML (its /ckpt paths moved to a temporary folder, --poll and --settle shortened) runs as a
subprocess while the trainer writes, then, as the kubelet would after its preStop hook, gets
SIGTERM (once also SIGKILL midway and a restart); the sbatch script runs as plain bash (TRAIN_SRUN and WATCH_SRUN empty). Either way the
watcher exits 0 and the output's parameters are the trainer's AveragedModel EMA, bit for bit."""
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import unittest

import torch
import yaml
from safetensors.torch import load_file

from common import SWAVG, TempDirTest

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "..", "configs")
SIDECAR = os.path.join(CONFIGS, "kubernetes", "watch-sidecar.yaml")
SBATCH = os.path.join(CONFIGS, "slurm", "watch.sbatch")
FAKE_TRAINER = os.path.join(HERE, "fake_trainer.py")
DECAY = 0.999
STEPS = 6
POLL, SETTLE = "0.1", "0.1"


def load_job():
    with open(SIDECAR) as f:
        (job,) = [d for d in yaml.safe_load_all(f) if d]
    return job


def set_option(command, name, value):
    """COMMAND with option NAME's value replaced (CLI11 refuses a single option given twice)."""
    command = list(command)
    if name in command:
        command[command.index(name) + 1] = value
    else:
        command += [name, value]
    return command


def trainer_args(run_dir, reference):
    return [sys.executable, FAKE_TRAINER, "--output-dir", run_dir, "--kind", "safetensors", "--steps", str(STEPS),
            "--interval", "0.5", "--keep", "2", "--reference", reference, "--ema-decay", str(DECAY), "--quiet"]


def trainer_command(run_dir, reference):
    """trainer_args as the bash command line TRAIN_CMD of watch.sbatch (the run's folder as $RUN_DIR)."""
    return " ".join('"$RUN_DIR"' if a == run_dir else shlex.quote(a) for a in trainer_args(run_dir, reference))


def assert_is_the_ema(test, out, reference):
    """OUT's parameters are the trainer's AveragedModel EMA of every step, bit for bit."""
    ref = torch.load(reference)
    test.assertEqual(ref["steps"], list(range(1, STEPS + 1)))
    ema, got = ref["ema"][DECAY], load_file(out)
    for name in ref["params"]:
        test.assertTrue(torch.equal(got[name], ema[name]), name)


class WatchConfigTest(TempDirTest):
    def assert_is_the_ema(self, out, reference):
        assert_is_the_ema(self, out, reference)

    def read_status(self, path):
        with open(path) as f:
            return json.load(f)


class SidecarTest(WatchConfigTest):
    def setUp(self):
        super().setUp()
        spec = load_job()["spec"]["template"]["spec"]
        (self.sidecar,) = spec["initContainers"]
        (self.trainer,) = spec["containers"]
        self.spec = spec
        self.mount = self.sidecar["volumeMounts"][0]["mountPath"]

    def local(self, path):
        """A path on the shared volume, moved under this test's folder."""
        self.assertTrue(path.startswith(self.mount + "/"), "%s is not on the volume %s" % (path, self.mount))
        return os.path.join(self.tmp, path[len(self.mount) + 1:])

    def test_pod_shape(self):
        """A native sidecar beside the trainer on one volume; preStop outlasts --settle and two polls."""
        self.assertEqual(self.sidecar["restartPolicy"], "Always")
        self.assertEqual(self.spec["restartPolicy"], "Never")
        self.assertEqual(self.trainer["volumeMounts"], self.sidecar["volumeMounts"])
        self.assertIn("/ckpt/run", self.trainer["command"])
        command = self.sidecar["command"]
        self.assertEqual(command[:3], ["swavg", "watch", "ema"])
        self.assertNotIn("/ckpt/run", command[command.index("-o") + 1])
        wait = self.sidecar["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(wait[0], "sleep")
        option = lambda name: float(command[command.index(name) + 1])
        self.assertGreaterEqual(float(wait[1]), option("--settle") + 2 * option("--poll"))
        self.assertGreater(self.spec["terminationGracePeriodSeconds"], float(wait[1]))
        self.assertIn("memory", self.sidecar["resources"]["requests"])

    def test_sidecar_folds_the_run_and_stops_on_sigterm(self):
        self.run_sidecar()

    def test_sidecar_killed_and_restarted_folds_each_checkpoint_once(self):
        """SIGKILL once step 2 is folded, then a new watcher, as the kubelet restarts a sidecar."""
        self.run_sidecar(kill_after_step=2)

    def run_sidecar(self, kill_after_step=None):
        """The YAML's sidecar command beside fake_trainer.py; SIGTERM once the last step is folded."""
        command = [self.local(a) if a.startswith(self.mount + "/") else a for a in self.sidecar["command"]]
        self.assertEqual(command[0], "swavg")
        command = set_option(set_option([SWAVG] + command[1:], "--poll", POLL), "--settle", SETTLE)
        out = command[command.index("-o") + 1]
        status = command[command.index("--status") + 1]
        run_dir = self.local("/ckpt/run")
        reference = self.path("ref.pt")
        os.makedirs(os.path.dirname(out))
        with open(self.path("watch.log"), "w+") as log:
            watcher = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            trainer = subprocess.Popen(trainer_args(run_dir, reference))
            try:
                if kill_after_step:
                    self.wait_for_step(status, kill_after_step)
                    watcher.kill()
                    self.assertEqual(watcher.wait(timeout=60), -signal.SIGKILL)
                    watcher = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
                self.assertEqual(trainer.wait(timeout=120), 0)
                self.wait_for_step(status, STEPS)  # the preStop hook's wait
                watcher.send_signal(signal.SIGTERM)
                rc = watcher.wait(timeout=60)
            finally:
                for p in (watcher, trainer):
                    p.kill()
                    p.wait()
            log.seek(0)
            text = log.read()
        self.assertEqual(rc, 0, text)
        if kill_after_step:
            self.assertIn("continuing its average of", text)
        got = self.read_status(status)
        self.assertEqual((got["state"], got["stopped_by"], got["last_step"]), ("stopped", "SIGTERM", STEPS))
        self.assertEqual((got["missed"], got["skipped"]), ([], []))
        self.assertEqual(got["outputs"][0]["n"], STEPS)
        self.assert_is_the_ema(out, reference)

    def wait_for_step(self, status, step, timeout=30):
        """Until the status file says STEP (or later) is folded."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if (self.read_status(status)["last_step"] or 0) >= step:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        self.fail("the watcher did not fold step %d within %d s" % (step, timeout))


class SbatchTest(WatchConfigTest):
    def test_plain_bash_run(self):
        """TRAIN_CMD runs the trainer, the watcher follows it, SIGTERM and a --once catch-up end it."""
        run_dir, out, reference = self.path("run"), self.path("avg/ema.safetensors"), self.path("ref.pt")
        env = dict(os.environ, SWAVG=os.path.abspath(SWAVG), RUN_DIR=run_dir, OUT=out,
                   TRAIN_CMD=trainer_command(run_dir, reference),
                   TRAIN_SRUN="", WATCH_SRUN="", POLL=POLL, SETTLE=SETTLE)
        p = subprocess.run(["bash", SBATCH, "ema", "--decay", str(DECAY)], capture_output=True, text=True,
                           timeout=120, cwd=self.tmp, env=env)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        got = self.read_status(out + ".watch.json")
        self.assertEqual((got["state"], got["stopped_by"], got["last_step"]), ("stopped", "--once", STEPS))
        self.assert_is_the_ema(out, reference)

    def test_training_failure_is_the_exit_status(self):
        env = dict(os.environ, SWAVG=os.path.abspath(SWAVG), RUN_DIR=self.path("run"),
                   OUT=self.path("avg/ema.safetensors"), TRAIN_CMD="exit 3", TRAIN_SRUN="", WATCH_SRUN="",
                   POLL=POLL, SETTLE=SETTLE)
        p = subprocess.run(["bash", SBATCH], capture_output=True, text=True, timeout=60, cwd=self.tmp, env=env)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertEqual(self.read_status(self.path("avg/ema.safetensors.watch.json"))["state"], "stopped")


if __name__ == "__main__":
    print("swavg:", SWAVG)
    unittest.main()
