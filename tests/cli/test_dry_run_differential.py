"""--dry-run is the real run minus the writes (issue 29, item 2): for each subcommand and output
format, the plan --dry-run --json prints is compared with what the real run then did: the tensors
and their actions, the bytes read and written, the files written (names and sizes), and the exit
code, refusals included (a worker joining another job's OUT.partial/, an output that exists).
A DCP worker writes the chunks of every tensor that has one in its rank files, and its plan says so."""
import json
import os
import subprocess
import sys
import unittest

import torch
from safetensors.torch import save_file

from common import SWAVG, TempDirTest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))


def run(*args):
    return subprocess.run([SWAVG, *map(str, args)], capture_output=True, text=True, timeout=600)


def state(seed):
    g = torch.Generator().manual_seed(seed)
    return {"embed.weight": torch.randn(64, 16, generator=g), "head.weight": torch.randn(32, 16, generator=g),
            "head.bias": torch.randn(32, generator=g), "bn.running_mean": torch.randn(16, generator=g),
            "bn.num_batches_tracked": torch.tensor(seed, dtype=torch.int64),
            "half.weight": torch.randn(8, 8, generator=g).half()}


def listing(folder):
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            p = os.path.join(root, name)
            out[os.path.relpath(p, folder)] = os.path.getsize(p)
    return out


_RANKED = {}


def ranked_dcp(tmp):
    """Two DCP checkpoints saved by 3 gloo processes (tensors split across rank files)."""
    import dcp as fixtures  # scripts/fixtures/dcp.py
    out = os.path.join(tmp, "ranked")
    os.makedirs(out, exist_ok=True)
    fixtures._spawn(3, out, "rank3", [0, 1])
    return [os.path.join(out, "rank3_%d" % i) for i in range(2)]


