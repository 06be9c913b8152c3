"""The container images (label image): scripts/build_image.sh builds them with podman from a
debian:12 base it makes with debootstrap; inside a container (no network), swavg average, swavg ema
and swavg update-bn (handed to the image's swavg-torch) run on small checkpoints made here, checked
against torch.optim.swa_utils.

Opt-in (SWAVG_IMAGE_TEST=1; otherwise exit 77, skipped): it installs podman, buildah and debootstrap
with apt when missing and debootstraps once (cached in /var/tmp/swavg-image).
- lean (Dockerfile): the .deb of a build against Debian's LibTorch, with libtorch1.13 from the Debian
  mirror (about 1 GB). The .deb comes from cpack in SWAVG_BUILD_DIR when that folder is a build
  against Debian's LibTorch (as package:test_package makes it), else scripts/build_deb.sh builds
  it in build-deb/.
- cuda (Dockerfile.cuda), with SWAVG_IMAGE_TEST_CUDA=1 as well: the binaries of SWAVG_BUILD_DIR when
  it is a build against a PyTorch wheel's LibTorch (else of build/), with the wheel's libraries
  (about 4.5 GB), run on the CPU.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

if __name__ == "__main__" and os.environ.get("SWAVG_IMAGE_TEST") != "1":
    print("skipped: set SWAVG_IMAGE_TEST=1 to build the container image and run swavg in it", file=sys.stderr)
    sys.exit(77)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.optim.swa_utils import AveragedModel, update_bn  # noqa: E402

try:
    from torch.optim.swa_utils import get_ema_multi_avg_fn
    EMA_075 = dict(multi_avg_fn=get_ema_multi_avg_fn(0.75))
except ImportError:  # torch 1.13 (the lean build's tests): the lerp that update runs in 2.x
    EMA_075 = dict(avg_fn=lambda avg, x, n: avg.lerp(x, 1 - 0.75))

from common import same_bits  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BASE = "localhost/debian:12"
DEBIAN_TORCH_DIR = "/usr/lib/%s/cmake/Torch"


def run(*args, **kwargs):
    p = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=1800, **kwargs)
    if p.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(map(str, args)), p.returncode, p.stdout, p.stderr))
    return p


def debian_build(build):
    """True when `build` is a CMake build folder against Debian's LibTorch."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            cache = f.read()
    except OSError:
        return False
    m = re.search(r"^Torch_DIR:[A-Z]*=(.*)$", cache, re.M)
    arch = run("gcc", "-dumpmachine").stdout.strip()
    return m is not None and m.group(1) == DEBIAN_TORCH_DIR % arch


def model():
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


