#!/usr/bin/env python3
"""A small safetensors writer and reader that follow the format spec, for tests.

The `safetensors` package is not available to every Python that runs the suite (Debian's torch
1.13 has none), so this module stands in for it (test_differential.py checks swavg against the real
package where it is importable): write() lays a
file out as the reference implementation does (8-byte little-endian header length, UTF-8 JSON
header padded with spaces to a multiple of 8 bytes, then the tensor bytes), and read() validates as
the reference's SafeTensors.deserialize does, and a little more strictly (duplicate keys, unknown
entry keys).

Usage:
  safetensors_ref.py check FILE MANIFEST   validate FILE and compare it with a fixture manifest
  safetensors_ref.py dump FILE             print the header and what read() returns
"""
import hashlib
import json
import struct
import sys

import torch

MAX_HEADER = 100_000_000

# safetensors dtype -> (itemsize, torch dtype or None)
DTYPES = {
    "BOOL": (1, torch.bool), "U8": (1, torch.uint8), "I8": (1, torch.int8),
    "I16": (2, torch.int16), "U16": (2, getattr(torch, "uint16", None)), "F16": (2, torch.float16),
    "BF16": (2, torch.bfloat16), "I32": (4, torch.int32), "U32": (4, getattr(torch, "uint32", None)),
    "F32": (4, torch.float32), "F64": (8, torch.float64), "I64": (8, torch.int64),
    "U64": (8, getattr(torch, "uint64", None)), "F8_E4M3": (1, getattr(torch, "float8_e4m3fn", None)),
    "F8_E5M2": (1, getattr(torch, "float8_e5m2", None)),
    "F8_E4M3FNUZ": (1, getattr(torch, "float8_e4m3fnuz", None)),
    "F8_E5M2FNUZ": (1, getattr(torch, "float8_e5m2fnuz", None)),
    "F8_E8M0": (1, getattr(torch, "float8_e8m0fnu", None)), "C64": (8, torch.complex64),
}
TORCH_TO_ST = {t: name for name, (_, t) in DTYPES.items() if t is not None}
# The dtypes numpy holds as themselves (tensor_bytes views the others as raw bytes).
_NUMPY_NAMES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
    torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}
# torch dtype -> its name, as swavg names it (torch 2.14's names; the lean build's torch 1.13 lacks some).
TORCH_NAMES = dict(_NUMPY_NAMES)
for _t in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
           "float8_e8m0fnu", "complex64"):
    if hasattr(torch, _t):
        TORCH_NAMES[getattr(torch, _t)] = _t


class SafetensorsError(Exception):
    pass


def tensor_bytes(t):
    c = t.detach().contiguous().reshape(-1)
    if c.dtype == torch.bool:
        c = c.to(torch.uint8)
    if c.dtype in (torch.bfloat16, torch.float16):
        c = c.view(torch.int16)
    if c.dtype not in _NUMPY_NAMES and not c.is_complex():
        # float8, uint16/32/64 (torch 2.x): dtypes numpy lacks, as their raw bytes
        c = c.view(torch.uint8)
    return c.numpy().tobytes()


