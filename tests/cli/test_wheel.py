"""`pip install .` in a fresh virtual environment with torch builds swavg against that torch, puts
swavg on the environment's PATH with an RPATH to that torch's libraries, and the binaries average
and update-bn as torch.optim.swa_utils does; `import swavg` returns the report and raises the
exit code's exception.

Opt-in (SWAVG_TEST_WHEEL=1; otherwise exit 77, skipped): the first run compiles both binaries in
a new build folder (over 20 minutes on 2 busy cores), more than CI's budget allows for it.

The environment gets the reference torch through a .pth file naming the site-packages of this
test's interpreter (no download). The build folder is SWAVG_WHEEL_BUILD_DIR (ctest: build/wheel),
kept between runs, so a second run rebuilds nothing; ccache serves a fresh folder. The wheel is
built with pip's build isolation (scikit-build-core from PyPI, or pip's cache).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
import unittest

if __name__ == "__main__" and os.environ.get("SWAVG_TEST_WHEEL") != "1":
    print("skipped: set SWAVG_TEST_WHEEL=1 to build and install the wheel", file=sys.stderr)
    sys.exit(77)

import torch  # noqa: E402
from torch.optim.swa_utils import AveragedModel, update_bn  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def venv_env(venv):
    """The environment of a command in the venv: its bin/ first, nothing pointing at the build tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("SWAVG_BIN", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = venv
    return env


@unittest.skipUnless(os.path.isdir(os.path.join(TORCH_DIR, "share", "cmake", "Torch")),
                     "this interpreter's torch has no CMake package (a PyTorch wheel's torch is needed)")
class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-wheel-")
        build = os.environ.get("SWAVG_WHEEL_BUILD_DIR") or os.path.join(cls.tmp, "build")
        cls.venv = os.path.join(cls.tmp, "venv")
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", cls.venv], check=True)
        purelib = sysconfig.get_path("purelib", vars={"base": cls.venv, "platbase": cls.venv})
        with open(os.path.join(purelib, "swavg_test_torch.pth"), "w") as f:
            f.write(os.path.dirname(TORCH_DIR) + "\n")
        cls.python = os.path.join(cls.venv, "bin", "python")
        env = venv_env(cls.venv)
        settings = ["build-dir=" + build, "cmake.build-type=Release"]
        if shutil.which("ccache"):
            env["CCACHE_BASEDIR"] = SOURCE
            settings.append("cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache")
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        cmd = [cls.python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", SOURCE]
        cmd += ["--config-settings=" + s for s in settings]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise AssertionError("pip install . exited %d:\n%s" % (p.returncode, p.stdout[-20000:]))
        print("pip install . took %.0f s" % (time.monotonic() - start), file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=self.tmp)

    def path(self, name):
        return os.path.join(self.dir, name)

    def in_venv(self, *cmd, check=True):
        p = subprocess.run(list(cmd), env=venv_env(self.venv), capture_output=True, text=True, timeout=300)
        if check and p.returncode != 0:
            raise AssertionError("%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stderr))
        return p

    def swavg(self, *args, check=True):
        return self.in_venv("swavg", *map(str, args), check=check)

    def two_checkpoints(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
        averaged = AveragedModel(model)
        paths = []
        for i in range(2):
            with torch.no_grad():
                for p in model.parameters():
                    p.normal_()
            averaged.update_parameters(model)
            paths.append(self.path("ckpt%d.pt" % i))
            torch.save(model.state_dict(), paths[-1])
        return paths, averaged

    def assert_averaged(self, output, averaged):
        found = torch.load(output, weights_only=True)
        for name, want in averaged.module.named_parameters():
            with self.subTest(tensor=name):
                self.assertTrue(torch.equal(found[name], want.detach()), name)

    def test_binaries_on_path_find_this_torch(self):
        for name in ("swavg", "swavg-torch"):
            self.assertEqual(shutil.which(name, path=venv_env(self.venv)["PATH"]),
                             os.path.join(self.venv, "bin", name))
        version = self.swavg("--version").stdout
        self.assertRegex(version, r"^swavg [0-9.]+ \(LibTorch %s," % re.escape(torch.__version__.split("+")[0]))
        lib = os.path.join(TORCH_DIR, "lib")
        ldd = subprocess.run(["ldd", os.path.join(self.venv, "bin", "swavg-torch")], capture_output=True,
                             text=True, check=True).stdout
        self.assertNotIn("not found", ldd)
        found = re.search(r"^\s*libtorch_cpu\.so => (\S+) ", ldd, re.M)
        self.assertIsNotNone(found, ldd)
        self.assertEqual(os.path.realpath(found.group(1)), os.path.realpath(os.path.join(lib, "libtorch_cpu.so")))
        readelf = subprocess.run(["readelf", "-d", os.path.join(self.venv, "bin", "swavg-torch")],
                                 capture_output=True, text=True, check=True).stdout
        rel = os.path.relpath(lib, os.path.join(self.venv, "bin"))
        self.assertIn("[$ORIGIN/%s:%s]" % (rel, lib), readelf)

    def test_average(self):
        paths, averaged = self.two_checkpoints()
        self.swavg("average", *paths, "-o", self.path("swa.pt"))
        self.assert_averaged(self.path("swa.pt"), averaged)

    def test_update_bn(self):
        torch.manual_seed(1)
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
        torch.jit.script(net).save(self.path("net.ts"))
        data = torch.randn(10, 3, 6, 6)
        torch.save(data, self.path("data.pt"))
        self.swavg("update-bn", "--model", self.path("net.ts"), "--data", self.path("data.pt"),
                   "--batch-size", 4, "-o", self.path("bn.pt"))
        update_bn(torch.utils.data.DataLoader(data, batch_size=4), net)
        found = torch.load(self.path("bn.pt"), weights_only=True)
        for name, want in net.state_dict().items():
            with self.subTest(tensor=name):
                torch.testing.assert_close(found[name], want, rtol=1e-5, atol=1e-6)

    def test_python_module(self):
        paths, averaged = self.two_checkpoints()
        with open(self.path("junk.pt"), "wb") as f:
            f.write(b"this is not a checkpoint\n")
        script = textwrap.dedent("""
            import json, sys, swavg
            a, b, out, junk = sys.argv[1:]
            report = swavg.average([a, b], out)
            try:
                swavg.average([a, junk], out + ".2")
                error = None
            except swavg.InputError as e:
                error = {"type": type(e).__name__, "exit_code": e.exit_code, "stderr": e.stderr,
                         "base": isinstance(e, swavg.SwavgError)}
            print(json.dumps({"report": report, "error": error, "module": swavg.__file__}))
        """)
        out = self.path("swa.pt")
        p = self.in_venv(self.python, "-c", script, *paths, out, self.path("junk.pt"))
        result = json.loads(p.stdout)
        self.assertTrue(result["module"].startswith(self.venv + "/"), result["module"])
        self.assertEqual(result["report"]["output"], out)
        self.assertEqual(result["report"]["mode"], "swa")
        self.assertEqual(result["report"]["n"], 2)
        self.assertEqual(result["report"]["inputs"], paths)
        self.assert_averaged(out, averaged)
        error = result["error"]
        self.assertIsNotNone(error, "a file that is no checkpoint raised nothing")
        self.assertEqual((error["type"], error["exit_code"], error["base"]), ("InputError", 3, True))
        self.assertIn("swavg: error:", error["stderr"])
        self.assertIn("junk.pt", error["stderr"])
        self.assertFalse(os.path.exists(out + ".2"))


if __name__ == "__main__":
    unittest.main()
