"""The malformed-input suite (scripts/fixtures/hostile.py): every case through swavg inspect, convert
and average (and update-bn --model where a TorchScript module is expected).

For each run: the expected exit code, never a crash (no signal, no code >= 128, no sanitizer report);
on failure a message that names the file and the problem, nothing on stdout, no output file and no
temp file left. For pickles that would run code: the payload does not run (its marker file is never
created), inspect lists it as opaque, and convert writes only the tensors. The payloads are checked
to be live: Python's own pickle module does create the marker.
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import zipfile

from common import FIXTURES, SWAVG

import torch

HOSTILE = os.path.join(FIXTURES, "hostile")
with open(os.path.join(HOSTILE, "manifest.json")) as _f:
    MANIFEST = json.load(_f)
CASES = MANIFEST["cases"]
GOOD = os.path.join(HOSTILE, MANIFEST["good"])
BN_DATA = os.path.join(FIXTURES, "bn", "data.npy")
TIMEOUT = 300
# SWAVG_REPLAY=1: SWAVG_BIN is swavg-replay (tests/fuzz/replay.cpp), `swavg inspect` without LibTorch, as
# the sanitizer build runs it: only inspect, and no case that needs LibTorch.
REPLAY = os.environ.get("SWAVG_REPLAY") == "1"


def has_update_bn():
    if REPLAY:
        return False
    p = subprocess.run([SWAVG, "update-bn", "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    return p.returncode == 0 and "--model" in p.stdout


def make_special(kind, folder):
    """Things that are not regular files, made at run time (no FIFO or symlink loop in fixtures)."""
    path = os.path.join(folder, kind + ".pt")
    if kind == "directory":
        os.mkdir(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling":
        os.symlink(os.path.join(folder, "nowhere.pt"), path)
    elif kind == "loop":
        os.symlink(os.path.join(folder, "loop2.pt"), path)
        os.symlink(path, os.path.join(folder, "loop2.pt"))
    elif kind != "missing":
        raise ValueError(kind)
    return path


class Run:
    """One swavg invocation of one case, made in its own empty working folder."""

    def __init__(self, case, command, inputs, workdir):
        self.case, self.command, self.inputs, self.workdir = case, command, inputs, workdir
        self.output = os.path.join(workdir, "out", "result.pt")
        os.makedirs(os.path.dirname(self.output))
        bad = case["inputs"][case["bad"]] if case.get("bad") is not None else None
        self.bad = inputs[case["inputs"].index(bad)] if bad else None
        if command == "inspect":
            self.args = ["inspect", "--json", inputs[0]]
        elif command == "convert":
            self.args = ["convert", inputs[0], "-o", self.output]
        elif command == "average":
            self.args = ["average", inputs[0], GOOD, "-o", self.output]
        elif command == "average_pair":
            self.args = ["average", *inputs, "-o", self.output]
        elif command == "update_bn_model":
            self.args = ["update-bn", "--model", inputs[0], "--data", BN_DATA, "-o", self.output]
        else:
            raise ValueError(command)

    def __call__(self):
        try:
            self.p = subprocess.run([SWAVG, *self.args], capture_output=True, text=True, cwd=self.workdir,
                                    timeout=TIMEOUT)
        except subprocess.TimeoutExpired as e:
            self.p = e
        self.left = sorted(os.listdir(os.path.dirname(self.output)))
        return self


class HostileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-hostile-")
        cls.update_bn = has_update_bn()
        runs = []
        for i, case in enumerate(CASES):
            special = os.path.join(cls.tmp, "special-%d" % i)
            os.mkdir(special)
            if case.get("special"):
                inputs = [make_special(case["special"], special)]
            else:
                inputs = [os.path.join(HOSTILE, f) for f in case["inputs"]]
            for command in case["commands"]:
                if command == "update_bn_model" and not cls.update_bn:
                    continue
                if REPLAY and command != "inspect":
                    continue
                workdir = os.path.join(cls.tmp, "%s-%s" % (case["name"], command))
                os.mkdir(workdir)
                runs.append(Run(case, command, inputs, workdir))
        # swavg starts LibTorch each time: run the cases side by side.
        workers = max(2, os.cpu_count() or 1)
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            done = list(pool.map(lambda r: r(), runs))
        cls.runs = {}
        for r in done:
            cls.runs.setdefault(r.case["name"], []).append(r)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check_run(self, r):
        case = r.case
        what = "swavg %s (case %s)" % (" ".join(r.args), case["name"])
        self.assertNotIsInstance(r.p, subprocess.TimeoutExpired, "%s: hung" % what)
        p = r.p
        detail = "%s: exit %d\nstderr: %s\nstdout: %s" % (what, p.returncode, p.stderr[-3000:], p.stdout[-500:])
        self.assertTrue(0 <= p.returncode < 128, "crashed: " + detail)
        for needle in ("Sanitizer", "runtime error:", "internal error", "terminate called"):
            self.assertNotIn(needle, p.stderr, detail)
        exit = case.get("exit_by_command", {}).get(r.command, case["exit"])
        self.assertEqual(p.returncode, exit, detail)
        for needle in case.get("message_by_command", {}).get(r.command, case["message"]):
            self.assertIn(needle, p.stderr, detail)
        if exit != 0:
            if r.bad:
                self.assertIn(r.bad, p.stderr, "the message does not name the file: " + detail)
            self.assertEqual(p.stdout, "", "stdout is not empty: " + detail)
            self.assertEqual(r.left, [], "an output or temp file was left: " + detail)
            self.assertFalse(os.path.lexists(r.output), detail)
        marker = case.get("marker")
        if marker:
            self.assertFalse(os.path.lexists(os.path.join(r.workdir, marker)), "the payload ran: " + detail)
            self.assertFalse(os.path.lexists(os.path.join(HOSTILE, marker)), "the payload ran: " + detail)
        if exit == 0 and r.command == "inspect":
            doc = json.loads(p.stdout)
            listed = {o["path"]: o["type"] for o in doc["opaque"]}
            for path, type_ in case.get("opaque", {}).items():
                self.assertEqual(listed.get(path), type_, "not reported as opaque: " + detail)
            self.assertEqual([t["name"] for t in doc["tensors"]], ["w"], detail)
        if exit == 0 and r.command in ("convert", "average"):
            self.assertEqual(r.left, ["result.pt"], detail)
            # The output holds the input's tensor and its non-tensor entries, carried as the pickle
            # data they were (never run by swavg).
            out = subprocess.run([SWAVG, "inspect", "--json", r.output], capture_output=True, text=True,
                                 cwd=r.workdir, timeout=TIMEOUT)
            doc = json.loads(out.stdout)
            self.assertEqual([t["name"] for t in doc["tensors"]], ["w"], detail)
            if case.get("opaque"):
                self.assertEqual({o["path"]: o["type"] for o in doc["others"]}, case["opaque"], detail)
            if doc["opaque"]:
                # torch's safe loader refuses the objects, as it refuses the input.
                with self.assertRaises(Exception):
                    torch.load(r.output, weights_only=True)
            else:
                state = torch.load(r.output, weights_only=True)
                self.assertEqual([k for k, v in state.items() if isinstance(v, torch.Tensor)], ["w"], detail)

    def test_suite_is_complete(self):
        names = {c["name"] for c in CASES}
        for required in ["empty", "directory", "fifo", "missing", "dangling", "loop", "truncated_zip",
                         "corrupt_central_directory", "record_past_end", "deflated_storage", "huge_record_size",
                         "pickle_global_os_system", "pickle_global_posix_system", "pickle_global_builtins_eval",
                         "pickle_stack_underflow", "pickle_bad_memo_index", "pickle_unknown_opcode",
                         "pickle_truncated", "storage_short", "negative_size", "negative_stride", "negative_offset",
                         "size_overflow", "stride_overflow", "offset_overflow", "numel_itemsize_overflow",
                         "st_header_len_max", "st_header_past_end", "st_invalid_utf8", "st_invalid_json",
                         "st_duplicate_name", "st_nul_in_name", "st_unknown_dtype", "st_overlap", "st_gap",
                         "st_out_of_range", "st_trailing_bytes", "storage_numel_redeclared", "regression_storage_numel_redeclared", "pair_names", "pair_shape", "pair_dtype", "nan",
                         "inf", "update_bn_model_checkpoint", "fake_torchscript", "legacy_bad_magic",
                         "legacy_storage_past_end", "legacy_duplicate_key", "legacy_trailing_bytes"]:
            self.assertIn(required, names)
        # Made only by a torch that writes them (2.x): the sanitizer's and the lean build's torch 1.13 does not.
        import torch
        later = []
        if hasattr(torch._utils, "_rebuild_tensor_v3") and hasattr(torch, "uint16"):
            later += ["v3_unknown_dtype", "v3_dtype_os_system", "v3_view_past_end"]
        if "dcp_chunk_twice" in names or "dcp_discarded_payload" in names:
            later += ["dcp_discarded_payload", "dcp_discarded_global", "dcp_chunk_twice", "megatron_torch_dist"]
        if "dcp_overlap" in names:  # copies of the DCP fixtures, written where torch has dcp.save and DTensor
            later += ["dcp_" + c for c in ("overlap", "missing_chunk", "past_end", "offset_past_end", "dtype", "shape",
                                           "off_allow_list", "payload", "chunk_payload", "escape")]
        if any(n.startswith("deepspeed_") for n in names):  # copies of the DeepSpeed fixtures, where it is installed
            later += ["deepspeed_" + c for c in ("missing_rank", "missing_model_rank", "world_size", "extra_rank",
                                                 "short_group", "shape_overflow", "shape_bigger", "shape_fewer",
                                                 "frozen_missing", "stage_mismatch", "no_module", "latest_escape",
                                                 "latest_missing", "world_limit", "world_past_limit")]
        try:  # hostile_pt2, where torch.export writes serialization schema 8
            from torch._export.serde.schema import SCHEMA_VERSION
        except ImportError:
            SCHEMA_VERSION = (0,)
        if SCHEMA_VERSION[0] == 8:
            later += ["pt2_" + c for c in ("good", "rewritten", "flipped_weight_byte", "config_missing_parameter",
                                           "weight_short", "pickled_weight", "aoti_package", "op_from_file",
                                           "op_custom", "op_higher_order", "reads_undefined", "training_ir",
                                           "eval_mode")]
        for required in later:
            self.assertIn(required, names)

    def test_payloads_are_live(self):
        """Python's pickle does run each payload (so the cases above test something)."""
        for case in CASES:
            if not case.get("live"):
                continue
            with self.subTest(case=case["name"]), tempfile.TemporaryDirectory() as cwd:
                path = os.path.join(HOSTILE, case["inputs"][0])
                if os.path.isdir(path):  # a DCP folder: its .metadata
                    with open(os.path.join(path, ".metadata"), "rb") as f:
                        data = f.read()
                else:
                    with zipfile.ZipFile(path) as z:
                        data = z.read("archive/data.pkl")
                code = (
                    "import io, pickle, sys\n"
                    "class U(pickle.Unpickler):\n"
                    "    def find_class(self, module, name):\n"
                    "        if module.startswith(('torch', 'collections')):\n"
                    "            return lambda *a, **k: None\n"
                    "        return super().find_class(module, name)\n"
                    "    def persistent_load(self, pid):\n"
                    "        return None\n"
                    "try:\n"
                    "    U(io.BytesIO(sys.stdin.buffer.read())).load()\n"
                    "except Exception:\n"
                    "    pass\n")
                subprocess.run([sys.executable, "-c", code], input=data, cwd=cwd, timeout=600,
                               capture_output=True)
                marker = os.path.join(cwd, case["marker"])
                for _ in range(50):  # subprocess.Popen's child may finish after Python exits
                    if os.path.exists(marker):
                        break
                    time.sleep(0.1)
                self.assertTrue(os.path.exists(marker),
                                "Python's pickle did not create %s: the payload is not live" % case["marker"])


def _add_case_test(case):
    def test(self):
        runs = self.runs.get(case["name"], [])
        if not runs:
            self.skipTest("no command applies here (update-bn missing, or needs LibTorch)")
        for r in runs:
            with self.subTest(command=r.command):
                self.check_run(r)
    setattr(HostileTest, "test_" + case["name"], test)


for _case in CASES:
    _add_case_test(_case)


if __name__ == "__main__":
    unittest.main(verbosity=1)
