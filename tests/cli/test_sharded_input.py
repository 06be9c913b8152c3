"""Sharded checkpoints as inputs: Hugging Face folders (safetensors shards written by the reference
writer, .bin shards written by torch.save; an index as transformers' save_pretrained writes it)
averaged by swavg must give the same bits as the same checkpoints as single files and as PyTorch's
own average (torch.optim.swa_utils.AveragedModel, bfloat16: the float32 fold PyTorch computes)."""
import json
import os
import unittest

import torch

import safetensors_ref
from common import TempDirTest, same_bits, swavg
from reference import (averaged_model_reference, is_buffer_name, load_output, load_safetensors, run_paths,
                       state_dict_of, swa_fold)

SHARD_BYTES = 1000  # small shards: the CNN fixtures (6.8 kB, 21 tensors) split into 4 or more


def shard_groups(sd, max_bytes):
    """transformers' greedy split: tensors in state-dict order, a new shard when the next would not fit."""
    groups, size = [[]], 0
    for name, t in sd.items():
        nbytes = t.numel() * t.element_size()
        if groups[-1] and size + nbytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    return groups


def write_hf_folder(folder, sd, kind, max_bytes=SHARD_BYTES):
    """A folder as save_pretrained writes it: shards, an index with sorted keys and total_size, a config."""
    os.makedirs(folder, exist_ok=True)
    groups = shard_groups(sd, max_bytes)
    weight_map = {}
    for k, names in enumerate(groups, 1):
        if kind == "safetensors":
            file = "model-%05d-of-%05d.safetensors" % (k, len(groups))
            safetensors_ref.write(os.path.join(folder, file), {n: sd[n].contiguous() for n in names},
                                  metadata={"format": "pt"})
        else:
            file = "pytorch_model-%05d-of-%05d.bin" % (k, len(groups))
            torch.save({n: sd[n].clone() for n in names}, os.path.join(folder, file))
        weight_map.update({n: file for n in names})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in sd.values())},
             "weight_map": weight_map}
    name = "model.safetensors.index.json" if kind == "safetensors" else "pytorch_model.bin.index.json"
    with open(os.path.join(folder, name), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write('{"model_type": "cnn"}\n')
    return groups


def key_of(path):
    """--key model where a fixture holds its state dict there (the training checkpoints)."""
    obj = torch.load(path, weights_only=False)
    return ["--key", "model"] if isinstance(obj, dict) and isinstance(obj.get("model"), dict) else []


def expected_order(groups):
    """swavg's order: shard files as they first appear in the (sorted) weight map, each in its own order."""
    shard_of = {n: k for k, names in enumerate(groups) for n in names}
    order = []
    for name in sorted(shard_of):
        if shard_of[name] not in order:
            order.append(shard_of[name])
    return [n for k in order for n in groups[k]]


class ShardedInputTest(TempDirTest):
    def folders(self, run, kind):
        paths = run_paths(run)
        folders = []
        for i, p in enumerate(paths):
            folder = self.path("%s_%s_%d" % (run, kind, i))
            groups = write_hf_folder(folder, state_dict_of(p), kind)
            self.assertGreaterEqual(len(groups), 3)
            folders.append(folder)
        return paths, folders, groups

    def assert_same(self, got, want, names):
        for k in names:
            with self.subTest(tensor=k):
                self.assertTrue(same_bits(got[k], want[k]), "%s differs" % k)

    def check_run(self, run, kind):
        paths, folders, groups = self.folders(run, kind)
        out, single = self.path("sharded_%s_%s.pt" % (run, kind)), self.path("single_%s_%s.pt" % (run, kind))
        swavg("average", *folders, "-o", out)
        swavg("average", *paths, *key_of(paths[0]), "-o", single)
        got, want = load_output(out), load_output(single)
        self.assertEqual(list(got), expected_order(groups))
        self.assertEqual(sorted(got), sorted(want))
        self.assert_same(got, want, want)
        return paths, got

    def test_safetensors_shards_fp32(self):
        paths, got = self.check_run("cnn", "safetensors")
        ref, n = averaged_model_reference("cnn", paths, use_buffers=False)
        last = state_dict_of(paths[-1])
        for k in got:
            with self.subTest(tensor=k):
                self.assertTrue(same_bits(got[k], last[k] if is_buffer_name(k) else ref[k]), k)

    def test_bin_shards_bf16(self):
        paths, got = self.check_run("cnn_bf16", "bin")
        sds = [state_dict_of(p) for p in paths]
        for k, v in got.items():
            with self.subTest(tensor=k):
                if is_buffer_name(k):
                    self.assertTrue(same_bits(v, sds[-1][k]), k)
                else:
                    want = swa_fold([sd[k] for sd in sds], torch.float32).to(torch.bfloat16)
                    self.assertTrue(same_bits(v, want), k)

    def test_bin_shards_fp32_and_safetensors_bf16(self):
        self.check_run("cnn", "bin")
        self.check_run("cnn_bf16", "safetensors")

    def test_index_argument_mixed_with_a_file_and_safetensors_output(self):
        paths, folders, _ = self.folders("cnn", "safetensors")
        plain = self.path("plain.safetensors")  # a single file among the sharded ones
        safetensors_ref.write(plain, {k: v.contiguous() for k, v in state_dict_of(paths[2]).items()})
        out, single = self.path("avg.safetensors"), self.path("single.pt")
        swavg("average", os.path.join(folders[0], "model.safetensors.index.json"), folders[1] + "/", plain,
              "-o", out)
        swavg("average", *paths[:3], *key_of(paths[0]), "-o", single)
        got, metadata = load_safetensors(out)
        want = load_output(single)
        self.assertEqual(sorted(got), sorted(want))
        self.assert_same(got, want, want)
        self.assertEqual(metadata["format"], "pt")  # the first shard's metadata is inherited
        self.assertIn("swavg", metadata)

    def test_same_storage_keys_in_two_bin_shards_are_not_ties(self):
        # torch.save numbers storages from 0 in every file: shard 1's "0" is not shard 2's "0".
        folders = []
        for i in range(2):
            g = torch.Generator().manual_seed(i)
            sd = {"a": torch.randn(64, generator=g), "b": torch.randn(64, generator=g)}
            folder = self.path("tie_%d" % i)
            write_hf_folder(folder, sd, "bin", max_bytes=256)
            folders.append((folder, sd))
        out = self.path("avg.pt")
        swavg("average", *[f for f, _ in folders], "-o", out)
        got = load_output(out)
        for k in ("a", "b"):
            self.assertTrue(same_bits(got[k], swa_fold([sd[k] for _, sd in folders])), k)
        self.assertFalse(torch.equal(got["a"], got["b"]))

    def test_inspect_a_folder(self):
        _, folders, groups = self.folders("cnn", "safetensors")
        p = swavg("inspect", folders[0], "--json")
        report = json.loads(p.stdout)
        self.assertEqual(report["format"], "hf")  # the input's kind: a Hugging Face folder
        self.assertEqual(len(report["tensors"]), sum(len(g) for g in groups))


class ShardedInputErrorTest(TempDirTest):
    def make(self, kind="safetensors"):
        folder = self.path("ckpt")
        g = torch.Generator().manual_seed(3)
        sd = {"w%d" % i: torch.randn(100, generator=g) for i in range(6)}
        write_hf_folder(folder, sd, kind, max_bytes=800)
        return folder

    def assert_failed(self, p, code, out, *needles):
        self.assertEqual(p.returncode, code, p.stderr)
        self.assertFalse(os.path.exists(out), "an output was written although swavg failed")
        for n in needles:
            self.assertIn(n, p.stderr)

    def test_missing_shard(self):
        folder = self.make()
        os.remove(os.path.join(folder, "model-00002-of-00003.safetensors"))
        out = self.path("avg.pt")
        p = swavg("average", folder, folder, "-o", out, check=False)
        self.assert_failed(p, 3, out, "model.safetensors.index.json", "model-00002-of-00003.safetensors",
                           "is missing")

    def test_tensor_missing_from_its_shard(self):
        folder = self.make("bin")
        index = os.path.join(folder, "pytorch_model.bin.index.json")
        with open(index) as f:
            doc = json.load(f)
        doc["weight_map"]["w9"] = "pytorch_model-00001-of-00003.bin"
        with open(index, "w") as f:
            json.dump(doc, f)
        out = self.path("avg.pt")
        p = swavg("average", folder, folder, "-o", out, check=False)
        self.assert_failed(p, 3, out, "tensor 'w9' is listed in shard 'pytorch_model-00001-of-00003.bin'")

    def test_shard_name_outside_the_folder(self):
        folder = self.make()
        index = os.path.join(folder, "model.safetensors.index.json")
        with open(index) as f:
            doc = json.load(f)
        doc["weight_map"]["w0"] = "../model-00001-of-00003.safetensors"
        with open(index, "w") as f:
            json.dump(doc, f)
        out = self.path("avg.pt")
        p = swavg("average", folder, folder, "-o", out, check=False)
        self.assert_failed(p, 3, out, "tensor 'w0'", "'../model-00001-of-00003.safetensors'")

    def test_an_output_that_is_a_shard_is_refused(self):
        folder = self.make()
        shard = os.path.join(folder, "model-00001-of-00003.safetensors")
        with open(shard, "rb") as f:
            before = f.read()
        p = swavg("average", folder, folder, "-o", shard, "--force", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("never overwrites its inputs", p.stderr)
        with open(shard, "rb") as f:
            self.assertEqual(f.read(), before)
        p = swavg("convert", folder, "-o", shard, "--force", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)

    def test_folder_without_a_checkpoint(self):
        folder = self.path("empty")
        os.makedirs(folder)
        open(os.path.join(folder, "config.json"), "w").close()
        out = self.path("avg.pt")
        p = swavg("average", folder, folder, "-o", out, check=False)
        self.assert_failed(p, 3, out, folder, "model.safetensors.index.json", "'config.json'")

    def test_total_size_that_disagrees_is_a_warning(self):
        folder = self.make()
        index = os.path.join(folder, "model.safetensors.index.json")
        with open(index) as f:
            doc = json.load(f)
        doc["metadata"]["total_size"] += 1
        with open(index, "w") as f:
            json.dump(doc, f)
        out = self.path("avg.pt")
        p = swavg("average", folder, folder, "-o", out)
        self.assertIn("total_size is 2401", p.stderr)
        self.assertTrue(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
