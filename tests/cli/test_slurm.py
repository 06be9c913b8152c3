"""swavg on a real Slurm (scripts/slurm_local.sh, started by the ctest fixture slurm_start):
configs/slurm/average.sbatch submitted as `sbatch --array=0-3 --wait`, then its finalize form with
--dependency=afterok; the published folder must be byte-identical to one plain run. An array
from 3 (step 1) tells SLURM_ARRAY_TASK_ID - MIN from ID / STEP. Held tasks of a stepped array show
finalize refusing (exit 6, nothing published) while a worker's part is
missing. configs/slurm/watch.sbatch runs fake_trainer.py as the training step and swavg watch as an
overlapping background step: the EMA it leaves is the trainer's own, bit for bit.

Where Slurm is not up this exits 77 (ctest: skipped), unless SWAVG_REQUIRE_SLURM=1 (CI)."""
import json
import os
import subprocess
import sys
import unittest

from common import SWAVG, TempDirTest
from shard_runs import (MAX_SHARD, assert_same_folder, assert_unpublished, finalize, make_checkpoints,
                        plain_env, plain_run)
from test_watch_configs import DECAY, STEPS, assert_is_the_ema, trainer_command

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SBATCH_FILE = os.path.join(ROOT, "configs", "slurm", "average.sbatch")
WATCH_SBATCH = os.path.join(ROOT, "configs", "slurm", "watch.sbatch")
SLURM_LOCAL = os.path.join(ROOT, "scripts", "slurm_local.sh")
SKIP = 77
WORKERS = 4


def slurm_env():
    """plain_env with SLURM_CONF from slurm_local.sh and SWAVG for the sbatch file."""
    line = subprocess.run(["bash", SLURM_LOCAL, "env"], capture_output=True, text=True, check=True).stdout
    key, _, value = line.strip().removeprefix("export ").partition("=")
    assert key == "SLURM_CONF", line
    return plain_env(SLURM_CONF=value, SWAVG=os.path.abspath(SWAVG))


def slurm_is_up():
    """None when the local node answers idle, else why not."""
    try:
        p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30, env=slurm_env())
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    states = p.stdout.split()
    return None if p.returncode == 0 and states and set(states) <= {"idle", "mixed", "allocated"} else \
        "sinfo exited %d: %s %s" % (p.returncode, p.stdout.strip(), p.stderr.strip())


class SlurmTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.env = slurm_env()
        self.logs = self.path("logs")
        os.makedirs(self.logs)
        self.paths = make_checkpoints(self.path("run"))
        self.ref = self.path("ref") + "/"
        plain_run(self, self.paths, self.ref)
        self.out = self.path("out") + "/"

    def sbatch(self, *args):
        """Runs sbatch ARGS in the test folder; returns the CompletedProcess (job id on stdout)."""
        return subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, timeout=120,
                              cwd=self.tmp, env=self.env)

    def submit_workers(self, array, *sbatch_args):
        """configs/slurm/average.sbatch as the job array ARRAY (WORKERS tasks); returns the job id."""
        p = self.sbatch("--array=" + array, "--output", os.path.join(self.logs, "%a.json"),
                        "--error", os.path.join(self.logs, "%a.err"), *sbatch_args,
                        SBATCH_FILE, self.out, "--max-shard-size", MAX_SHARD, "--json", *self.paths)
        self.assertEqual(p.returncode, 0, self.job_logs(p))
        return p.stdout.split()[0].split(";")[0]

    def submit_finalize(self, dependency):
        return self.sbatch("--wait", "--dependency=afterok:" + dependency, "--output",
                           os.path.join(self.logs, "finalize-%j.txt"), SBATCH_FILE, "--finalize", self.out)

    def job_logs(self, p):
        text = "sbatch exited %d\n%s%s" % (p.returncode, p.stdout, p.stderr)
        for name in sorted(os.listdir(self.logs)):
            with open(os.path.join(self.logs, name)) as f:
                text += "--- %s\n%s" % (name, f.read())
        return text

    def assert_workers_reported(self, task_ids, first=0, step=1):
        """Array task t's --json report: worker (t - first) / step of WORKERS, from SLURM_ARRAY_TASK_ID."""
        for t in task_ids:
            with open(os.path.join(self.logs, "%d.json" % t)) as f:
                worker = json.load(f)["worker"]
            self.assertEqual((worker["index"], worker["count"], worker["source"]),
                             ((t - first) // step, WORKERS, "SLURM_ARRAY_TASK_ID"))

    def test_array_then_dependent_finalize_is_one_plain_run(self):
        job = self.submit_workers("0-%d" % (WORKERS - 1), "--wait")
        self.assert_workers_reported(range(WORKERS))
        self.assertFalse(os.path.exists(self.out), "a worker published the output")
        p = self.submit_finalize(job)
        self.assertEqual(p.returncode, 0, self.job_logs(p))
        self.assertFalse(os.path.exists(self.out.rstrip("/") + ".partial"))
        assert_same_folder(self, self.out, self.ref)

    def test_array_from_a_minimum_above_zero(self):
        """--array=3-6: SLURM_ARRAY_TASK_MIN 3 and step 1, so task t is worker t - 3 (t / 1 would be
        out of range, and t - 3 and t / STEP are told apart)."""
        tasks = list(range(3, 3 + WORKERS))
        job = self.submit_workers("%d-%d" % (tasks[0], tasks[-1]), "--wait")
        self.assert_workers_reported(tasks, first=3, step=1)
        p = self.submit_finalize(job)
        self.assertEqual(p.returncode, 0, self.job_logs(p))
        assert_same_folder(self, self.out, self.ref)

    def test_finalize_refuses_while_a_worker_is_missing(self):
        """A stepped array not starting at 0 (tasks 1, 3, 5, 7: SLURM_ARRAY_TASK_MIN and _STEP as a
        real Slurm sets them), held; all but the last task released, then the last one."""
        tasks = list(range(1, 2 * WORKERS, 2))
        job = self.submit_workers("%d-%d:2" % (tasks[0], tasks[-1]), "--hold")
        try:
            self.release(job, tasks[:-1])
            p = self.submit_finalize(":".join("%s_%d" % (job, t) for t in tasks[:-1]))
            self.assertEqual(p.returncode, 6, self.job_logs(p))  # ran after the first three, the last still held
            assert_unpublished(self, self.out)
            self.assert_workers_reported(tasks[:-1], first=1, step=2)
            p = finalize(self.out, self.env)  # and by hand, outside Slurm
            self.assertEqual(p.returncode, 6, p.stderr)
            assert_unpublished(self, self.out)

            self.release(job, tasks[-1:])
            p = self.submit_finalize(job)
            self.assertEqual(p.returncode, 0, self.job_logs(p))
            self.assert_workers_reported(tasks, first=1, step=2)
            assert_same_folder(self, self.out, self.ref)
        finally:
            subprocess.run(["scancel", job], capture_output=True, timeout=60, env=self.env)

    def test_watch_beside_the_training_step(self):
        """watch.sbatch: the watcher as a second step (srun --overlap) while the training step writes
        and rotates checkpoints; SIGTERM through srun ends it (exit 0), then its --once catch-up."""
        run_dir, out, reference = self.path("watch-run"), self.path("avg/ema.safetensors"), self.path("ref.pt")
        env = dict(self.env, RUN_DIR=run_dir, OUT=out, TRAIN_CMD=trainer_command(run_dir, reference), POLL="0.1",
                   SETTLE="0.1")
        p = subprocess.run(["sbatch", "--parsable", "--wait", "--output", os.path.join(self.logs, "watch.txt"),
                            WATCH_SBATCH, "ema", "--decay", str(DECAY)], capture_output=True, text=True,
                           timeout=120, cwd=self.tmp, env=env)
        self.assertEqual(p.returncode, 0, self.job_logs(p))
        with open(out + ".watch.json") as f:
            status = json.load(f)
        self.assertEqual((status["state"], status["stopped_by"], status["last_step"]), ("stopped", "--once", STEPS),
                         self.job_logs(p))
        with open(os.path.join(self.logs, "watch.txt")) as f:
            self.assertIn("stopped (SIGTERM)", f.read())
        assert_is_the_ema(self, out, reference)

    def release(self, job, tasks):
        for t in tasks:
            p = subprocess.run(["scontrol", "release", "%s_%d" % (job, t)], capture_output=True, text=True,
                               timeout=60, env=self.env)
            self.assertEqual(p.returncode, 0, p.stderr)

class SlurmLocalTest(unittest.TestCase):
    def test_second_start_is_a_no_op(self):
        def status():
            p = subprocess.run(["bash", SLURM_LOCAL, "status"], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            return [line for line in p.stdout.splitlines() if "pid" in line]
        before = status()
        self.assertEqual(len(before), 3, before)
        p = subprocess.run(["bash", SLURM_LOCAL, "start"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("already up", p.stdout)
        self.assertEqual(status(), before)


if __name__ == "__main__":
    why = slurm_is_up()
    if why:
        if os.environ.get("SWAVG_REQUIRE_SLURM") == "1":
            sys.exit("SWAVG_REQUIRE_SLURM=1 but Slurm is not up: %s" % why)
        print("Slurm is not up (%s): skipped; scripts/slurm_local.sh start brings it up" % why)
        sys.exit(SKIP)
    unittest.main()
