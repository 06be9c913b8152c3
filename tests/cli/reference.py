"""PyTorch reference computations for the `swavg average` / `swavg ema` end-to-end tests.

Everything here is computed by PyTorch from the fixture files (torch.optim.swa_utils.AveragedModel
itself where it applies, and the same elementwise expressions it uses elsewhere), never from
numbers swavg produced.
"""
import collections
import functools
import json
import os
import subprocess
import sys

import torch

from common import SWAVG, fixture, same_bits

STANDARD_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")

RUNS = {"resnet18": 4, "cnn": 6, "cnn_bf16": 6, "custom": 3}


def run_paths(run, indices=None):
    """Paths of a fixture training run's checkpoints, in epoch order."""
    if indices is None:
        indices = range(RUNS[run])
    return [fixture(os.path.join("runs", run, "ckpt_%d.pt" % i)) for i in indices]


@functools.lru_cache(maxsize=None)
def _load(path):
    return torch.load(path, weights_only=False)


def state_dict_of(path):
    """The model state dict PyTorch reads from a fixture (training checkpoints hold it at 'model').
    Cached: callers must not modify it."""
    obj = _load(path)
    if isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        return obj["model"]
    return obj


def load_output(path):
    """An output file of swavg, as PyTorch opens it: torch.load(weights_only=True)."""
    return torch.load(path, weights_only=True)


def load_safetensors(path):
    import safetensors_ref
    tensors, metadata = safetensors_ref.read(path)
    out = collections.OrderedDict()
    for name, st_dtype, shape, data in tensors:
        dtype = safetensors_ref.DTYPES[st_dtype][1]
        if data:
            out[name] = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)
        else:
            out[name] = torch.empty(shape, dtype=dtype)
    return out, metadata


def is_buffer_name(name):
    return name.rsplit(".", 1)[-1] in STANDARD_BUFFERS


def model_for(run):
    """A fresh module of the architecture a fixture run trained."""
    if run == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=10)
    if run in ("cnn", "cnn_bf16"):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
        from fixtures.checkpoints import SmallCNN
        return SmallCNN()
    raise ValueError(run)


def averaged_model_reference(run, paths, use_buffers):
    """torch.optim.swa_utils.AveragedModel, updated with each checkpoint loaded into the model.
    Returns (the averaged module's state dict, n_averaged)."""
    model = model_for(run)
    avg = torch.optim.swa_utils.AveragedModel(model, use_buffers=use_buffers)
    for p in paths:
        model.load_state_dict(state_dict_of(p))
        avg.update_parameters(model)
    return avg.module.state_dict(), int(avg.n_averaged)


