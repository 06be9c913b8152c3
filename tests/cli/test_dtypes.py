"""Every dtype torch 2.14's torch.save writes, end to end against real torch and safetensors.

- torch.save files of uint16/32/64, the float8 types, float8_e8m0fnu, float4_e2m1fn_x2, complex32
  and the bits* types (torch writes them with _rebuild_tensor_v3 over an UntypedStorage) are read,
  carried and written back as torch writes them (the same rebuild function, storage class and
  dtype global), and torch.load reads the outputs bit for bit.
- Unsigned integers: EMA bit-exact with torch's AveragedModel(get_ema_multi_avg_fn, use_buffers);
  SWA (which torch 2.14 cannot run on them: no uint16-64 subtraction) as the documented formula,
  computed here with numpy's wrapping arithmetic and torch's own float32 -> uint copy_.
- The 8-bit floats: averaged in float32 and rounded once as torch's `.to(dtype)` rounds, bit-exact
  with AveragedModel over the float32 copies of the inputs followed by `.to(dtype)`; every float32
  bit pattern class (ties, near-ties, out of range, NaN, Inf, denormals) converted as torch does.
- float4_e2m1fn_x2 and the other packed types are refused by name unless a rule takes them whole.
- safetensors: every dtype safetensors 0.8 has, read and written back under the same dtype string
  (F4 with its doubled last dimension); F6 types refused by name.
"""
import collections
import json
import os
import pickletools
import struct
import unittest
import zipfile

import numpy as np
import safetensors
import safetensors.torch
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from common import TempDirTest, same_bits, swavg

UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]
FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
          torch.float8_e8m0fnu]
PACKED = [torch.float4_e2m1fn_x2, torch.complex32, torch.bits8, torch.bits16, torch.bits1x8, torch.bits2x4,
          torch.bits4x2]
NP_UNSIGNED = {torch.uint16: np.uint16, torch.uint32: np.uint32, torch.uint64: np.uint64}


def random_bytes(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)


def random_of(dtype, n, seed):
    """n elements of dtype with random bits (float8: random finite values)."""
    if dtype in FLOAT8:
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(n, generator=g) * 8).to(dtype)
    return random_bytes(n * dtype.itemsize, seed).view(dtype)


def unsigned_extremes(dtype, n, seed):
    """Values of an unsigned dtype spread over its range, its top included (where float32 rounds
    up to 2^bits and the conversion back wraps)."""
    bits = dtype.itemsize * 8
    top = 2 ** bits - 1
    rng = np.random.default_rng(seed)
    base = rng.integers(0, top, size=n, dtype=np.uint64, endpoint=True)
    base[: 4] = [0, 1, top, top - 1]
    base[4: 8] = top - rng.integers(0, 2 ** min(bits - 1, 30), size=4, dtype=np.uint64)
    return torch.from_numpy(base.astype(NP_UNSIGNED[dtype]))


