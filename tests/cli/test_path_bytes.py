"""Paths are bytes (issue 28 item 7, issue 29 item 3): a file name that is not UTF-8 (Latin-1
b'caf\\xe9', b'x\\xff') works as an input, an output, a report, a resumed file, in an --inputs-from
--null list and in --dry-run --json, through every subcommand. JSON carries such a byte XX as the
escape \\udcXX (Python's surrogateescape: os.fsencode(json.loads(text)[...]) gives back the bytes);
messages and tables escape it printably (\\xe9); a DCP output's .metadata stores the names as torch
pickles os.fsdecode(name)."""
import json
import os
import pickle
import subprocess
import unittest
import warnings

import numpy as np
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file

from common import SWAVG, TempDirTest


def run(*args, stdin=None):
    return subprocess.run([SWAVG, *[a if isinstance(a, bytes) else os.fsencode(a) for a in args]],
                          capture_output=True, timeout=600, input=stdin)


def st_metadata(path):
    """A safetensors file's __metadata__ (safetensors' own readers take UTF-8 paths only)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))["__metadata__"]


def st_tensor(path, name):
    with open(path, "rb") as f:
        return load_safetensors(f.read())[name]


def state(seed):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(3, 3, generator=g), "b": torch.randn(3, generator=g)}


class PathBytes(TempDirTest):
    def setUp(self):
        super().setUp()
        self.dir = os.path.join(os.fsencode(self.tmp), b"d\xff")
        os.mkdir(self.dir)
        self.inputs = []
        for i in range(3):
            p = os.path.join(self.dir, b"caf\xe9_%d.safetensors" % i)
            save_file(state(i), os.fsdecode(p))
            self.inputs.append(p)

    def b(self, name):
        return os.path.join(self.dir, name)

    def ok(self, *args, stdin=None):
        p = run(*args, stdin=stdin)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="backslashreplace"))
        return p

    def report(self, path):
        with open(path, "rb") as f:
            text = f.read()
        text.decode("ascii")  # every byte that is not ASCII is escaped, so any JSON reader takes it
        return json.loads(text)

    def test_average_report_resume_and_record(self):
        out, rep = self.b(b"x\xff.safetensors"), self.b(b"r\xe9.json")
        self.ok("average", *self.inputs[:2], "-o", out, "--report", rep)
        r = self.report(rep)
        self.assertEqual([os.fsencode(p) for p in r["inputs"]], self.inputs[:2])
        self.assertEqual(os.fsencode(r["output"]), out)
        record = json.loads(st_metadata(out)["swavg"])
        self.assertEqual([os.fsencode(p) for p in record["inputs"]], self.inputs[:2])
        # Resumed: the record is read back, bytes and all, and the next record continues it.
        rolled, rep2 = self.b(b"y\xe9.safetensors"), self.b(b"r2\xe9.json")
        self.ok("average", "--resume", out, self.inputs[2], "-o", rolled, "--report", rep2)
        r = self.report(rep2)
        self.assertEqual(os.fsencode(r["resume"]), out)
        self.assertEqual(r["n"], 3)
        record = json.loads(st_metadata(rolled)["swavg"])
        listed = [os.fsencode(p) for p in record["inputs"]]
        self.assertEqual(listed[-1], self.inputs[2])
        self.assertTrue(set(listed) <= {*self.inputs, out}, listed)
        expected = sum(state(i)["w"] for i in range(3)) / 3
        self.assertTrue(torch.allclose(st_tensor(rolled, "w"), expected, atol=1e-6))

    def test_ema_torch_output_and_json_stdout(self):
        out = self.b(b"e\xe9.pt")
        p = self.ok("ema", "--decay", "0.5", *self.inputs, "-o", out, "--json")
        r = json.loads(p.stdout.decode("ascii"))
        self.assertEqual(os.fsencode(r["output"]), out)
        sd = torch.load(os.fsdecode(out), weights_only=True)
        self.assertEqual(sorted(sd), ["b", "w"])

    def test_inputs_from_null(self):
        listed = self.b(b"list\xe9")
        with open(listed, "wb") as f:
            f.write(b"\0".join(self.inputs) + b"\0")
        p = self.ok("average", "--inputs-from", listed, "--null", "-o", self.b(b"n\xe9.pt"), "--json")
        self.assertEqual([os.fsencode(x) for x in json.loads(p.stdout)["inputs"]], self.inputs)
        p = self.ok("average", "--inputs-from", "-", "--null", "-o", self.b(b"n2\xe9.pt"), "--json",
                    stdin=b"\0".join(self.inputs))
        self.assertEqual([os.fsencode(x) for x in json.loads(p.stdout)["inputs"]], self.inputs)

    def test_dry_run_json_and_table(self):
        before = sorted(os.listdir(self.dir))
        for command in (["average"], ["ema", "--decay", "0.9"]):
            for out in (self.b(b"p\xe9.pt"), self.b(b"q\xe9/")):
                with self.subTest(command=command[0], out=out):
                    p = self.ok(*command, *self.inputs, "-o", out, "--dry-run", "--json")
                    plan = json.loads(p.stdout.decode("ascii"))
                    self.assertEqual([os.fsencode(i["path"]) for i in plan["inputs"]], self.inputs)
                    self.assertEqual(os.fsencode(plan["output"]["path"]), out.rstrip(b"/"))
                    p = self.ok(*command, *self.inputs, "-o", out, "--dry-run")
                    self.assertNotIn(b"\xe9", p.stdout)  # escaped as inspect escapes it
                    self.assertIn(b"caf\\xe9_0.safetensors", p.stdout)
        p = self.ok("convert", self.inputs[0], "-o", self.b(b"c\xe9.pt"), "--dry-run", "--json")
        self.assertEqual(os.fsencode(json.loads(p.stdout)["inputs"][0]["path"]), self.inputs[0])
        self.assertEqual(sorted(os.listdir(self.dir)), before)

    def test_convert_and_folder_outputs(self):
        out = self.b(b"c\xe9.pt")
        self.ok("convert", self.inputs[0], "-o", out)
        self.assertTrue(torch.equal(torch.load(os.fsdecode(out), weights_only=True)["w"], state(0)["w"]))
        folder = self.b(b"f\xe9/")
        self.ok("convert", self.inputs[1], "-o", folder, "--max-shard-size", "40")
        names = sorted(os.listdir(folder))
        self.assertIn(b"model.safetensors.index.json", names)

    def test_workers_finalize_copy_names(self):
        src = self.b(b"src\xe9")
        os.mkdir(src)
        for i in range(2):
            os.mkdir(os.path.join(src, b"ck%d" % i))
            save_file(state(i), os.fsdecode(os.path.join(src, b"ck%d/model.safetensors" % i)))
            with open(os.path.join(src, b"ck%d/note\xe9.txt" % i), "wb") as f:
                f.write(b"note %d" % i)
        ins = [os.path.join(src, b"ck%d/" % i) for i in range(2)]
        out = self.b(b"w\xe9/")
        for w in ("0/2", "1/2"):
            self.ok("average", *ins, "-o", out, "--max-shard-size", "40", "--shard", w)
        p = self.ok("finalize", out, "--json")
        r = json.loads(p.stdout.decode("ascii"))
        self.assertEqual([os.fsencode(c) for c in r["copied"]], [b"note\xe9.txt"])
        with open(os.path.join(out, b"note\xe9.txt"), "rb") as f:
            self.assertEqual(f.read(), b"note 1")

    def test_posthoc_ema(self):
        snaps = []
        for t in (100, 200):
            p = self.b(b"snap\xe9-%07d-0.050.safetensors" % t)
            save_file(state(t), os.fsdecode(p))
            snaps.append(p)
        out, rep = self.b(b"ph\xe9-{sigma_rel}.safetensors"), self.b(b"ph\xe9.json")
        self.ok("posthoc-ema", "--sigma-rel", "0.1", *snaps, "-o", out, "--report", rep)
        r = self.report(rep)
        self.assertEqual(os.fsencode(r["outputs"][0]["output"]), self.b(b"ph\xe9-0.1.safetensors"))
        self.assertEqual([os.fsencode(s["path"]) for s in r["outputs"][0]["snapshots"]], snaps)
        meta = json.loads(st_metadata(self.b(b"ph\xe9-0.1.safetensors"))["swavg_posthoc_ema"])
        self.assertEqual(os.fsencode(meta["output"]), self.b(b"ph\xe9-0.1.safetensors"))
        p = self.ok("posthoc-ema", "--sigma-rel", "0.1", *snaps, "-o", self.b(b"q\xe9.pt"), "--dry-run", "--json")
        self.assertEqual([os.fsencode(i["path"]) for i in json.loads(p.stdout)["inputs"]], snaps)

    def test_update_bn(self):
        net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
        model, data, ck = self.b(b"net\xe9.ts"), self.b(b"data\xe9.npy"), self.b(b"ck\xe9.pt")
        torch.jit.script(net).save(self.path("net.ts"))  # TorchScript's save takes UTF-8 names only
        os.rename(self.path("net.ts"), model)
        np.save(os.fsdecode(data), np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32))
        torch.save(net.state_dict(), os.fsdecode(ck))
        out, rep, mod = self.b(b"bn\xe9.pt"), self.b(b"bn\xe9.json"), self.b(b"bn\xe9.ts")
        self.ok("update-bn", "--model", model, "--data", data, "--checkpoint", ck, "-o", out, "--report", rep,
                "--save-module", mod)
        r = self.report(rep)
        self.assertEqual(os.fsencode(r["checkpoint"]), ck)
        self.assertEqual(os.fsencode(r["model"]), model)
        self.assertEqual(os.fsencode(r["data"]["file"]), data)
        self.assertEqual(os.fsencode(r["output"]), out)
        self.assertEqual(os.fsencode(r["module_output"]), mod)
        self.assertIn("1.running_mean", torch.load(os.fsdecode(out), weights_only=True))
        # And through average --update-bn: the report's update_bn part too.
        rep2 = self.b(b"ab\xe9.json")
        sds = [self.b(b"m\xe9%d.pt" % i) for i in range(2)]
        for s in sds:
            torch.save(net.state_dict(), os.fsdecode(s))
        self.ok("average", *sds, "-o", self.b(b"ab\xe9.pt"), "--update-bn", "--model", model, "--data", data,
                "--report", rep2)
        self.assertEqual(os.fsencode(self.report(rep2)["update_bn"]["model"]), model)

    def test_dcp_output_and_input(self):
        out = self.b(b"dcp\xe9/")
        self.ok("average", *self.inputs[:2], "-o", out, "--format", "dcp")
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        md = dcp.FileSystemReader(os.fsdecode(out)).read_metadata()
        self.assertTrue(os.fsencode(str(md.storage_meta.checkpoint_id)).endswith(b"dcp\xe9"),
                        md.storage_meta.checkpoint_id)
        saved = os.fsdecode(self.b(b"t\xe9.pt"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp_to_torch_save(os.fsdecode(out), saved)
        expected = (state(0)["w"] + state(1)["w"]) / 2
        self.assertTrue(torch.allclose(torch.load(saved, weights_only=True)["w"], expected, atol=1e-6))
        # A DCP folder so named as an input, and a rank file so named (as torch would name it).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(state(5), checkpoint_id=os.fsdecode(self.b(b"in\xe9")))
        p = self.ok("average", self.b(b"in\xe9"), self.b(b"in\xe9"), "-o", self.b(b"from_dcp\xe9.pt"), "--json")
        self.assertEqual(os.fsencode(json.loads(p.stdout)["inputs"][0]), self.b(b"in\xe9"))

    def test_dry_run_table_escapes_names(self):
        """The table escapes tensor names as inspect does: ESC, CR, BEL, U+202E never reach the terminal
        and a newline in a name cannot forge a line."""
        names = {"evil\x1b[2J": torch.ones(2), "cr\rbel\x07": torch.ones(2), "rtl\u202eabc": torch.ones(2),
                 "two\nTensors (99):": torch.ones(2)}
        files = []
        for i in range(2):
            p = os.path.join(self.dir, b"evil%d.safetensors" % i)
            save_file(names, os.fsdecode(p))
            files.append(p)
        p = self.ok("-v", "average", *files, "-o", self.b(b"e.safetensors"), "--dry-run")
        for raw in (b"\x1b", b"\r", b"\x07", "\u202e".encode()):
            self.assertNotIn(raw, p.stdout)
        for shown in (b"evil\\x1b[2J", b"cr\\rbel\\x07", b"rtl\\u202eabc", b"two\\nTensors (99):"):
            self.assertIn(shown, p.stdout)
        self.assertFalse(any(line.startswith(b"Tensors (99)") for line in p.stdout.splitlines()))
        p = self.ok("inspect", files[0])
        self.assertIn(b"evil\\x1b[2J", p.stdout)

    def test_messages_escape(self):
        p = run("average", self.b(b"missing\xe9.pt"), self.inputs[0], "-o", self.b(b"o.pt"))
        self.assertNotEqual(p.returncode, 0)
        self.assertNotIn(b"internal error", p.stderr)
        self.assertIn(b"missing\\xe9.pt", p.stderr)
        self.assertNotIn(b"\xe9", p.stderr)


if __name__ == "__main__":
    unittest.main()
