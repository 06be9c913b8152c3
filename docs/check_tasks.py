#!/usr/bin/env python3
"""Runs every command of the README's "Ten common tasks" against a built swavg, on checkpoints
generated here as the libraries lay them out: training checkpoints (scripts/make_example.py),
transformers folders (save_pretrained), timm and Lightning checkpoints, DCP folders
(torch.distributed.checkpoint.save) and DeepSpeed tag folders. The commands are read from the
README itself, so the page and this check cannot drift apart. Then checks a few results with the
libraries: the folder output loads with from_pretrained, EMA and --last folded the checkpoints in
step order, swavg watch's output is one ema run's bytes.

Usage: /var/lib/swavg/venv/bin/python docs/check_tasks.py [--swavg build/swavg] [--keep DIR]
Exit 0 when every command exits 0 and every check passes."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def task_blocks(readme):
    """The code blocks of the README's "Ten common tasks" section: (language, [command, ...]), lines
    ending in a backslash joined, comments and indentation removed."""
    text = open(readme, encoding="utf-8").read()
    section = text.split("## Ten common tasks", 1)[1].split("\n## ", 1)[0]
    blocks = []
    for lang, body in re.findall(r"```(sh|python)\n(.*?)```", section, re.S):
        lines = [line.strip() for line in body.splitlines()]
        if lang == "python":
            blocks.append((lang, ["\n".join(lines)]))
            continue
        commands, pending = [], ""
        for line in lines:
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = pending + line
            pending = ""
            if line:
                commands.append(line)
        blocks.append((lang, commands))
    return blocks


GENERATE = r'''
import argparse, os, subprocess, sys
import torch

root = sys.argv[1]
os.chdir(root)
subprocess.run([sys.executable, os.path.join(sys.argv[2], "scripts", "make_example.py"), "run", "12"], check=True,
               stdout=subprocess.DEVNULL)

def small(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 4))
    with torch.no_grad():
        m[1].running_mean.normal_()
        m[1].num_batches_tracked.fill_(seed)
    return m.state_dict()

# transformers: the Trainer's checkpoint-<step>/ folders.
from transformers import BertConfig, BertModel
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32)
for step in (500, 1000, 1500):
    torch.manual_seed(step)
    BertModel(config).save_pretrained("out/checkpoint-%d" % step)

# timm: CheckpointSaver's checkpoint-<epoch>.pth.tar with the model EMA beside the weights.
os.makedirs("output/train/exp", exist_ok=True)
for epoch in (1, 2, 10):
    torch.save({"epoch": epoch, "arch": "small", "state_dict": small(epoch), "optimizer": {"state": {}, "param_groups": []},
                "version": 2, "args": argparse.Namespace(lr=0.1), "metric": 0.5, "state_dict_ema": small(100 + epoch)},
               "output/train/exp/checkpoint-%d.pth.tar" % epoch)

# Lightning: epoch=<e>-step=<s>.ckpt, the LightningModule's own `model.` prefix, and last.ckpt.
os.makedirs("lightning_logs/version_0/checkpoints", exist_ok=True)
for epoch in (0, 1, 9, 10):
    sd = {"model." + k: v for k, v in small(200 + epoch).items()}
    ckpt = {"epoch": epoch, "global_step": 100 * (epoch + 1), "pytorch-lightning_version": "2.5.0", "state_dict": sd,
            "loops": {}, "callbacks": {}, "optimizer_states": [], "lr_schedulers": [], "hyper_parameters": {"lr": 0.1}}
    torch.save(ckpt, "lightning_logs/version_0/checkpoints/epoch=%d-step=%d.ckpt" % (epoch, 100 * (epoch + 1)))
torch.save(ckpt, "lightning_logs/version_0/checkpoints/last.ckpt")

# DCP: torch.distributed.checkpoint.save from one process, as torchtitan's step-<n>/ folders.
import torch.distributed.checkpoint as dcp
for step in (100, 200, 1000):
    dcp.save({"model": small(300 + step), "step": step}, checkpoint_id="checkpoint/step-%d" % step)

# DeepSpeed (no ZeRO / stage 1-2): global_step<n>/mp_rank_00_model_states.pt and the `latest` file.
for step in (10, 20, 100):
    os.makedirs("ds_run/global_step%d" % step, exist_ok=True)
    sd = small(400 + step)
    torch.save({"module": sd, "buffer_names": [k for k in sd if "running" in k or "num_batches" in k],
                "optimizer": None, "lr_scheduler": None, "ds_config": {}, "ds_version": "0.19.8"},
               "ds_run/global_step%d/mp_rank_00_model_states.pt" % step)
with open("ds_run/latest", "w") as f:
    f.write("global_step100")
'''

CHECK = r'''
import json, os, subprocess, sys
import torch
from transformers import AutoModel
os.chdir(sys.argv[1])
swavg = sys.argv[2]
AutoModel.from_pretrained("swa-model")
AutoModel.from_pretrained("swa-sharded")
AutoModel.from_pretrained("swa-4")
print("check: swa-model/, swa-sharded/ and swa-4/ load with transformers' AutoModel.from_pretrained")
a = open("swa-sharded/model.safetensors", "rb").read()
b = open("swa-4/model.safetensors", "rb").read()
assert a == b, "the 4-worker output differs from the plain run's"
print("check: the 4-worker output is byte-identical to the plain run's")


def mean_of(sds):
    return {k: torch.stack([sd[k].double() for sd in sds]).mean(0) for k in sds[0] if sds[0][k].is_floating_point()}


def close(found, want, what):
    for k, w in want.items():
        if "running" in k or "num_batches" in k:
            continue  # buffers: the latest checkpoint's
        assert torch.allclose(found[k].double(), w, rtol=1e-6, atol=1e-7), (what, k)
    print("check: %s is the mean of the inputs' weights" % what)


timm = [torch.load("output/train/exp/checkpoint-%d.pth.tar" % e, weights_only=False) for e in (1, 2, 10)]
close(torch.load("swa_ema.pt", weights_only=True), mean_of([c["state_dict_ema"] for c in timm]), "swa_ema.pt (timm's EMA)")
close(torch.load("swa_raw.pt", weights_only=True), mean_of([c["state_dict"] for c in timm]), "swa_raw.pt (timm's raw)")
pl = [torch.load("lightning_logs/version_0/checkpoints/epoch=%d-step=%d.ckpt" % (e, 100 * (e + 1)), weights_only=False)
      for e in (0, 1, 9, 10)]
close(torch.load("swa_lightning.pt", weights_only=True),
      {k[len("model."):]: v for k, v in mean_of([c["state_dict"] for c in pl]).items()}, "swa_lightning.pt")
ds = [torch.load("ds_run/global_step%d/mp_rank_00_model_states.pt" % s, weights_only=False)["module"] for s in (10, 20, 100)]
close(torch.load("ds_swa.pt", weights_only=True), mean_of(ds), "ds_swa.pt (DeepSpeed)")
from safetensors.torch import load_file
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
dcps = []
for s in (100, 200, 1000):
    dcp_to_torch_save("checkpoint/step-%d" % s, "dcp-%d.pt" % s)
    dcps.append(torch.load("dcp-%d.pt" % s, weights_only=False)["model"])
close(load_file("swa.safetensors"), mean_of(dcps), "swa.safetensors (DCP)")
dcp_to_torch_save("swa-dcp", "swa-dcp.pt")
close(torch.load("swa-dcp.pt", weights_only=False)["model"], mean_of(dcps), "swa-dcp/ (a DCP folder, through dcp_to_torch_save)")
plan = json.loads(subprocess.run([swavg, "ema", "--decay", "0.999", "--last", "5", "run/ckpt_0.pt", "run/ckpt_1.pt",
                                  "run/ckpt_10.pt", "run/ckpt_11.pt", "run/ckpt_2.pt", "run/ckpt_3.pt", "run/ckpt_4.pt",
                                  "run/ckpt_5.pt", "run/ckpt_6.pt", "run/ckpt_7.pt", "run/ckpt_8.pt", "run/ckpt_9.pt",
                                  "-o", "x.pt", "--dry-run", "--json"], capture_output=True, text=True,
                                 check=True).stdout)
order = [os.path.basename(i["path"]) for i in plan["inputs"]]
want = ["ckpt_%d.pt" % i for i in range(7, 12)]
print("check: ema --last 5 of run/ckpt_*.pt (the glob's text order) folds %s: %s" %
      (order, "step order" if order == want else "NOT step order (wanted %s)" % want))
steps = sorted(range(12), key=int)
subprocess.run([swavg, "ema", "--decay", "0.999", "--sort", "none", *["run/ckpt_%d.pt" % i for i in steps], "-o",
                "ema_one_run.pt", "-q"], check=True)
same = open("ema_live.pt", "rb").read() == open("ema_one_run.pt", "rb").read()
print("check: swavg watch's ema_live.pt is %s one ema over run/ckpt_0..11.pt in step order" %
      ("byte-identical to" if same else "NOT the bytes of"))
sys.exit(0 if order == want and same else 3)
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--swavg", default=os.path.join(ROOT, "build", "swavg"))
    ap.add_argument("--keep", help="work in DIR and keep it (default: a temporary folder, removed)")
    a = ap.parse_args()
    swavg = os.path.abspath(a.swavg)
    work = os.path.abspath(a.keep) if a.keep else tempfile.mkdtemp(prefix="swavg-tasks-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, PATH=os.path.dirname(swavg) + os.pathsep + os.environ["PATH"], SWAVG_BIN=swavg,
               PYTHONPATH=os.path.join(ROOT, "python"))
    failed = 0
    try:
        start = time.time()
        subprocess.run([sys.executable, "-c", GENERATE, work, ROOT], check=True, env=env)
        print("generated the checkpoints in %s (%.1f s)" % (work, time.time() - start))
        for lang, commands in task_blocks(os.path.join(ROOT, "README.md")):
            for command in commands:
                runs = [("I=%d" % i, dict(env, I=str(i))) for i in range(4)] if "$I" in command else [("", env)]
                for tag, run_env in runs:
                    start = time.time()
                    argv = [sys.executable, "-c", command] if lang == "python" else ["bash", "-c", command]
                    p = subprocess.run(argv, cwd=work, env=run_env, capture_output=True, text=True)
                    status = "ok" if p.returncode == 0 else "FAILED (exit %d)" % p.returncode
                    print("%s  %.2f s  %s%s" % (status, time.time() - start, (tag + " ") if tag else "", command))
                    if p.returncode != 0:
                        failed += 1
                        print(p.stdout + p.stderr)
                    elif lang == "python" and p.stdout.strip():
                        print("    " + p.stdout.strip().replace("\n", "\n    "))
        check = subprocess.run([sys.executable, "-c", CHECK, work, swavg], env=env)
        failed += check.returncode != 0
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("%s" % ("every task ran" if not failed else "%d failed" % failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