def write(path, tensors, metadata=None, header_order=None):
    """Writes `tensors` (name -> torch.Tensor, data in this order). `header_order` optionally lists
    the names in the order their JSON entries appear, to make files whose header order differs from
    their data order."""
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    entries = {}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        data = tensor_bytes(t)
        entries[name] = {"dtype": TORCH_TO_ST[t.dtype], "shape": list(t.shape),
                         "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    for name in (header_order or list(tensors)):
        header[name] = entries[name]
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def _no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise SafetensorsError("duplicate key %r" % k)
        seen[k] = v
    return seen


def _reject_constant(name):
    raise SafetensorsError("invalid JSON constant %s" % name)


def _uint(x):
    return type(x) is int and 0 <= x < 2**64


def read(path):
    """Returns ([(name, st_dtype, shape, bytes)] in order of data offset, metadata dict)."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise SafetensorsError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > MAX_HEADER:
        raise SafetensorsError("header too large: %d" % n)
    if 8 + n > len(buf):
        raise SafetensorsError("header length %d past the end of the file" % n)
    try:
        text = buf[8:8 + n].decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        raise SafetensorsError("header is not UTF-8: %s" % e)
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise SafetensorsError("header is not JSON: %s" % e)
    if not isinstance(header, dict):
        raise SafetensorsError("header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError("__metadata__ is not an object of strings")
    infos = []
    for name, info in header.items():
        if not name or "\0" in name:
            raise SafetensorsError("bad tensor name %r" % name)
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError("%s: entry must hold exactly dtype, shape, data_offsets" % name)
        dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dt not in DTYPES:
            raise SafetensorsError("%s: unknown dtype %r" % (name, dt))
        if not isinstance(shape, list) or not all(_uint(d) for d in shape):
            raise SafetensorsError("%s: bad shape %r" % (name, shape))
        if not isinstance(offs, list) or len(offs) != 2 or not all(_uint(o) for o in offs):
            raise SafetensorsError("%s: bad data_offsets %r" % (name, offs))
        infos.append((tuple(offs), name, dt, shape))
    infos.sort(key=lambda i: i[0])
    data = buf[8 + n:]
    start = 0
    out = []
    for (b, e), name, dt, shape in infos:
        if b != start or e < b:
            raise SafetensorsError("%s: invalid offsets [%d, %d], expected to begin at %d" % (name, b, e, start))
        numel = 1
        for d in shape:
            numel *= d
        if numel * DTYPES[dt][0] != e - b:
            raise SafetensorsError("%s: shape %r x %s does not span [%d, %d]" % (name, shape, dt, b, e))
        start = e
        out.append((name, dt, list(shape), data[b:e]))
    if start != len(data):
        raise SafetensorsError("tensors end at %d but the data section has %d bytes" % (start, len(data)))
    return out, metadata


def check(path, manifest_path):
    """Validates `path` and compares it with a manifest written by scripts/fixtures (names,
    dtypes, shapes and sha256 in data order; metadata when the manifest has it)."""
    tensors, metadata = read(path)
    with open(manifest_path) as f:
        manifest = json.load(f)
    expected = manifest["tensors"]
    got_names = [t[0] for t in tensors]
    want_names = [t["name"] for t in expected]
    if got_names != want_names:
        raise SafetensorsError("names %r, expected %r" % (got_names, want_names))
    for (name, dt, shape, data), want in zip(tensors, expected):
        torch_dtype = DTYPES[dt][1]
        got_dtype = TORCH_NAMES.get(torch_dtype, dt)
        if got_dtype != want["dtype"]:
            raise SafetensorsError("%s: dtype %s, expected %s" % (name, got_dtype, want["dtype"]))
        if shape != want["shape"]:
            raise SafetensorsError("%s: shape %r, expected %r" % (name, shape, want["shape"]))
        digest = hashlib.sha256(data).hexdigest()
        if digest != want["sha256"]:
            raise SafetensorsError("%s: sha256 %s, expected %s" % (name, digest, want["sha256"]))
    if "metadata" in manifest and metadata != manifest["metadata"]:
        raise SafetensorsError("metadata %r, expected %r" % (metadata, manifest["metadata"]))


def main(argv):
    if len(argv) == 4 and argv[1] == "check":
        try:
            check(argv[2], argv[3])
        except SafetensorsError as e:
            print("%s: %s" % (argv[2], e), file=sys.stderr)
            return 1
        return 0
    if len(argv) == 3 and argv[1] == "dump":
        tensors, metadata = read(argv[2])
        print("metadata:", metadata)
        for name, dt, shape, data in tensors:
            print(name, dt, shape, len(data), hashlib.sha256(data).hexdigest())
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