# AveragedModel(use_buffers=False) as PyTorch 1.13 runs it (--buffers first), computed by Debian's
# python3-torch 1.13 when the tests run under another torch.
TORCH_1_13_PYTHON = os.environ.get("SWAVG_TORCH_1_13_PYTHON", "/usr/bin/python3")
_FIRST_BUFFERS_SCRIPT = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from reference import averaged_model_from_first
assert torch.__version__.startswith("1.13"), torch.__version__
torch.save(averaged_model_from_first(sys.argv[2], sys.argv[4:]), sys.argv[3])
"""


def averaged_model_from_first(run, paths):
    """AveragedModel(model, use_buffers=False) built from the first checkpoint and updated with
    each, under this process's torch: the averaged module's state dict."""
    model = model_for(run)
    model.load_state_dict(state_dict_of(paths[0]))
    avg = torch.optim.swa_utils.AveragedModel(model, use_buffers=False)
    for p in paths:
        model.load_state_dict(state_dict_of(p))
        avg.update_parameters(model)
    return avg.module.state_dict()


def averaged_model_1_13(run, paths, out):
    """The state dict of PyTorch 1.13's AveragedModel(model, use_buffers=False), built from the
    first checkpoint and updated with each: 1.13 keeps the buffers it deep-copied at construction.
    Runs in this process under torch 1.13, else in TORCH_1_13_PYTHON (writing `out`)."""
    if torch.__version__.startswith("1.13"):
        return averaged_model_from_first(run, paths)
    subprocess.run([TORCH_1_13_PYTHON, "-c", _FIRST_BUFFERS_SCRIPT, os.path.dirname(os.path.abspath(__file__)),
                    run, out, *paths], check=True, timeout=600)
    return torch.load(out, weights_only=True)


# ----- elementwise folds, the expressions torch.optim.swa_utils uses -----

def swa_fold(tensors, acc_dtype=None):
    """avg = avg + (x - avg) / (n + 1) with n + 1 an int64 0-dim tensor: AveragedModel's default
    avg_fn, in the accumulator dtype (default: the tensors' own)."""
    avg = None
    n = torch.tensor(0, dtype=torch.long)
    for x in tensors:
        x = x if acc_dtype is None else x.to(acc_dtype)
        if avg is None:
            avg = x.clone()
        else:
            avg = avg + (x - avg) / (n + 1)
        n += 1
    return avg


def lerp_fold(tensors, weights, acc_dtype=None):
    """avg = x_0, then avg.lerp_(x_k, weights[k]) for k >= 1 (weights[0] unused): the EMA
    update of get_ema_multi_avg_fn (torch 2.x), with a Python float weight."""
    avg = None
    for x, w in zip(tensors, weights):
        x = x if acc_dtype is None else x.to(acc_dtype)
        if avg is None:
            avg = x.clone()
        else:
            avg.lerp_(x, w)
    return avg


def ema_decays(count, decay, warmup="none", inv_gamma=1.0, power=2.0 / 3.0, min_decay=0.0, start=0):
    """The decay used to fold each checkpoint; n = number already folded (the i-th checkpoint of a
    run that starts from `start` folded ones). Entry 0 (the copy) is None when start == 0."""
    out = []
    for i in range(count):
        n = start + i
        if n == 0:
            out.append(None)
            continue
        if warmup == "none":
            d = decay
        elif warmup == "torch_ema":
            d = min(decay, (1 + n) / (10 + n))
        elif warmup == "power":
            d = 1 - (1 + n / inv_gamma) ** -power
            d = max(min_decay, min(d, decay))
        else:
            raise ValueError(warmup)
        out.append(d)
    return out


def ema_fold(tensors, decays, acc_dtype=None):
    return lerp_fold(tensors, [None if d is None else 1 - d for d in decays], acc_dtype)


def weighted_weights(ws):
    """Lerp weights of a weighted average folded one checkpoint at a time: w_k / (w_1 + .. + w_k)."""
    out, total = [], 0.0
    for w in ws:
        total += w
        out.append(w / total)
    return out


def float64_weighted_mean(tensors, ws):
    s = sum(ws)
    acc = torch.zeros(tensors[0].shape, dtype=torch.float64)
    for x, w in zip(tensors, ws):
        acc += x.to(torch.float64) * (w / s)
    return acc


def bf16_ulp(ref):
    """One bfloat16 ulp at each value of a float64 tensor (8 significant bits)."""
    _, e = torch.frexp(ref)
    ulp = torch.ldexp(torch.ones_like(ref), (e - 8).to(torch.int32))
    tiny = 2.0 ** -133  # the smallest bfloat16 subnormal
    return torch.clamp(ulp, min=tiny)


# ----- running swavg -----

def swavg_input(stdin, *args):
    """Runs swavg with `stdin` as its standard input."""
    return subprocess.run([SWAVG, *map(str, args)], input=stdin, capture_output=True, text=True,
                          timeout=600)


def write_rules(path, rules):
    with open(path, "w") as f:
        json.dump(rules, f)
    return path


def save_state(path, sd):
    torch.save(sd, path)
    return path


def copy_state(sd):
    return collections.OrderedDict((k, v.clone()) for k, v in sd.items())


def nan_equal(a, b):
    """Equal values, NaN where the other has NaN (NaN payloads aside)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    na, nb = torch.isnan(a), torch.isnan(b)
    return torch.equal(na, nb) and same_bits(a[~na], b[~nb])
