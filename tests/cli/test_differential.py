"""Differential test of swavg's ZIP reading against PyTorch's readers.

Inputs: every ZIP file of the malformed-input suite (fixtures/hostile/manifest.json), and a few
hundred deterministic mutations of checkpoints written here by torch.save (byte flips in the
headers and end records, appended end records and bytes, renamed and case-changed records,
duplicated directory entries, truncations).

For each file swavg accepts (`swavg inspect --json` exits 0), PyTorch's readers must see the same
tensors: torch.load(weights_only=True), which reads through miniz, and a reader that resolves the
records with Python's zipfile and unpickles with an allow-list (it stands in for the many tools
built on zipfile, and for torch.load where that refuses the file, e.g. for a pickle holding a
global). Same means the same names in the same order, dtypes, shapes and bytes (from
`swavg convert -o out.safetensors`). A file swavg accepts while a reader that does read it sees
other tensors fails the test; so does one that no reader reads at all, unless a CRC does not match
(swavg does not check CRCs, nor does torch.load in 1.13; the zipfile reader here skips the check
too, as it reads each record's bytes where zipfile locates them).
The readers run in child processes (a reader crashing on a mutated file is reported, not fatal).

SafetensorsPackageTest (with the real `safetensors` package, skipped without it): every file
safetensors.torch.save_file writes, over each dtype it has, shapes with 0-dim and empty tensors,
names and metadata, is read by swavg as safetensors reads it (`inspect --json`; `convert` to
safetensors and to torch.save, and `average` of a file with itself, read back by load_file,
safe_open and torch.load), or, for a dtype swavg does not have, refused with exit 3 naming the
tensor and the dtype.
"""
import concurrent.futures
import json
import os
import pickle
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

from common import FIXTURES, SWAVG
import safetensors_ref

import torch

HOSTILE = os.path.join(FIXTURES, "hostile")
SEED = 20240610
TIMEOUT = 120
HERE = os.path.dirname(os.path.abspath(__file__))

