"""A deterministic fake trainer for the `swavg watch` tests: it writes one checkpoint per saved step
into a folder the way trainers do (slowly, by rename, rotating old ones away) and, at the end, the
average torch.optim.swa_utils.AveragedModel itself makes of every checkpoint it wrote, so a test can
compare what the watcher folded with what torch would have.

Checkpoint of step S (seed G): state_at(S, G), a float32 state dict drawn from a generator seeded
G * 100000 + S: {"layer.weight": [W, 4], "layer.bias": [W], "bn.running_mean": [W],
"bn.num_batches_tracked": int64 scalar S} (W = --width, 8 by default). Steps: E, 2E, ... up to --steps
(E = --save-every). Kinds (--kind), under --output-dir:
  pt           ckpt_<S>.pt             torch.save (zip)
  safetensors  ckpt_<S>.safetensors    safetensors.torch.save_file
  hf           checkpoint-<S>/         model.safetensors, config.json, optimizer.pt, then (after
                                       --chunk-delay) trainer_state.json last, as transformers.Trainer
  dcp          step-<S>/               torch.distributed.checkpoint.save, one process, no process
                                       group (DCP writes .metadata last)
Writing: the bytes of a file (pt, safetensors, hf's model.safetensors) are made in memory, then written
--chunk-bytes at a time with --chunk-delay seconds between chunks, so a watcher sees a growing,
truncated file. --write-mode rename writes the checkpoint (file, or whole folder for hf and dcp) under
the hidden name .<name>.tmp beside it (.ckpt_<S>.pt.tmp, .checkpoint-<S>.tmp) and os.renames it into
place; direct writes the final name from the start (DCP's .metadata records the path it was saved
at, the temporary one under rename, and a random save_id: DCP folders are the same tensors, not bytes).
--interval S sleeps between checkpoints; --keep K deletes the oldest checkpoints (by step) after each
save so K remain, as save_total_limit=K.
write_dcp_without_metadata / restore_dcp_metadata make and mend a DCP folder caught before its
.metadata.

--reference FILE: torch.save({"swa": state dict, "ema": {decay: state dict}, "steps": [...],
"params": [...], "buffers": [...], "buffers_from": "last"}) over every checkpoint written (rotated ones
included), by AveragedModel (use_buffers=False) over module_of(state), whose state_dict keys are the
checkpoint's: SWA with the default average, EMA with get_ema_multi_avg_fn(decay) per --ema-decay.
Parameters are the floating tensors whose last name part is neither running_* nor
num_batches_tracked; the rest are buffers. With use_buffers=False, torch 2.14's update_parameters copies
every buffer of the model just folded into the average (the first fold too), so buffers are the LAST
checkpoint's, unaveraged (bn.num_batches_tracked is the last step); only "params" are averaged.

Run: python fake_trainer.py --output-dir DIR --kind pt --steps 8 --save-every 2 --keep 2
         --chunk-bytes 256 --chunk-delay 0.05 --interval 0.5 --reference ref.pt --ema-decay 0.9
It prints "saved NAME" and "deleted NAME" (flushed) as it goes, unless --quiet.
"""
import argparse
import io
import json
import os
import re
import shutil
import sys
import time
import warnings

import torch

KINDS = ("pt", "safetensors", "hf", "dcp")
WRITE_MODES = ("direct", "rename")
_PATTERNS = {"pt": r"ckpt_(\d+)\.pt", "safetensors": r"ckpt_(\d+)\.safetensors", "hf": r"checkpoint-(\d+)",
             "dcp": r"step-(\d+)"}


def state_at(step, seed=0, width=8):
    """The state dict of checkpoint `step`: the same for the same (step, seed, width)."""
    g = torch.Generator().manual_seed(seed * 100000 + step)
    return {"layer.weight": torch.randn(width, 4, generator=g), "layer.bias": torch.randn(width, generator=g),
            "bn.running_mean": torch.randn(width, generator=g),
            "bn.num_batches_tracked": torch.tensor(step, dtype=torch.int64)}


def checkpoint_name(kind, step):
    return {"pt": "ckpt_%d.pt", "safetensors": "ckpt_%d.safetensors", "hf": "checkpoint-%d",
            "dcp": "step-%d"}[kind] % step


def step_of(kind, name):
    """The step in a checkpoint's name, or None when the name is not one of `kind`'s."""
    m = re.fullmatch(_PATTERNS[kind], name)
    return int(m.group(1)) if m else None


