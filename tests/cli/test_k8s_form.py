"""configs/kubernetes/average-indexed-job.yaml, run without Kubernetes: the Indexed Job's command
(read from the YAML, paths moved to a temporary folder) run once per JOB_COMPLETION_INDEX
0..N-1 in a shuffled order, then the finalize Job's command; the folder must be byte-identical
to one plain run. finalize before the last index exits 6 and publishes nothing."""
import json
import os
import unittest

import yaml

from common import SWAVG, TempDirTest
from shard_runs import (MAX_SHARD, assert_same_folder, assert_unpublished, finalize, make_checkpoints,
                        plain_env, plain_run, run_swavg)

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "kubernetes",
                      "average-indexed-job.yaml")


def load_jobs():
    """(worker Job, finalize Job) of the YAML file."""
    with open(CONFIG) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    jobs = [d for d in docs if d.get("kind") == "Job"]
    indexed = [j for j in jobs if j["spec"].get("completionMode") == "Indexed"]
    others = [j for j in jobs if j["spec"].get("completionMode") != "Indexed"]
    assert len(indexed) == 1 and len(others) == 1, "expected one Indexed Job and one finalize Job"
    return indexed[0], others[0]


def container(job):
    (c,) = job["spec"]["template"]["spec"]["containers"]
    return c


def option(command, name):
    i = command.index(name)
    return command[i + 1]


class KubernetesFormTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.worker, self.final = load_jobs()
        self.mount = container(self.worker)["volumeMounts"][0]["mountPath"]

    def local(self, path):
        """A path on the shared volume, moved under this test's folder."""
        self.assertTrue(path.startswith(self.mount + "/"), "%s is not on the shared volume %s" % (path, self.mount))
        return os.path.join(self.tmp, path[len(self.mount) + 1:])

    def test_job_shape(self):
        spec = self.worker["spec"]
        command = container(self.worker)["command"]
        count = int(option(command, "--shard-count"))
        self.assertGreater(count, 1)
        self.assertEqual(spec["completions"], count)
        self.assertEqual(spec["parallelism"], count)
        self.assertEqual(self.worker["spec"]["template"]["spec"]["restartPolicy"], "Never")
        out = option(command, "-o")
        self.assertTrue(out.endswith("/"), out)
        self.assertEqual(container(self.final)["command"][1:], ["finalize", out])
        for job in (self.worker, self.final):
            self.assertEqual(container(job)["volumeMounts"][0]["mountPath"], self.mount)
        rules = self.final["spec"]["podFailurePolicy"]["rules"]
        self.assertEqual(rules[0]["onExitCodes"]["values"], [6])  # retries exactly "not finished yet"

    def test_indexed_job_then_finalize_is_one_plain_run(self):
        command = container(self.worker)["command"]
        self.assertEqual(command[:2], ["swavg", "average"])
        count = int(option(command, "--shard-count"))
        out_at = command.index("-o")
        out = self.local(command[out_at + 1])
        inputs = command[out_at + 2:]
        self.assertGreater(len(inputs), 1)
        paths = make_checkpoints(self.path("run"), count=len(inputs))
        args = list(command[2:out_at]) + ["-o", out] + paths
        args[args.index("--max-shard-size") + 1] = MAX_SHARD
        ref = self.path("ref") + "/"
        plain_run(self, paths, ref)

        order = [count - 2] + [i for i in range(count) if i != count - 2]  # not 0..N-1, last one apart
        for n, index in enumerate(order):
            if n == count - 1:
                p = finalize(out)
                self.assertEqual(p.returncode, 6, "finalize with index %d missing:\n%s" % (index, p.stderr))
                assert_unpublished(self, out)
            p = run_swavg(["average", *args, "--json"], plain_env(JOB_COMPLETION_INDEX=index))
            self.assertEqual(p.returncode, 0, p.stderr)
            worker = json.loads(p.stdout)["worker"]
            self.assertEqual((worker["index"], worker["count"], worker["source"]),
                             (index, count, "JOB_COMPLETION_INDEX"))

        final = container(self.final)["command"]
        p = finalize(self.local(final[2]))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.exists(out.rstrip("/") + ".partial"))
        assert_same_folder(self, out, ref)


if __name__ == "__main__":
    print("swavg:", SWAVG)
    unittest.main()