# Run by a child Python per batch: reads each file with torch.load and with zipfile + an allow-list
# unpickler and prints one JSON line per file with what each saw.
READERS = r'''
import collections, io, json, pickle, struct, sys, zipfile, zlib
import torch

STORAGES = {"FloatStorage": torch.float32, "DoubleStorage": torch.float64, "HalfStorage": torch.float16,
            "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
            "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
            "BoolStorage": torch.bool, "ComplexFloatStorage": torch.complex64,
            "ComplexDoubleStorage": torch.complex128}

class Opaque:
    def __init__(self, *a, **k):
        pass
    def __setstate__(self, state):
        pass

def rebuild(storage, offset, size, stride, *rest):
    flat, dtype = storage
    return torch.as_strided(flat, tuple(size), tuple(stride), offset) if flat.numel() else \
        torch.empty(tuple(size), dtype=dtype)

def raw(z, info, f):
    """The record's bytes where zipfile puts them, without zipfile's CRC check."""
    f.seek(info.header_offset)
    h = f.read(30)
    if len(h) != 30 or h[:4] != b"PK\x03\x04":
        raise ValueError("no local header")
    n, x = struct.unpack("<HH", h[26:30])
    if info.compress_type != 0:
        return z.read(info)
    f.seek(info.header_offset + 30 + n + x)
    data = f.read(info.compress_size)
    if len(data) != info.compress_size:
        raise ValueError("truncated record")
    return data

def zipfile_read(path):
    with open(path, "rb") as f, zipfile.ZipFile(f) as z:
        names = z.namelist()
        root = names[0].split("/", 1)[0]
        def record(name):
            return raw(z, z.getinfo(root + "/" + name), f)
        if root + "/byteorder" in names and record("byteorder") != b"little":
            raise ValueError("big-endian")
        class U(pickle.Unpickler):
            def find_class(self, module, name):
                if (module, name) == ("collections", "OrderedDict"):
                    return collections.OrderedDict
                if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                    return rebuild
                if module == "torch" and name in STORAGES:
                    return STORAGES[name]
                return Opaque
            def persistent_load(self, pid):
                _, cls, key, _, numel = pid
                data = record("data/" + key)
                dtype = cls if isinstance(cls, torch.dtype) else torch.float32
                flat = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)
                return (flat, dtype)
        return U(io.BytesIO(record("data.pkl"))).load()

class AllowListUnpickler(pickle.Unpickler):
    """For torch.load of legacy files: the callables torch.save writes, anything else opaque (what
    weights_only=True refuses swavg keeps as data, so this stands in for torch.load there)."""
    ALLOWED = {("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"),
               ("torch._utils", "_rebuild_tensor"), ("torch._utils", "_rebuild_parameter"),
               ("torch._utils", "_rebuild_parameter_with_state")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        return Opaque

class AllowList:
    Unpickler = AllowListUnpickler

    @staticmethod
    def load(f, **kw):
        return AllowListUnpickler(f, **kw).load()

def describe(obj, key):
    for part in key.split(".") if key else []:
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    out = []
    for k, v in obj.items():
        if isinstance(v, torch.Tensor):
            c = v.detach().contiguous().reshape(-1)
            if c.dtype in (torch.bool,):
                c = c.to(torch.uint8)
            if c.is_complex():
                c = torch.view_as_real(c).reshape(-1)
            if c.dtype in (torch.bfloat16, torch.float16):
                c = c.view(torch.int16)
            out.append([k, str(v.dtype).replace("torch.", ""), list(v.shape), zlib.crc32(c.numpy().tobytes())])
    return out

for line in sys.stdin:
    job = json.loads(line)
    res = {"path": job["path"]}
    safe = ("torch", lambda p: torch.load(p, weights_only=True))
    if job.get("legacy"):  # the non-ZIP torch.save format: torch.load is its reader
        readers = (safe, ("allowlist", lambda p: torch.load(p, weights_only=False, pickle_module=AllowList)))
    else:
        with zipfile.ZipFile(job["path"]) as z:
            torchscript = any("/code/" in n or n.endswith("/constants.pkl") for n in z.namelist())
        # A TorchScript archive is read by LibTorch's jit loader (the files swavg accepts run no code
        # there: it refuses classes with __setstate__); torch.save archives by both safe readers.
        readers = ((("torchscript", lambda p: torch.jit.load(p).state_dict()),) if torchscript else
                   (safe, ("zipfile", zipfile_read)))
    for reader, fn in readers:
        try:
            res[reader] = describe(fn(job["path"]), job["key"])
        except Exception as e:
            res[reader + "_error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
    print(json.dumps(res), flush=True)
'''


def is_zip(path):
    with open(path, "rb") as f:
        return f.read(4) in (b"PK\x03\x04", b"PK\x05\x06")


def swavg_view(path, workdir):
    """What swavg sees: None when it refuses the file, else the key and the tensors (name, dtype,
    shape, CRC of the bytes from convert's safetensors output)."""
    p = subprocess.run([SWAVG, "inspect", "--json", path], capture_output=True, text=True, errors="replace", timeout=TIMEOUT)
    if p.returncode != 0:
        return dict(exit=p.returncode, stderr=p.stderr)
    report = json.loads(p.stdout)
    out = os.path.join(workdir, "out.safetensors")
    c = subprocess.run([SWAVG, "convert", path, "--drop-objects", "-o", out], capture_output=True, text=True, errors="replace", timeout=TIMEOUT)
    if c.returncode != 0:
        return dict(exit=0, convert_exit=c.returncode, stderr=c.stderr, key=report["key"])
    tensors, _ = safetensors_ref.read(out)
    os.unlink(out)
    by_name = {name: data for name, _, _, data in tensors}
    seen = [[t["name"], t["dtype"], t["shape"], zlib.crc32(by_name.get(t["name"], b""))] for t in report["tensors"]]
    return dict(exit=0, key=report["key"], tensors=seen, names=sorted(by_name),
                torchscript=report.get("format") == "torchscript")


# ------------------------------------------------------------------------------------------------
# Mutations of real checkpoints

