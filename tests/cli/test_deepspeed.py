"""DeepSpeed checkpoints as inputs: ZeRO-2 and ZeRO-3 runs saved by DeepSpeed's own
engine.save_checkpoint on 1 and 2 gloo ranks (scripts/fixtures/deepspeed.py). swavg's average of a
run's tag folders must equal DeepSpeed's own consolidation of each (zero_to_fp32's
get_fp32_state_dict_from_zero_checkpoint) averaged in Python as AveragedModel does; the parent
folder reads the tag its `latest` names. Peak memory does not grow with a ZeRO-3 model (MemoryTest).
Altered folders are cases of the malformed-input suite (scripts/fixtures/hostile_deepspeed.py,
tests/cli/test_hostile.py)."""
import os
import shutil
import sys
import tempfile
import unittest

from common import TempDirTest, fixture, same_bits, swavg
from peak_rss import peak_rss
from reference import load_output, load_safetensors, swa_fold

try:
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
except ImportError:  # the fixtures are not written without DeepSpeed either
    get_fp32_state_dict_from_zero_checkpoint = None

ROOT = fixture("deepspeed")
STEPS = 3


def run(name):
    return os.path.join(ROOT, name)


def consolidated(name, step):
    return get_fp32_state_dict_from_zero_checkpoint(run(name), tag="global_step%d" % step)


@unittest.skipIf(get_fp32_state_dict_from_zero_checkpoint is None, "deepspeed is not installed")
class DeepSpeedTest(TempDirTest):
    def check_run(self, name, inputs, *args):
        out = self.path(name + ".pt")
        swavg("average", *inputs, "-o", out, *args)
        got = load_output(out)
        refs = [consolidated(name, step) for step in range(1, STEPS + 1)]
        self.assertEqual(sorted(got), sorted(refs[0]))
        for k in refs[0]:
            want = swa_fold([r[k] for r in refs])
            self.assertTrue(same_bits(got[k], want), "%s: %s differs from zero_to_fp32's average" % (name, k))
        # The tied embedding stays one tensor in the output, as torch.save writes tied weights.
        self.assertEqual(got["out.weight"].data_ptr(), got["emb.weight"].data_ptr())
        return got

    def tags(self, name):
        return [os.path.join(run(name), "global_step%d" % s) for s in range(1, STEPS + 1)]

    def test_zero2_one_rank(self):
        self.check_run("zero2_w1", self.tags("zero2_w1"))

    def test_zero2_two_ranks(self):
        self.check_run("zero2_w2", self.tags("zero2_w2"))

    def test_zero3_one_rank(self):
        self.check_run("zero3_w1", self.tags("zero3_w1"))

    def test_zero3_two_ranks(self):
        got = self.check_run("zero3_w2", self.tags("zero3_w2"))
        self.assertIn("frozen.weight", got)  # from each rank's frozen_param_fragments

    def test_latest_parent(self):
        # The parent folder is the tag its `latest` names (the last step). Its name sorts before its
        # tags' (step order knows names only): --sort none keeps it last.
        for name in ("zero2_w2", "zero3_w2"):
            self.check_run(name, self.tags(name)[:-1] + [run(name)], "--sort", "none")

    def test_single_checkpoint_is_zero_to_fp32(self):
        out = self.path("one.pt")
        swavg("average", run("zero3_w2"), "-o", out)
        got, want = load_output(out), consolidated("zero3_w2", STEPS)
        self.assertEqual(list(got), list(want))  # zero_to_fp32's order: buffers, frozen, trainable, tied
        for k in want:
            self.assertTrue(same_bits(got[k], want[k]), k)

    def test_folder_output(self):
        # -o DIR/ writes a Hugging Face folder; nothing of the DeepSpeed folder (latest, zero_to_fp32.py) is copied.
        out = self.path("avg")
        swavg("average", *self.tags("zero3_w2"), "-o", out + "/")
        self.assertEqual(sorted(os.listdir(out)), ["model.safetensors"])
        want = self.path("avg.pt")
        swavg("average", *self.tags("zero3_w2"), "-o", want)
        got, ref = load_safetensors(os.path.join(out, "model.safetensors"))[0], load_output(want)
        self.assertEqual(sorted(got), sorted(k for k in ref))
        for k in got:
            self.assertTrue(same_bits(got[k], ref[k].contiguous()), k)

    def test_latest_bounds(self):
        # `latest` holds at most 4096 bytes; the tag, a folder name, at most 255.
        for size, tag_len, ok in ((4096, 255, True), (4097, 255, False), (4096, 256, False)):
            with self.subTest(size=size, tag_len=tag_len):
                parent = self.path("run%d_%d" % (size, tag_len))
                tag = ("global_step3" + "x" * tag_len)[:tag_len]
                os.makedirs(parent)
                if tag_len <= 255:
                    shutil.copytree(self.tags("zero2_w1")[-1], os.path.join(parent, tag))
                with open(os.path.join(parent, "latest"), "w") as f:
                    f.write(tag + "\n" * (size - tag_len))
                out = self.path("out.pt")
                p = swavg("average", parent, "-o", out, check=False)
                self.assertEqual(p.returncode, 0 if ok else 3, p.stderr)
                self.assertEqual(os.path.exists(out), ok)
                if ok:
                    os.remove(out)
                else:
                    self.assertIn("4096 bytes" if size > 4096 else "expected the name of a folder", p.stderr)


