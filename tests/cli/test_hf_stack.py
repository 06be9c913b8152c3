"""The real Hugging Face stack as the reference (fixtures: scripts/fixtures/hf_stack.py).

Folders written by transformers (tiny Llama, GPT-2 with tied embeddings, BERT, T5, a Mixtral-style
MoE; safetensors shards and torch.save shards), diffusers (a UNet's folder; a pipeline root),
PEFT (LoRA adapter folders), a hub cache snapshot (symlinks into ../../blobs/), timm and Lightning
checkpoints are averaged by swavg, and every output is loaded by the library that consumes it:
AutoModel*.from_pretrained, UNet2DConditionModel.from_pretrained, PeftModel.from_pretrained,
timm's load_checkpoint, a LightningModule's load_state_dict, with no missing or unexpected keys,
and with weights equal to the same average computed in Python: torch.optim.swa_utils.AveragedModel
(float32, bit for bit; get_ema_multi_avg_fn for ema) and, for bfloat16, the float32 accumulation
swavg does by default, rounded once. Every safetensors file written is opened with
safetensors' safe_open. Nothing is fetched from a hub (HF_HUB_OFFLINE=1).

Skipped when transformers (or the library a test needs) is not importable, or the fixtures were
made without it.
"""
import glob
import json
import os
import shutil
import unittest
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

import torch

from common import TempDirTest, fixture, same_bits, swavg
from reference import swa_fold

try:
    import transformers
    from safetensors import safe_open
    from safetensors.torch import load_file
except ImportError:  # the suite's python without the Hugging Face stack
    transformers = None

ROOT = fixture("hf_stack")
HAVE = transformers is not None and os.path.isdir(ROOT)
RUNS = 3
MODELS = {  # fixture folder -> the Auto class that loads it
    "llama": "AutoModelForCausalLM", "gpt2": "AutoModelForCausalLM", "bert": "AutoModel",
    "t5": "AutoModelForSeq2SeqLM", "mixtral": "AutoModelForCausalLM",
}


def runs(*parts):
    return [os.path.join(ROOT, *parts, "run_%d" % i) for i in range(RUNS)]


def swa_models(models, **kwargs):
    """AveragedModel over the models, in order (default avg_fn: avg + (x - avg) / (n + 1); its
    buffers, with use_buffers=False, the latest model's)."""
    avg = torch.optim.swa_utils.AveragedModel(models[0], **kwargs)
    for m in models:
        avg.update_parameters(m)
    return avg.module


