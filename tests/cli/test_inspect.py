"""swavg inspect agrees with PyTorch on every name, dtype and shape; CLI basics and exit codes; names
from the file are printed escaped (no control characters, direction overrides or invalid UTF-8
reach the terminal or the JSON); amplifying pickles stay within memory and time bounds."""
import collections
import argparse
import io
import json
import os
import re
import shutil
import subprocess
import unittest
import zipfile

import torch

from common import FIXTURES, SWAVG, TempDirTest, fixture, same_bits, swavg

DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
          torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
          torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
          torch.complex64: "complex64", torch.complex128: "complex128"}


def inspect_json(*args):
    return json.loads(swavg("inspect", "--json", *args).stdout)


class InspectTest(unittest.TestCase):
    def assert_matches(self, report, state):
        expected = [(k, DTYPES[v.dtype], list(v.shape), v.numel() * v.element_size())
                    for k, v in state.items() if isinstance(v, torch.Tensor)]
        found = [(t["name"], t["dtype"], t["shape"], t["bytes"]) for t in report["tensors"]]
        self.assertEqual(found, expected)
        self.assertEqual(report["totals"]["tensors"], len(expected))
        self.assertEqual(report["totals"]["bytes"], sum(e[3] for e in expected))

    def test_state_dicts(self):
        for name in ["resnet18.pt", "dtypes.pt", "crafted/archive_v2.pt"]:
            with self.subTest(name=name):
                report = inspect_json(fixture(name))
                self.assertEqual(report["format"], "torch")
                self.assertEqual(report["key"], "")
                self.assert_matches(report, torch.load(fixture(name), weights_only=False))

    def test_training_checkpoint(self):
        report = inspect_json(fixture("training.pt"))
        ckpt = torch.load(fixture("training.pt"), weights_only=False)
        self.assertEqual(report["key"], "model")
        self.assert_matches(report, ckpt["model"])
        opaque = {o["path"]: o["type"] for o in report["opaque"]}
        self.assertEqual(opaque.get("args"), "argparse.Namespace")
        self.assertTrue(opaque.get("best", "").startswith("numpy"), opaque)
        text = swavg("inspect", fixture("training.pt"))
        self.assertIn("took the state dict at 'model'", text.stderr)
        self.assertIn("argparse.Namespace", text.stdout)

    def test_key_option(self):
        report = inspect_json(fixture("training.pt"), "--key", "model")
        self.assert_matches(report, torch.load(fixture("training.pt"), weights_only=False)["model"])

    def test_torchscript(self):
        report = inspect_json(fixture("scripted.ts"))
        self.assertEqual(report["format"], "torchscript")
        m = torch.jit.load(fixture("scripted.ts"))
        self.assert_matches(report, m.state_dict())
        params = {n for n, _ in m.named_parameters()}
        for t in report["tensors"]:
            self.assertEqual(t["kind"], "parameter" if t["name"] in params else "buffer", t["name"])

    def test_strip_prefix(self):
        report = inspect_json(fixture("prefixed.pt"), "--strip-prefix", "module.", "--strip-prefix", "_orig_mod.")
        state = torch.load(fixture("prefixed.pt"), weights_only=False)
        self.assertEqual([t["name"] for t in report["tensors"]],
                         [k[len("module._orig_mod."):] for k in state])


class CliBasicsTest(unittest.TestCase):
    def test_help_and_version(self):
        self.assertIn("inspect", swavg("--help").stdout)
        version = swavg("--version").stdout
        # The tests run with the Python whose torch is the LibTorch swavg was built against: the
        # wheel's (CUDA compiled in) or Debian's (CPU only).
        self.assertIn("LibTorch %s," % re.match(r"\d+\.\d+\.\d+", torch.__version__).group(0), version)
        self.assertIn("CUDA %s" % torch.version.cuda if torch.version.cuda else "CPU only", version)
        for cmd in ["inspect", "convert"]:
            self.assertIn("Examples", swavg(cmd, "--help").stdout)

    def test_exit_codes(self):
        cases = [
            (["inspect", fixture("missing.pt")], 5, "missing.pt"),
            (["inspect", fixture("crafted/storage_short.pt")], 3, "storage_short.pt"),
            (["inspect", fixture("hostile/legacy_bad_magic.pt")], 3, "magic number"),
            (["inspect", fixture("training.pt"), "--key", "nope"], 2, "no entry 'nope'"),
            (["inspect"], 2, "input"),
            (["frobnicate"], 2, ""),
        ]
        for args, code, message in cases:
            with self.subTest(args=args):
                p = swavg(*args, check=False)
                self.assertEqual(p.returncode, code, p.stderr)
                self.assertIn(message, p.stderr)
                self.assertEqual(p.stdout, "")

    def test_quiet(self):
        p = swavg("-q", "inspect", fixture("training.pt"))
        self.assertEqual(p.stderr, "")
        p = swavg("inspect", fixture("training.pt"), "-q")
        self.assertEqual(p.stderr, "")