@unittest.skipIf(get_fp32_state_dict_from_zero_checkpoint is None, "deepspeed is not installed")
class MemoryTest(unittest.TestCase):
    """Averaging two 4-rank ZeRO-3 tag folders of 16 and of 64 parameters of 4 MiB (each rebuilt from
    4 ranks' flat partitions; scripts/fixtures/deepspeed.py make_zero3_memory): the peak RSS of the
    larger average is within 48 MiB of the smaller one's, while its inputs hold 2 x 192 MiB more.
    The smaller folders are checked against zero_to_fp32, both averages against the parameters."""
    SIZES = (16, 64)
    # The pieces being read are mapped a large page-cache folio (up to 2 MiB) at a time around each
    # touch, a few MiB per piece for a moment, whatever the model's size: measured up to 17 MiB.
    LIMIT = 48 << 20

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="swavg-zero3-memory-")
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
        from fixtures import deepspeed as fixtures
        cls.fixtures = fixtures
        for n in cls.SIZES:
            for s in (0, 1):
                fixtures.make_zero3_memory(os.path.join(cls.tmp, "z%d_%d" % (n, s), "global_step1"), n, s)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_layout_is_zero_to_fp32s(self):
        n = self.SIZES[0]
        got = get_fp32_state_dict_from_zero_checkpoint(os.path.join(self.tmp, "z%d_0" % n), tag="global_step1")
        want = self.fixtures.zero3_memory_params(n, 0)
        self.assertEqual(list(got), list(want))
        for k in want:
            self.assertTrue(same_bits(got[k].contiguous(), want[k]), k)

    def test_peak_rss_is_flat(self):
        peaks = {}
        for n in self.SIZES:
            out = os.path.join(self.tmp, "avg%d.pt" % n)
            peaks[n] = peak_rss("average", *[os.path.join(self.tmp, "z%d_%d" % (n, s), "global_step1")
                                             for s in (0, 1)], "-o", out)
            got = load_output(out)
            refs = [self.fixtures.zero3_memory_params(n, s) for s in (0, 1)]
            self.assertEqual(sorted(got), sorted(refs[0]))
            for k in refs[0]:
                self.assertTrue(same_bits(got[k], swa_fold([r[k] for r in refs])), k)
            os.remove(out)
        growth = peaks[self.SIZES[1]] - peaks[self.SIZES[0]]
        self.assertLess(growth, self.LIMIT, "peak RSS %s MiB for %s parameters per input" % (
            [round(peaks[n] / 2 ** 20, 1) for n in self.SIZES], list(self.SIZES)))


