"""`swavg finalize` under faults and hostile job files: killed (SIGKILL, through the hook
SWAVG_FINALIZE_KILL_AT) after every one of its steps and run again, it publishes the bytes of an
uninterrupted run and leaves nothing behind; two at once publish once, with no stray temp file; a
worker writing (its shared lock on OUT.partial/) blocks it (exit 6), and a finalize blocks a worker;
workers run with other options are another job (exit 4 naming the option); every listed file
tampered with in turn is exit 5; OUT.partial/ is fsynced before its rename and the parent after;
plans and manifests past the bounds, without their fields or that are FIFOs are exit 3, at once;
files of an input folder named like the job's are not copied.

Inputs are Hugging Face folders (model.safetensors, config.json) written here with fixed seeds."""
import collections
import fcntl
import json
import os
import shutil
import subprocess
import unittest

import torch

import safetensors_ref
from common import SWAVG, TempDirTest, swavg
from shard_runs import plain_env

SHAPES = collections.OrderedDict([
    ("embed.weight", (32, 32)), ("block.0.weight", (10, 10)), ("block.0.big", (64, 64)),
    ("block.1.weight", (16, 32)), ("head.bias", (2,)),
])
ARGS = ["--max-shard-size", "3KB"]  # 4 shards: {embed}, {block.0.weight}, {big}, {the rest}
STEPS = ["locked", "checked", "temps", "index", "record", "manifest", "manifests", "plan", "renamed"]
TIMEOUT = 600  # a finalize that hangs (blocked, using no CPU) fails the test


def folder_bytes(path):
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


