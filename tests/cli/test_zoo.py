"""swavg average on the checkpoint layouts of real projects (scripts/fixtures/zoo.py): torchvision,
Lightning, timm, fairseq, DeepSpeed, MMEngine, Hugging Face, _extra_state, tied weights, sparse
tensors, non-string keys. Each output is compared with PyTorch's own fold of the same state dicts
bit for bit, every entry of the state dict must be accounted for (averaged, carried over from the
latest input, or the run fails naming it), and load_state_dict(strict=True) must take the output."""
import json
import os
import sys
import unittest

import torch

from common import TempDirTest, fixture, same_bits, swavg
from reference import is_buffer_name, load_safetensors, swa_fold, write_rules

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from fixtures import zoo  # noqa: E402

zoo.install_fake_modules()


def zoo_paths(kind, name="ckpt_%d.pt", n=3):
    return [fixture(os.path.join("zoo", kind, name % i)) for i in range(n)]


def load(path):
    return torch.load(path, weights_only=False)


def plain(x):
    """A value with opaque objects replaced by (class, their plain state), for comparing."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    if type(x).__module__ in ("builtins", "collections") or isinstance(x, torch.dtype):
        return x
    return (type(x), plain(vars(x)))


class ZooTest(TempDirTest):
    def run_average(self, paths, *args, out_name="avg.pt"):
        out, report = self.path(out_name), self.path("report.json")
        swavg("average", *paths, "-o", out, "--report", report, *args)
        with open(report) as f:
            return out, json.load(f)

    def expected(self, dicts):
        """PyTorch's fold: floating non-buffers averaged as AveragedModel does, the rest the latest."""
        last = dicts[-1]
        want = {}
        for k, v in last.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point() and not is_buffer_name(k):
                want[k] = swa_fold([d[k] for d in dicts])
            else:
                want[k] = v
        return want

    def assert_same_entry(self, got, want, name):
        if isinstance(want, torch.Tensor):
            self.assertIsInstance(got, torch.Tensor, name)
            self.assertTrue(same_bits(got, want), "%s differs from PyTorch's" % name)
        else:
            self.assertEqual(plain(got), plain(want), name)

    def check_fold(self, paths, select, *args, model=None, prefix=""):
        """Averages `paths`; checks every entry against PyTorch and the report's accounting."""
        out, report = self.run_average(paths, *args, "--force")
        dicts = [select(load(p)) for p in paths]
        want = self.expected(dicts)
        got = load(out)
        self.assertEqual(sorted(got.keys(), key=str), sorted(want.keys(), key=str))
        tensors = [k for k, v in dicts[-1].items() if isinstance(v, torch.Tensor)]
        self.assertEqual([k for k in got if isinstance(got[k], torch.Tensor)], tensors)
        for k in want:
            with self.subTest(entry=k):
                self.assert_same_entry(got[k], want[k], k)
        others = [k for k in want if not isinstance(want[k], torch.Tensor)]
        self.assertEqual([e["name"] for e in report["carried"]], others)
        self.assertTrue(all(e["from"] == paths[-1] for e in report["carried"]))
        self.assertEqual([t["name"] for t in report["details"]], tensors)
        if model is not None:
            state = {k[len(prefix):]: v for k, v in got.items()}
            model.load_state_dict(state, strict=True)
        return got, report


