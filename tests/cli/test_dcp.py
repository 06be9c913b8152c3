"""PyTorch Distributed Checkpoint (DCP) folders as swavg inputs, against torch itself.

The reference for every folder is torch's own consolidation,
torch.distributed.checkpoint.format_utils.dcp_to_torch_save, then the average in Python with
torch.optim.swa_utils' expression (reference.swa_fold) or the EMA lerp (reference.ema_fold); and,
for what swavg carries beyond the tensors, swavg run on those consolidated torch.save files.
Peak memory does not grow with the model (MemoryTest). Hostile folders are cases of the
malformed-input suite (scripts/fixtures/hostile_dcp.py, tests/cli/test_hostile.py).
"""
import functools
import os
import shutil
import sys
import tempfile
import unittest
import warnings

import torch

from common import TempDirTest, fixture, same_bits, swavg
from peak_rss import peak_rss
from reference import ema_decays, ema_fold, load_output, load_safetensors, swa_fold

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")

_SCRATCH = tempfile.mkdtemp(prefix="swavg-dcp-ref-")


def dcp(name):
    return fixture(os.path.join("dcp", name))


@functools.lru_cache(maxsize=None)
def consolidated(name):
    """torch's own dcp_to_torch_save of a fixture folder: (path of the .pt, the object it holds)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    out = os.path.join(_SCRATCH, name + ".pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_to_torch_save(dcp(name), out)
    return out, torch.load(out, weights_only=False)


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + str(k) + "."))
        else:
            out[prefix + str(k)] = v
    return out


def fold(f, tensors, *args):
    """f's fold as swavg claims it: bfloat16 and float16 accumulated in float32, rounded once."""
    if tensors[0].dtype in (torch.bfloat16, torch.float16):
        return f(tensors, *args, acc_dtype=torch.float32).to(tensors[0].dtype)
    return f(tensors, *args)