def data_pkl_globals(path):
    """The GLOBALs of a torch.save archive's data.pkl, in order."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        data = z.read(name)
    out = []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            out.append(arg)
    return out


class Buffers(torch.nn.Module):
    def __init__(self, sd):
        super().__init__()
        for k, v in sd.items():
            self.register_buffer(k, v.clone())


class DtypeTest(TempDirTest):
    def save(self, name, sd):
        path = self.path(name)
        torch.save(sd, path)
        return path

    def assert_bits(self, got, want, what):
        """The same dtype, shape and bytes (common.same_bits compares 1-byte types by value, and
        PyTorch has no comparison for the packed types)."""
        self.assertEqual(got.dtype, want.dtype, what)
        self.assertEqual(tuple(got.shape), tuple(want.shape), what)
        raw = lambda t: bytes(t.contiguous().view(-1).view(torch.uint8).numpy()) if t.numel() else b""
        if got.dtype in UNSIGNED + FLOAT8 + PACKED:
            self.assertEqual(raw(got), raw(want), "%s: not bit-exact" % what)
        else:
            self.assertTrue(same_bits(got, want), "%s: not bit-exact" % what)

    def assert_failed(self, p, code, out, *needles):
        self.assertEqual(p.returncode, code, "exit %d, expected %d; stderr:\n%s" % (p.returncode, code, p.stderr))
        self.assertFalse(os.path.exists(out), "an output was written although swavg failed")
        for n in needles:
            self.assertIn(n, p.stderr)


class TorchSaveTest(DtypeTest):
    def every_dtype(self, seed):
        sd = collections.OrderedDict()
        for i, dt in enumerate(UNSIGNED + FLOAT8 + PACKED):
            sd["t.%s" % str(dt).split(".")[1]] = random_of(dt, 24, seed * 100 + i).reshape(4, 6)
        # a strided view with an offset into a shared storage, and a parameter
        wide = random_of(torch.uint16, 40, seed + 7)
        sd["view"] = wide[3:].reshape(37, 1)[::2]
        sd["param"] = torch.nn.Parameter(random_of(torch.float8_e4m3fn, 6, seed + 8), requires_grad=False)
        return sd

    def test_read_and_written_back_as_torch_writes_them(self):
        sd = self.every_dtype(1)
        src = self.save("in.pt", sd)
        out = self.path("out.pt")
        rules = self.path("rules.json")
        with open(rules, "w") as f:
            json.dump([{"match": ".", "action": "latest"}], f)
        swavg("average", src, "--rules", rules, "-o", out)
        got = torch.load(out, weights_only=True)
        self.assertEqual(list(got.keys()), list(sd.keys()))
        for k, v in sd.items():
            self.assert_bits(got[k], v.detach(), k)
        # the same rebuild function, storage class and dtype globals as torch.save's
        want_globals = data_pkl_globals(src)
        got_globals = data_pkl_globals(out)
        self.assertIn("torch._utils _rebuild_tensor_v3", got_globals)
        self.assertIn("torch.storage UntypedStorage", got_globals)
        for g in want_globals:
            if g.startswith("torch ") or g.startswith("torch.storage ") or "_rebuild_tensor_v3" in g:
                self.assertIn(g, got_globals)

    def test_inspect_names_the_dtypes(self):
        src = self.save("in.pt", self.every_dtype(2))
        p = swavg("inspect", src)
        for dt in UNSIGNED + FLOAT8 + PACKED:
            self.assertIn(str(dt).split(".")[1], p.stdout)

    def test_unsigned_ema_is_averaged_models(self):
        for decay in (0.9, 0.999):
            sds = [collections.OrderedDict((str(dt).split(".")[1], unsigned_extremes(dt, 3000, 10 * s + i))
                                           for i, dt in enumerate(UNSIGNED)) for s in range(4)]
            paths = [self.save("u%d.pt" % i, sd) for i, sd in enumerate(sds)]
            rules = self.path("rules.json")
            with open(rules, "w") as f:
                json.dump([{"match": ".", "action": "average"}], f)
            out = self.path("ema%g.pt" % decay)
            swavg("ema", "--decay", str(decay), "--rules", rules, *paths, "-o", out)
            got = torch.load(out, weights_only=True)
            am = AveragedModel(Buffers(sds[0]), multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
            for sd in sds:
                am.update_parameters(Buffers(sd))
            want = am.module.state_dict()
            for k in want:
                self.assert_bits(got[k], want[k], "ema %g %s" % (decay, k))

    def test_unsigned_swa_is_the_documented_formula(self):
        sds = [collections.OrderedDict((str(dt).split(".")[1], unsigned_extremes(dt, 3000, 20 * s + i))
                                       for i, dt in enumerate(UNSIGNED)) for s in range(4)]
        paths = [self.save("u%d.pt" % i, sd) for i, sd in enumerate(sds)]
        rules = self.path("rules.json")
        with open(rules, "w") as f:
            json.dump([{"match": ".", "action": "average"}], f)
        out = self.path("avg.pt")
        swavg("average", "--rules", rules, *paths, "-o", out)
        got = torch.load(out, weights_only=True)
        # torch 2.14 itself refuses: no subtraction for these dtypes
        with self.assertRaises(RuntimeError):
            am = AveragedModel(Buffers(sds[0]), use_buffers=True)
            for sd in sds:
                am.update_parameters(Buffers(sd))
        for i, dt in enumerate(UNSIGNED):
            k = str(dt).split(".")[1]
            avg = sds[0][k].clone()
            for n, sd in enumerate(sds[1:], start=1):
                a = avg.numpy()
                diff = (sd[k].numpy() - a).astype(np.float32)  # wrapping in the dtype, then to float32
                total = a.astype(np.float32) + diff / np.float32(n + 1)
                avg = torch.empty_like(avg).copy_(torch.from_numpy(total))  # torch's float32 -> uint
            self.assert_bits(got[k], avg, "swa " + k)

    def float8_runs(self, dtype, seed):
        # within every 8-bit type's range (no NaN, whose sign the float32 arithmetic may not keep)
        g = torch.Generator().manual_seed(seed)
        base = torch.randn(5000, generator=g) * 10
        return [collections.OrderedDict(w=(base + torch.randn(5000, generator=g) * s).to(dtype),
                                        b=(torch.rand(7, generator=g) * 20 * (1 + s)).to(dtype))
                for s in (0.5, 2.0, 8.0, 0.1)]

    def test_float8_averages_are_float32_rounded_once(self):
        for dt in FLOAT8:
            sds = self.float8_runs(dt, 3)
            paths = [self.save("%s_%d.pt" % (dt, i), sd) for i, sd in enumerate(sds)]
            up = [collections.OrderedDict((k, torch.nn.Parameter(v.float())) for k, v in sd.items()) for sd in sds]

            class P(torch.nn.Module):
                def __init__(self, sd):
                    super().__init__()
                    for k, v in sd.items():
                        self.register_parameter(k, torch.nn.Parameter(v.detach().clone()))

            for mode in ("average", "ema"):
                out = self.path("%s_%s.pt" % (dt, mode))
                args = ["--decay", "0.9"] if mode == "ema" else []
                swavg(mode, *args, "--allow-nonfinite", *paths, "-o", out)
                got = torch.load(out, weights_only=True)
                kw = dict(multi_avg_fn=get_ema_multi_avg_fn(0.9)) if mode == "ema" else {}
                am = AveragedModel(P(up[0]), **kw)
                for sd in up:
                    am.update_parameters(P(sd))
                for k, v in am.module.state_dict().items():
                    self.assert_bits(got[k], v.to(dt), "%s %s %s" % (mode, dt, k))

    def test_float8_conversion_of_every_bit_pattern_class(self):
        hi = torch.arange(0, 1 << 16, dtype=torch.int64) << 16
        g = torch.Generator().manual_seed(4)
        rand = torch.randint(-(1 << 31), 1 << 31, (1 << 16,), dtype=torch.int64, generator=g)
        bits = torch.cat([hi, hi | 1, hi | 0xFFFF, hi | 0x8000, rand]).to(torch.int64)
        bits = torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32)
        x = bits.view(torch.float32)
        src = self.save("x.pt", collections.OrderedDict(x=x))
        for dt in FLOAT8:
            out = self.path("x_%s.pt" % dt)
            swavg("average", src, "--output-dtype", str(dt).split(".")[1], "--allow-nonfinite", "-o", out)
            got = torch.load(out, weights_only=True)["x"]
            self.assert_bits(got, x.to(dt), "float32 -> %s" % dt)
            # and back: float8 inputs written as float32
            src8 = self.save("x8_%s.pt" % dt, collections.OrderedDict(x=x.to(dt)))
            out32 = self.path("x32_%s.pt" % dt)
            swavg("average", src8, "--output-dtype", "float32", "--allow-nonfinite", "-o", out32)
            self.assert_bits(torch.load(out32, weights_only=True)["x"], x.to(dt).float(), "%s -> float32" % dt)

    def test_float8_nonfinite_is_refused_by_default(self):
        for dt in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu):
            x = torch.tensor([1.0, float("nan"), 2.0]).to(dt)
            src = self.save("nan.pt", collections.OrderedDict(w=x))
            out = self.path("nan_out.pt")
            p = swavg("average", src, src, "-o", out, check=False)
            self.assert_failed(p, 3, out, "tensor 'w' has NaN or Inf values")

    def test_float8_native_accumulator_is_refused(self):
        src = self.save("f8.pt", collections.OrderedDict(w=torch.ones(4).to(torch.float8_e5m2)))
        out = self.path("f8_out.pt")
        p = swavg("average", src, src, "--accumulate", "native", "-o", out, check=False)
        self.assert_failed(p, 2, out, "tensor 'w' is float8_e5m2", "--accumulate float32")

    def test_packed_dtypes_are_refused_by_name_unless_taken_whole(self):
        for dt in PACKED:
            name = str(dt).split(".")[1]
            a = self.save("a.pt", collections.OrderedDict(w=torch.ones(2), q=random_of(dt, 8, 1)))
            b = self.save("b.pt", collections.OrderedDict(w=torch.ones(2), q=random_of(dt, 8, 2)))
            out = self.path("p.pt")
            p = swavg("average", a, b, "-o", out, check=False)
            self.assert_failed(p, 2, out, "tensor 'q' is %s" % name, "cannot average it", '"action": "latest"')
            rules = self.path("r.json")
            with open(rules, "w") as f:
                json.dump([{"match": "^q$", "action": "average"}], f)
            p = swavg("average", a, b, "--rules", rules, "-o", out, check=False)
            self.assert_failed(p, 2, out, "tensor 'q' is %s" % name, "the rule '^q$'")
            with open(rules, "w") as f:
                json.dump([{"match": "^q$", "action": "first"}], f)
            swavg("average", a, b, "--rules", rules, "-o", out)
            got = torch.load(out, weights_only=True)
            self.assert_bits(got["q"], random_of(dt, 8, 1), name + " first")
            os.remove(out)


def st_file(path, entries, data):
    h = json.dumps(entries).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return path


def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


class SafetensorsTest(DtypeTest):
    def test_every_dtype_round_trips_under_its_name(self):
        sd = collections.OrderedDict()
        for i, dt in enumerate(UNSIGNED + FLOAT8 + [torch.float4_e2m1fn_x2, torch.complex64]):
            sd["t%d" % i] = random_of(dt, 24, 30 + i).reshape(4, 6)
        src = self.path("in.safetensors")
        safetensors.torch.save_file(sd, src)
        out = self.path("out.safetensors")
        rules = self.path("rules.json")
        with open(rules, "w") as f:
            json.dump([{"match": ".", "action": "latest"}], f)
        swavg("average", src, "--rules", rules, "-o", out)
        want_h, got_h = st_header(src), st_header(out)
        with open(src, "rb") as f:
            want = {k: v for k, v in safetensors.deserialize(f.read())}
        with open(out, "rb") as f:
            got = {k: v for k, v in safetensors.deserialize(f.read())}
        for k in sd:
            self.assertEqual(got_h[k]["dtype"], want_h[k]["dtype"], k)
            self.assertEqual(got_h[k]["shape"], want_h[k]["shape"], k)
            self.assertEqual(bytes(got[k]["data"]), bytes(want[k]["data"]), k)

    def test_float8_safetensors_average_is_torchs(self):
        for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
            g = torch.Generator().manual_seed(5)
            xs = [(torch.randn(300, generator=g) * 20).to(dt) for _ in range(3)]
            paths = []
            for i, x in enumerate(xs):
                paths.append(self.path("f%d.safetensors" % i))
                safetensors.torch.save_file({"w": x}, paths[-1])
            out = self.path("f8avg_%s.safetensors" % dt)
            swavg("average", *paths, "-o", out)
            got = safetensors.torch.load_file(out)["w"]
            avg = xs[0].float()
            for n, x in enumerate(xs[1:], start=1):
                avg = avg + (x.float() - avg) / (n + 1)
            self.assert_bits(got, avg.to(dt), str(dt))

    def test_f6_is_refused_by_name(self):
        src = st_file(self.path("f6.safetensors"), {"w": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [0, 3]}},
                      b"\0" * 3)
        with safetensors.safe_open(src, "np") as f:  # valid for the reference implementation
            self.assertEqual(f.get_slice("w").get_dtype(), "F6_E2M3")
        out = self.path("f6_out.safetensors")
        p = swavg("average", src, "-o", out, check=False)
        self.assert_failed(p, 3, out, "F6_E2M3", "has no PyTorch dtype")

    def test_f4_edges(self):
        # the last dimension holds the 4-bit values: an odd one has no float4_e2m1fn_x2 form
        ok = st_file(self.path("f4.safetensors"), {"w": {"dtype": "F4", "shape": [3, 2], "data_offsets": [0, 3]}},
                     b"\x12\x34\x56")
        out = self.path("f4_out.safetensors")
        rules = self.path("rules.json")
        with open(rules, "w") as f:
            json.dump([{"match": ".", "action": "latest"}], f)
        swavg("average", ok, "--rules", rules, "-o", out)
        self.assertEqual(st_header(out)["w"]["shape"], [3, 2])
        odd = st_file(self.path("f4odd.safetensors"), {"w": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]}},
                      b"\x12\x34\x56")
        with safetensors.safe_open(odd, "np") as f:  # valid for the reference implementation
            self.assertEqual(f.get_slice("w").get_dtype(), "F4")
        p = swavg("average", odd, "--rules", rules, "-o", self.path("f4odd_out.safetensors"), check=False)
        self.assert_failed(p, 3, self.path("f4odd_out.safetensors"), "F4 shape [2, 3] has an odd last dimension")
        split = st_file(self.path("f4split.safetensors"),
                        {"w": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"\x12\x34")
        p = swavg("average", split, "-o", self.path("f4split_out.safetensors"), check=False)
        self.assert_failed(p, 3, self.path("f4split_out.safetensors"), "does not end on a byte boundary")


if __name__ == "__main__":
    unittest.main()