def layout(data):
    eocd = data.rfind(b"PK\x05\x06")
    count, cd_size, cd_offset = struct.unpack_from("<HII", data, eocd + 10)
    if data[eocd - 20:eocd - 16] == b"PK\x06\x07":
        end64, = struct.unpack_from("<Q", data, eocd - 12)
        count, cd_size, cd_offset = struct.unpack_from("<QQQ", data, end64 + 32)
    central, p = [], cd_offset
    for _ in range(count):
        n, x, c = struct.unpack_from("<HHH", data, p + 28)
        local, = struct.unpack_from("<I", data, p + 42)
        ln, lx = struct.unpack_from("<HH", data, local + 26)
        central.append(dict(at=p, size=46 + n + x + c, name=(p + 46, n), local=local, local_name=(local + 30, ln)))
        p += 46 + n + x + c
    return dict(eocd=eocd, cd_offset=cd_offset, cd_size=cd_size, central=central)


def mutations(base, rng):
    """(description, bytes) pairs, deterministic for a given rng state."""
    lay = layout(base)
    eocd = lay["eocd"]
    out = []

    def flip(at, mask):
        b = bytearray(base)
        b[at] ^= mask
        return bytes(b)

    regions = [("end records", eocd - 76 if eocd >= 76 else eocd, len(base)),
               ("central directory", lay["cd_offset"], eocd)]
    for c in lay["central"]:
        regions.append(("local header of %r" % base[c["name"][0]:c["name"][0] + c["name"][1]], c["local"],
                        c["local_name"][0] + c["local_name"][1] + 4))
    for what, lo, hi in regions:
        for _ in range(12):
            at = rng.randrange(lo, hi)
            mask = rng.choice([0x01, 0x20, 0x80, 0xFF])
            out.append(("flip %s byte %d ^ 0x%02x" % (what, at, mask), flip(at, mask)))
    for _ in range(10):
        at = rng.randrange(len(base))
        out.append(("flip byte %d anywhere" % at, flip(at, 1 << rng.randrange(8))))

    tail = base[eocd:]
    out.append(("end record appended", base + tail))
    out.append(("end record appended, comment claimed", base[:-2] + struct.pack("<H", 22) + tail))
    out.append(("junk appended", base + b"\0" * rng.randrange(1, 100)))
    out.append(("comment with a signature", base[:-2] + struct.pack("<H", 8) + b"PK\x05\x06xxxx"))
    out.append(("valid comment", base[:-2] + struct.pack("<H", 5) + b"hello"))
    out.append(("prefix", b"\0" * 16 + base))

    for i, c in enumerate(lay["central"]):
        cn, ln = c["name"], c["local_name"]
        name = base[cn[0]:cn[0] + cn[1]]
        for j in rng.sample(range(len(name)), min(3, len(name))):
            for how in ("central", "local", "both"):
                b = bytearray(base)
                ch = bytes([name[j]]).swapcase() if bytes([name[j]]).isalpha() else b"X"
                if how in ("central", "both"):
                    b[cn[0] + j:cn[0] + j + 1] = ch
                if how in ("local", "both") and ln[1] == cn[1]:
                    b[ln[0] + j:ln[0] + j + 1] = ch
                out.append(("rename %r byte %d in %s" % (name, j, how), bytes(b)))
        # Duplicate this central entry at the end of the directory (counts and size updated).
        entry = base[c["at"]:c["at"] + c["size"]]
        b = bytearray(base[:eocd] + base[eocd:])
        cd_end = lay["cd_offset"] + lay["cd_size"]
        b[cd_end:cd_end] = entry
        e = eocd + len(entry)
        n = len(lay["central"]) + 1
        struct.pack_into("<HHI", b, e + 8, n, n, lay["cd_size"] + len(entry))
        if bytes(b[e - 20:e - 16]) == b"PK\x06\x07":
            end64 = e - 76
            struct.pack_into("<QQQ", b, end64 + 24, n, n, lay["cd_size"] + len(entry))
            struct.pack_into("<Q", b, e - 12, end64)
        out.append(("duplicate entry %d" % i, bytes(b)))
    for _ in range(20):
        n = rng.randrange(len(base))
        out.append(("truncated to %d" % n, base[:n]))
    return out


def real_checkpoints(folder):
    g = torch.Generator().manual_seed(SEED)
    states = {
        "floats.pt": {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g)},
        "dtypes.pt": {"h": torch.randn(5, generator=g).half(), "bf": torch.randn(2, 3, generator=g).bfloat16(),
                      "d": torch.randn(2, generator=g).double(), "i": torch.arange(6).reshape(2, 3),
                      "m": torch.rand(4, generator=g) > 0.5, "u": torch.arange(7, dtype=torch.uint8)},
        "training.pt": {"model": {"w": torch.randn(2, 2, generator=g), "b": torch.zeros(2)}, "epoch": 3},
    }
    paths = []
    for name, state in states.items():
        path = os.path.join(folder, name)
        torch.save(state, path)
        paths.append(path)
    return paths


class DifferentialTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-differential-")
        files = []
        with open(os.path.join(HOSTILE, "manifest.json")) as f:
            for c in json.load(f)["cases"]:
                if c.get("special"):
                    continue
                # torch.export programs are not torch.save archives: torch.load does not read them (their
                # own reader's checks are test_update_bn_export's and the pt2 cases').
                for name in c["inputs"]:
                    path = os.path.join(HOSTILE, name)
                    if name.endswith(".pt2"):
                        continue
                    if os.path.isfile(path) and is_zip(path) and ("hostile " + name) not in {x[0] for x in files}:
                        files.append(("hostile " + name, path))
        rng = random.Random(SEED)
        cls.originals = real_checkpoints(cls.tmp)
        for base_path in cls.originals:
            with open(base_path, "rb") as f:
                base = f.read()
            files.append(("original " + os.path.basename(base_path), base_path))
            for i, (what, data) in enumerate(mutations(base, rng)):
                path = os.path.join(cls.tmp, "%s.%03d.pt" % (os.path.basename(base_path)[:-3], i))
                with open(path, "wb") as f:
                    f.write(data)
                files.append(("%s: %s" % (os.path.basename(base_path), what), path))
        cls.files = files

        def view(item):
            label, path = item
            work = tempfile.mkdtemp(dir=cls.tmp)
            return label, path, swavg_view(path, work)
        with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 1)) as pool:
            cls.views = list(pool.map(view, files))
        accepted = [(label, path, v) for label, path, v in cls.views if v["exit"] == 0 and "tensors" in v]
        cls.readers = run_readers([(path, v["key"]) for _, path, v in accepted])
        cls.accepted = accepted

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_enough_inputs(self):
        mutated = [f for f in self.files if f[0].split(":")[0].endswith(".pt") and ":" in f[0]]
        self.assertGreaterEqual(len(mutated), 300)
        self.assertGreaterEqual(len([f for f in self.files if f[0].startswith("hostile zip_")]), 20)
        # Most mutations are refused, a fair number read: both sides of the test run.
        self.assertGreaterEqual(len(self.accepted), 20)
        self.assertGreaterEqual(len([v for v in self.views if v[2]["exit"] == 3]), 200)

    def test_refusals_are_input_errors(self):
        for label, path, v in self.views:
            with self.subTest(file=label):
                self.assertIn(v["exit"], (0, 3), v.get("stderr"))
                if v["exit"] == 3:
                    self.assertIn(path, v["stderr"])
                self.assertNotIn("convert_exit", v, v.get("stderr"))

    def test_readers_see_what_swavg_sees(self):
        for label, path, v in self.accepted:
            r = self.readers[path]
            with self.subTest(file=label):
                self.assertEqual(sorted(t[0] for t in v["tensors"]), v["names"], "convert wrote other tensors")
                if "torchscript" in r or "torchscript_error" in r or ("crashed" in r and v.get("torchscript")):
                    # LibTorch's loader may refuse or crash on a crafted archive swavg reads (deep
                    # nesting); where it reads one, it must see the same tensors.
                    if "torchscript" in r:
                        self.assertEqual(r["torchscript"], v["tensors"], "torch.jit.load sees other tensors")
                    continue
                self.assertNotIn("crashed", r, r.get("crashed"))
                seen_by = [reader for reader in ("torch", "zipfile") if reader in r]
                if not seen_by:
                    # Both readers refuse: only a CRC mismatch may explain it (swavg does not check).
                    errors = " / ".join(r.get(k + "_error", "") for k in ("torch", "zipfile"))
                    self.assertRegex(errors, "CRC|crc", "no PyTorch reader reads a file swavg accepts: " + errors)
                for reader in seen_by:
                    self.assertEqual(r[reader], v["tensors"], "%s sees other tensors than swavg" % reader)

    def test_originals_are_accepted_and_read_the_same(self):
        for path in self.originals:
            v = next(v for _, p, v in self.views if p == path)
            self.assertEqual(v["exit"], 0, v.get("stderr"))
            self.assertEqual(self.readers[path].get("torch"), v["tensors"])
            self.assertEqual(self.readers[path].get("zipfile"), v["tensors"])