def run(args, env=None, timeout=TIMEOUT):
    return subprocess.run([SWAVG, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env or plain_env())


class FinalizeTest(TempDirTest):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.shared = tempfile.mkdtemp(prefix="swavg-finalize-")
        cls.inputs = []
        for i in range(2):
            folder = os.path.join(cls.shared, "run_%d" % i)
            os.makedirs(folder)
            g = torch.Generator().manual_seed(10 + i)
            sd = collections.OrderedDict((k, torch.randn(s, generator=g)) for k, s in SHAPES.items())
            safetensors_ref.write(os.path.join(folder, "model.safetensors"), sd, metadata={"format": "pt"})
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump({"model_type": "test", "run": i}, f)
            cls.inputs.append(folder)
        cls.plain = os.path.join(cls.shared, "plain")
        p = run(["average", *cls.inputs, "-o", cls.plain + "/", *ARGS])
        assert p.returncode == 0, p.stderr
        cls.want = folder_bytes(cls.plain)
        assert "config.json" in cls.want and "model.safetensors.index.json" in cls.want, sorted(cls.want)
        # The workers' part, made once and copied for each test.
        cls.done = os.path.join(cls.shared, "done")
        for i in range(2):
            p = run(["average", *cls.inputs, "-o", cls.done + "/", *ARGS, "--shard", "%d/2" % i])
            assert p.returncode == 0, p.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    def fresh(self, name="out"):
        """OUT (not there) and OUT.partial/, a copy of both workers' finished part."""
        out = self.path(name)
        shutil.copytree(self.done + ".partial", out + ".partial")
        return out

    def assert_fails(self, p, code, *needles):
        self.assertEqual(p.returncode, code, "exit %d, expected %d; stderr:\n%s" % (p.returncode, code, p.stderr))
        self.assertIn("swavg: error:", p.stderr)
        for n in needles:
            self.assertIn(n, p.stderr)

    def assert_published(self, out):
        self.assertEqual(folder_bytes(out), self.want)
        self.assertFalse(os.path.lexists(out + ".partial"))
        self.assertEqual([n for n in os.listdir(self.tmp) if ".swavg-" in n], [], "left beside OUT")

    def assert_unpublished(self, out):
        self.assertFalse(os.path.lexists(out))
        self.assertTrue(os.path.isdir(out + ".partial"))


class KillTest(FinalizeTest):
    def test_killed_after_every_step_then_retried_publishes_the_same_bytes(self):
        for step in STEPS:
            with self.subTest(step=step):
                out = self.fresh("k_" + step)
                p = run(["finalize", out + "/"], env=plain_env(SWAVG_FINALIZE_KILL_AT=step))
                self.assertEqual(p.returncode, -9, "not killed at %s: %s" % (step, p.stderr))
                if step != "renamed":
                    self.assertFalse(os.path.lexists(out), "published before the rename")
                self.assertFalse([n for n in os.listdir(self.tmp) if ".swavg-tmp-" in n])
                r = run(["finalize", out + "/"])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assert_published(out)
                again = run(["finalize", out + "/"])  # the work is done: exit 0 (a retry on 6 ends), OUT untouched
                self.assertEqual(again.returncode, 0, again.stderr)
                self.assertIn("published already", again.stderr)
                self.assertEqual(folder_bytes(out), self.want)
                shutil.rmtree(out)

    def test_finalize_after_its_record_is_removed(self):
        """Killed between removing its record and exiting: OUT/ published, nothing beside it. The
        next finalize says so and exits 0 (--json: already_published); with no OUT/ at all it is 6."""
        out = self.fresh("after")
        self.assertEqual(run(["finalize", out + "/"]).returncode, 0)
        again = run(["finalize", out + "/", "--json"])
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(json.loads(again.stdout), {"output": out + "/", "already_published": True})
        self.assertEqual(folder_bytes(out), self.want)
        nothing = run(["finalize", self.path("never") + "/"])
        self.assert_fails(nothing, 6, "does not exist", "no worker has written its part")
        os.makedirs(self.path("empty"))  # an empty folder is no published output
        self.assert_fails(run(["finalize", self.path("empty") + "/"]), 6, "does not exist")

    def test_killed_finalize_with_force_over_an_old_folder(self):
        for step in ("index", "plan", "renamed"):
            with self.subTest(step=step):
                out = self.fresh("f_" + step)
                os.makedirs(out)
                with open(os.path.join(out, "old.txt"), "w") as f:
                    f.write("old")
                p = run(["finalize", "--force", out + "/"], env=plain_env(SWAVG_FINALIZE_KILL_AT=step))
                self.assertEqual(p.returncode, -9, p.stderr)
                r = run(["finalize", "--force", out + "/"])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assert_published(out)
                shutil.rmtree(out)

    def test_a_retry_after_the_rename_checks_what_was_published(self):
        for name in ("model.safetensors.index.json", "config.json"):
            with self.subTest(name=name):
                out = self.fresh("r_" + name)
                p = run(["finalize", out + "/"], env=plain_env(SWAVG_FINALIZE_KILL_AT="renamed"))
                self.assertEqual(p.returncode, -9, p.stderr)
                with open(os.path.join(out, name), "ab") as f:
                    f.write(b" ")
                self.assert_fails(run(["finalize", out + "/"]), 5, "is not what it published")
                self.assertTrue(os.path.exists(out + ".swavg-finalize.json"))

    def test_a_worker_refuses_while_a_killed_finalize_has_its_record(self):
        out = self.fresh()
        p = run(["finalize", out + "/"], env=plain_env(SWAVG_FINALIZE_KILL_AT="manifests"))
        self.assertEqual(p.returncode, -9, p.stderr)
        w = run(["average", *self.inputs, "-o", out + "/", *ARGS, "--shard", "0/2"])
        self.assert_fails(w, 6, out + ".swavg-finalize.json", "interrupted")
        self.assertEqual(run(["finalize", out + "/"]).returncode, 0)
        self.assert_published(out)


class ConcurrencyTest(FinalizeTest):
    def test_two_finalizers_at_once(self):
        for round_ in range(4):
            out = self.fresh("c%d" % round_)
            procs = [subprocess.Popen([SWAVG, "finalize", out + "/"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=plain_env()) for _ in range(2)]
            codes = []
            for p in procs:
                _, err = p.communicate(timeout=TIMEOUT)
                codes.append(p.returncode)
                self.assertIn(p.returncode, (0, 6), err)
                if p.returncode == 6:
                    self.assertTrue("another swavg holds it" in err or "does not exist" in err
                                    or "while this finalize locked it" in err, err)
            self.assertIn(0, codes)
            self.assert_published(out)

    def test_a_finalize_holding_the_lock_makes_another_exit_6(self):
        out = self.fresh()
        fd = os.open(out + ".partial", os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # what a running finalize holds
            self.assert_fails(run(["finalize", out + "/"]), 6, "another swavg holds it")
            self.assert_unpublished(out)
            w = run(["average", *self.inputs, "-o", out + "/", *ARGS, "--shard", "1/2"])
            self.assert_fails(w, 6, "a swavg finalize is publishing it")
        finally:
            os.close(fd)
        self.assertEqual(run(["finalize", out + "/"]).returncode, 0)
        self.assert_published(out)

    def test_a_worker_writing_blocks_finalize(self):
        out = self.fresh()
        fd = os.open(out + ".partial", os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # what a worker holds while it writes (its rerun too)
            self.assert_fails(run(["finalize", out + "/"]), 6, "another swavg holds it")
            self.assert_unpublished(out)
            # Workers share the lock: one rerun while another holds it succeeds.
            self.assertEqual(run(["average", *self.inputs, "-o", out + "/", *ARGS, "--shard", "1/2"]).returncode, 0)
        finally:
            os.close(fd)
        self.assertEqual(run(["finalize", out + "/"]).returncode, 0)
        self.assert_published(out)


    @unittest.skipUnless(shutil.which("strace"), "strace is not installed")
    def test_a_rerun_worker_locks_before_it_reads_an_input(self):
        # So a finalize while a rerun is still loading its inputs waits for it (exit 6) instead of
        # publishing the manifests of the run before.
        out = self.fresh()
        log = self.path("strace.log")
        p = subprocess.run(["strace", "-f", "-o", log, "-e", "trace=openat,flock", SWAVG, "average", *self.inputs,
                            "-o", out + "/", *ARGS, "--shard", "1/2"], capture_output=True, text=True,
                           timeout=TIMEOUT, env=plain_env())
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(log) as f:
            calls = f.read().splitlines()
        locked = [i for i, c in enumerate(calls) if "flock(" in c and "LOCK_SH" in c]
        read = [i for i, c in enumerate(calls) if "openat(" in c and "model.safetensors" in c and "= -1" not in c
                and any(folder in c for folder in self.inputs)]
        self.assertTrue(locked and read, "no lock or no input read traced")
        self.assertLess(locked[0], read[0], "the worker read an input before it held OUT.partial/'s lock")


class JobIdentityTest(FinalizeTest):
    def worker(self, out, i, *args, command="average"):
        return run([command, *self.inputs, "-o", out + "/", *ARGS, "--shard", "%d/2" % i, *args])

    def test_workers_with_other_options_are_another_job(self):
        rules_a, rules_b = self.path("rules_a.json"), self.path("rules_b.json")
        cases = [  # (command, worker 0's options, worker 1's, the option named)
            ("average", ["--weights", "1,3"], ["--weights", "3,1"], "--weights"),
            ("average", [], ["--buffers", "average"], "--buffers"),
            ("average", [], ["--int", "first"], "--int"),
            ("average", ["--rules", rules_a], ["--rules", rules_b], "--rules"),
            ("ema", ["--decay", "0.9"], ["--decay", "0.99"], "--decay"),
            ("average", [], ["--output-dtype", "bfloat16"], "--output-dtype"),
            ("average", [], ["--accumulate", "float64"], "--accumulate"),
            ("average", [], ["--strip-prefix", "block."], "--strip-prefix"),
        ]
        for k, (command, first, second, option) in enumerate(cases):
            with self.subTest(option=option):
                # Both rules files are at one path in turn: the content counts, not the path.
                with open(rules_a, "w") as f:
                    json.dump([{"match": "^head", "action": "latest"}], f)
                with open(rules_b, "w") as f:
                    json.dump([{"match": "^head", "action": "first"}], f)
                out = self.path("id%d" % k)
                p = self.worker(out, 0, *first, command=command)
                self.assertEqual(p.returncode, 0, p.stderr)
                p = self.worker(out, 1, *second, command=command)
                self.assert_fails(p, 4, "another job's plan", option + " differs")

    def test_rules_content_not_path(self):
        a, b = self.path("a.json"), self.path("b.json")
        for path in (a, b):
            with open(path, "w") as f:
                json.dump([{"match": "^head", "action": "latest"}], f)
        out = self.path("rules")
        self.assertEqual(self.worker(out, 0, "--rules", a).returncode, 0)
        self.assertEqual(self.worker(out, 1, "--rules", b).returncode, 0)  # same content elsewhere: one job
        self.assertEqual(run(["finalize", out + "/"]).returncode, 0)
        with open(a, "w") as f:
            json.dump([{"match": "^head", "action": "first"}], f)
        out2 = self.path("rules2")
        self.assertEqual(self.worker(out2, 0, "--rules", b).returncode, 0)
        self.assert_fails(self.worker(out2, 1, "--rules", a), 4, "--rules differs")

    def test_a_plan_there_with_more_options_or_another_size(self):
        """A plan there that has an option this worker's lacks names it; one that differs only in its
        max_shard_size names that (a plan edited by hand: swavg's own plans name the same options)."""
        def edited(name, change):
            out = self.path(name)
            self.assertEqual(self.worker(out, 0).returncode, 0)
            plan = os.path.join(out + ".partial", "swavg-plan.json")
            with open(plan) as f:
                j = json.load(f, object_pairs_hook=collections.OrderedDict)
            change(j)
            with open(plan, "w") as f:
                json.dump(j, f)
            return out

        out = edited("extra", lambda j: j["options"].update({"--extra": "x"}))
        self.assert_fails(self.worker(out, 1), 4, "another job's plan",
                          "--extra differs: (not set) here, 'x' in the plan there")
        out = edited("size", lambda j: j.update({"max_shard_size": j["max_shard_size"] * 2}))
        self.assert_fails(self.worker(out, 1), 4, "another job's plan", '"max_shard_size" differs: 3000 here, 6000')

    def test_the_plan_names_the_options(self):
        with open(os.path.join(self.done + ".partial", "swavg-plan.json")) as f:
            options = json.load(f)["options"]
        for key in ("swavg's version", "the mode", "--buffers", "--int", "--rules", "--accumulate", "--output-dtype",
                    "--key", "--strip-prefix", "--layout", "--drop-objects", "--max-shard-size"):
            self.assertIn(key, options)
        self.assertEqual(options["--max-shard-size"], "3000")
        self.assertEqual(options["the mode"], "swa")


class TamperTest(FinalizeTest):
    def manifests(self, out):
        files = []
        for i in range(2):
            with open(os.path.join(out + ".partial", "swavg-worker-%d-of-2.json" % i)) as f:
                files += [e["name"] for e in json.load(f)["files"]]
        return files

    def test_every_listed_file_tampered_in_turn(self):
        names = self.manifests(self.done)
        self.assertEqual(len(names), 5, names)  # 4 shards and config.json, the last entry of worker 0's
        for name in names:
            with self.subTest(name=name):
                out = self.fresh("t_" + name)
                path = os.path.join(out + ".partial", name)
                with open(path, "r+b") as f:
                    f.seek(-1, 2)
                    last = f.read(1)
                    f.seek(-1, 2)
                    f.write(bytes([last[0] ^ 1]))
                self.assert_fails(run(["finalize", out + "/"]), 5, name, "sha256")
                self.assert_unpublished(out)

    @unittest.skipUnless(shutil.which("strace"), "strace is not installed")
    def test_partial_fsynced_before_its_rename_and_parent_after(self):
        out = self.fresh()
        partial = out + ".partial"
        log = self.path("strace.log")
        p = subprocess.run(["strace", "-f", "-o", log, "-e", "trace=openat,fsync,rename,renameat,renameat2,unlink,unlinkat",
                            SWAVG, "finalize", out + "/"], capture_output=True, text=True, timeout=TIMEOUT,
                           env=plain_env())
        if p.returncode != 0 and "ptrace" in p.stderr:
            self.skipTest("ptrace is not permitted here")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(log) as f:
            calls = f.read().splitlines()
        os.remove(log)
        rename = [i for i, l in enumerate(calls) if "rename" in l and '"%s"' % partial in l and '"%s"' % out in l]
        self.assertEqual(len(rename), 1, "\n".join(calls[-20:]))
        rename = rename[0]

        def fds(lines, path):
            return [l.rsplit("=", 1)[1].strip() for l in lines if "openat(" in l and '"%s"' % path in l
                    and "O_DIRECTORY" in l and "= -1" not in l]

        def fsynced(lines, fd_list):
            return any(("fsync(%s)" % fd) in l for fd in fd_list for l in lines)

        before = calls[:rename]
        # After its last change (the plan unlinked) and before the rename, OUT.partial/ is fsynced.
        unlinks = [i for i, l in enumerate(before) if "unlink" in l and '"%s/' % partial in l]
        self.assertTrue(unlinks, "\n".join(before[-20:]))
        self.assertIn("swavg-plan.json", before[unlinks[-1]])
        self.assertTrue(fsynced(before[unlinks[-1]:], fds(before, partial)),
                        "OUT.partial/ not fsynced between its last change and its rename")
        after = calls[rename:]
        self.assertTrue(fsynced(after, fds(after, self.tmp)), "the parent is not fsynced after the rename")
        # The finalize record, unlinked last, is a change of the parent too: fsynced after it.
        record = [i for i, l in enumerate(after) if "unlink" in l and '"%s.swavg-finalize.json"' % out in l]
        self.assertEqual(len(record), 1, "\n".join(after))
        self.assertTrue(fsynced(after[record[0]:], fds(after[record[0]:], self.tmp)),
                        "the parent is not fsynced after the finalize record is unlinked")


class HostileJobFileTest(FinalizeTest):
    def edit(self, path, change):
        with open(path) as f:
            j = json.load(f)
        change(j)
        with open(path, "w") as f:
            json.dump(j, f)

    def plan(self, out):
        return os.path.join(out + ".partial", "swavg-plan.json")

    def test_worker_bounds_at_the_edges(self):
        for workers, code in ((10 ** 12, 3), (1000001, 3), (1000000, 6)):
            with self.subTest(workers=workers):
                out = self.fresh("w%d" % workers)
                self.edit(self.plan(out), lambda j: j.update(workers=workers))
                p = run(["finalize", out + "/"])
                self.assert_fails(p, code, self.plan(out) if code == 3 else "of 1000000")
                self.assert_unpublished(out)

    def test_shard_bounds_at_the_edges(self):
        for shards, code in ((100000, 3), (99999, 4)):
            with self.subTest(shards=shards):
                out = self.fresh("s%d" % shards)

                def claim(j):
                    j["shards"] = [{"file": "s%06d.safetensors" % k, "bytes": 1, "tensors": ["t%d" % k]}
                                   for k in range(shards)]
                    j["total_size"] = shards
                self.edit(self.plan(out), claim)
                p = run(["finalize", out + "/"])
                # 99999 is a plan (then the manifests are of another plan: exit 4); one more is not.
                self.assert_fails(p, code, self.plan(out) if code == 3 else "another plan")

    def test_a_manifest_of_another_worker_count(self):
        """A manifest (of this plan, at its name) that says another count of workers is exit 4; nothing published."""
        for index, count in ((1, 3), (1, 1000)):
            with self.subTest(count=count):
                out = self.fresh("c%d" % count)
                manifest = os.path.join(out + ".partial", "swavg-worker-1-of-2.json")
                self.edit(manifest, lambda j: j.update(index=index, count=count))
                self.assert_fails(run(["finalize", out + "/"]), 4, manifest,
                                  "says worker %d of %d, expected 1 of 2" % (index, count))
                self.assert_unpublished(out)

    def test_manifest_bounds(self):
        for count in (2 ** 40, 1000001):
            out = self.fresh("m%d" % count)
            manifest = os.path.join(out + ".partial", "swavg-worker-1-of-2.json")
            self.edit(manifest, lambda j: j.update(count=count))
            self.assert_fails(run(["finalize", out + "/"]), 3, manifest)

    def test_missing_fields_are_exit_3_naming_the_file(self):
        for field in ("shards", "workers", "copied", "format"):
            out = self.fresh("p_" + field)
            self.edit(self.plan(out), lambda j: j.pop(field))
            self.assert_fails(run(["finalize", out + "/"]), 3, self.plan(out), field)
        for field in ("files", "plan_hash", "count"):
            out = self.fresh("m_" + field)
            manifest = os.path.join(out + ".partial", "swavg-worker-1-of-2.json")
            self.edit(manifest, lambda j: j.pop(field))
            self.assert_fails(run(["finalize", out + "/"]), 3, manifest, field)
        out = self.fresh("m_list")
        manifest = os.path.join(out + ".partial", "swavg-worker-0-of-2.json")
        self.edit(manifest, lambda j: j.update(files={}))
        self.assert_fails(run(["finalize", out + "/"]), 3, manifest, "not a list")

    def test_a_file_listed_by_another_worker_than_the_plan_says(self):
        # The file is there and intact; only the worker that lists it is not the plan's owner.
        out = self.fresh("moved")
        first, second = (os.path.join(out + ".partial", "swavg-worker-%d-of-2.json" % i) for i in range(2))
        with open(second) as f:
            moved = json.load(f)["files"][0]
        self.edit(second, lambda j: j.update(files=j["files"][1:]))
        self.edit(first, lambda j: j.update(files=j["files"] + [moved]))
        self.assert_fails(run(["finalize", out + "/"]), 4,
                          "'%s' is not in worker 1's manifest, as the plan says" % moved["name"])
        self.assert_unpublished(out)

    def test_fifo_named_like_a_manifest_or_the_plan(self):
        for name in ("swavg-worker-1-of-2.json", "swavg-plan.json"):
            out = self.fresh("fifo_" + name)
            path = os.path.join(out + ".partial", name)
            os.unlink(path)
            os.mkfifo(path)
            p = run(["finalize", out + "/"], timeout=TIMEOUT)  # a hang raises TimeoutExpired
            self.assert_fails(p, 3, path, "not a regular file")
            self.assert_unpublished(out)

    def test_symlinked_manifest_is_refused(self):
        out = self.fresh()
        path = os.path.join(out + ".partial", "swavg-worker-1-of-2.json")
        os.rename(path, self.path("elsewhere.json"))
        os.symlink(self.path("elsewhere.json"), path)
        self.assert_fails(run(["finalize", out + "/"]), 3, path)

    def test_index_left_in_partial_is_rewritten(self):
        out = self.fresh()
        with open(os.path.join(out + ".partial", "model.safetensors.index.json"), "w") as f:
            f.write("{}")
        self.assertEqual(run(["finalize", out + "/"]).returncode, 0)
        self.assert_published(out)


class InputFolderTest(FinalizeTest):
    def test_files_named_like_the_job_files_are_not_copied(self):
        last = self.path("last")
        shutil.copytree(self.inputs[1], last)
        names = ["swavg-plan.json", "swavg-worker-1-of-2.json", "swavg-worker-0-of-2.json",
                 "out.swavg-finalize.json"]
        for name in names:
            with open(os.path.join(last, name), "w") as f:
                f.write("{}")
        out = self.path("out")
        for i in (1, 0):
            p = run(["average", self.inputs[0], last, "-o", out + "/", *ARGS, "--shard", "%d/2" % i])
            self.assertEqual(p.returncode, 0, p.stderr)
            if i == 0:
                for name in names:
                    self.assertIn(name + ": not copied", p.stderr)
        p = run(["finalize", out + "/"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(os.listdir(out)), sorted(self.want))
        plain = self.path("plain")
        p = run(["average", self.inputs[0], last, "-o", plain + "/", *ARGS])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(folder_bytes(plain), folder_bytes(out))


if __name__ == "__main__":
    unittest.main(verbosity=1)