class DcpTest(TempDirTest):
    def assert_bits(self, got, want, name):
        self.assertEqual(got.dtype, want.dtype, name)
        self.assertEqual(tuple(got.shape), tuple(want.shape), name)
        if not same_bits(got, want):
            self.fail("%s: not bit-exact, max |diff| %g" % (name, (got.double() - want.double()).abs().max()))

    def check_average(self, names, *extra, key="model", out_name="avg.pt"):
        out = self.path(out_name)
        # --sort none: the references fold `names` in the order each test gives them.
        swavg("average", *[dcp(n) for n in names], "--sort", "none", *extra, "-o", out, "--force")
        got = load_safetensors(os.path.join(out, "model.safetensors"))[0] if out.endswith("/") else load_output(out)
        refs = [flat(consolidated(n)[1][key]) for n in names]
        tensors = [k for k, v in refs[0].items() if isinstance(v, torch.Tensor)]
        self.assertEqual(sorted(k for k, v in got.items() if isinstance(v, torch.Tensor)), sorted(tensors))
        for k in tensors:
            with self.subTest(tensor=k):
                self.assert_bits(got[k], fold(swa_fold, [r[k] for r in refs]), k)
        return got

    def test_one_process_run(self):
        self.check_average(["run1_0", "run1_1", "run1_2"])

    def test_two_and_four_ranks(self):
        self.check_average(["rank2_0", "rank2_1"])
        self.check_average(["rank4_0", "rank4_1"])

    def test_layouts_mix(self):
        # rank<N>_<i> and run1_<i> hold the same values, saved over 2, 4 and 1 processes
        got = self.check_average(["rank4_0", "rank2_1", "run1_2"])
        want = self.check_average(["run1_0", "run1_1", "run1_2"], out_name="same.pt")
        for k in want:
            self.assert_bits(got[k], want[k], k)

    def test_shards_as_torch_reads_them(self):
        for name in ("rank2_0", "rank4_0", "fsdp2_0"):
            with self.subTest(name=name):
                out = self.path(name + ".pt")
                swavg("convert", dcp(name), "-o", out, "--force")
                got = load_output(out)
                want = consolidated(name)[1]["model"]
                self.assertEqual(list(got.keys()), list(want.keys()))
                for k in want:
                    self.assert_bits(got[k], want[k], k)

    def test_convert_to_folder(self):
        out = self.path("hf/")
        swavg("convert", dcp("rank4_1"), "-o", out)
        got, _ = load_safetensors(os.path.join(out, "model.safetensors"))
        want = consolidated("rank4_1")[1]["model"]
        self.assertEqual(sorted(got), sorted(want))
        for k in want:
            self.assert_bits(got[k], want[k], k)
        self.assertEqual(sorted(os.listdir(out)), ["model.safetensors"])  # none of the DCP files copied

    def test_output_is_not_an_input_file(self):
        target = self.path("ckpt")
        shutil.copytree(dcp("run1_0"), target)
        before = open(os.path.join(target, "__0_0.distcp"), "rb").read()
        p = swavg("average", target, dcp("run1_1"), "-o", os.path.join(target, "__0_0.distcp"), "--force",
                  check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("swavg never overwrites its inputs", p.stderr)
        self.assertEqual(open(os.path.join(target, "__0_0.distcp"), "rb").read(), before)

    def test_fsdp2(self):
        self.check_average(["fsdp2_0", "fsdp2_1"])

    def test_key(self):
        self.check_average(["rank2_0", "rank2_1"], "--key", "model")
        got = self.check_average(["rank4_0", "rank4_1"], "--key", "optimizer", key="optimizer")
        self.assertIn("state.embed.weight.exp_avg", got)
        p = swavg("average", dcp("run1_0"), dcp("run1_1"), "--key", "nothing", "-o", self.path("x.pt"), check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("'model', 'optimizer', 'step'", p.stderr)
        self.assertFalse(os.path.exists(self.path("x.pt")))

    def test_folder_output(self):
        self.check_average(["rank2_0", "rank2_1"], out_name="out/")

    def test_ema(self):
        names = ["rank4_0", "rank2_1", "run1_2"]
        out = self.path("ema.pt")
        swavg("ema", "--decay", "0.9", *[dcp(n) for n in names], "-o", out, "--force", "--sort", "none")
        got = load_output(out)
        refs = [consolidated(n)[1]["model"] for n in names]
        decays = ema_decays(len(names), 0.9)
        for k in refs[0]:
            with self.subTest(tensor=k):
                self.assert_bits(got[k], fold(ema_fold, [r[k] for r in refs], decays), k)

    def test_same_as_consolidated_files(self):
        # everything swavg writes (tensors and the non-tensor entries it carries) is what it writes
        # from torch's own consolidation of the same folders
        cases = [(("rank2_0", "rank4_1"), []), (("rank2_0", "rank4_1"), ["--key", "optimizer.state.embed.weight"]),
                 (("flat_0", "flat_1"), [])]
        for names, key in cases:
            with self.subTest(names=names, key=key):
                a, b = self.path("dcp.pt"), self.path("pt.pt")
                swavg("average", *[dcp(n) for n in names], *key, "-o", a, "--force")
                swavg("average", *[consolidated(n)[0] for n in names], *key, "-o", b, "--force")
                got, want = torch.load(a, weights_only=False), torch.load(b, weights_only=False)
                self.assertEqual(list(flat(got).keys()), list(flat(want).keys()))
                for k, v in flat(want).items():
                    if isinstance(v, torch.Tensor):
                        self.assert_bits(flat(got)[k], v, k)
                    else:
                        self.assertEqual(flat(got)[k], v, k)


class MegatronTest(TempDirTest):
    """A Megatron-core torch_dist folder (scripts/fixtures/hostile_dcp.py lays it out as
    dist_checkpointing.save does: the DCP files, metadata.json, and common.pt in the layout before
    Megatron-LM#5160, the common state among the DCP items since) is refused by every command that
    reads it, naming it and what to do; without metadata.json it is a plain DCP folder."""

    def make(self, common_pt):
        sys.path.insert(0, SCRIPTS)
        from fixtures.hostile_dcp import megatron_folder
        shutil.rmtree(self.path("run"), ignore_errors=True)
        self.folders = []
        for i in range(2):
            g = torch.Generator().manual_seed(i)
            state = {"decoder.layers.0.weight": torch.randn(4, 3, generator=g), "embedding": torch.randn(5, generator=g)}
            folder = self.path("run/iter_%07d" % (i + 1))
            megatron_folder(folder, state, i + 1, common_pt=common_pt)
            self.folders.append(folder)

    def test_refused_by_every_command(self):
        out = self.path("out.pt")
        for common_pt, common in ((True, "common.pt"), (False, "the common state among its DCP items")):
            self.make(common_pt)
            for args in (["average", *self.folders, "-o", out], ["ema", "--decay", "0.9", *self.folders, "-o", out],
                         ["convert", self.folders[1], "-o", out], ["inspect", self.folders[0]],
                         ["average", *self.folders, "--format", "dcp", "-o", self.path("out/")]):
                with self.subTest(command=args[0], common_pt=common_pt):
                    p = swavg(*args, check=False)
                    self.assertEqual(p.returncode, 3, p.stderr)
                    self.assertIn("swavg: error: %s: a Megatron-core distributed checkpoint (metadata.json: "
                                  "sharded_backend 'torch_dist', %s)"
                                  % (self.folders[1] if args[0] == "convert" else self.folders[0], common), p.stderr)
                    self.assertIn("--ckpt-convert-format torch", p.stderr)
                    self.assertEqual(p.stdout, "")
                    self.assertEqual(sorted(os.listdir(self.tmp)), ["run"])

    def test_without_metadata_json_it_is_plain_dcp(self):
        # metadata.json, written last, is what makes it Megatron's; without it the folder is the DCP folder it is
        self.make(True)
        for f in self.folders:
            os.remove(os.path.join(f, "metadata.json"))
        out = self.path("avg.pt")
        swavg("average", *self.folders, "-o", out)
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        refs = []
        for i, f in enumerate(self.folders):
            dcp_to_torch_save(f, self.path("ref%d.pt" % i))
            refs.append(torch.load(self.path("ref%d.pt" % i), weights_only=True))
        got = load_output(out)
        self.assertEqual(sorted(got), sorted(refs[0]))
        for k in refs[0]:
            self.assert_bits(got[k], swa_fold([r[k] for r in refs]), k)

    assert_bits = DcpTest.assert_bits


class MemoryTest(unittest.TestCase):
    """Averaging two 4-rank DCP checkpoints of 16 and of 64 tensors of 4 MiB (chunked by rows and by
    columns, so every tensor is assembled from 4 chunks): the peak RSS of the larger average is
    within 48 MiB of the smaller one's, while its inputs hold 2 x 192 MiB more (a reader that
    assembled the tensors at load grew by that much). Both averages are bit-exact."""
    SIZES = (16, 64)
    # The pieces being read are mapped a large page-cache folio (up to 2 MiB) at a time around each
    # touch, a few MiB per piece for a moment, whatever the model's size: measured up to 17 MiB.
    LIMIT = 48 << 20

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-dcp-memory-")
        sys.path.insert(0, SCRIPTS)
        from fixtures import dcp as fixtures
        cls.fixtures = fixtures
        fixtures.make_memory(cls.tmp, cls.SIZES)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_peak_rss_is_flat(self):
        peaks = {}
        for n in self.SIZES:
            out = os.path.join(self.tmp, "avg%d.safetensors" % n)
            peaks[n] = peak_rss("average", *[os.path.join(self.tmp, "mem%d_%d" % (n, s)) for s in (0, 1)], "-o", out)
            got, _ = load_safetensors(out)
            self.assertEqual(sorted(got), sorted(self.fixtures.memory_name(i) for i in range(n)))
            for i in (0, 1, n - 1):  # by rows, by columns, the last
                want = swa_fold([self.fixtures.memory_tensor(i, s) for s in (0, 1)])
                self.assertTrue(same_bits(got[self.fixtures.memory_name(i)], want), i)
            os.remove(out)
        growth = peaks[self.SIZES[1]] - peaks[self.SIZES[0]]
        self.assertLess(growth, self.LIMIT, "peak RSS %s MiB for %s tensors per input" % (
            [round(peaks[n] / 2 ** 20, 1) for n in self.SIZES], list(self.SIZES)))


if __name__ == "__main__":
    unittest.main()
