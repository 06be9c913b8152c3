"""The Debian package, made by cpack from this build (one against Debian's LibTorch: label package).

Its control fields (Depends: exactly the packages that hold the libraries the binaries link, no
path), its files (both binaries, the man page, the completions), binaries without RPATH or RUNPATH,
and the extracted swavg running average, ema and update-bn (handed to the extracted swavg-torch)
with the system's libraries alone, checked against torch.
"""
import glob
import json
import os
import re
import struct
import subprocess
import shutil
import tempfile
import unittest

import numpy as np
import torch

from common import SWAVG

BUILD = os.environ.get("SWAVG_BUILD_DIR", os.path.dirname(os.path.abspath(SWAVG)))


def run(*args, **kwargs):
    p = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=600, **kwargs)
    if p.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(map(str, args)), p.returncode, p.stdout, p.stderr))
    return p


def write_safetensors(path, tensors):
    header, data = {}, b""
    for name, values in tensors.items():
        raw = np.asarray(values, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": [len(values)], "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + a:8 + n + b], dtype="<f4").reshape(h["shape"])
    return out


class DebianPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-deb-")
        run("cpack", "-G", "DEB", "--config", os.path.join(BUILD, "CPackConfig.cmake"), "-B", cls.tmp)
        cls.debs = glob.glob(os.path.join(cls.tmp, "*.deb"))
        cls.root = os.path.join(cls.tmp, "root")
        if len(cls.debs) == 1:
            run("dpkg-deb", "-x", cls.debs[0], cls.root)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def deb(self):
        self.assertEqual(len(self.debs), 1, self.debs)
        return self.debs[0]

    def test_file_name(self):
        version = re.match(r"swavg (\S+) ", run(SWAVG, "--version").stdout).group(1)
        arch = run("dpkg", "--print-architecture").stdout.strip()
        self.assertEqual(os.path.basename(self.deb()), "swavg_%s_%s.deb" % (version, arch))
        self.assertEqual(run("dpkg-deb", "-f", self.deb(), "Package").stdout.strip(), "swavg")

    def needed_packages(self):
        """The Debian packages holding the libraries the two binaries link directly."""
        packages = set()
        for binary in ("swavg", "swavg-torch"):
            dynamic = run("readelf", "-d", os.path.join(self.root, "usr/bin", binary)).stdout
            for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic):
                resolved = re.search(r"\s%s \(.*\) => (\S+)" % re.escape(lib), run("ldconfig", "-p").stdout)
                self.assertIsNotNone(resolved, lib)
                # dpkg knows each file by the path its package ships, /lib/... or /usr/lib/... (merged /usr)
                path, real = resolved.group(1), os.path.realpath(resolved.group(1))
                for candidate in (real, path, re.sub(r"^/usr/", "/", real), "/usr" + path):
                    owner = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
                    if owner.returncode == 0:
                        break
                self.assertEqual(owner.returncode, 0, "no package holds %s" % path)
                packages.add(owner.stdout.split(":")[0])
        return packages

    def test_depends_on_the_packages_of_the_linked_libraries(self):
        depends = run("dpkg-deb", "-f", self.deb(), "Depends").stdout.strip()
        self.assertNotIn("/", depends)
        self.assertNotIn("venv", depends)
        names = {re.match(r"\s*([^\s(]+)", d).group(1) for d in depends.split(",")}
        self.assertTrue(any(n.startswith("libtorch") for n in names), depends)
        self.assertEqual(names, self.needed_packages())

    def test_contents(self):
        listing = run("dpkg-deb", "-c", self.deb()).stdout
        paths = {line.split()[-1] for line in listing.splitlines()}
        for path in ("./usr/bin/swavg", "./usr/bin/swavg-torch", "./usr/share/man/man1/swavg.1.gz",
                     "./usr/share/bash-completion/completions/swavg", "./usr/share/zsh/vendor-completions/_swavg",
                     "./usr/share/fish/vendor_completions.d/swavg.fish", "./usr/share/doc/swavg/README.md"):
            self.assertIn(path, paths)
        self.assertNotIn(os.path.abspath(BUILD), listing)

    def test_no_rpath(self):
        for binary in ("swavg", "swavg-torch"):
            dynamic = run("readelf", "-d", os.path.join(self.root, "usr/bin", binary)).stdout
            self.assertNotRegex(dynamic, r"\((RPATH|RUNPATH)\)")

    def swavg(self, *args):
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        return run(os.path.join(self.root, "usr/bin/swavg"), *args, env=env, cwd=self.tmp)

    def test_average_and_ema(self):
        a, b, c = (os.path.join(self.tmp, n + ".safetensors") for n in "abc")
        write_safetensors(a, {"w": [1.0, 2.0, 3.0]})
        write_safetensors(b, {"w": [3.0, 6.0, -1.0]})
        write_safetensors(c, {"w": [5.0, 1.0, 0.5]})
        out = os.path.join(self.tmp, "avg.safetensors")
        self.swavg("average", a, b, c, "-o", out)
        x = [torch.tensor(read_safetensors(p)["w"].copy()) for p in (a, b, c)]
        avg = x[0].clone()
        for n, t in enumerate(x[1:], start=1):  # AveragedModel's default avg_fn, n averaged so far
            avg = avg + (t - avg) / (n + 1)
        self.assertTrue(torch.equal(torch.tensor(read_safetensors(out)["w"].copy()), avg))
        out = os.path.join(self.tmp, "ema.safetensors")
        self.swavg("ema", "--decay", "0.5", a, b, c, "-o", out)
        ema = x[0].clone()
        for t in x[1:]:
            ema = ema.lerp(t, 0.5)
        self.assertTrue(torch.allclose(torch.tensor(read_safetensors(out)["w"].copy()), ema, rtol=0, atol=1e-6))

    def test_update_bn_in_the_extracted_swavg_torch(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
        module = os.path.join(self.tmp, "net.ts")
        torch.jit.script(model).save(module)
        checkpoint = os.path.join(self.tmp, "swa.pt")
        torch.save(model.state_dict(), checkpoint)
        data = torch.randn(10, 4)
        np.save(os.path.join(self.tmp, "data.npy"), data.numpy())
        out = os.path.join(self.tmp, "bn.pt")
        p = self.swavg("-v", "update-bn", "--model", module, "--checkpoint", checkpoint, "--data",
                       os.path.join(self.tmp, "data.npy"), "--batch-size", "4", "-o", out)
        self.assertIn("running %s" % os.path.join(self.root, "usr/bin/swavg-torch"), p.stderr)
        loader = torch.utils.data.DataLoader(data, batch_size=4)
        torch.optim.swa_utils.update_bn(loader, model)
        got = torch.load(out)
        for name in ("1.running_mean", "1.running_var"):
            self.assertTrue(torch.allclose(got[name], model.state_dict()[name], rtol=1e-5, atol=1e-6), name)
        self.assertEqual(int(got["1.num_batches_tracked"]), int(model.state_dict()["1.num_batches_tracked"]))


if __name__ == "__main__":
    unittest.main()
