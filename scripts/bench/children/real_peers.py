"""What users run instead of swavg, for `scripts/bench.py --peers`: real tools, each its own process.

Run with a Python that has the tool installed (bench.py's --peer-python; the torch 2.x venv with
timm, transformers and safetensors). Every subcommand fsyncs what it wrote (each file, its folder
and the folder's parent) before it exits, because swavg fsyncs its output: the same durability.

  timm INPUT... --out FILE [--safetensors] [--no-use-ema]
      timm's avg_checkpoints.py (a script in the pytorch-image-models repo, not in the wheel), its
      averaging as shipped (read from the repo at aa4b585, 2026-08; the file last changed in
      52e6d19, 2026-03), calling the installed timm's own timm.models.load_state_dict: each
      checkpoint's state dict (the EMA one if present) summed per key in float64, divided by the
      count, clamped to float32's range, cast to float32, saved with torch.save
      (safetensors.torch.save_file with --safetensors), then the file read back whole for the
      SHA-256 the script prints. The script finds its inputs with --input/--filter (a glob) and
      first sorts them by the `metric` each torch.load-ed checkpoint holds; on safetensors files
      it must be run with --no-sort (the metric probe torch.loads them), which this is. Here the
      inputs are given in order instead of globbed.
  transformers FOLDER... --out FOLDER
      a model soup as people write it: AutoModelForCausalLM.from_pretrained of the first folder,
      its state_dict summed in float32 with each further folder's (from_pretrained, then freed),
      divided by the count, load_state_dict into the first model, save_pretrained.
  mergekit FOLDER... --out FOLDER
      mergekit's linear merge (equal weights, normalize: true, dtype of the inputs) run through
      the mergekit-yaml command's own entry point on a YAML file written next to the output, with
      --no-copy-tokenizer (the bench's folders hold no tokenizer).
  probe TOOL
      prints the tool's version; exits 1 when it cannot be imported (bench.py skips it then).
"""
import argparse
import os
import sys


def fsync_tree(path):
    """fsync every file under `path` (or the file), every folder, and the parent folder."""
    def sync(p, flags):
        fd = os.open(p, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if os.path.isdir(path):
        for root, _, files in os.walk(path):
            for name in files:
                sync(os.path.join(root, name), os.O_RDONLY)
            sync(root, os.O_RDONLY | os.O_DIRECTORY)
    else:
        sync(path, os.O_RDONLY)
    sync(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)


def cmd_timm(args):
    """avg_checkpoints.py's steps, in order, with timm's own loader (see the module docstring)."""
    import hashlib
    import torch
    from timm.models import load_state_dict

    sums, counts = {}, {}  # per key, as the script keeps them: a key missing from a file is not counted
    for path in args.inputs:
        state = load_state_dict(path, not args.no_use_ema)
        if not state:
            print(f"{path}: empty state dict, skipped (as the script does)")
            continue
        for key, t in state.items():
            if key in sums:
                sums[key] += t.to(dtype=torch.float64)
                counts[key] += 1
            else:
                sums[key] = t.clone().to(dtype=torch.float64)
                counts[key] = 1
    limits = torch.finfo(torch.float32)
    averaged = {}
    for key, total in sums.items():
        total.div_(counts[key])
        averaged[key] = total.clamp(limits.min, limits.max).to(dtype=torch.float32)
    if args.safetensors:
        import safetensors.torch
        safetensors.torch.save_file(averaged, args.out)
    else:
        torch.save(averaged, args.out)
    with open(args.out, "rb") as f:  # the script reads its output back whole for a SHA-256
        print(f"{args.out}: sha256 {hashlib.sha256(f.read()).hexdigest()}")
    fsync_tree(args.out)


def cmd_transformers(args):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.inputs[0], dtype="auto")
    first = model.state_dict()
    dtypes = {k: v.dtype for k, v in first.items()}
    sums = {k: v.detach().to(torch.float32, copy=True) for k, v in first.items()}
    del first
    for path in args.inputs[1:]:
        other = AutoModelForCausalLM.from_pretrained(path, dtype="auto")
        for k, v in other.state_dict().items():
            sums[k] += v.detach().float()
        del other
    n = len(args.inputs)
    model.load_state_dict({k: (s / n).to(dtypes[k]) for k, s in sums.items()})
    del sums
    model.save_pretrained(args.out)
    fsync_tree(args.out)


def cmd_mergekit(args):
    import json
    from mergekit.scripts.run_yaml import main as mergekit_yaml

    with open(os.path.join(args.inputs[0], "config.json")) as f:
        config = json.load(f)
    dtype = config.get("dtype") or config.get("torch_dtype") or "float32"
    lines = ["merge_method: linear", "parameters:", "  normalize: true", f"dtype: {dtype}", "models:"]
    for p in args.inputs:
        lines += [f"  - model: {json.dumps(os.path.abspath(p))}", "    parameters:", "      weight: 1.0"]
    yml = os.path.abspath(args.out.rstrip("/")) + ".mergekit.yml"
    with open(yml, "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        # --no-copy-tokenizer: the bench's folders have none (mergekit then fails building one).
        mergekit_yaml([yml, args.out, "--no-copy-tokenizer"], standalone_mode=False)
    finally:
        os.unlink(yml)
    fsync_tree(args.out)


def cmd_probe(args):
    import importlib
    import importlib.metadata
    try:
        importlib.import_module(args.tool)
        print(importlib.metadata.version(args.tool))
    except Exception as e:  # noqa: BLE001 (any failure to import means: skip this peer)
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("timm")
    s.add_argument("inputs", nargs="+")
    s.add_argument("--out", required=True)
    s.add_argument("--safetensors", action="store_true")
    s.add_argument("--no-use-ema", action="store_true")
    s.set_defaults(fn=cmd_timm)
    s = sub.add_parser("transformers")
    s.add_argument("inputs", nargs="+")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_transformers)
    s = sub.add_parser("mergekit")
    s.add_argument("inputs", nargs="+")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_mergekit)
    s = sub.add_parser("probe")
    s.add_argument("tool")
    s.set_defaults(fn=cmd_probe)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
