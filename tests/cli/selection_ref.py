"""Python reference for checkpoint selection (--from-step/--to-step, --every, --last, --top/--bottom
--metric) and the --weights recipes (sma, wma, wma-step, ema:D, wsm:SHAPE, wsm:W1,...,Wk), written
straight from the contract's formulas so the end-to-end tests never compare swavg with itself.

An entry is a dict {"path", "step", "metric"} (step or metric None where the checkpoint has none),
and a list of them is in fold order (the order --sort gave). entries_from_reference() reads the
reference.json that scripts/fixtures/trainer_runs.py writes beside each run.
"""
import collections
import json
import math
import os
import re

import torch


def natural_key(name):
    """Digit runs compare as numbers: ckpt_2 before ckpt_10."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name) if t]


def sort_by_step(entries):
    """--sort step: by each checkpoint's step, ties keeping the order given (natural order)."""
    for e in entries:
        if e["step"] is None:
            raise ValueError("%s: no step (--sort step needs one)" % e["path"])
    return sorted(entries, key=lambda e: e["step"])


def select(entries, from_step=None, to_step=None, every=1, last=None, top=None, bottom=None):
    """The contract's pipeline after sorting: step range (inclusive), every K-th (the K-th, 2K-th, ...),
    the last N, then the N with the highest (top) or lowest (bottom) metric, back in fold order.
    Ties keep the earlier in fold order (Python's stable sorted, also with reverse=True). Raises
    ValueError naming the checkpoint that lacks a step or metric the selection needs."""
    if top is not None and bottom is not None:
        raise ValueError("top and bottom together")
    out = list(entries)
    if from_step is not None or to_step is not None:
        for e in out:
            if e["step"] is None:
                raise ValueError("%s: no step (a step range needs one)" % e["path"])
        out = [e for e in out if (from_step is None or e["step"] >= from_step)
               and (to_step is None or e["step"] <= to_step)]
    if every < 1:
        raise ValueError("every must be >= 1")
    out = out[every - 1::every]
    if last is not None:
        out = out[-last:] if last > 0 else []
    n = top if top is not None else bottom
    if n is not None:
        for e in out:
            if e["metric"] is None:
                raise ValueError("%s: no metric" % e["path"])
        ranked = sorted(range(len(out)), key=lambda i: out[i]["metric"], reverse=top is not None)
        out = [out[i] for i in sorted(ranked[:n])]
    return out


def _wsm(decay, n):
    """WSM merge weights from the decay values w_1..w_k (k = n - 1): c_0 = 1 - w_1,
    c_j = w_j - w_{j+1}, c_k = w_k."""
    k = n - 1
    if len(decay) != k:
        raise ValueError("wsm: %d decay values given for %d checkpoints (need %d)" % (len(decay), n, k))
    if k == 0:
        return [1.0]
    if not all(1 >= a >= b >= 0 for a, b in zip([1.0] + decay, decay + [0.0])):
        raise ValueError("wsm: decay values must satisfy 1 >= W1 >= ... >= Wk >= 0: %r" % (decay,))
    return [1 - decay[0]] + [decay[j] - decay[j + 1] for j in range(k - 1)] + [decay[k - 1]]


WSM_SHAPES = {
    "linear": lambda x: 1 - x,
    "cosine": lambda x: (1 + math.cos(math.pi * x)) / 2,
    "1-sqrt": lambda x: 1 - math.sqrt(x),
}


def raw_weights(recipe, steps):
    """The unnormalised weights of a recipe (or of a plain comma list) for checkpoints whose steps are
    `steps`, in fold order; len(steps) is N (a step may be None where the recipe needs none)."""
    n = len(steps)
    if n == 0:
        raise ValueError("no checkpoints")
    if recipe == "sma":
        return [1.0 / n] * n
    if recipe == "wma":
        return [i / (n * (n + 1) / 2) for i in range(1, n + 1)]
    if recipe == "wma-step":
        if any(s is None for s in steps):
            raise ValueError("wma-step: a checkpoint without a step")
        total = sum(steps)
        if total <= 0:
            raise ValueError("wma-step: the steps sum to %r" % total)
        return [s / total for s in steps]
    if recipe.startswith("ema:"):
        d = float(recipe[4:])
        if not 0 <= d <= 1:
            raise ValueError("ema: decay %r outside [0, 1]" % d)
        return [d ** (n - 1)] + [(1 - d) * d ** (n - i) for i in range(2, n + 1)]
    if recipe.startswith("wsm:"):
        shape = recipe[4:]
        if shape in WSM_SHAPES:
            f = WSM_SHAPES[shape]
            return _wsm([f(j / n) for j in range(1, n)], n)
        return _wsm([float(v) for v in shape.split(",")] if shape else [], n)
    values = [float(v) for v in recipe.split(",")]
    if len(values) != n:
        raise ValueError("%d weights for %d checkpoints" % (len(values), n))
    if any(not math.isfinite(v) or v < 0 for v in values) or not sum(values) > 0:
        raise ValueError("weights must be finite, >= 0, with a positive sum: %r" % (values,))
    return values


def recipe_weights(recipe, steps):
    """raw_weights, normalised to sum to 1 (each divided by their exactly rounded sum)."""
    w = raw_weights(recipe, steps)
    total = math.fsum(w)
    return [v / total for v in w]


def weighted_average(state_dicts, weights):
    """sum_i w_i * sd_i for every tensor, accumulated in float64 (integer tensors included: the caller
    decides what to compare). Every state dict must hold the first one's tensor names."""
    if len(state_dicts) != len(weights) or not state_dicts:
        raise ValueError("%d state dicts, %d weights" % (len(state_dicts), len(weights)))
    out = collections.OrderedDict()
    for name, t in state_dicts[0].items():
        if not isinstance(t, torch.Tensor):
            continue
        acc = torch.zeros(t.shape, dtype=torch.float64)
        for sd, w in zip(state_dicts, weights):
            acc += float(w) * sd[name].detach().to(torch.float64)
        out[name] = acc
    return out


def entries_from_reference(run_dir, value="value", include=None):
    """The entries of a trainer_runs/<run>/reference.json in its (natural) order, with absolute
    paths; value picks the metric ("value", or "value_from_name" for Lightning's file names);
    include, a regex, keeps the paths it matches (e.g. r"^checkpoint-\\d" for timm's epoch files)."""
    with open(os.path.join(run_dir, "reference.json")) as f:
        doc = json.load(f)
    return [{"path": os.path.join(run_dir, c["path"]), "step": c["step"], "metric": c.get(value)}
            for c in doc["checkpoints"] if include is None or re.search(include, c["path"])]
