"""swavg built without LibTorch (cmake -DSWAVG_WITH_LIBTORCH=OFF), from Debian's packages alone: it
links no LibTorch, averages and runs EMA as torch.optim.swa_utils does (bit for bit, against torch
here), and refuses what needs LibTorch (update-bn, a lerp weight of exactly 1) with exit 2 and the
fix, writing nothing.

The build folder is SWAVG_MIN_BUILD_DIR (ctest: build/without_libtorch), kept between runs, with
ccache when installed; CMake is told not to look for Torch at all."""
import os
import shutil
import subprocess
import tempfile
import unittest

import torch

from common import same_bits
from reference import ema_decays, ema_fold, is_buffer_name, load_output, run_paths, state_dict_of, swa_fold

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build(folder):
    launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
    env = dict(os.environ, CCACHE_BASEDIR=SOURCE)
    for var in ("CMAKE_PREFIX_PATH", "Torch_DIR"):
        env.pop(var, None)
    subprocess.run(["cmake", "-S", SOURCE, "-B", folder, "-DSWAVG_WITH_LIBTORCH=OFF",
                    "-DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON", "-DCMAKE_BUILD_TYPE=Release", *launcher],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", folder, "-j2", "--target", "swavg"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return os.path.join(folder, "swavg")


class WithoutLibTorchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-min-")
        folder = os.environ.get("SWAVG_MIN_BUILD_DIR") or os.path.join(cls.tmp, "build")
        cls.swavg = build(folder)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_swavg(self, *args):
        return subprocess.run([self.swavg, *map(str, args)], capture_output=True, text=True, timeout=600)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def test_links_no_libtorch(self):
        libs = subprocess.run(["ldd", self.swavg], capture_output=True, text=True, check=True).stdout
        for lib in ("libtorch", "libc10", "libpython"):
            self.assertNotIn(lib, libs)
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(self.swavg), "swavg-torch")))
        p = self.run_swavg("--version")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("built without LibTorch", p.stdout)

    def test_average_and_ema_as_torch(self):
        paths = run_paths("cnn")
        sds = [state_dict_of(p) for p in paths]
        decays = ema_decays(len(paths), 0.99, warmup="torch_ema")
        for command, reference in ((["average"], swa_fold),
                                   (["ema", "--decay", "0.99", "--warmup", "torch_ema"],
                                    lambda ts: ema_fold(ts, decays))):
            out = self.path("%s.pt" % command[0])
            p = self.run_swavg(*command, *paths, "-o", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = load_output(out)
            for k in sds[0]:
                if sds[0][k].is_floating_point() and not is_buffer_name(k):
                    with self.subTest(command=command[0], tensor=k):
                        self.assertTrue(same_bits(got[k], reference([sd[k] for sd in sds])))

    def test_what_needs_libtorch_is_refused_with_the_fix(self):
        a, b = self.path("ckpt_0.pt"), self.path("ckpt_1.pt")
        torch.save({"w": torch.ones(8)}, a)
        torch.save({"w": torch.full((8,), -0.0)}, b)
        out = self.path("x.pt")
        for args, why in ((["ema", "--decay", "0", a, b], "a lerp weight of exactly 1"),
                          (["update-bn", "--model", self.path("net.ts"), "--checkpoint", a, "--data",
                            self.path("d.npy")], "update-bn")):
            with self.subTest(args=args[0]):
                p = self.run_swavg(*args, "-o", out)
                self.assertEqual(p.returncode, 2, p.stderr)
                error = p.stderr.strip().splitlines()[-1]  # after the progress lines
                self.assertTrue(error.startswith("swavg: error: "), p.stderr)
                for text in (why, "needs LibTorch", "swavg-torch", "docs/install.md"):
                    self.assertIn(text, error)
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