class Differential(TempDirTest):
    def setUp(self):
        super().setUp()
        self.files = []
        for i in range(3):
            p = self.path("ck_%d.safetensors" % i)
            save_file(state(i), p)
            self.files.append(p)

    def plan_and_run(self, args, out_arg, report=True):
        """The dry run's plan and exit code, then the real run's report, exit code and the files."""
        before = listing(self.tmp)
        dry = run(*args, "--dry-run", "--json")
        self.assertEqual(listing(self.tmp), before, "the dry run wrote")
        plan = json.loads(dry.stdout) if dry.returncode == 0 else None
        rep = self.path("report.json")
        self.before_real = listing(self.tmp)
        real = run(*args, *(["--report", rep] if report else []))
        self.assertEqual(dry.returncode, real.returncode, "dry run: %s\nreal: %s" % (dry.stderr, real.stderr))
        result = None
        if real.returncode == 0 and report:
            with open(rep) as f:
                result = json.load(f)
            os.unlink(rep)
        return plan, result, real

    def check_same(self, plan, result, written_in):
        """Tensors, bytes and files of the plan against the real run."""
        if result is not None:
            self.assertEqual(plan["bytes_read"], result["bytes_read"])
            if plan["bytes_written_exact"]:
                self.assertEqual(plan["bytes_written"], result["bytes_written"])
            mine = [(t["name"], t["action"], t["dtype"], t["output_dtype"], t["count"]) for t in plan["details"]]
            theirs = [(t["name"], t["action"], t["dtype"], t["output_dtype"], t["count"]) for t in result["details"]]
            self.assertEqual(mine, theirs)
        there = listing(written_in)
        # The files this run made (a worker's OUT.partial/ holds the other workers' too).
        prefix = os.path.relpath(written_in, self.tmp)
        made = {k for k in there if self.before_real.get(os.path.join(prefix, k)) is None}
        for f in plan["output"]["files"]:
            name = os.path.relpath(f["file"], written_in) if os.path.isabs(f["file"]) else f["file"]
            if f["written"]:
                self.assertIn(name, there, there)
                if f["bytes_exact"]:
                    self.assertEqual(there[name], f["bytes"], name)
            else:
                self.assertNotIn(name, made)

    def test_file_outputs(self):
        for command in (["average"], ["ema", "--decay", "0.9"], ["average", "--weights", "1,2,3"]):
            for ext in ("pt", "safetensors"):
                with self.subTest(command=command, ext=ext):
                    out = self.path("out.%s" % ext)
                    plan, result, _ = self.plan_and_run([*command, *self.files, "-o", out, "--force"], out)
                    self.assertEqual(plan["output"]["files"][0]["file"], out)
                    self.check_same(plan, result, self.tmp)
                    self.assertEqual(os.path.getsize(out), result["bytes_written"])

    def test_folder_outputs(self):
        for fmt in ("safetensors", "dcp"):
            out = self.path("fold_%s/" % fmt)
            args = ["average", *self.files, "-o", out, "--format", fmt]
            if fmt != "dcp":
                args += ["--max-shard-size", "3KB"]
            with self.subTest(fmt=fmt):
                plan, result, _ = self.plan_and_run(args, out)
                self.check_same(plan, result, out)

    def test_workers(self):
        inputs = ranked_dcp(self.tmp)
        for fmt, extra in (("dcp", []), ("safetensors", ["--max-shard-size", "200"])):
            out = self.path("w_%s/" % fmt)
            for w in range(3):
                with self.subTest(fmt=fmt, worker=w):
                    args = ["average", *inputs, "--key", "model", "-o", out, "--format", fmt, *extra,
                            "--shard", "%d/3" % w]
                    plan, result, _ = self.plan_and_run(args, out)
                    mine = sum(t["written"] for t in plan["details"])
                    self.assertGreater(mine, 0)
                    self.check_same(plan, result, out.rstrip("/") + ".partial")
            # Another job's worker (other weights) joining: exit 4 from both.
            args = ["average", *inputs, "--key", "model", "-o", out, "--format", fmt, *extra, "--shard", "0/3",
                    "--weights", "1,3"]
            plan, result, real = self.plan_and_run(args, out)
            self.assertEqual(real.returncode, 4, real.stderr)
            p = run("finalize", out)
            self.assertEqual(p.returncode, 0, p.stderr)

    def test_refusals(self):
        out = self.path("exists.pt")
        with open(out, "wb") as f:
            f.write(b"x")
        for args in (["average", *self.files, "-o", out],                       # exists, no --force
                     ["average", *self.files, "-o", self.files[0], "--force"],  # an input
                     ["ema", "--decay", "2", *self.files, "-o", self.path("e.pt")],  # decay past 1
                     ["average", *self.files, "-o", self.path("nodir/x.pt")]):
            with self.subTest(args=args):
                plan, result, real = self.plan_and_run(args, None)
                self.assertNotEqual(real.returncode, 0)

    def test_convert_and_posthoc(self):
        for out in (self.path("c.pt"), self.path("c.safetensors"), self.path("cf/")):
            with self.subTest(out=out):
                extra = ["--max-shard-size", "3KB"] if out.endswith("/") else []
                plan, _, real = self.plan_and_run(["convert", self.files[0], "-o", out, *extra], out, report=False)
                self.assertEqual(real.returncode, 0, real.stderr)
                self.check_same(plan, None, out if out.endswith("/") else self.tmp)
        snaps = []
        for t in (100, 200, 300):
            p = self.path("snap-%07d-0.050.safetensors" % t)
            save_file(state(t), p)
            snaps.append(p)
        out = self.path("ph.safetensors")
        plan, result, _ = self.plan_and_run(["posthoc-ema", "--sigma-rel", "0.1", *snaps, "-o", out], out)
        self.assertEqual(plan["bytes_read"], result["bytes_read"])
        self.assertEqual(plan["output"]["files"][0]["bytes"], os.path.getsize(out))
        self.assertEqual(len(plan["details"]), result["tensors"])

    def test_python_dry_run(self):
        """swavg.average(..., dry_run=True) returns the plan (it raised AssertionError)."""
        sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
        import swavg
        out = self.path("py.safetensors")
        plan = swavg.average(self.files, out, dry_run=True)
        self.assertTrue(plan["dry_run"])
        self.assertEqual(plan["output"]["files"][0]["file"], out)
        self.assertFalse(os.path.exists(out))
        report = swavg.average(self.files, out)
        self.assertEqual(plan["bytes_read"], report["bytes_read"])
        self.assertEqual(plan["output"]["files"][0]["bytes"], os.path.getsize(out))
        plan = swavg.ema(self.files, self.path("e.pt"), decay=0.9, dry_run=True)
        self.assertEqual(plan["command"], "ema")


if __name__ == "__main__":
    unittest.main()