def printable(s):
    """What swavg prints for a string from a file (src/util/printable.h), from its UTF-8 bytes."""
    data = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s
    out, i = [], 0
    while i < len(data):
        for n in (1, 2, 3, 4):
            try:
                ch = data[i:i + n].decode("utf-8")
                break
            except UnicodeDecodeError:
                ch = None
        if ch is None or len(ch) != 1:
            out.append("\\x%02x" % data[i])
            i += 1
            continue
        cp = ord(ch)
        i += len(ch.encode("utf-8"))
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif cp < 0x20 or cp == 0x7F:
            out.append("\\x%02x" % cp)
        elif 0x80 <= cp <= 0x9F or cp in (0x061C, 0x200E, 0x200F) or 0x2028 <= cp <= 0x202E or 0x2066 <= cp <= 0x2069:
            out.append("\\u%04x" % cp)
        else:
            out.append(ch)
    return "".join(out)


# Bytes that must never reach the output raw: C0 controls but the line break, DEL, C1 controls,
# direction overrides, marks and isolates, and the line/paragraph separators.
FORBIDDEN = [bytes([c]) for c in range(0x20) if c != 0x0A] + [b"\x7f"] + \
            [chr(c).encode() for c in list(range(0x80, 0xA0)) + [0x061C, 0x200E, 0x200F] +
             list(range(0x2028, 0x202F)) + list(range(0x2066, 0x206A))]

HOSTILE_NAMES = ["w\x1b[2J\x1b[Hhidden", "carriage\rreturn", "\u202eevil.txt", "lone\ud800surrogate",
                 "tab\tand\nnewline", "c1\x85\x9b", "back\\slash", "\u2066isolate\u2069", "plain.weight"]