class RankMismatchTest(TempDirTest):
    """ZeRO-3 ranks that disagree with rank 0 (files of two runs in one folder): another number of flat
    groups, another partition_count. Refused (exit 3), naming the rank's file; the folder as written
    (scripts/fixtures/deepspeed.py make_zero3_memory, DeepSpeed's layout) averages."""

    def setUp(self):
        super().setUp()
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
        from fixtures import deepspeed as fixtures
        self.fixtures = fixtures
        self.tag = self.path("run/global_step1")
        fixtures.make_zero3_memory(self.tag, 1, 0)
        self.optim1 = os.path.join(self.tag, "zero_pp_rank_1_mp_rank_00_optim_states.pt")

    def rewrite(self, change):
        import torch
        obj = torch.load(self.optim1, weights_only=False)
        change(obj["optimizer_state_dict"])
        torch.save(obj, self.optim1)

    def average(self):
        out = self.path("avg.pt")
        p = swavg("average", self.tag, self.tag, "-o", out, check=False)
        if p.returncode == 0:
            os.remove(out)
        return p

    def test_as_written(self):
        out = self.path("avg.pt")
        swavg("average", self.tag, self.tag, "-o", out)
        want = self.fixtures.zero3_memory_params(1, 0)
        got = load_output(out)
        self.assertEqual(sorted(got), sorted(want))
        for k in want:
            self.assertTrue(same_bits(got[k], want[k]), k)
        os.remove(out)
        self.rewrite(lambda o: o.update(partition_count=[4]))  # one per param group, as DeepSpeed may save it
        self.assertEqual(self.average().returncode, 0)

    def test_another_number_of_groups(self):
        import torch
        self.rewrite(lambda o: o["fp32_flat_groups"].append(torch.zeros(3)))
        p = self.average()
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn(self.optim1 + ": 2 flat groups, but rank 0 has 1", p.stderr)

    def test_another_partition_count(self):
        for count, text in ((2, "2"), (8, "8"), ([2], "[2]")):
            with self.subTest(count=count):
                self.rewrite(lambda o: o.update(partition_count=count))
                p = self.average()
                self.assertEqual(p.returncode, 3, p.stderr)
                self.assertIn(self.optim1 + ": partition_count is %s, but rank 0's is 4" % text, p.stderr)
                self.assertEqual(sorted(os.listdir(self.tmp)), ["run"])


class MegatronTest(TempDirTest):
    def folder(self, metadata):
        folder = self.path("iter_0000003")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "metadata.json"), "w") as f:
            f.write(metadata)
        with open(os.path.join(folder, "common.pt"), "wb") as f:
            f.write(b"PK")
        return folder

    def test_torch_dist_named(self):
        # As megatron.core.dist_checkpointing writes metadata.json; the limit is 1 MiB, padding included.
        text = '{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch"}'
        for size, named in ((1 << 20, True), ((1 << 20) + 1, False)):
            with self.subTest(size=size):
                p = swavg("average", self.folder(text + " " * (size - len(text))), "-o", self.path("o.pt"),
                          check=False)
                self.assertEqual(p.returncode, 3, p.stderr)
                if named:
                    self.assertIn("a Megatron-core distributed checkpoint (metadata.json: sharded_backend "
                                  "'torch_dist', common.pt)", p.stderr)
                else:
                    self.assertIn("1048576", p.stderr)
                self.assertFalse(os.path.exists(self.path("o.pt")))

    def test_another_folders_metadata_json_is_not_read(self):
        # A Hugging Face folder holding a large metadata.json of its own (no .metadata, no common.pt).
        import torch
        from safetensors.torch import save_file
        folder = self.path("hf")
        os.makedirs(folder)
        save_file({"w": torch.ones(3)}, os.path.join(folder, "model.safetensors"))
        with open(os.path.join(folder, "metadata.json"), "w") as f:
            f.write('{"sharded_backend": "torch_dist", "pad": "%s"}' % ("x" * (2 << 20)))
        swavg("average", folder, folder, "-o", self.path("o.safetensors"))
        self.assertTrue(os.path.exists(self.path("o.safetensors")))


if __name__ == "__main__":
    unittest.main()