def run_readers(jobs):
    """Runs the readers in a child Python; restarts it after a crash, marking the file that crashed it."""
    results = {}
    pending = list(jobs)
    while pending:
        p = subprocess.run([sys.executable, "-c", READERS], input="".join(
            json.dumps({"path": path, "key": key, "legacy": not is_zip(path)}) + "\n" for path, key in pending),
            capture_output=True, text=True, timeout=600)
        done = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        for d in done:
            results[d["path"]] = d
        pending = pending[len(done):]
        if pending:
            results[pending[0][0]] = {"crashed": "reader exited %d on it: %s" % (p.returncode, p.stderr[-500:])}
            pending = pending[1:]
    return results


# ------------------------------------------------------------------------------------------------
# The legacy torch.save format (scripts/fixtures/legacy.py), against torch.load(weights_only=True)

sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from fixtures import legacy  # noqa: E402


def legacy_mutations(base, rng):
    """(description, bytes): truncations, byte flips in each pickle and count, counts off by one,
    appended bytes, the storage key list reversed."""
    lay = legacy.layout(base)
    out = []

    def flip(at, mask):
        b = bytearray(base)
        b[at] ^= mask
        return bytes(b)

    for i, (lo, hi) in enumerate(lay["pickles"]):
        for _ in range(3):
            at = rng.randrange(lo, hi)
            out.append(("flip pickle %d byte %d" % (i + 1, at), flip(at, rng.choice([0x01, 0x20, 0x80]))))
    for key, count_at, _, _ in lay["storages"][:3]:
        count, = struct.unpack_from("<q", base, count_at)
        for delta in (-1, 1):
            out.append(("count of %s %+d" % (key, delta), base[:count_at] + struct.pack("<q", count + delta) +
                        base[count_at + 8:]))
        out.append(("count of %s byte 7 flipped" % key, flip(count_at + 7, 0x80)))
    for _ in range(6):
        n = rng.randrange(len(base))
        out.append(("truncated to %d" % n, base[:n]))
    out.append(("one byte appended", base + b"\0"))
    k0, k1 = lay["pickles"][4]
    if len(lay["keys"]) > 1:
        reordered = pickle.dumps(list(reversed(lay["keys"])), protocol=2)
        out.append(("storage keys reversed", base[:k0] + reordered + base[k1:]))
    return out