class HostileNamesTest(TempDirTest):
    """Tensor names, keys, values and opaque class names with escape sequences, CR, bidi
    overrides and invalid UTF-8, shown by inspect (text and --json) and quoted in errors."""

    def make(self):
        torch.manual_seed(3)
        state = collections.OrderedDict((n, torch.randn(2)) for n in HOSTILE_NAMES)
        state["note\x1b]0;title\x07"] = "value\x1b[31mred\u202e"
        state["args"] = argparse.Namespace(lr=0.1)
        buf = io.BytesIO()
        torch.save(state, buf)
        path = self.path("hostile_names.pt")
        # The opaque class's name, spoofed: argparse.Na<U+202E><U+0085>mespace (the pickler cannot write it).
        with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(path, "w") as dst:
            for info in src.infolist():
                data = src.read(info.filename)
                if info.filename.endswith("/data.pkl"):
                    assert data.count(b"cargparse\nNamespace\n") == 1
                    data = data.replace(b"cargparse\nNamespace\n", b"cargparse\nNa\xe2\x80\xae\xc2\x85mespace\n")
                dst.writestr(info.filename, data, compress_type=zipfile.ZIP_STORED)
        return path, state

    def assert_clean(self, data, what):
        data.decode("utf-8")  # valid UTF-8
        for b in FORBIDDEN:
            self.assertNotIn(b, data, "%s holds %r raw" % (what, b))

    def run_swavg(self, *args):
        return subprocess.run([SWAVG, *args], capture_output=True, timeout=600)

    def test_text(self):
        path, state = self.make()
        p = self.run_swavg("inspect", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assert_clean(p.stdout, "inspect's output")
        out = p.stdout.decode()
        for name in HOSTILE_NAMES:
            self.assertIn("  " + printable(name) + " ", out)
        self.assertIn(printable("note\x1b]0;title\x07") + ": str = " + printable("value\x1b[31mred\u202e"), out)
        self.assertIn("args: argparse.Na\\u202e\\u0085mespace", out)
        self.assertIn("lone\\xed\\xa0\\x80surrogate", out)

    def test_json(self):
        path, state = self.make()
        p = self.run_swavg("inspect", "--json", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assert_clean(p.stdout, "inspect --json's output")
        doc = json.loads(p.stdout.decode("utf-8"))
        self.assertEqual([t["name"] for t in doc["tensors"]], [printable(n) for n in HOSTILE_NAMES])
        others = {o["path"]: (o["type"], o["value"]) for o in doc["others"]}
        self.assertEqual(others[printable("note\x1b]0;title\x07")], ("str", printable("value\x1b[31mred\u202e")))
        opaque = {o["path"]: o["type"] for o in doc["opaque"]}
        self.assertEqual(opaque, {"args": "argparse.Na\\u202e\\u0085mespace"})
        self.assertEqual(json.loads(json.dumps(doc)), doc)  # the escaped form round-trips

    def test_errors_escape_names(self):
        path, _ = self.make()
        plain = self.path("plain.pt")
        torch.save(collections.OrderedDict(only=torch.zeros(2)), plain)
        p = self.run_swavg("average", path, plain, "-o", self.path("out.pt"))
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assert_clean(p.stderr, "the error message")
        self.assertIn(printable(HOSTILE_NAMES[0]).encode(), p.stderr)


class SubclassTensor(torch.Tensor):
    """torch.save writes it as torch._tensor._rebuild_from_type_v2(_rebuild_tensor_v2, this class, ...)."""


class SubclassParameter(torch.nn.Parameter):
    """torch.save writes it as a Parameter (_rebuild_parameter)."""


class SubclassTest(TempDirTest):
    """Tensor subclasses are read as the tensors they hold, by inspect and convert."""

    def make(self):
        torch.manual_seed(11)
        state = collections.OrderedDict()
        state["sub"] = torch.randn(3, 4).as_subclass(SubclassTensor)
        noted = torch.randn(5, dtype=torch.float64).as_subclass(SubclassTensor)
        noted.note = "an attribute, saved as the rebuild's state"
        state["noted"] = noted
        state["sub_param"] = SubclassParameter(torch.randn(2))
        state["plain"] = torch.arange(4)
        path = self.path("subclass.pt")
        torch.save(state, path)
        return path, state

    def test_inspect(self):
        path, state = self.make()
        report = inspect_json(path)
        self.assertEqual(report["opaque"], [])
        self.assertEqual(report["others"], [])
        InspectTest.assert_matches(self, report, state)
        kinds = {t["name"]: t["kind"] for t in report["tensors"]}
        self.assertEqual(kinds["sub_param"], "parameter")

    def test_convert(self):
        path, state = self.make()
        swavg("convert", path, "-o", self.path("out.pt"))
        got = torch.load(self.path("out.pt"))
        self.assertEqual(list(got), list(state))
        for k, v in state.items():
            self.assertIs(type(got[k]), torch.Tensor, k)
            self.assertTrue(same_bits(got[k], v.as_subclass(torch.Tensor).detach()), k)
        swavg("convert", path, "-o", self.path("out.safetensors"))
        import safetensors_ref
        tensors, _ = safetensors_ref.read(self.path("out.safetensors"))
        self.assertEqual({name: (shape, data) for name, _, shape, data in tensors},
                         {k: (list(v.shape), v.detach().as_subclass(torch.Tensor).numpy().tobytes())
                          for k, v in state.items()})


def _manifest():
    with open(os.path.join(FIXTURES, "hostile", "manifest.json")) as f:
        return json.load(f)["cases"]


# Runs argv[2:] under a 2 GiB address-space limit and a CPU-time limit (argv[1] + 5 s: the kernel stops
# a runaway with SIGXCPU, however busy the machine); prints its exit code, peak RSS (KB, from wait4)
# and CPU seconds (user + system), or "timeout" when it ran past the wall-clock guard, which only
# catches a run that blocks without using CPU and is far above any busy machine's slowness.
_BOUNDED_RUN = """
import os, resource, subprocess, sys
seconds = int(sys.argv[1])
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds + 5, seconds + 5))
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit)
try:
    _, err = p.communicate(timeout=600)
except subprocess.TimeoutExpired:
    p.kill()
    p.communicate()
    print("timeout")
    sys.exit(0)
# communicate() has reaped the child: its own peak RSS and CPU time are this process's RUSAGE_CHILDREN.
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(p.returncode, usage.ru_maxrss, usage.ru_utime + usage.ru_stime)
sys.stderr.write(err.decode("utf-8", "replace"))
"""


class AmplificationTest(unittest.TestCase):
    """The amplifying pickles of scripts/fixtures/hostile_pickle.py: swavg inspect ends with the
    expected exit code, within a peak RSS of a base plus a multiple of data.pkl's size and within a
    few seconds of CPU time (not wall time: a busy machine must not fail it), under a 2 GiB
    address-space limit that keeps a regression from taking the machine."""

    def test_cases_are_bounded(self):
        cases = [c for c in _manifest() if c.get("amplification")]
        self.assertGreaterEqual(len(cases), 8)
        for case in cases:
            a = case["amplification"]
            path = os.path.join(FIXTURES, "hostile", case["inputs"][0])
            with self.subTest(case=case["name"]):
                r = subprocess.run(["/usr/bin/python3", "-c", _BOUNDED_RUN, str(a["seconds"]), SWAVG, "inspect",
                                    "--json", path], capture_output=True, text=True, timeout=700)
                if r.stdout.startswith("timeout"):
                    self.fail("%s: swavg inspect blocked for 600 s" % case["name"])
                rc, rss_kb, seconds = r.stdout.split()
                detail = "%s: exit %s, peak RSS %s KB, %.2f CPU s; stderr: %s" % (
                    case["name"], rc, rss_kb, float(seconds), r.stderr[-500:])
                self.assertLess(float(seconds), a["seconds"], detail)
                self.assertEqual(int(rc), case["exit"], detail)
                for needle in case["message"]:
                    self.assertIn(needle, r.stderr, detail)
                bound = a["rss_base"] + a["rss_per_byte"] * a["pickle_bytes"]
                self.assertLess(int(rss_kb) * 1024, bound, detail)



class InputKindTest(TempDirTest):
    """inspect (text and --json) and --dry-run (text and --json) name the input's kind, one row of the
    input table each (formats/io/input_kinds.h): a DCP folder is "dcp", a ZeRO checkpoint "deepspeed", a
    Hugging Face folder "hf", a legacy torch.save file "torch-legacy"; a Megatron-core folder is refused,
    with or without common.pt (megatron-core writes none since Megatron-LM#5160)."""
    KINDS = [("torch", "dtypes.pt"), ("torch-legacy", "legacy/plain.pt"), ("torchscript", "scripted.ts"),
             ("safetensors", "st_mixed.safetensors"), ("hf", "hf_stack/llama/st/run_0"), ("dcp", "dcp/flat_0"),
             ("deepspeed", "deepspeed/zero2_w1")]

    def test_inspect_and_dry_run_name_the_kind(self):
        for kind, name in self.KINDS:
            with self.subTest(kind=kind):
                path = fixture(name)
                self.assertEqual(inspect_json(path)["format"], kind)
                self.assertTrue(swavg("inspect", path).stdout.startswith("%s: %s, state dict at " % (path, kind)))
                out = self.path("out.pt")
                plan = json.loads(swavg("convert", path, "-o", out, "--dry-run", "--json").stdout)
                self.assertEqual(plan["inputs"], [{"path": path, "key": plan["inputs"][0]["key"], "format": kind}])
                text = swavg("convert", path, "-o", out, "--dry-run").stdout
                self.assertIn("%s  (%s, state dict at" % (path, kind), text)
                self.assertFalse(os.path.exists(out))

    def megatron_folders(self):
        legacy = fixture("hostile/megatron_torch_dist/iter_0000003")
        current = self.path("iter_0000007")  # as megatron-core writes it today: no common.pt
        shutil.copytree(fixture("dcp/flat_0"), current)
        with open(os.path.join(current, "metadata.json"), "w") as f:
            json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1}, f)
        return [(legacy, "common.pt"), (current, "the common state among its DCP items")]

    def test_megatron_refused(self):
        for path, common in self.megatron_folders():
            for args in (["inspect", "--json", path], ["inspect", path],
                         ["convert", path, "-o", self.path("o.pt"), "--dry-run", "--json"],
                         ["convert", path, "-o", self.path("o.pt"), "--dry-run"]):
                with self.subTest(path=path, args=args):
                    p = swavg(*args, check=False)
                    self.assertEqual(p.returncode, 3, p.stderr)
                    self.assertEqual(p.stdout, "")
                    self.assertIn("swavg: error: %s: a Megatron-core distributed checkpoint (metadata.json: "
                                  "sharded_backend 'torch_dist', %s)" % (path, common), p.stderr)
                    self.assertIn("--ckpt-convert-format torch", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