class LayoutsTest(ZooTest):
    def test_torchvision_plain(self):
        paths = zoo_paths("torchvision")
        got, _ = self.check_fold(paths, lambda o: o, model=zoo.ZooNet())
        # Also against AveragedModel itself, and readable with weights_only=True.
        net = zoo.ZooNet()
        avg = torch.optim.swa_utils.AveragedModel(net)
        for p in paths:
            net.load_state_dict(load(p))
            avg.update_parameters(net)
        for k, v in avg.module.named_parameters():
            self.assertTrue(same_bits(got[k], v.detach()), k)
        torch.load(self.path("avg.pt"), weights_only=True)

    def test_lightning(self):
        self.check_fold(zoo_paths("lightning", "epoch=%d.ckpt"), lambda o: o["state_dict"], model=zoo.ZooNet(),
                        prefix="model.")

    def test_timm_takes_the_ema_in_every_input(self):
        _, report = self.check_fold(zoo_paths("timm"), lambda o: o["state_dict_ema"], model=zoo.ZooNet())
        self.check_fold(zoo_paths("timm"), lambda o: o["state_dict"], "--key", "state_dict", model=zoo.ZooNet())

    def test_fairseq(self):
        self.check_fold(zoo_paths("fairseq"), lambda o: o["model"], model=zoo.ZooNet())

    def test_deepspeed(self):
        self.check_fold(zoo_paths("deepspeed"), lambda o: o["module"], model=zoo.ZooNet())

    def test_mmengine(self):
        self.check_fold(zoo_paths("mmengine"), lambda o: o["state_dict"], model=zoo.ZooNet())

    def test_hf_bin_and_safetensors(self):
        self.check_fold(zoo_paths("hf", "run_%d/pytorch_model.bin"), lambda o: o, model=zoo.ZooNet())
        st = zoo_paths("hf", "run_%d/model.safetensors")
        out, report = self.run_average(st, out_name="avg.safetensors")
        got, metadata = load_safetensors(out)
        self.assertEqual(metadata.get("format"), "pt")  # transformers' from_pretrained requires it
        self.assertIn("swavg", metadata)
        dicts = [load_safetensors(p)[0] for p in st]
        for k, v in self.expected(dicts).items():
            self.assertTrue(same_bits(got[k], v), k)
        zoo.ZooNet().load_state_dict(got, strict=True)

    def test_legacy_format(self):
        """torch.save(..., _use_new_zipfile_serialization=False), as zoos made before PyTorch 1.6 hold them."""
        self.check_fold(zoo_paths("legacy"), lambda o: o, model=zoo.ZooNet())
        self.check_fold(zoo_paths("legacy", "training_%d.pt"), lambda o: o["state_dict"], model=zoo.ZooNet())

    def test_extra_state_carried(self):
        paths = zoo_paths("extra_state")
        got, report = self.check_fold(paths, lambda o: o, model=zoo.ZooNet(extra=True))
        extra = got["block._extra_state"]
        self.assertEqual(extra["step"], zoo.SEEDS[-1])
        self.assertEqual(extra["blob"], bytes([zoo.SEEDS[-1] % 256, 0, 255]))
        self.assertEqual(extra["big"], 2 ** 70 + zoo.SEEDS[-1])
        self.assertEqual(extra["flags"], (True, None))
        self.assertEqual(type(extra["scale"]).__name__, "RunningScale")
        self.assertEqual(report["carried"][0]["type"], "dict")
        self.assertFalse(report["objects_dropped"])

    def test_extra_state_to_safetensors(self):
        paths = zoo_paths("extra_state")
        out = self.path("avg.safetensors")
        p = swavg("average", *paths, "-o", out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("block._extra_state", p.stderr)
        self.assertIn("--drop-objects", p.stderr)
        self.assertFalse(os.path.exists(out))
        out, report = self.run_average(paths, "--drop-objects", out_name="avg.safetensors")
        self.assertTrue(report["objects_dropped"])
        self.assertEqual([e["name"] for e in report["carried"]], ["block._extra_state"])
        got, _ = load_safetensors(out)
        self.assertNotIn("block._extra_state", got)

    def test_convert_carries_extra_state(self):
        src = zoo_paths("extra_state")[0]
        out = self.path("conv.pt")
        swavg("convert", src, "-o", out)
        got, want = load(out), load(src)
        self.assertEqual(got.keys(), want.keys())
        self.assertEqual(got["block._extra_state"]["name"], want["block._extra_state"]["name"])
        zoo.ZooNet(extra=True).load_state_dict(got, strict=True)
        p = swavg("convert", src, "-o", self.path("conv.safetensors"), check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        swavg("convert", src, "-o", self.path("conv.safetensors"), "--drop-objects")

    def test_tied_weights_stay_tied(self):
        paths = zoo_paths("tied")
        got, report = self.check_fold(paths, lambda o: o, model=zoo.ZooNet(tied=True))
        self.assertEqual(got["head.weight"].data_ptr(), got["embed.weight"].data_ptr())
        self.assertEqual(report["tied"], [{"name": "head.weight", "to": "embed.weight"}])
        # One storage record: the archive holds the embedding's bytes once.
        import zipfile
        with zipfile.ZipFile(self.path("avg.pt")) as z:
            records = [i for i in z.infolist() if "/data/" in i.filename]
        self.assertEqual(len(records), len([k for k, v in got.items() if isinstance(v, torch.Tensor)]) - 1)
        # safetensors cannot share: both are written, equal.
        out, _ = self.run_average(paths, out_name="avg.safetensors")
        st, _ = load_safetensors(out)
        self.assertTrue(same_bits(st["head.weight"], st["embed.weight"]))

    def test_ties_follow_the_decisions(self):
        paths = zoo_paths("tied")
        dicts = [load(p) for p in paths]
        # The embedding dropped: the head is written on its own.
        rules = write_rules(self.path("drop.json"), [{"match": "^embed\\.weight$", "action": "drop"}])
        got, report = self.run_average(paths, "--rules", rules, "--force")
        got = load(got)
        self.assertNotIn("embed.weight", got)
        self.assertTrue(same_bits(got["head.weight"], swa_fold([d["head.weight"] for d in dicts])))
        self.assertEqual(report["tied"], [])
        # Decided differently: not tied.
        rules = write_rules(self.path("latest.json"), [{"match": "^head\\.weight$", "action": "latest"}])
        got, report = self.run_average(paths, "--rules", rules, "--force")
        got = load(got)
        self.assertEqual(report["tied"], [])
        self.assertTrue(same_bits(got["head.weight"], dicts[-1]["head.weight"]))
        self.assertTrue(same_bits(got["embed.weight"], swa_fold([d["embed.weight"] for d in dicts])))

    def test_resumed_ties_stay_tied(self):
        paths = zoo_paths("tied")
        first, _ = self.run_average(paths[:2], out_name="first.pt")
        out, report = self.run_average(["--resume", first, paths[2]], out_name="resumed.pt")
        got = load(out)
        self.assertEqual(report["tied"], [{"name": "head.weight", "to": "embed.weight"}])
        self.assertEqual(got["head.weight"].data_ptr(), got["embed.weight"].data_ptr())
        want = swa_fold([load(p)["embed.weight"] for p in paths])
        self.assertTrue(same_bits(got["embed.weight"], want))

    def test_untied_in_one_input_is_not_tied(self):
        paths = zoo_paths("tied")
        untied = load(paths[1])
        untied["head.weight"] = untied["head.weight"].clone()
        torch.save(untied, self.path("untied.pt"))
        mixed = [paths[0], self.path("untied.pt"), paths[2]]
        got, report = self.check_fold(mixed, lambda o: o, "--sort", "none")
        self.assertEqual(report["tied"], [])
        self.assertNotEqual(got["head.weight"].data_ptr(), got["embed.weight"].data_ptr())


class ObjectsTest(ZooTest):
    def test_every_pickle_shape_round_trips(self):
        src = fixture("zoo/objects/ckpt_0.pt")
        out = self.path("conv.pt")
        swavg("convert", src, "-o", out)
        got, want = load(out), load(src)
        self.assertEqual(set(got.keys()), set(want.keys()))
        for k, v in want.items():
            if isinstance(v, torch.Tensor):
                self.assertTrue(same_bits(got[k], v), k)
        self.assertIs(got["shared_a"], got["shared_b"])
        self.assertEqual(got["shared_a"], {"k": [1, 2]})
        self.assertIs(got["cycle"][0], got["cycle"])
        self.assertIs(got["through"][0][0], got["through"])
        self.assertEqual(got["through"][0][1], "t")
        for k in ("set", "empty_bytes", "bytes", "neg_big", "int64_min", "text", "none", "flag", "complex",
                  "dtype", 3):
            self.assertEqual(got[k], want[k], k)
        self.assertEqual(set(got["frozen"]), {4})
        self.assertEqual(str(got["float"]), "-0.0")
        self.assertEqual(got["attributed"], want["attributed"])
        self.assertEqual(got["attributed"]._note, "kept")
        self.assertEqual(vars(got["args"]), vars(want["args"]))

    def test_averaged_with_objects(self):
        src = fixture("zoo/objects/ckpt_0.pt")
        out, report = self.run_average([src, src])
        got = load(out)
        self.assertIs(got["cycle"][0], got["cycle"])
        self.assertEqual(len(report["carried"]), len([k for k, v in load(src).items()
                                                      if not isinstance(v, torch.Tensor)]))


class RefusalsTest(ZooTest):
    def assert_refused(self, paths, code, *needles, args=()):
        out = self.path("avg.pt")
        p = swavg("average", *paths, "-o", out, *args, check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        for n in needles:
            self.assertIn(n, p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_sparse_tensor_refused_by_name(self):
        self.assert_refused(zoo_paths("sparse"), 3, "'adjacency' is a sparse tensor",
                            "swavg averages dense tensors only")

    def test_tensor_under_a_non_string_key(self):
        self.assert_refused(zoo_paths("int_key", n=1) * 2, 3, "key 7 of type int")

    def test_state_dicts_found_at_different_places(self):
        # timm's state_dict_ema and a plain state dict: EMA and raw weights must not mix.
        mixed = zoo_paths("timm")[:2] + zoo_paths("torchvision")[2:]
        self.assert_refused(mixed, 4, "different places", "'state_dict_ema'", "the top level", mixed[2], "--key")

    def test_key_missing_in_one_input(self):
        mixed = zoo_paths("timm")[:2] + zoo_paths("torchvision")[2:]
        self.assert_refused(mixed, 2, mixed[2], "no entry 'state_dict'", args=("--key", "state_dict"))


if __name__ == "__main__":
    unittest.main()