class LegacyDifferentialTest(unittest.TestCase):
    """swavg's reading of legacy torch.save files, PyTorch's and mutated ones, against
    torch.load(weights_only=True): what swavg accepts, torch.load reads the same."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-legacy-diff-")
        g = torch.Generator().manual_seed(SEED)
        base = torch.randn(4, 5, generator=g)
        states = {
            "floats.pt": {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g)},
            "dtypes.pt": {"h": torch.randn(5, generator=g).half(), "bf": torch.randn(2, 3, generator=g).bfloat16(),
                          "i": torch.arange(6).reshape(2, 3), "m": torch.rand(4, generator=g) > 0.5,
                          "t": base.t(), "v": base[1:, 2:], "s": torch.tensor(2.5), "e": torch.zeros(0, 2)},
            "training.pt": {"model": {"w": torch.randn(2, 2, generator=g), "b": torch.zeros(2)}, "epoch": 3},
        }
        cls.originals = [os.path.join(FIXTURES, "legacy", n + ".pt")
                         for n in ("plain", "shared", "nested", "parameters")]
        rng = random.Random(SEED)
        files = [("fixture " + os.path.basename(p), p) for p in cls.originals]
        for name, state in states.items():
            path = os.path.join(cls.tmp, name)
            data = legacy.save_legacy(state, path)
            cls.originals.append(path)
            files.append(("original " + name, path))
            for i, (what, mutated) in enumerate(legacy_mutations(data, rng)):
                mpath = os.path.join(cls.tmp, "%s.%03d.pt" % (name[:-3], i))
                with open(mpath, "wb") as f:
                    f.write(mutated)
                files.append(("%s: %s" % (name, what), mpath))
        cls.files = files

        def view(item):
            return item[0], item[1], swavg_view(item[1], tempfile.mkdtemp(dir=cls.tmp))
        with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 1)) as pool:
            cls.views = list(pool.map(view, files))
        cls.accepted = [(label, path, v) for label, path, v in cls.views if v["exit"] == 0 and "tensors" in v]
        cls.readers = run_readers([(path, v["key"]) for _, path, v in cls.accepted])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_both_sides_run(self):
        self.assertGreaterEqual(len(self.files), 60)
        self.assertGreaterEqual(len(self.accepted), 10)
        self.assertGreaterEqual(len([v for v in self.views if v[2]["exit"] == 3]), 30)

    def test_originals_are_read_as_torch_load_reads_them(self):
        for path in self.originals:
            with self.subTest(file=path):
                v = next(v for _, p, v in self.views if p == path)
                self.assertEqual(v["exit"], 0, v.get("stderr"))
                self.assertEqual(self.readers[path].get("torch"), v["tensors"], self.readers[path])

    def test_refusals_are_input_errors_naming_the_file(self):
        for label, path, v in self.views:
            with self.subTest(file=label):
                self.assertIn(v["exit"], (0, 3), v.get("stderr"))
                if v["exit"] == 3:
                    self.assertIn(path, v["stderr"])
                self.assertNotIn("convert_exit", v, v.get("stderr"))

    def test_what_swavg_accepts_torch_load_reads_the_same(self):
        for label, path, v in self.accepted:
            with self.subTest(file=label):
                r = self.readers[path]
                self.assertEqual(sorted(t[0] for t in v["tensors"]), v["names"], "convert wrote other tensors")
                # torch.load(weights_only=True) where it reads the file; where it refuses a global
                # swavg keeps as data, torch.load through an allow-list unpickler.
                reader = "torch" if "torch" in r else "allowlist"
                self.assertIn(reader, r, "torch.load does not read a file swavg accepts: %s" % r)
                self.assertEqual(r[reader], v["tensors"], "torch.load sees other tensors than swavg")


# ------------------------------------------------------------------------------------------------
# The real safetensors package

try:
    import safetensors
    import safetensors.torch as st_torch
except ImportError:  # the suite's python may not have it
    safetensors = None

# swavg's dtypes, by the safetensors name; the others safetensors.torch writes are refused.
SWAVG_ST_DTYPES = {"BOOL", "U8", "I8", "I16", "I32", "I64", "F16", "BF16", "F32", "F64"}
SHAPES = [(), (0,), (1,), (7,), (0, 3), (3, 0, 2), (2, 3, 4), (1, 1, 1, 1, 1), (65,)]
METADATA = [None, {}, {"format": "pt"}, {"format": "np", "note": "\u00fcn\u00efc\u00f6d\u00e9 \u2603"},
            {"k" * 100: "v" * 2000, "format": "pt", "empty": ""}]


def st_values(dtype, shape, g):
    """Deterministic values of any dtype safetensors.torch writes."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 4).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


