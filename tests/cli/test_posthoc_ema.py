"""swavg posthoc-ema (EDM2's post-hoc EMA reconstruction) against a numpy reimplementation of
EDM2's solve (training/phema.py: std_to_exp, power_function_correlation,
solve_posthoc_coefficients) on a simulated training run: a small model's parameters drift with
noise, two power-function EMAs (sigma_rel 0.05 and 0.10) are updated every step by EDM2's rule in
PyTorch, and snapshots of both are saved every K steps under EDM2's names.

Every expected value is computed here by numpy and PyTorch, never taken from swavg."""
import copy
import json
import os
import pickle
import sys
import types
import unittest

import numpy as np
import torch

from common import TempDirTest, swavg
from reference import is_buffer_name, load_output, load_safetensors
import safetensors_ref

STEPS = 480
EVERY = 40
STDS = (0.05, 0.10)


# --- EDM2's training/phema.py, in numpy float64 ---------------------------------------------------
def std_to_exp(std):
    std = np.float64(std)
    tmp = std.flatten() ** -2
    exp = [np.roots([1, 7, 16 - t, 12 - t]).real.max() for t in tmp]
    return np.float64(exp).reshape(std.shape)


def power_function_correlation(a_ofs, a_std, b_ofs, b_std):
    a_exp = std_to_exp(a_std)
    b_exp = std_to_exp(b_std)
    t_ratio = a_ofs / b_ofs
    t_exp = np.where(a_ofs < b_ofs, b_exp, -a_exp)
    t_max = np.maximum(a_ofs, b_ofs)
    num = (a_exp + 1) * (b_exp + 1) * t_ratio ** t_exp
    den = (a_exp + b_exp + 1) * t_max
    return num / den


def solve_posthoc_coefficients(in_ofs, in_std, out_ofs, out_std):
    rv = lambda x: np.float64(x).reshape(-1, 1)
    cv = lambda x: np.float64(x).reshape(1, -1)
    A = power_function_correlation(rv(in_ofs), rv(in_std), cv(in_ofs), cv(in_std))
    B = power_function_correlation(rv(in_ofs), rv(in_std), cv(out_ofs), cv(out_std))
    X = np.linalg.solve(A, B)
    X = X / np.sum(X, axis=0)
    return X


def power_function_beta(std, t_next, t_delta):
    return (1 - t_delta / t_next) ** (std_to_exp(std).item() + 1)


# --- a simulated training run --------------------------------------------------------------------
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 3)


def simulate(folder, stds=STDS, track=(0.07,), fmt="pt"):
    """Trains by drift and noise; EMAs for `stds` (snapshotted) and `track` (kept directly) updated
    every step with EDM2's beta. Returns ({(t, std): path}, {std: final direct EMA state dict})."""
    torch.manual_seed(1234)
    net = Net()
    drift = {n: torch.randn_like(p) * 0.02 for n, p in net.named_parameters()}
    emas = {s: {n: p.detach().clone() for n, p in net.named_parameters()} for s in stds + track}
    paths = {}
    with torch.no_grad():
        for t in range(1, STEPS + 1):
            for n, p in net.named_parameters():
                p.add_(drift[n] + 0.05 * torch.randn_like(p))
            net.bn.running_mean.add_(0.01 * torch.randn(16))
            net.bn.num_batches_tracked += 1
            for s, ema in emas.items():
                beta = power_function_beta(s, t, 1)
                for n, p in net.named_parameters():
                    ema[n].lerp_(p, 1 - beta)
            if t % EVERY == 0:
                for s in stds:
                    sd = dict(emas[s])
                    for n, b in net.named_buffers():
                        sd[n] = b.clone()
                    path = os.path.join(folder, "network-snapshot-%07d-%.3f.%s" % (t, s, fmt))
                    if fmt == "pt":
                        torch.save({k: v.clone() for k, v in sd.items()}, path)
                    else:
                        safetensors_ref.write(path, {k: v.clone() for k, v in sd.items()})
                    paths[(t, s)] = path
    return paths, {s: emas[s] for s in track}