def temp_name(path):
    """Where --write-mode rename writes `path` before renaming it into place: .<name>.tmp beside it."""
    head, tail = os.path.split(path)
    return os.path.join(head, "." + tail + ".tmp")


def is_buffer(name, tensor):
    leaf = name.rsplit(".", 1)[-1]
    return not tensor.is_floating_point() or leaf.startswith("running_") or leaf == "num_batches_tracked"


def module_of(state):
    """A torch.nn.Module whose state_dict() has `state`'s keys and values (copies), in its order."""
    root = torch.nn.Module()
    for name, tensor in state.items():
        *path, leaf = name.split(".")
        module = root
        for part in path:
            if part not in module._modules:
                module.add_module(part, torch.nn.Module())
            module = module._modules[part]
        if is_buffer(name, tensor):
            module.register_buffer(leaf, tensor.detach().clone())
        else:
            module.register_parameter(leaf, torch.nn.Parameter(tensor.detach().clone(), requires_grad=False))
    if list(root.state_dict()) != list(state):
        raise ValueError("module_of: the keys' order cannot be kept (a module's parameters before its buffers)")
    return root


def write_slowly(path, data, chunk_bytes=0, chunk_delay=0):
    """Writes `data` to `path`, chunk_bytes at a time (all at once when 0), sleeping between chunks."""
    with open(path, "wb") as f:
        if chunk_bytes <= 0:
            f.write(data)
            return
        for i in range(0, len(data), chunk_bytes):
            f.write(data[i:i + chunk_bytes])
            f.flush()
            if i + chunk_bytes < len(data) and chunk_delay > 0:
                time.sleep(chunk_delay)


def _torch_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _hf_files(state, step, save_every, max_steps):
    """The files of a Trainer checkpoint besides model.safetensors: (name, bytes), trainer_state.json last."""
    params = [k for k, v in state.items() if not is_buffer(k, v)]
    optimizer = {"state": {i: {"step": torch.tensor(float(step)), "exp_avg": torch.zeros_like(state[k]),
                               "exp_avg_sq": torch.zeros_like(state[k])} for i, k in enumerate(params)},
                 "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
                                   "params": list(range(len(params)))}]}
    config = {"architectures": ["FakeModel"], "model_type": "fake", "dtype": "float32",
              "hidden_size": state["layer.weight"].shape[0] if "layer.weight" in state else 0}
    trainer_state = {"best_global_step": None, "best_metric": None, "best_model_checkpoint": None,
                     "epoch": float(step) / max_steps if max_steps else 0.0, "eval_steps": save_every,
                     "global_step": step, "is_hyper_param_search": False, "is_local_process_zero": True,
                     "is_world_process_zero": True, "log_history": [], "logging_steps": save_every,
                     "max_steps": max_steps or step, "num_input_tokens_seen": 0, "num_train_epochs": 1,
                     "save_steps": save_every, "stateful_callbacks": {}, "total_flos": 0.0,
                     "train_batch_size": 1, "trial_name": None, "trial_params": None}
    return [("config.json", json.dumps(config, indent=2).encode()), ("optimizer.pt", _torch_bytes(optimizer)),
            ("trainer_state.json", json.dumps(trainer_state, indent=2, sort_keys=True).encode())]


def _write_hf(folder, state, step, save_every, max_steps, chunk_bytes, chunk_delay):
    from safetensors.torch import save
    os.makedirs(folder)
    write_slowly(os.path.join(folder, "model.safetensors"), save(state, metadata={"format": "pt"}),
                 chunk_bytes, chunk_delay)
    *others, last = _hf_files(state, step, save_every, max_steps)
    for name, data in others:
        write_slowly(os.path.join(folder, name), data)
    if chunk_delay > 0:
        time.sleep(chunk_delay)
    write_slowly(os.path.join(folder, last[0]), last[1])


def _dcp_save(folder, state):
    import torch.distributed.checkpoint as dcp
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, checkpoint_id=folder)


def write_dcp_without_metadata(folder, state):
    """A DCP folder as a watcher may see it before the save finishes: .metadata renamed .metadata.hidden."""
    _dcp_save(folder, state)
    os.rename(os.path.join(folder, ".metadata"), os.path.join(folder, ".metadata.hidden"))


def restore_dcp_metadata(folder):
    os.rename(os.path.join(folder, ".metadata.hidden"), os.path.join(folder, ".metadata"))