class LeanImage(unittest.TestCase):
    KIND = "lean"
    SWAVG_TORCH = "/usr/bin/swavg-torch"
    LIBTORCH = r"LibTorch 1\.13"

    @classmethod
    def image_env(cls, env):
        build = os.environ.get("SWAVG_BUILD_DIR")
        if build and debian_build(build):
            run("cpack", "-G", "DEB", "--config", os.path.join(build, "CPackConfig.cmake"), "-B", cls.tmp)
            debs = [f for f in os.listdir(cls.tmp) if f.endswith(".deb")]
            assert len(debs) == 1, debs
            env["DEB"] = os.path.join(cls.tmp, debs[0])

    @classmethod
    def setUpClass(cls):
        cls.image = "localhost/swavg:" + cls.KIND
        cls.tmp = tempfile.mkdtemp(prefix="swavg-image-")
        env = dict(os.environ)
        cls.image_env(env)
        p = run(os.path.join(ROOT, "scripts", "build_image.sh"), cls.KIND, env=env, cwd=ROOT)
        opts = re.search(r"^PODMAN_RUN_OPTS=(.*)$", p.stdout, re.M)
        assert opts is not None, p.stdout
        cls.run_opts = opts.group(1).split()
        cls.data = os.path.join(cls.tmp, "data")
        os.mkdir(cls.data)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.data, name)

    def swavg(self, *args):
        """swavg in a container of the image, with no network, this test's folder as /data."""
        return run("podman", "run", "--rm", "--network", "none", *self.run_opts, "-v", "%s:/data" % self.data,
                   "-w", "/data", self.image, *args)

    def checkpoints(self, count):
        """`count` training checkpoints of model(): distinct weights and BatchNorm statistics."""
        torch.manual_seed(0)
        net, paths, states = model(), [], []
        for i in range(count):
            with torch.no_grad():
                for p in net.parameters():
                    p.add_(torch.randn_like(p) * 0.1)
            net.train()
            for _ in range(i + 1):
                net(torch.randn(8, 6) * (i + 1))
            states.append({k: v.clone() for k, v in net.state_dict().items()})
            paths.append("ckpt_%d.pt" % i)
            torch.save(net.state_dict(), self.path(paths[-1]))
        return paths, states

    def reference(self, states, **kwargs):
        net = model()
        avg = AveragedModel(net, **kwargs)
        for s in states:
            net.load_state_dict(s)
            avg.update_parameters(net)
        return avg.module.state_dict()

    def assert_bits(self, got, want, keys):
        self.assertEqual(list(got), list(keys))
        for k in keys:
            self.assertTrue(same_bits(got[k], want[k]), "%s: %s != %s" % (k, got[k], want[k]))

    def test_image_is_built_on_the_debootstrapped_base(self):
        layers = {}
        for image in (BASE, self.image):
            out = run("podman", "image", "inspect", "--format", "{{range .RootFS.Layers}}{{.}} {{end}}", image)
            layers[image] = out.stdout.split()
        self.assertEqual(layers[self.image][:len(layers[BASE])], layers[BASE])
        self.assertGreater(len(layers[self.image]), len(layers[BASE]))
        self.assertRegex(self.swavg("--version").stdout, r"^swavg \S+ \(%s" % self.LIBTORCH)

    def test_average(self):
        paths, states = self.checkpoints(4)
        self.swavg("average", *paths, "-o", "avg.pt", "--force")
        got = torch.load(self.path("avg.pt"), weights_only=True)
        want = self.reference(states, use_buffers=False)
        params = {k for k, _ in model().named_parameters()}
        self.assert_bits(got, {k: want[k] if k in params else states[-1][k] for k in states[0]}, states[0].keys())
        self.swavg("average", *paths, "--buffers", "average", "-o", "avg_buffers.pt", "--force")
        got = torch.load(self.path("avg_buffers.pt"), weights_only=True)
        self.assert_bits(got, self.reference(states, use_buffers=True), states[0].keys())
        self.assertFalse(same_bits(got["1.running_var"], states[-1]["1.running_var"]))

    def test_ema(self):
        paths, states = self.checkpoints(5)
        self.swavg("ema", "--decay", "0.75", *paths, "-o", "ema.pt", "--force")
        got = torch.load(self.path("ema.pt"), weights_only=True)
        want = self.reference(states, use_buffers=False, **EMA_075)
        params = {k for k, _ in model().named_parameters()}
        # the buffers are the last checkpoint's (--buffers latest, AveragedModel's use_buffers=False)
        self.assert_bits(got, {k: want[k] if k in params else states[-1][k] for k in states[0]}, states[0].keys())
        plain = self.reference(states, use_buffers=False)
        self.assertFalse(same_bits(got["0.weight"], plain["0.weight"]))

    def test_update_bn_in_swavg_torch(self):
        _, states = self.checkpoints(2)
        net = model()
        net.load_state_dict(states[-1])
        torch.jit.script(net).save(self.path("net.ts"))
        torch.save(net.state_dict(), self.path("swa.pt"))
        torch.manual_seed(1)
        data = torch.randn(20, 6) * 3 + 1
        np.save(self.path("data.npy"), data.numpy())
        p = self.swavg("-v", "update-bn", "--model", "net.ts", "--checkpoint", "swa.pt", "--data", "data.npy",
                       "--batch-size", "8", "-o", "bn.pt", "--force")
        self.assertIn("running %s" % self.SWAVG_TORCH, p.stderr)
        update_bn(torch.utils.data.DataLoader(data, batch_size=8), net)
        got = torch.load(self.path("bn.pt"), weights_only=True)
        want = net.state_dict()
        self.assertEqual(list(got), list(want))
        for k in ("1.running_mean", "1.running_var"):
            torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)
            self.assertFalse(same_bits(got[k], states[-1][k]), k)
        self.assertEqual(int(got["1.num_batches_tracked"]), int(want["1.num_batches_tracked"]))
        for k in ("0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"):
            self.assertTrue(same_bits(got[k], want[k]), k)


@unittest.skipUnless(os.environ.get("SWAVG_IMAGE_TEST_CUDA") == "1", "set SWAVG_IMAGE_TEST_CUDA=1 for the cuda image")
class CudaImage(LeanImage):
    KIND = "cuda"
    SWAVG_TORCH = "/opt/swavg/bin/swavg-torch"
    LIBTORCH = r"LibTorch 2\.\d+\.\d+, CUDA"

    @classmethod
    def image_env(cls, env):
        build = os.environ.get("SWAVG_BUILD_DIR")
        if build and not debian_build(build):
            env["WHEEL_BUILD"] = build


if __name__ == "__main__":
    unittest.main()