@unittest.skipIf(safetensors is None, "the safetensors package is not importable")
class SafetensorsPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-st-diff-")
        g = torch.Generator().manual_seed(SEED)
        cls.files = []  # (path, {name: tensor}, metadata)
        for st_name, dtype in sorted(st_torch._TYPES.items()):
            tensors = {"t%d_%s" % (k, "x".join(map(str, s)) or "scalar"): st_values(dtype, s, g)
                       for k, s in enumerate(SHAPES)}
            cls.files.append((cls.write("dtype_%s" % st_name, tensors, None), tensors, None))
        for k, meta in enumerate(METADATA):
            tensors = {"\u00fcn\u00ef.weight": st_values(torch.float32, (3, 2), g), "a.b.c": st_values(torch.int64, (), g),
                       "z" * 300: st_values(torch.bfloat16, (0,), g), "B": st_values(torch.float16, (4,), g)}
            cls.files.append((cls.write("metadata_%d" % k, tensors, meta), tensors, meta))
        mixed = {}
        for k in range(40):
            name = sorted(SWAVG_ST_DTYPES)[k % len(SWAVG_ST_DTYPES)]
            mixed["layer.%d.%s" % (39 - k, name)] = st_values(st_torch._TYPES[name], SHAPES[k % len(SHAPES)], g)
        cls.files.append((cls.write("mixed", mixed, {"format": "pt"}), mixed, {"format": "pt"}))
        cls.files.append((cls.write("empty", {}, None), {}, None))

    @classmethod
    def write(cls, stem, tensors, metadata):
        path = os.path.join(cls.tmp, stem + ".safetensors")
        st_torch.save_file(tensors, path, metadata=metadata)
        return path

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_swavg(self, *args):
        return subprocess.run([SWAVG, *args], capture_output=True, text=True, errors="replace", timeout=TIMEOUT)

    def assert_same(self, got, want, what):
        self.assertEqual(sorted(got), sorted(want), what)
        for k, t in want.items():
            self.assertEqual(got[k].dtype, t.dtype, (what, k))
            self.assertEqual(tuple(got[k].shape), tuple(t.shape), (what, k))
            self.assertEqual(safetensors_ref.tensor_bytes(got[k]), safetensors_ref.tensor_bytes(t), (what, k))

    def test_every_file_is_read_as_safetensors_reads_it(self):
        read = 0
        for path, tensors, meta in self.files:
            with self.subTest(file=os.path.basename(path)):
                want = st_torch.load_file(path)
                self.assert_same(want, tensors, "load_file")  # the package itself round-trips
                unsupported = sorted({str(t.dtype) for t in tensors.values()
                                      if t.dtype not in safetensors_ref.TORCH_TO_ST})
                p = self.run_swavg("inspect", "--json", path)
                if unsupported:
                    self.assertEqual(p.returncode, 3, p.stderr)
                    self.assertTrue(p.stderr.startswith("swavg: error: "), p.stderr)
                    self.assertIn(path, p.stderr)
                    continue
                self.assertEqual(p.returncode, 0, p.stderr)
                report = json.loads(p.stdout)
                with safetensors.safe_open(path, framework="pt") as f:
                    self.assertEqual(sorted(t["name"] for t in report["tensors"]), sorted(f.keys()))
                    self.assertEqual(report["metadata"], f.metadata() or {})
                for t in report["tensors"]:
                    self.assertEqual(t["dtype"], safetensors_ref.TORCH_NAMES[want[t["name"]].dtype], t["name"])
                    self.assertEqual(tuple(t["shape"]), tuple(want[t["name"]].shape), t["name"])
                out = os.path.join(self.tmp, "out.safetensors")
                for args in (["convert", path], ["average", path, path]):
                    c = self.run_swavg(*args, "-o", out, "--force")
                    if not want and args[0] == "average":  # no tensors: nothing to average
                        self.assertEqual(c.returncode, 2, c.stderr)
                        self.assertIn("nothing to write", c.stderr)
                        continue
                    self.assertEqual(c.returncode, 0, c.stderr)
                    self.assert_same(st_torch.load_file(out), want, " ".join(args[:1]))
                    with safetensors.safe_open(out, framework="pt") as f:
                        got_meta = f.metadata()
                    for k, v in (meta or {}).items():
                        self.assertEqual(got_meta.get(k), v, k)
                    self.assertEqual(got_meta.get("format"), (meta or {}).get("format", "pt"))
                pt = os.path.join(self.tmp, "out.pt")
                c = self.run_swavg("convert", path, "-o", pt, "--force")
                self.assertEqual(c.returncode, 0, c.stderr)
                self.assert_same(dict(torch.load(pt, weights_only=True)), want, "convert to torch")
                read += 1
        self.assertGreaterEqual(read, len(SWAVG_ST_DTYPES) + len(METADATA) + 2)

    def test_unsupported_dtypes_are_named(self):
        for path, tensors, _ in self.files:
            names = {str(t.dtype): k for k, t in tensors.items() if t.dtype not in safetensors_ref.TORCH_TO_ST}
            if not names:
                continue
            with self.subTest(file=os.path.basename(path)):
                p = self.run_swavg("inspect", "--json", path)
                self.assertEqual(p.returncode, 3, p.stderr)
                st_name = os.path.basename(path)[len("dtype_"):-len(".safetensors")]
                self.assertIn(st_name, p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