def write_checkpoint(folder, kind, step, seed, chunk_bytes=0, chunk_delay=0, write_mode="direct",
                     save_every=None, max_steps=None, width=8):
    """Writes checkpoint `step` (state_at(step, seed, width)) into `folder`; returns its path."""
    if kind not in KINDS or write_mode not in WRITE_MODES:
        raise ValueError("write_checkpoint: kind %r, write_mode %r" % (kind, write_mode))
    final = os.path.join(folder, checkpoint_name(kind, step))
    target = temp_name(final) if write_mode == "rename" else final
    state = state_at(step, seed, width)
    if kind == "pt":
        write_slowly(target, _torch_bytes(state), chunk_bytes, chunk_delay)
    elif kind == "safetensors":
        from safetensors.torch import save
        write_slowly(target, save(state), chunk_bytes, chunk_delay)
    elif kind == "hf":
        _write_hf(target, state, step, save_every or step, max_steps, chunk_bytes, chunk_delay)
    else:
        _dcp_save(target, state)
    if target != final:
        os.rename(target, final)
    return final


def rotate(folder, kind, keep):
    """Deletes the oldest of `kind`'s checkpoints in `folder` (by step) so `keep` remain; returns their names."""
    found = sorted((s, n) for n in os.listdir(folder) for s in [step_of(kind, n)] if s is not None)
    gone = [n for _, n in found[:max(len(found) - keep, 0)]]
    for name in gone:
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    return gone


def reference(steps, seed=0, decays=(), width=8):
    """AveragedModel's SWA and EMA (one per decay) over state_at(s) for s in steps, in that order."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
    first = module_of(state_at(steps[0], seed, width))
    swa = AveragedModel(first)
    emas = {d: AveragedModel(first, multi_avg_fn=get_ema_multi_avg_fn(d)) for d in decays}
    for step in steps:
        model = module_of(state_at(step, seed, width))
        for averaged in [swa, *emas.values()]:
            averaged.update_parameters(model)

    def state(averaged):
        return {k: v.detach().clone() for k, v in averaged.module.state_dict().items()}
    names = list(first.state_dict())
    params = [n for n, _ in first.named_parameters()]
    return {"swa": state(swa), "ema": {d: state(e) for d, e in emas.items()}, "steps": list(steps),
            "params": params, "buffers": [n for n in names if n not in params], "buffers_from": "last"}


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", required=True, help="the run's folder (made when missing)")
    p.add_argument("--kind", choices=KINDS, default="pt")
    p.add_argument("--steps", type=int, default=8, help="the last step (default 8)")
    p.add_argument("--save-every", type=int, default=1, help="steps between checkpoints (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--width", type=int, default=8, help="rows of layer.weight and length of the vectors")
    p.add_argument("--chunk-bytes", type=int, default=0, help="write files this many bytes at a time (0: at once)")
    p.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between chunks (and before hf's "
                   "trainer_state.json)")
    p.add_argument("--write-mode", choices=WRITE_MODES, default="direct",
                   help="rename: write .<name>.tmp, then os.rename it into place")
    p.add_argument("--interval", type=float, default=0.0, help="seconds between checkpoints")
    p.add_argument("--keep", type=int, default=0, help="keep only the K newest checkpoints (0: all)")
    p.add_argument("--reference", help="torch.save the AveragedModel SWA/EMA of every checkpoint written here")
    p.add_argument("--ema-decay", type=float, action="append", default=[], help="an EMA decay (repeatable)")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    return p


def run(args):
    """Runs the fake trainer; `args` is a list of command-line arguments or parser()'s Namespace.
    Returns the steps written."""
    if not isinstance(args, argparse.Namespace):
        args = parser().parse_args(args)
    say = (lambda *_: None) if args.quiet else (lambda s: print(s, flush=True))
    os.makedirs(args.output_dir, exist_ok=True)
    steps = list(range(args.save_every, args.steps + 1, args.save_every))
    for i, step in enumerate(steps):
        if i and args.interval > 0:
            time.sleep(args.interval)
        path = write_checkpoint(args.output_dir, args.kind, step, args.seed, args.chunk_bytes, args.chunk_delay,
                                args.write_mode, save_every=args.save_every, max_steps=args.steps,
                                width=args.width)
        say("saved " + os.path.basename(path))
        for name in rotate(args.output_dir, args.kind, args.keep) if args.keep > 0 else []:
            say("deleted " + name)
    if args.reference and steps:
        torch.save(reference(steps, args.seed, args.ema_decay, args.width), args.reference)
        say("reference " + args.reference)
    return steps


if __name__ == "__main__":
    run(sys.argv[1:])