def expected(paths_by_profile, sigma, at):
    """numpy's coefficients and sum_i x_i theta_i in float64, over the snapshots with t <= at."""
    keys = sorted(k for k in paths_by_profile if k[0] <= at)
    x = solve_posthoc_coefficients([k[0] for k in keys], [k[1] for k in keys], at, sigma)[:, 0]
    return keys, x


def combine(sds, x):
    """sum_i x_i theta_i in float64 for each floating tensor, and |x_i| |theta_i| summed (the scale
    of the rounding a float64 sum can have)."""
    out, scale = {}, {}
    for name in sds[0]:
        if not sds[0][name].is_floating_point() or is_buffer_name(name):
            continue  # buffers and integer tensors: the last snapshot's
        acc = sum(float(xi) * sd[name].double() for xi, sd in zip(x, sds))
        out[name] = acc
        scale[name] = sum(abs(float(xi)) * sd[name].double().abs() for xi, sd in zip(x, sds))
    return out, scale


def read(path):
    if path.endswith(".safetensors"):
        return load_safetensors(path)[0]
    return load_output(path)


class PosthocEmaTest(TempDirTest):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.run_dir = tempfile.mkdtemp(prefix="swavg-phema-")
        cls.paths, cls.direct = simulate(cls.run_dir)
        cls.snapshots = [cls.paths[k] for k in sorted(cls.paths)]

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.run_dir, ignore_errors=True)

    def posthoc(self, *args, out="ema.pt"):
        out_path = self.path(out)
        p = swavg("posthoc-ema", *args, "-o", out_path, "--json")
        return p, json.loads(p.stdout)

    def assert_reconstruction(self, got, keys, x, paths=None):
        paths = paths or self.paths
        sds = [torch.load(paths[k]) for k in keys]
        want, scale = combine(sds, x)
        for name, w in want.items():
            g = got[name]
            self.assertEqual(g.dtype, torch.float32, name)
            # float32 rounding of the float64 sum (half an ulp), plus what the last bits of the
            # float64 coefficients (numpy's vs swavg's) can move it.
            ulp = torch.finfo(torch.float32).eps * w.abs()
            tol = ulp + 1e-9 * scale[name] + torch.finfo(torch.float32).tiny
            err = (g.double() - w).abs()
            self.assertTrue(bool((err <= tol).all()), "%s: max error %g, tolerance %g" % (name, err.max(), tol.min()))
        last = sds[-1]
        self.assertTrue(torch.equal(got["bn.running_mean"], last["bn.running_mean"]))
        self.assertTrue(torch.equal(got["bn.num_batches_tracked"], last["bn.num_batches_tracked"]))
        self.assertEqual(list(got.keys()), list(sds[0].keys()))

    def test_equals_numpy_solve(self):
        p, report = self.posthoc("--sigma-rel", "0.07", *self.snapshots)
        keys, x = expected(self.paths, 0.07, STEPS)
        got = load_output(self.path("ema.pt"))
        self.assert_reconstruction(got, keys, x)
        out = report["outputs"][0]
        self.assertAlmostEqual(out["gamma"], std_to_exp(0.07).item(), delta=1e-12)
        self.assertEqual(out["at"], STEPS)
        coeffs = {(s["t"], s["sigma_rel"]): s["coefficient"] for s in out["snapshots"]}
        for k, xi in zip(keys, x):
            self.assertAlmostEqual(coeffs[(float(k[0]), k[1])], xi, delta=1e-9 * np.abs(x).max())
        self.assertEqual(out["excluded"], [])

    def test_closer_than_best_snapshot(self):
        self.posthoc("--sigma-rel", "0.07", *self.snapshots)
        got = load_output(self.path("ema.pt"))
        direct = self.direct[0.07]

        def distance(sd):
            return sum(float((sd[n].double() - direct[n].double()).pow(2).sum()) for n in direct) ** 0.5

        best = min(distance(torch.load(p)) for p in self.snapshots)
        self.assertLess(distance(got), best / 2)

    def test_at_drops_later_snapshots(self):
        at = 200
        p, report = self.posthoc("--sigma-rel", "0.12", "--at", at, *self.snapshots)
        keys, x = expected(self.paths, 0.12, at)
        self.assertEqual(len(keys), 2 * (at // EVERY))
        self.assert_reconstruction(load_output(self.path("ema.pt")), keys, x)
        out = report["outputs"][0]
        self.assertEqual(len(out["snapshots"]), len(keys))
        self.assertEqual(sorted(e["t"] for e in out["excluded"]),
                         sorted(float(k[0]) for k in self.paths if k[0] > at))
        # T between snapshot times: the later ones are still left out.
        keys, x = expected(self.paths, 0.12, at + EVERY / 2)
        self.posthoc("--sigma-rel", "0.12", "--at", at + EVERY / 2, *self.snapshots, out="mid.pt")
        self.assert_reconstruction(load_output(self.path("mid.pt")), keys, x)

    def test_several_sigmas_in_one_run_equal_separate_runs(self):
        p, report = self.posthoc("--sigma-rel", "0.03", "--sigma-rel", "0.10", "--sigma-rel", "0.2",
                                 *self.snapshots, out="ema-{sigma_rel}.safetensors")
        self.assertEqual([o["output"] for o in report["outputs"]],
                         [self.path("ema-%s.safetensors" % s) for s in ("0.03", "0.10", "0.2")])
        for s in ("0.03", "0.10", "0.2"):
            self.posthoc("--sigma-rel", s, *self.snapshots, out="one-%s.safetensors" % s)
            many = read(self.path("ema-%s.safetensors" % s))
            one = read(self.path("one-%s.safetensors" % s))
            self.assertEqual(list(many), list(one))
            for name in one:
                self.assertTrue(torch.equal(many[name], one[name]), name)
            keys, x = expected(self.paths, float(s), STEPS)
            self.assert_reconstruction(many, keys, x)

    def test_safetensors_snapshots_and_explicit_lists(self):
        folder = self.path("st")
        os.mkdir(folder)
        paths, _ = simulate(folder, fmt="safetensors")
        keys = sorted(paths)
        # Renamed so that only the lists say what they are; a single sigma for all of them.
        renamed = []
        for i, k in enumerate(keys):
            if k[1] != 0.05:
                continue
            new = os.path.join(folder, "weights_%d.safetensors" % i)
            os.rename(paths[k], new)
            renamed.append((k, new))
        args = ["--snapshot-times", ",".join(str(k[0]) for k, _ in renamed), "--snapshot-sigmas", "0.05"]
        self.posthoc("--sigma-rel", "0.06", *args, *[p for _, p in renamed], out="st.safetensors")
        want_keys, x = expected({k: p for k, p in renamed}, 0.06, STEPS)
        got = read(self.path("st.safetensors"))
        sds = [load_safetensors(p)[0] for _, p in renamed]
        want, scale = combine(sds, x)
        for name, w in want.items():
            tol = torch.finfo(torch.float32).eps * w.abs() + 1e-9 * scale[name] + 1e-30
            self.assertTrue(bool(((got[name].double() - w).abs() <= tol).all()), name)

    def test_ill_conditioned_schedule_like_numpy(self):
        """An EDM2-like schedule (2 x 150 snapshots, cond ~1e8): solved, and numpy's coefficients
        reproduced to what the conditioning allows."""
        times = [8 * k for k in range(1, 151)] * 2
        sigmas = [0.05] * 150 + [0.10] * 150
        files = []
        for i in range(len(times)):
            path = self.path("s%d.pt" % i)
            torch.save({"w": torch.full((2,), float(i))}, path)
            files.append(path)
        p, report = self.posthoc("--sigma-rel", "0.07", "--snapshot-times", ",".join(map(str, times)),
                                 "--snapshot-sigmas", ",".join(map(str, sigmas)), *files)
        x = solve_posthoc_coefficients(times, sigmas, max(times), 0.07)[:, 0]
        got = {s["path"]: s["coefficient"] for s in report["outputs"][0]["snapshots"]}
        diff = max(abs(got[f] - xi) for f, xi in zip(files, x))
        A = power_function_correlation(np.float64(times).reshape(-1, 1), np.float64(sigmas).reshape(-1, 1),
                                       np.float64(times).reshape(1, -1), np.float64(sigmas).reshape(1, -1))
        self.assertLess(diff, np.linalg.cond(A) * 1e-14 * np.abs(x).max())
        self.assertNotIn("ill-conditioned", p.stderr)  # numpy's cond_1 8.1e7: under the bound
        cond = np.linalg.cond(A, 1)
        self.assertLessEqual(report["outputs"][0]["condition_estimate"], cond * 1.0001)
        self.assertGreaterEqual(report["outputs"][0]["condition_estimate"], cond / 3)

    def test_consecutive_steps_warn_with_the_condition_estimate(self):
        """Both sigma_rels snapshotted at each of 150 consecutive steps from t = 1000: numpy's cond_1 is
        2.5e10, past the bound (1e10): solved, with a warning naming the estimate."""
        times = list(range(1000, 1150)) * 2
        sigmas = [0.05] * 150 + [0.10] * 150
        files = []
        for i in range(len(times)):
            path = self.path("s%d.pt" % i)
            torch.save({"w": torch.full((2,), float(i))}, path)
            files.append(path)
        p, report = self.posthoc("--sigma-rel", "0.07", "--snapshot-times", ",".join(map(str, times)),
                                 "--snapshot-sigmas", ",".join(map(str, sigmas)), *files)
        A = power_function_correlation(np.float64(times).reshape(-1, 1), np.float64(sigmas).reshape(-1, 1),
                                       np.float64(times).reshape(1, -1), np.float64(sigmas).reshape(1, -1))
        cond = np.linalg.cond(A, 1)
        self.assertGreater(cond, 1e10)
        estimate = report["outputs"][0]["condition_estimate"]
        self.assertLessEqual(estimate, cond * 1.0001)
        self.assertGreaterEqual(estimate, cond / 3)
        self.assertIn("--sigma-rel 0.07: the snapshots' system is ill-conditioned (condition estimate %.3g, above 1e+10)"
                      % estimate, p.stderr)
        self.assertTrue(os.path.exists(self.path("ema.pt")))

    def test_nonfinite_snapshots_are_refused_as_average_refuses_them(self):
        folder = self.path("nan")
        os.mkdir(folder)
        files = []
        for t, s in ((40, "0.050"), (80, "0.100"), (80, "0.050"), (120, "0.050")):
            files.append(os.path.join(folder, "s-%07d-%s.pt" % (t, s)))
            w = torch.full((3,), t / 40.0)
            if t == 80 and s == "0.100":
                w[1] = float("nan")
            if t == 120:
                w[0] = float("inf")  # only used with --at 120
            torch.save({"w": w, "bn.running_mean": torch.ones(2)}, files[-1])
        used = files[:3]
        p = swavg("average", *used, "-o", self.path("avg.pt"), check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("tensor 'w' has NaN or Inf values in " + files[1] + " (1 values)", p.stderr)
        err = self.assert_refused(3, "--sigma-rel", "0.07", "--at", "80", *files, outputs=["nan"])
        self.assertIn("tensor 'w' has NaN or Inf values in " + files[1] + " (1 values); pass --allow-nonfinite",
                      err)
        err = self.assert_refused(3, "--sigma-rel", "0.07", *files, outputs=["nan"])
        self.assertIn(files[3] + " (1 values)", err)
        # --allow-nonfinite: combined anyway, NaN where the snapshot has it.
        self.posthoc("--sigma-rel", "0.07", "--at", "80", "--allow-nonfinite", *files)
        got = torch.load(self.path("ema.pt"))
        self.assertTrue(bool(torch.isnan(got["w"][1])))
        self.assertTrue(bool(torch.isfinite(got["w"][0])))
        # A snapshot after T is not used: its Inf does not matter.
        os.remove(self.path("ema.pt"))
        clean = [f for f in files if f != files[1]]
        self.posthoc("--sigma-rel", "0.07", "--at", "80", *clean)
        self.assertTrue(bool(torch.isfinite(torch.load(self.path("ema.pt"))["w"]).all()))

    def test_non_tensor_entries(self):
        folder = self.path("obj")
        os.mkdir(folder)
        files = []
        for t, s, epoch in ((40, "0.050", 1), (80, "0.100", 2), (80, "0.050", 3)):
            files.append(os.path.join(folder, "s-%07d-%s.pt" % (t, s)))
            torch.save({"w": torch.full((2,), float(epoch)), "epoch": epoch}, files[-1])
        self.posthoc("--sigma-rel", "0.07", *files, out="obj.pt")
        got = torch.load(self.path("obj.pt"))
        self.assertEqual(got["epoch"], 3)  # the last snapshot used: the largest t, the last given of those
        self.assert_refused(2, "--sigma-rel", "0.07", *files, out="obj.safetensors", outputs=["obj", "obj.pt"])
        self.posthoc("--sigma-rel", "0.07", "--drop-objects", *files, out="obj.safetensors")
        self.assertEqual(list(read(self.path("obj.safetensors"))), ["w"])

    def test_output_dtype(self):
        self.posthoc("--sigma-rel", "0.07", "--output-dtype", "float64", *self.snapshots)
        got = load_output(self.path("ema.pt"))
        keys, x = expected(self.paths, 0.07, STEPS)
        want, scale = combine([torch.load(self.paths[k]) for k in keys], x)
        for name, w in want.items():
            self.assertEqual(got[name].dtype, torch.float64)
            self.assertTrue(bool(((got[name] - w).abs() <= 1e-9 * scale[name] + 1e-300).all()), name)

    # --- errors: exit non-zero, nothing written ----------------------------------------------------
    def assert_refused(self, code, *args, out="bad.pt", outputs=None):
        p = swavg("posthoc-ema", *args, "-o", self.path(out), check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted(outputs or []), p.stderr)
        return p.stderr

    def test_bad_target_sigma(self):
        for s in ("0.28", "0.3", "0", "-0.05", "nan", "inf", "abc"):
            self.assert_refused(2, "--sigma-rel", s, *self.snapshots)
        # just below the bound is accepted
        self.posthoc("--sigma-rel", repr(float(np.nextafter(0.28, 0))), *self.snapshots)

    def test_at_before_every_snapshot(self):
        err = self.assert_refused(2, "--sigma-rel", "0.1", "--at", EVERY - 1, *self.snapshots)
        self.assertIn("before every snapshot", err)
        self.assert_refused(2, "--sigma-rel", "0.1", "--at", "0", *self.snapshots)
        # at the first snapshot time: its two profiles are enough
        self.posthoc("--sigma-rel", "0.1", "--at", EVERY, *self.snapshots)

    def test_too_few_or_duplicate_profiles(self):
        one = self.paths[(EVERY, 0.05)]
        self.assert_refused(2, "--sigma-rel", "0.1", one)
        self.assert_refused(2, "--sigma-rel", "0.1", "--at", EVERY, *[self.paths[(t, 0.05)] for t in (EVERY, 2 * EVERY)])
        err = self.assert_refused(2, "--sigma-rel", "0.1", one, self.paths[(2 * EVERY, 0.05)], one)
        self.assertIn("same profile", err)

    def test_snapshot_sigma_out_of_range(self):
        bad = self.path("snaps")
        os.mkdir(bad)
        for t, s in ((40, "0.050"), (80, "0.280")):
            torch.save({"w": torch.ones(2)}, os.path.join(bad, "snap-%07d-%s.pt" % (t, s)))
        files = sorted(os.path.join(bad, f) for f in os.listdir(bad))
        err = self.assert_refused(2, "--sigma-rel", "0.1", *files, outputs=["snaps"])
        self.assertIn("0.280", err)

    def test_name_without_pattern(self):
        plain = self.path("plain.pt")
        torch.save({"w": torch.ones(2)}, plain)
        err = self.assert_refused(2, "--sigma-rel", "0.1", self.snapshots[0], plain, outputs=["plain.pt"])
        self.assertIn("plain.pt", err)
        self.assert_refused(2, "--sigma-rel", "0.1", "--snapshot-times", "1,2,3", *self.snapshots[:2],
                            outputs=["plain.pt"])

    def test_several_sigmas_need_a_pattern(self):
        err = self.assert_refused(2, "--sigma-rel", "0.1", "--sigma-rel", "0.2", *self.snapshots)
        self.assertIn("{sigma_rel}", err)

    def test_one_bad_target_writes_no_output(self):
        self.assert_refused(2, "--sigma-rel", "0.1", "--sigma-rel", "0.3", *self.snapshots, out="e-{sigma_rel}.pt")

    def test_snapshots_that_disagree(self):
        folder = self.path("d")
        os.mkdir(folder)
        torch.save({"w": torch.ones(2)}, os.path.join(folder, "s-0000040-0.050.pt"))
        torch.save({"w": torch.ones(3)}, os.path.join(folder, "s-0000040-0.100.pt"))
        files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
        self.assert_refused(4, "--sigma-rel", "0.07", *files, out="x-{sigma_rel}.pt", outputs=["d"])
        # the state dict at the top level of one and under "ema" in the other
        torch.save({"ema": {"w": torch.ones(3)}, "step": 40}, files[0])
        self.assert_refused(4, "--sigma-rel", "0.07", *files, outputs=["d"])

    def test_code_carrying_pickles_are_refused(self):
        """EDM2's own snapshots are pickles whose objects carry source code
        (torch_utils.persistence); swavg never runs them: exit 3, nothing written."""
        folder = self.path("pkl")
        os.mkdir(folder)
        marker = self.path("pkl/ran")
        persistence = types.ModuleType("torch_utils_persistence_fake")

        def _reconstruct_persistent_obj(meta):
            open(marker, "w").close()
            return meta

        _reconstruct_persistent_obj.__module__ = persistence.__name__
        _reconstruct_persistent_obj.__qualname__ = "_reconstruct_persistent_obj"
        persistence._reconstruct_persistent_obj = _reconstruct_persistent_obj
        sys.modules[persistence.__name__] = persistence

        class Persistent:
            def __reduce__(self):
                meta = {"type": "class", "version": 6, "module_src": "import os\nos.system('true')\n",
                        "class_name": "Net", "state": {"w": torch.ones(2)}}
                return (_reconstruct_persistent_obj, (meta,))

        files = []
        for i, (t, s) in enumerate(((40, "0.050"), (40, "0.100"))):
            bare = os.path.join(folder, "network-snapshot-%07d-%s.pkl" % (t, s))
            with open(bare, "wb") as f:
                pickle.dump({"ema": Persistent(), "w": torch.ones(2)}, f)
            zipped = os.path.join(folder, "zipped-%07d-%s.pt" % (t, s))
            torch.save({"ema": Persistent(), "w": torch.ones(2)}, zipped)
            files.append((bare, zipped))
        for bare, zipped in files:
            self.assertFalse(os.path.exists(marker))
            self.assert_refused(3, "--sigma-rel", "0.07", bare, self.snapshots[-1], outputs=["pkl"])
            # EDM2 writes bare pickles (pickle.dump): refused as such. In a torch.save archive the
            # object is read as data, never reconstructed, and is no state dict (a usage error).
            self.assert_refused(2, "--sigma-rel", "0.07", "--key", "ema", zipped, self.snapshots[-1], outputs=["pkl"])
        self.assertFalse(os.path.exists(marker))


class PowerSigmaRelTest(TempDirTest):
    """swavg ema --power-sigma-rel: EDM2's power-function EMA folded over checkpoints."""

    def checkpoints(self, times, dtype=torch.float32, name="ckpt-%07d.pt"):
        torch.manual_seed(7)
        net = Net().to(dtype)
        paths = []
        with torch.no_grad():
            for t in times:
                for p in net.parameters():
                    p.add_(0.01 + 0.1 * torch.randn_like(p))
                net.bn.num_batches_tracked += 1
                path = self.path(name % t)
                torch.save({k: v.clone() for k, v in net.state_dict().items()}, path)
                paths.append(path)
        return paths

    def ema(self, *args, out="ema.pt"):
        p = swavg("ema", *args, "-o", self.path(out), "--json", "--force")
        report = json.loads(p.stdout)
        return load_output(self.path(out)), report

    def lerp_reference(self, paths, times, gamma, start=0.0, ema=None):
        """The fold in PyTorch: p_ema.lerp_(p, 1 - beta), beta as EDM2's power_function_beta."""
        prev = start
        for path, t in zip(paths, times):
            sd = torch.load(path)
            if ema is None:
                ema = {k: v.clone() for k, v in sd.items()}
            else:
                beta = (1 - (t - prev) / t) ** (gamma + 1)
                for k, v in sd.items():
                    if v.is_floating_point() and not is_buffer_name(k):
                        ema[k].lerp_(v, 1 - beta)
                    else:
                        ema[k] = v.clone()
            prev = t
        return ema

    def assert_same(self, got, want):
        self.assertEqual(list(got), list(want))
        for k in want:
            self.assertEqual(got[k].dtype, want[k].dtype, k)
            self.assertTrue(torch.equal(got[k].view(-1).view(torch.uint8) if got[k].is_floating_point() else got[k],
                                        want[k].view(-1).view(torch.uint8) if want[k].is_floating_point() else want[k]),
                            k)

    def test_sparse_checkpoints_bit_exact_with_lerp(self):
        times = [4096, 8192, 12288, 20480, 40960]
        for dtype in (torch.float32, torch.bfloat16):
            paths = self.checkpoints(times, dtype, name="ckpt-%07d-" + str(dtype)[6:] + ".pt")
            got, report = self.ema("--power-sigma-rel", "0.10", *paths)
            gamma = report["power_ema"]["gamma"]
            self.assertAlmostEqual(gamma, std_to_exp(0.10).item(), delta=1e-12)
            self.assertEqual(report["power_ema"]["times"], [float(t) for t in times])
            self.assert_same(got, self.lerp_reference(paths, times, gamma))

    def test_every_step_equals_edm2_update(self):
        """Checkpoints of the raw model after every step: the fold equals EDM2's PowerFunctionEMA
        updated each step with t_next = cur_nimg, t_delta = batch_size (1 here)."""
        torch.manual_seed(3)
        net = Net()
        steps = 60
        paths = []
        with torch.no_grad():
            for t in range(1, steps + 1):
                for p in net.parameters():
                    p.add_(0.01 + 0.1 * torch.randn_like(p))
                path = self.path("step_%d.pt" % t)
                torch.save({k: v.clone() for k, v in net.state_dict().items()}, path)
                paths.append(path)
        got, report = self.ema("--power-sigma-rel", "0.05", *paths)
        gamma = report["power_ema"]["gamma"]  # checked against numpy's root below
        self.assertAlmostEqual(gamma, std_to_exp(0.05).item(), delta=1e-12)
        torch.manual_seed(3)
        net = Net()
        ema = copy.deepcopy(net)  # PowerFunctionEMA.__init__
        with torch.no_grad():
            for t in range(1, steps + 1):
                for p in net.parameters():
                    p.add_(0.01 + 0.1 * torch.randn_like(p))
                beta = (1 - 1 / t) ** (gamma + 1)  # phema.py's power_function_beta(std, t, 1)
                for p_net, p_ema in zip(net.parameters(), ema.parameters()):
                    p_ema.lerp_(p_net, 1 - beta)
        for name, p in ema.named_parameters():
            self.assertTrue(torch.equal(got[name].view(torch.int32), p.detach().view(torch.int32)), name)

    def test_resume_continues(self):
        times = [100, 200, 300, 400]
        paths = self.checkpoints(times)
        whole, report = self.ema("--power-sigma-rel", "0.10", *paths, out="whole.pt")
        self.ema("--power-sigma-rel", "0.10", *paths[:2], out="part.pt")
        resumed, r2 = self.ema("--power-sigma-rel", "0.10", "--resume", self.path("part.pt"), *paths[2:], out="rest.pt")
        self.assertEqual(r2["power_ema"]["start_t"], 200.0)
        self.assert_same(resumed, whole)
        # another sigma, or none, cannot continue it; nor can an earlier time
        for args in (["--power-sigma-rel", "0.05"], ["--decay", "0.9"]):
            p = swavg("ema", *args, "--resume", self.path("part.pt"), *paths[2:], "-o", self.path("x.pt"), check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
        p = swavg("ema", "--power-sigma-rel", "0.10", "--resume", self.path("part.pt"), paths[1], paths[3],
                  "-o", self.path("x.pt"), check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertFalse(os.path.exists(self.path("x.pt")))

    def test_times_from_list_and_errors(self):
        paths = self.checkpoints([1, 2, 3], name="weights%d.pt")
        got, _ = self.ema("--power-sigma-rel", "0.2", "--snapshot-times", "10,20,35", *paths)
        gamma = std_to_exp(0.2).item()
        _, report = self.ema("--power-sigma-rel", "0.2", "--snapshot-times", "10,20,35", *paths, out="again.pt")
        self.assert_same(got, self.lerp_reference(paths, [10, 20, 35], report["power_ema"]["gamma"]))
        self.assertAlmostEqual(report["power_ema"]["gamma"], gamma, delta=1e-12)
        bad = [
            ["--power-sigma-rel", "0.2", *paths],  # no time in the names
            ["--power-sigma-rel", "0.2", "--snapshot-times", "10,20", *paths],
            ["--power-sigma-rel", "0.2", "--snapshot-times", "10,20,20", *paths],
            ["--power-sigma-rel", "0.2", "--snapshot-times", "30,20,40", *paths],
            ["--power-sigma-rel", "0.2", "--snapshot-times", "0,20,40", *paths],
            ["--power-sigma-rel", "0.28", "--snapshot-times", "10,20,35", *paths],
            ["--power-sigma-rel", "0", "--snapshot-times", "10,20,35", *paths],
            ["--power-sigma-rel", "0.2", "--decay", "0.9", "--snapshot-times", "10,20,35", *paths],
            ["--snapshot-times", "10,20,35", "--decay", "0.9", *paths],
            ["--power-sigma-rel", "0.2", "--warmup", "power", "--snapshot-times", "10,20,35", *paths],
        ]
        for args in bad:
            p = swavg("ema", *args, "-o", self.path("bad.pt"), check=False)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertFalse(os.path.exists(self.path("bad.pt")), args)
        # the last valid sigma_rel below the bound
        self.ema("--power-sigma-rel", repr(float(np.nextafter(0.28, 0))), "--snapshot-times", "10,20,35", *paths, out="ok.pt")


if __name__ == "__main__":
    unittest.main()
