"""Every file a run reads is an input: no output may be one, hold one or lie inside one (--force or
not); every file read by name is a regular file (a FIFO or a device is refused before the first
read, never waited on), except the list --inputs-from reads, which may be a pipe, up to 64 MiB; a
folder resolves to the weights transformers' from_pretrained loads.

References: the files themselves (their bytes before and after a refused run) and, for folders,
transformers' AutoModelForCausalLM.from_pretrained on the same folder.
"""
import glob
import hashlib
import json
import os
import shutil
import subprocess
import unittest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch

from common import SWAVG, TempDirTest, fixture, same_bits, swavg
from reference import load_output, run_paths

try:
    import transformers
    from safetensors.torch import load_file, save_file
except ImportError:
    transformers = None

TIMEOUT_S = 600  # a run that waits on a FIFO (blocked, using no CPU) fails here instead of hanging the suite


def digest_tree(path):
    """sha256 of every file under `path` (or of the file), by relative name."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return {"": hashlib.sha256(f.read()).hexdigest()}
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return out


class OutputOverInputTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.ckpts = run_paths("cnn")[:2]

    def refused(self, *args, keep=()):
        """Runs swavg expecting exit 2 with every path in `keep` unchanged."""
        before = {k: digest_tree(k) for k in keep}
        p = swavg(*args, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("swavg: error:", p.stderr)
        for k in keep:
            self.assertTrue(os.path.exists(k), k + " was removed")
            self.assertEqual(digest_tree(k), before[k], k + " was changed")
        return p

    def test_a_folder_output_never_holds_the_resumed_folder(self):
        # The data loss of issue 21: `ema --resume top/ema/ new.pt -o top/ --force` deleted top/ema/.
        top = self.path("top")
        os.mkdir(top)
        swavg("ema", "--decay", "0.5", *self.ckpts, "-o", os.path.join(top, "ema") + "/")
        resumed = os.path.join(top, "ema")
        p = self.refused("ema", "--decay", "0.5", "--resume", resumed + "/", run_paths("cnn")[2], "-o", top + "/",
                         "--force", keep=[resumed])
        self.assertIn("holds the input", p.stderr)
        # Resuming a folder into itself is the rolling average, as for files.
        swavg("ema", "--decay", "0.5", "--resume", resumed + "/", run_paths("cnn")[2], "-o", resumed + "/", "--force")

    def test_the_rolling_file_average_is_kept(self):
        ema = self.path("ema.pt")
        swavg("ema", "--decay", "0.5", *self.ckpts, "-o", ema)
        swavg("ema", "--decay", "0.5", "--resume", ema, run_paths("cnn")[2], "-o", ema, "--force")
        self.assertIn("fc.weight", load_output(ema))

    def test_no_output_lies_inside_an_input_folder(self):
        folder = self.path("ckpt")
        shutil.copytree(fixture("hf_stack/llama/st/run_0"), folder)
        for out in (os.path.join(folder, "avg.safetensors"), os.path.join(folder, "sub") + "/"):
            with self.subTest(out=out):
                p = self.refused("average", folder, fixture("hf_stack/llama/st/run_1"), "-o", out, "--force",
                                 keep=[folder])
                self.assertIn("inside the input folder", p.stderr)

    def test_no_output_is_a_file_the_run_reads(self):
        rules = self.path("rules.json")
        with open(rules, "w") as f:
            json.dump([{"match": "^fc\\.bias$", "action": "first"}], f)
        listed = self.path("list.txt")
        with open(listed, "w") as f:
            f.write(run_paths("cnn")[2] + "\n")
        model = self.path("model.ts")
        shutil.copy(fixture("scripted.ts"), model)
        cases = {
            "--rules": (["--rules", rules], rules),
            "--inputs-from": (["--inputs-from", listed], listed),
            "--model": (["--model", model], model),
        }
        for option, (args, target) in cases.items():
            for command in ("average", "ema"):
                with self.subTest(option=option, command=command):
                    decay = ["--decay", "0.5"] if command == "ema" else []
                    self.refused(command, *decay, *args, *self.ckpts, "-o", target, "--force", keep=[target])

    def test_update_bn_data_is_an_input(self):
        data = self.path("data.npy")
        shutil.copy(fixture("bn/data.npy"), data)
        for out in (["-o", data], ["--save-module", data]):
            with self.subTest(out=out):
                self.refused("update-bn", "--model", fixture("bn/cnn_scripted.ts"), "--data", data,
                             "--checkpoint", fixture("bn/weights.pt"), *out, "--force", keep=[data])

    def test_dot_forms_of_a_folder_output(self):
        # -o empty/. is the empty folder itself; -o full/./ --force replaces full/, not "full/.".
        for form in ("%s/.", "%s/./", "%s/./."):
            with self.subTest(form=form):
                empty = self.path("empty")
                os.makedirs(empty, exist_ok=True)
                swavg("average", *self.ckpts, "-o", form % empty)
                self.assertTrue(os.path.isfile(os.path.join(empty, "model.safetensors")))
                swavg("average", *self.ckpts, "-o", form % empty, "--force")
                self.assertEqual(sorted(os.listdir(self.tmp)), ["empty"], "nothing beside the folder")
                shutil.rmtree(empty)


class SpecialFileTest(TempDirTest):
    """A FIFO with no writer and /dev/zero, named wherever swavg reads a file by name."""

    def setUp(self):
        super().setUp()
        self.fifo = self.path("fifo")
        os.mkfifo(self.fifo)
        self.ckpts = run_paths("cnn")[:2]

    def cases(self, special):
        out = ["-o", self.path("out.pt")]
        return {
            "input": ["average", special, *self.ckpts, *out],
            "--resume": ["average", "--resume", special, *self.ckpts, *out],
            "--rules": ["average", "--rules", special, *self.ckpts, *out],
            "--model": ["average", "--model", special, *self.ckpts, *out],
            "--avg-fn": ["average", "--avg-fn", special, *self.ckpts, *out],
            "--multi-avg-fn": ["average", "--multi-avg-fn", special, *self.ckpts, *out],
            "inspect": ["inspect", special],
            "convert": ["convert", special, *out],
            "update-bn --model": ["update-bn", "--model", special, "--data", fixture("bn/data.npy"), *out],
            "update-bn --data": ["update-bn", "--model", fixture("bn/cnn_scripted.ts"), "--data", special, *out],
            "posthoc-ema": ["posthoc-ema", special, *self.ckpts, "--sigma-rel", "0.1", "--snapshot-times", "1,2,3",
                            "--snapshot-sigmas", "0.05", *out],
        }

    def test_fifos_and_devices_are_refused_before_the_first_read(self):
        for special, kind in ((self.fifo, "a FIFO"), ("/dev/zero", "a device")):
            for where, argv in self.cases(special).items():
                with self.subTest(special=special, where=where):
                    p = subprocess.run([SWAVG, *argv], capture_output=True, text=True, timeout=TIMEOUT_S)
                    self.assertEqual(p.returncode, 3, p.stderr)
                    self.assertIn("expected a regular file but it is " + kind, p.stderr)
                    self.assertIn(special, p.stderr)
                    self.assertFalse(os.path.exists(self.path("out.pt")))


class InputListTest(TempDirTest):
    """--inputs-from reads a list: a file, a pipe or stdin, up to 64 MiB, never forever."""

    def setUp(self):
        super().setUp()
        self.ckpts = run_paths("cnn")[:3]
        self.out = self.path("out.pt")

    def inputs_of(self, p):
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)["inputs"]

    def test_a_pipe_and_process_substitution(self):
        listing = "\n".join(self.ckpts[1:])
        p = subprocess.run(["bash", "-c", 'exec "$0" average "$1" --inputs-from <(printf "%s\n" "$2") -o "$3" --json',
                            SWAVG, self.ckpts[0], listing, self.out], capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(self.inputs_of(p), self.ckpts)
        fifo = self.path("list.fifo")
        os.mkfifo(fifo)
        writer = subprocess.Popen(["bash", "-c", 'printf "%s\n" "$1" > "$0"', fifo, listing])
        p = subprocess.run([SWAVG, "average", self.ckpts[0], "--inputs-from", fifo, "-o", self.out, "--force",
                            "--json"], capture_output=True, text=True, timeout=TIMEOUT_S)
        writer.wait(timeout=TIMEOUT_S)
        self.assertEqual(self.inputs_of(p), self.ckpts)
        p = subprocess.run([SWAVG, "average", *self.ckpts, "--inputs-from", "/dev/null", "-o", self.out, "--force",
                            "--json"], capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(self.inputs_of(p), self.ckpts)

    def test_a_folder_is_no_list(self):
        folder = self.path("lists")
        os.mkdir(folder)
        for argv in (["--inputs-from", folder], ["--inputs-from=" + folder]):
            with self.subTest(argv=argv):
                p = subprocess.run([SWAVG, "average", self.ckpts[0], *argv, "-o", self.out], capture_output=True,
                                   text=True, timeout=TIMEOUT_S)
                self.assertEqual(p.returncode, 3, p.stderr)
                self.assertIn("swavg: error: %s: expected a regular file but it is a directory" % folder, p.stderr)
                self.assertFalse(os.path.exists(self.out))

    def test_an_endless_list_stops_at_the_bound(self):
        for argv, stdin in ((["--inputs-from", "/dev/zero"], None), (["--inputs-from", "-"], "/dev/zero")):
            with self.subTest(argv=argv):
                with open(stdin or os.devnull, "rb") as f:
                    p = subprocess.run([SWAVG, "average", *self.ckpts, *argv, "-o", self.out], stdin=f,
                                       capture_output=True, text=True, timeout=TIMEOUT_S)
                self.assertEqual(p.returncode, 3, p.stderr)
                self.assertIn("67108864 bytes", p.stderr)
                self.assertFalse(os.path.exists(self.out))

    def test_the_list_bound_at_its_edge(self):
        head = self.ckpts[1] + "\n"
        for size, ok in ((67108864, True), (67108865, False)):
            with self.subTest(size=size):
                listed = self.path("list.txt")
                with open(listed, "w") as f:
                    f.write(head + "\n" * (size - len(head)))  # empty lines, skipped
                self.assertEqual(os.path.getsize(listed), size)
                for argv, stdin in ((["--inputs-from", listed], None), (["--inputs-from", "-"], listed)):
                    with open(stdin or os.devnull, "rb") as f:
                        p = subprocess.run([SWAVG, "average", self.ckpts[0], *argv, "-o", self.out, "--force",
                                            "--json"], stdin=f, capture_output=True, text=True, timeout=TIMEOUT_S)
                    if ok:
                        self.assertEqual(self.inputs_of(p), self.ckpts[:2])
                    else:
                        self.assertEqual(p.returncode, 3, p.stderr)
                        self.assertIn("67108864 bytes", p.stderr)


@unittest.skipUnless(transformers is not None and os.path.isdir(fixture("hf_stack/llama")),
                     "transformers or the hf_stack fixtures are missing")
class FolderResolutionTest(TempDirTest):
    """A folder holding several weight files: swavg reads the one from_pretrained loads."""

    RUN = fixture("hf_stack/llama/st/run_0")

    def variants(self):
        """One folder per weight file, each with its own values, as {file name: folder}."""
        tensors = {}
        for path in sorted(glob.glob(os.path.join(self.RUN, "*.safetensors"))):
            tensors.update(load_file(path))
        out = {}
        for k, name in enumerate(("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                                  "pytorch_model.bin.index.json")):
            scaled = {n: (t.float() * (k + 2)).to(t.dtype).contiguous() for n, t in tensors.items()}
            out[name] = scaled
        return out

    def write(self, folder, name, tensors):
        if name == "model.safetensors":
            save_file(tensors, os.path.join(folder, name), metadata={"format": "pt"})
        elif name == "pytorch_model.bin":
            torch.save(tensors, os.path.join(folder, name))
        else:
            shard = "st-shard.safetensors" if name.startswith("model") else "pt-shard.bin"
            if shard.endswith(".safetensors"):
                save_file(tensors, os.path.join(folder, shard), metadata={"format": "pt"})
            else:
                torch.save(tensors, os.path.join(folder, shard))
            with open(os.path.join(folder, name), "w") as f:
                json.dump({"metadata": {}, "weight_map": {n: shard for n in tensors}}, f)

    def check(self, names):
        folder = self.path("-".join(n.replace(".", "_") for n in names))
        os.mkdir(folder)
        for extra in ("config.json", "generation_config.json"):
            shutil.copy(os.path.join(self.RUN, extra), folder)
        values = self.variants()
        for name in names:
            self.write(folder, name, values[name])
        model = transformers.AutoModelForCausalLM.from_pretrained(folder)
        want = model.state_dict()
        out = self.path("out.safetensors")
        swavg("convert", folder, "-o", out, "--force")
        got = load_file(out)
        for name, tensor in got.items():
            self.assertTrue(same_bits(tensor, want[name]), "%s: %s differs from from_pretrained" % (names, name))

    def test_every_pair_of_weight_files(self):
        names = ["model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json"]
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                with self.subTest(pair=(names[i], names[j])):
                    self.check([names[i], names[j]])
        self.check(names)

    def test_transformers_weights_in_config(self):
        folder = self.path("named")
        shutil.copytree(self.RUN, folder)
        values = self.variants()
        save_file(values["model.safetensors"], os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        save_file(values["pytorch_model.bin"], os.path.join(folder, "chosen.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
        config["transformers_weights"] = "chosen.safetensors"
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
        want = transformers.AutoModelForCausalLM.from_pretrained(folder).state_dict()
        out = self.path("out.safetensors")
        swavg("convert", folder, "-o", out)
        for name, tensor in load_file(out).items():
            self.assertTrue(same_bits(tensor, want[name]), name)


if __name__ == "__main__":
    unittest.main()