def disk_tensors(folder):
    """{name: tensor} of every weight file in a folder, as the libraries' own readers give them."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        out.update(load_file(path))
    for path in sorted(glob.glob(os.path.join(folder, "*.bin"))):
        out.update(torch.load(path, map_location="cpu", weights_only=True))
    return out


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@unittest.skipUnless(HAVE, "transformers or the hf_stack fixtures are missing")
class HfStackTest(TempDirTest):
    def assert_state_equal(self, got, want, what):
        self.assertEqual(sorted(got), sorted(want), what)
        for k in want:
            self.assertTrue(same_bits(got[k], want[k].to(got[k].dtype)), "%s: %s differs" % (what, k))

    def assert_safetensors_readable(self, folder):
        """safe_open reads every safetensors file; the index (if any) lists exactly their tensors."""
        files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
        names = {}
        for path in files:
            with safe_open(path, framework="pt") as f:
                self.assertEqual(f.metadata().get("format"), "pt", path)
                for k in f.keys():
                    f.get_tensor(k)
                    names[k] = os.path.basename(path)
        index = glob.glob(os.path.join(folder, "*.safetensors.index.json"))
        if index:
            with open(index[0]) as f:
                self.assertEqual(json.load(f)["weight_map"], names)
        return files

    def load_pretrained(self, auto, folder):
        model, info = quiet(getattr(transformers, auto).from_pretrained, folder, output_loading_info=True)
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            self.assertFalse(info.get(key), "%s: %s %s" % (folder, key, info.get(key)))
        return model

    def check_transformers(self, kind, form, fmt=None, shard="40KB"):
        inputs = runs(kind, form)
        out = self.path("%s_%s_%s/" % (kind, form, fmt))
        args = ["average", *inputs, "-o", out, "--max-shard-size", shard]
        if fmt:
            args += ["--format", fmt]
        swavg(*args)
        auto = MODELS[kind]
        got = self.load_pretrained(auto, out)
        want = swa_models([self.load_pretrained(auto, p) for p in inputs])
        self.assert_state_equal(got.state_dict(), want.state_dict(), "%s/%s" % (kind, form))
        # The folder as save_pretrained lays it out: the first input's tensors under the same names,
        # in shards of the library's names, and the config files copied.
        self.assertEqual(sorted(disk_tensors(out)), sorted(disk_tensors(inputs[0])))
        stem = "pytorch_model" if (fmt or "safetensors") == "torch" else "model"
        ext = "bin" if fmt == "torch" else "safetensors"
        shards = sorted(n for n in os.listdir(out) if n.endswith("." + ext))
        self.assertGreater(len(shards), 1, shards)
        self.assertTrue(all(n.startswith(stem + "-0000") for n in shards), shards)
        self.assertTrue(os.path.isfile(os.path.join(out, "%s.%s.index.json" % (stem, ext))))
        with open(os.path.join(out, "config.json")) as a, open(os.path.join(inputs[-1], "config.json")) as b:
            self.assertEqual(a.read(), b.read())
        self.assert_safetensors_readable(out)
        if form == "st" and fmt is None:  # the index save_pretrained wrote: its metadata and its layout
            index = "%s.%s.index.json" % (stem, ext)
            with open(os.path.join(out, index)) as a, open(os.path.join(inputs[-1], index)) as b:
                written, want = a.read(), b.read()
            self.assertIn("total_parameters", json.loads(want)["metadata"])  # transformers 5 writes it
            self.assertEqual(json.loads(written)["metadata"], json.loads(want)["metadata"])
            self.assertEqual(written, json.dumps(json.loads(written), indent=2, sort_keys=True) + "\n")

    def test_transformers_safetensors_folders(self):
        for kind in MODELS:
            with self.subTest(kind=kind):
                self.check_transformers(kind, "st")

    def test_transformers_torch_folders(self):
        for kind in MODELS:
            with self.subTest(kind=kind):
                self.check_transformers(kind, "bin")

    def test_torch_output_folders(self):
        for kind in ("gpt2", "mixtral"):
            with self.subTest(kind=kind):
                self.check_transformers(kind, "st", fmt="torch")

    def test_single_file_output_folder(self):
        out = self.path("llama/")
        swavg("average", *runs("llama", "st"), "-o", out)
        self.assertEqual(sorted(os.listdir(out)), ["config.json", "generation_config.json", "model.safetensors"])
        self.load_pretrained("AutoModelForCausalLM", out)

    def test_weight_files_given_by_name_bring_their_folder(self):
        """c0/model.safetensors c1/model.safetensors -o out/: the folder's config files come along, as
        when the folders are given, and from_pretrained loads the output."""
        inputs = []
        for i, run in enumerate(runs("llama", "st")):
            folder = self.path("single_%d" % i)
            swavg("convert", run, "-o", folder + "/")  # one model.safetensors beside config.json
            self.assertIn("model.safetensors", os.listdir(folder))
            inputs.append(os.path.join(folder, "model.safetensors"))
        out = self.path("by_name/")
        swavg("average", *inputs, "-o", out)
        self.assertEqual(sorted(os.listdir(out)), ["config.json", "generation_config.json", "model.safetensors"])
        got = self.load_pretrained("AutoModelForCausalLM", out)
        want = swa_models([self.load_pretrained("AutoModelForCausalLM", os.path.dirname(p)) for p in inputs])
        self.assert_state_equal(got.state_dict(), want.state_dict(), "by name")

    def test_total_parameters_left_out_when_the_tensors_differ(self):
        """--exclude changes the tensors: the input index's total_parameters would be wrong, so the
        output's index has total_size alone."""
        inputs = runs("llama", "st")
        out = self.path("fewer/")
        swavg("average", *inputs, "-o", out, "--max-shard-size", "40KB", "--exclude", "lm_head")
        with open(os.path.join(out, "model.safetensors.index.json")) as f:
            index = json.load(f)
        self.assertEqual(list(index["metadata"]), ["total_size"])
        self.assertNotIn("lm_head.weight", index["weight_map"])

    def test_ema_is_get_ema_multi_avg_fn(self):
        inputs = runs("llama", "st")
        out = self.path("ema/")
        swavg("ema", "--decay", "0.9", *inputs, "-o", out)
        got = self.load_pretrained("AutoModelForCausalLM", out)
        fn = torch.optim.swa_utils.get_ema_multi_avg_fn(0.9)
        want = swa_models([self.load_pretrained("AutoModelForCausalLM", p) for p in inputs], multi_avg_fn=fn)
        self.assert_state_equal(got.state_dict(), want.state_dict(), "ema")

    def test_bfloat16_accumulates_in_float32(self):
        inputs = runs("llama_bf16", "st")
        out = self.path("bf16/")
        swavg("average", *inputs, "-o", out)
        files = [disk_tensors(p) for p in inputs]
        got = disk_tensors(out)
        self.assertTrue(all(t.dtype == torch.bfloat16 for t in got.values()))
        want = {k: swa_fold([f[k] for f in files], acc_dtype=torch.float32).to(torch.bfloat16) for k in files[0]}
        self.assert_state_equal(got, want, "bf16")
        model = self.load_pretrained("AutoModelForCausalLM", out)
        self.assert_state_equal(model.state_dict(), want, "bf16 loaded")

    def test_hub_cache_snapshots(self):
        repo = os.path.join(ROOT, "hub", "models--swavg--tiny-gpt2")
        snaps = sorted(glob.glob(os.path.join(repo, "snapshots", "*")))
        self.assertEqual(len(snaps), RUNS)
        self.assertTrue(all(os.path.islink(p) for p in glob.glob(os.path.join(snaps[0], "*"))))
        # Fold the revisions in the runs' order: each snapshot's first shard is one run's.
        def first_shard(folder):
            with open(os.path.join(folder, "model-00001-of-00004.safetensors"), "rb") as f:
                return f.read()

        run_of = {first_shard(r): i for i, r in enumerate(runs("gpt2", "st"))}
        snaps.sort(key=lambda s: run_of[first_shard(s)])
        out = self.path("hub/")
        swavg("average", *[s + "/" for s in snaps], "-o", out, "--max-shard-size", "40KB", "--sort", "none")
        self.assertFalse(any(os.path.islink(p) for p in glob.glob(os.path.join(out, "*"))))
        got = self.load_pretrained("AutoModelForCausalLM", out)
        want = swa_models([self.load_pretrained("AutoModelForCausalLM", s) for s in snaps])
        self.assert_state_equal(got.state_dict(), want.state_dict(), "hub")
        self.assert_safetensors_readable(out)

    # ----- diffusers -----

    def check_unet(self, form, fmt=None):
        try:
            from diffusers import UNet2DConditionModel
        except ImportError:
            self.skipTest("diffusers is not importable")
        inputs = [os.path.join(p, "unet") for p in runs("unet", form)]
        out = self.path("avg_%s_%s/unet/" % (form, fmt))
        os.makedirs(os.path.dirname(out[:-1]))  # swavg makes the output folder, not its parents
        args = ["average", *inputs, "-o", out] + (["--format", fmt] if fmt else [])
        if form == "st":
            args += ["--max-shard-size", "50KB"]
        swavg(*args)
        names = sorted(os.listdir(out))
        ext = "bin" if fmt == "torch" else "safetensors"
        if form == "st":
            self.assertIn("diffusion_pytorch_model.%s.index.json" % ext, names)
            self.assertTrue(any(n.startswith("diffusion_pytorch_model-00001-of-") for n in names), names)
        else:
            self.assertIn("diffusion_pytorch_model." + ext, names)
        self.assertIn("config.json", names)

        def load(p):
            model, info = quiet(UNet2DConditionModel.from_pretrained, p, output_loading_info=True)
            for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
                self.assertFalse(info.get(key), "%s: %s %s" % (p, key, info.get(key)))
            return model

        got = load(out)
        want = swa_models([load(p) for p in inputs])
        self.assert_state_equal(got.state_dict(), want.state_dict(), "unet")
        self.assert_safetensors_readable(out)

    def test_diffusers_model_folders(self):
        self.check_unet("st")

    def variant_inputs(self, variant, max_shard_size=None, also_plain=False):
        """The unet runs saved again by diffusers with save_pretrained(variant=...)."""
        from diffusers import UNet2DConditionModel
        folders = []
        for i, p in enumerate(runs("unet", "st")):
            model = quiet(UNet2DConditionModel.from_pretrained, os.path.join(p, "unet"))
            folder = self.path("%s_%s_%s_%d/unet" % (variant, max_shard_size, also_plain, i))
            kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
            model.save_pretrained(folder, variant=variant, **kwargs)
            if also_plain:
                model.save_pretrained(folder, **kwargs)
            folders.append(folder)
        return folders

    def load_unet(self, folder, **kwargs):
        from diffusers import UNet2DConditionModel
        model, info = quiet(UNet2DConditionModel.from_pretrained, folder, output_loading_info=True, **kwargs)
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            self.assertFalse(info.get(key), "%s: %s %s" % (folder, key, info.get(key)))
        return model

    def test_diffusers_variant_folders_keep_their_variant(self):
        """A folder of diffusion_pytorch_model.fp16.safetensors (one file, or shards and an index) is
        read as that variant and written with it: from_pretrained(out, variant="fp16") loads it."""
        try:
            import diffusers  # noqa: F401
        except ImportError:
            self.skipTest("diffusers is not importable")
        for shard in (None, "50KB"):
            with self.subTest(max_shard_size=shard):
                inputs = self.variant_inputs("fp16", shard)
                out = self.path("variant_%s/unet/" % shard)
                os.makedirs(os.path.dirname(out[:-1]))
                args = ["--max-shard-size", shard] if shard else []
                swavg("average", *[p + "/" for p in inputs], "-o", out, *args)
                names = sorted(os.listdir(out))
                if shard:
                    self.assertIn("diffusion_pytorch_model.safetensors.index.fp16.json", names)
                    self.assertTrue(any(n.startswith("diffusion_pytorch_model.fp16-00001-of-") for n in names), names)
                else:
                    self.assertEqual(names, ["config.json", "diffusion_pytorch_model.fp16.safetensors"])
                got = self.load_unet(out, variant="fp16")
                want = swa_models([self.load_unet(p, variant="fp16") for p in inputs])
                self.assert_state_equal(got.state_dict(), want.state_dict(), "variant")
                # Given by name, the file brings its folder and keeps the variant too.
                by_name = self.path("variant_by_name_%s/unet/" % shard)
                os.makedirs(os.path.dirname(by_name[:-1]))
                files = [os.path.join(p, "diffusion_pytorch_model.safetensors.index.fp16.json" if shard
                                      else "diffusion_pytorch_model.fp16.safetensors") for p in inputs]
                swavg("average", *files, "-o", by_name, *args)
                self.assertEqual(sorted(os.listdir(by_name)), names)

    def test_diffusers_two_variants_and_no_plain_weights_are_refused(self):
        try:
            import diffusers  # noqa: F401
        except ImportError:
            self.skipTest("diffusers is not importable")
        inputs = self.variant_inputs("fp16")
        for p in inputs:
            shutil.copy(os.path.join(p, "diffusion_pytorch_model.fp16.safetensors"),
                        os.path.join(p, "diffusion_pytorch_model.bf16.safetensors"))
        out = self.path("two/")
        p = swavg("average", *inputs, "-o", out, check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        for needle in ("holds the weights of 2 variants", "bf16", "fp16", "diffusion_pytorch_model.bf16.safetensors"):
            self.assertIn(needle, p.stderr)
        self.assertIn("pass the file or index of the variant to average by name", p.stderr)
        self.assertFalse(os.path.exists(out))
        # Beside plain weights, the plain ones are read, as from_pretrained without variant= does.
        plain = self.variant_inputs("fp16", also_plain=True)
        out = self.path("plain/")
        p = swavg("-v", "average", *plain, "-o", out)
        self.assertEqual(sorted(os.listdir(out)), ["config.json", "diffusion_pytorch_model.safetensors"])
        self.assertIn("holds the variant 'fp16' too", p.stderr)

    def test_diffusers_torch_folders(self):
        self.check_unet("bin")
        self.check_unet("bin", fmt="torch")

    def test_diffusers_shard_parallel_keeps_the_names(self):
        inputs = [os.path.join(p, "unet") for p in runs("unet", "st")]
        plain, parallel = self.path("plain/unet/"), self.path("parallel/unet/")
        os.makedirs(self.path("plain"))
        os.makedirs(self.path("parallel"))
        swavg("average", *inputs, "-o", plain, "--max-shard-size", "50KB")
        for i in (1, 0):
            swavg("average", *inputs, "-o", parallel, "--max-shard-size", "50KB", "--shard", "%d/2" % i)
        with open(os.path.join(parallel[:-1] + ".partial", "swavg-plan.json")) as f:
            self.assertEqual(json.load(f)["index"]["name"], "diffusion_pytorch_model.safetensors.index.json")
        swavg("finalize", parallel)
        self.assertEqual(sorted(os.listdir(plain)), sorted(os.listdir(parallel)))
        for name in os.listdir(plain):
            with open(os.path.join(plain, name), "rb") as a, open(os.path.join(parallel, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
        self.assertIn("diffusion_pytorch_model.safetensors.index.json", os.listdir(parallel))

    def test_convert_keeps_the_names(self):
        for src, names in (((ROOT, "unet", "bin", "run_0", "unet"), ["config.json", "diffusion_pytorch_model.safetensors"]),
                           ((ROOT, "peft", "bin", "run_0"),
                            ["README.md", "adapter_config.json", "adapter_model.safetensors"])):
            with self.subTest(src=src[-2]):
                out = self.path("convert_%s/" % src[-2])
                swavg("convert", os.path.join(*src), "-o", out)
                self.assertEqual(sorted(os.listdir(out)), names)
                self.assert_state_equal(disk_tensors(out), disk_tensors(os.path.join(*src)), "convert")

    def test_diffusers_pipeline_root_is_refused_naming_components(self):
        pipe = os.path.join(ROOT, "pipeline")
        p = swavg("average", pipe, pipe, "-o", self.path("out/"), check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertTrue(p.stderr.startswith("swavg: error: "), p.stderr)
        self.assertIn("model_index.json", p.stderr)
        self.assertIn("'unet/'", p.stderr)
        self.assertIn("'vae/'", p.stderr)
        self.assertNotIn("scheduler", p.stderr)  # it holds no weights
        self.assertFalse(os.path.exists(self.path("out")))

    # ----- PEFT -----

    def check_adapter(self, form, fmt=None):
        try:
            import peft
        except ImportError:
            self.skipTest("peft is not importable")
        inputs = runs("peft", form)
        out = self.path("adapter_%s_%s/" % (form, fmt))
        swavg("average", *inputs, "-o", out, *(["--format", fmt] if fmt else []))
        ext = "bin" if fmt == "torch" else "safetensors"
        self.assertEqual(sorted(os.listdir(out)), ["README.md", "adapter_config.json", "adapter_model." + ext])
        base = os.path.join(ROOT, "peft", "base")

        def load(p):
            model = quiet(peft.PeftModel.from_pretrained,
                          quiet(transformers.AutoModelForCausalLM.from_pretrained, base), p)
            result = quiet(model.load_adapter, p, adapter_name="check")
            self.assertFalse(result.unexpected_keys, p)
            self.assertFalse([k for k in result.missing_keys if "lora_" in k], p)
            return peft.utils.get_peft_model_state_dict(model)

        got = load(out)
        files = [disk_tensors(p) for p in inputs]
        self.assertEqual(sorted(got), sorted(files[0]))
        want = {k: swa_fold([f[k] for f in files]) for k in files[0]}
        self.assert_state_equal(got, want, "adapter")
        self.assert_state_equal(disk_tensors(out), want, "adapter file")
        self.assert_safetensors_readable(out)

    def test_peft_adapter_folders(self):
        self.check_adapter("st")

    def test_peft_torch_adapter_folders(self):
        self.check_adapter("bin")
        self.check_adapter("st", fmt="torch")

    # ----- timm and Lightning -----

    def test_timm_checkpoints(self):
        try:
            import timm
        except ImportError:
            self.skipTest("timm is not importable")
        inputs = sorted(glob.glob(os.path.join(ROOT, "timm", "run_*.pth.tar")))
        self.assertEqual(len(inputs), RUNS)
        ckpts = [torch.load(p, map_location="cpu", weights_only=False) for p in inputs]
        for key, use_ema in (("state_dict_ema", True), ("state_dict", False)):
            with self.subTest(key=key):
                out = self.path("timm_%s.pth" % key)
                swavg("average", *inputs, "-o", out, "--key", key)

                def model_of(sd):
                    m = timm.create_model("test_efficientnet", pretrained=False, num_classes=4)
                    m.load_state_dict(sd, strict=True)
                    return m

                got = timm.create_model("test_efficientnet", pretrained=False, num_classes=4)
                timm.models.load_checkpoint(got, out, use_ema=use_ema, strict=True)
                want = swa_models([model_of(c[key]) for c in ckpts])
                self.assert_state_equal(got.state_dict(), want.state_dict(), key)
        # Without --key, the EMA weights are taken (README: which state dict is taken).
        out = self.path("timm_default.pth")
        swavg("average", *inputs, "-o", out)
        self.assert_state_equal(torch.load(out, weights_only=True), torch.load(self.path("timm_state_dict_ema.pth"),
                                                                              weights_only=True), "default key")

    def test_lightning_checkpoints(self):
        try:
            import pytorch_lightning  # noqa: F401
        except ImportError:
            self.skipTest("pytorch_lightning is not importable")
        inputs = sorted(glob.glob(os.path.join(ROOT, "lightning", "run_*.ckpt")))
        self.assertEqual(len(inputs), RUNS)
        out = self.path("lightning.pt")
        swavg("average", *inputs, "-o", out)

        class Lit(torch.nn.Module):  # the fixture's LightningModule, its weights only
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                               torch.nn.Linear(16, 2))

        def model_of(sd):
            m = Lit()
            m.load_state_dict(sd, strict=True)
            return m

        got = model_of(torch.load(out, weights_only=True))
        ckpts = [torch.load(p, map_location="cpu", weights_only=False)["state_dict"] for p in inputs]
        want = swa_models([model_of(c) for c in ckpts])
        expected = want.state_dict()  # buffers: the latest checkpoint's, as swavg's --buffers latest
        self.assert_state_equal(got.state_dict(), expected, "lightning")


if __name__ == "__main__":
    unittest.main()
