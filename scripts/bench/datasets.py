"""The inputs the benchmarks generate into the work folder, with fixed seeds; a folder that holds
a set made with the same config (its manifest.json) is reused.

torch.save checkpoints of a transformer-like state dict (float32 and bfloat16), of a ResNet with
BatchNorm buffers and of many tiny tensors, each a base plus small per-checkpoint noise; and, for
the disk-bound modes and --peers, safetensors files, sharded Hugging Face folders and Llama-like
folders written with numpy (a per-file block of random normals tiled over the tensors), which is
fast at any size.
"""
import dataclasses
import json
import math
import os

from ._common import MiB
from .children.peer import build_model


NOISE_POOL = 1 << 20
DISK_BLOCK = 4 << 20  # float32 values per generated block (16 MiB)


@dataclasses.dataclass
class CkptSet:
    """One input set: its checkpoints' paths (files or folders) and the sizes the targets use."""
    key: str
    label: str
    paths: list
    file_bytes: int
    largest_tensor_bytes: int
    n_tensors: int

    @property
    def total_bytes(self):
        return sum(os.path.getsize(p) for p in self.paths)

    @property
    def budget_bytes(self):
        """The RSS target above the baseline: 3 x the largest tensor + 64 MiB."""
        return 3 * self.largest_tensor_bytes + 64 * MiB


def transformer_shapes(mib):
    """Names and shapes of a GPT-like state dict of about `mib` MiB in float32 (embeddings ~1/3)."""
    params = mib * MiB // 4
    d = max(64, round(1024 * math.sqrt(mib / 400) / 64) * 64)
    ctx = 1024
    vocab = max(64, round(params / 3 / d))
    layers = max(1, round((params - (vocab + ctx + 2) * d) / (12 * d * d + 13 * d)))
    return gpt_shapes(d, vocab, ctx, layers)


def gpt_shapes(d, vocab, ctx, layers):
    """Token/position embeddings, `layers` blocks (LayerNorms, qkv, proj, MLP) and a final LayerNorm."""
    shapes = [("tok_emb.weight", (vocab, d)), ("pos_emb.weight", (ctx, d))]
    for i in range(layers):
        b = f"blocks.{i}."
        shapes += [(b + "ln1.weight", (d,)), (b + "ln1.bias", (d,)),
                   (b + "attn.qkv.weight", (3 * d, d)), (b + "attn.qkv.bias", (3 * d,)),
                   (b + "attn.proj.weight", (d, d)), (b + "attn.proj.bias", (d,)),
                   (b + "ln2.weight", (d,)), (b + "ln2.bias", (d,)),
                   (b + "mlp.fc1.weight", (4 * d, d)), (b + "mlp.fc1.bias", (4 * d,)),
                   (b + "mlp.fc2.weight", (d, 4 * d)), (b + "mlp.fc2.bias", (d,))]
    return shapes + [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]


def llama_shapes(mib):
    """(entries, config) of a LlamaForCausalLM of about `mib` MiB in float32 (embeddings ~1/2)."""
    params = mib * MiB // 4
    d = max(64, round(768 * math.sqrt(mib / 100) / 64) * 64)
    heads = d // 64
    inter = round(8 * d / 3 / 64) * 64
    vocab = max(64, round(params / 4 / d / 64) * 64)
    layers = max(1, round((params - 2 * vocab * d) / (4 * d * d + 3 * d * inter + 2 * d)))
    entries = [("model.embed_tokens.weight", (vocab, d))]
    for i in range(layers):
        b = f"model.layers.{i}."
        entries += [(b + "input_layernorm.weight", (d,))]
        entries += [(b + f"self_attn.{p}_proj.weight", (d, d)) for p in "qkvo"]
        entries += [(b + "post_attention_layernorm.weight", (d,)),
                    (b + "mlp.gate_proj.weight", (inter, d)), (b + "mlp.up_proj.weight", (inter, d)),
                    (b + "mlp.down_proj.weight", (d, inter))]
    entries += [("model.norm.weight", (d,)), ("lm_head.weight", (vocab, d))]
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
              "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": heads,
              "num_hidden_layers": layers, "vocab_size": vocab, "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False}
    return entries, config


def _base_tensor(name, shape, gen):
    import torch
    t = torch.randn(shape, generator=gen)
    if name.rsplit(".", 2)[-2].startswith("ln") and name.endswith("weight"):
        return t.mul_(0.05).add_(1.0)
    return t.mul_(0.02)


def _perturbed(base, seed):
    """A copy of `base` with small noise, from a per-checkpoint pool, on every floating tensor."""
    import torch
    pool = torch.randn(NOISE_POOL, generator=torch.Generator().manual_seed(seed)).mul_(1e-3)
    out = {}
    for i, (name, t) in enumerate(base.items()):
        x = t.clone()
        if x.is_floating_point():
            start = (i * 7919) % NOISE_POOL
            noise = torch.cat([pool[start:], pool[:start]])
            flat = x.view(-1)
            for off in range(0, flat.numel(), NOISE_POOL):
                chunk = flat[off:off + NOISE_POOL]
                chunk.add_(noise[:chunk.numel()])
        out[name] = x
    return out


def ckpt_paths(folder, n):
    return [os.path.join(folder, f"ckpt_{i:03d}.pt") for i in range(n)]


def link_inputs(sources, n, folder):
    """n input names in `folder`, hard links to `sources` cyclically (existing names replaced)."""
    os.makedirs(folder, exist_ok=True)
    paths = ckpt_paths(folder, n)
    for i, p in enumerate(paths):
        if os.path.realpath(p) == os.path.realpath(sources[i % len(sources)]):
            continue
        if os.path.exists(p):
            os.unlink(p)
        os.link(sources[i % len(sources)], p)
    return paths


def cached_manifest(folder, config):
    """The manifest of a folder generated with this config, or None."""
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            man = json.load(f)
    except (OSError, ValueError):
        return None
    files = [p for s in man.get("sets", []) for p in s["paths"]]
    files += list(man.get("extra", {}).values())
    if man.get("config") != config or not all(os.path.exists(p) for p in files):
        return None
    return man


def save_manifest(folder, config, sets, extra=None):
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"config": config, "sets": [dataclasses.asdict(s) for s in sets],
                   "extra": extra or {}}, f)


def make_transformer_sets(root, key, mib, n, distinct, dtypes, seed):
    """n checkpoints per dtype: the first `distinct` generated, the rest hard links to them."""
    folder = os.path.join(root, key)
    config = {"kind": "transformer", "mib": mib, "n": n, "distinct": distinct,
              "dtypes": list(dtypes), "seed": seed, "version": 1}
    man = cached_manifest(folder, config)
    if man:
        return [CkptSet(**s) for s in man["sets"]]
    import torch
    gen = torch.Generator().manual_seed(seed)
    base = {name: _base_tensor(name, shape, gen) for name, shape in transformer_shapes(mib)}
    largest = max(t.numel() for t in base.values())
    tdtypes = [getattr(torch, d) for d in dtypes]
    folders = [os.path.join(folder, d) for d in dtypes]
    for k in range(distinct):
        ckpt = _perturbed(base, seed * 1000 + k + 1)
        for sub, tdt in zip(folders, tdtypes):
            os.makedirs(sub, exist_ok=True)
            torch.save({name: t.to(tdt) for name, t in ckpt.items()}, ckpt_paths(sub, distinct)[k])
        del ckpt
    sets = []
    for sub, dtype, tdt in zip(folders, dtypes, tdtypes):
        paths = link_inputs(ckpt_paths(sub, distinct), n, sub)
        size = os.path.getsize(paths[0])
        itemsize = torch.tensor([], dtype=tdt).element_size()
        sets.append(CkptSet(key=f"{key}_{dtype}", paths=paths, file_bytes=size,
                            label=f"transformer {dtype} {n}x{size / MiB:.0f} MiB",
                            largest_tensor_bytes=largest * itemsize, n_tensors=len(base)))
    save_manifest(folder, config, sets)
    return sets


def make_resnet_set(root, spec, n, seed, bn_samples, bn_res):
    """n ResNet checkpoints with BatchNorm buffers; the scripted model and .npy data for update-bn.

    Returns (CkptSet, model.ts path, data.npy path)."""
    folder = os.path.join(root, "resnet")
    config = {"kind": "resnet", "spec": spec, "n": n, "seed": seed, "bn_samples": bn_samples,
              "bn_res": bn_res, "version": 1}
    extra = {"model": os.path.join(folder, "model.ts"), "data": os.path.join(folder, "data.npy")}
    man = cached_manifest(folder, config)
    if man:
        return CkptSet(**man["sets"][0]), extra["model"], extra["data"]
    import numpy as np
    import torch
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(seed)
    model = build_model(spec)
    torch.jit.script(model).save(extra["model"])
    gen = torch.Generator().manual_seed(seed)
    base = model.state_dict()
    for name, t in base.items():
        if name.endswith("running_mean"):
            t.copy_(0.1 * torch.randn(t.shape, generator=gen))
        elif name.endswith("running_var"):
            t.copy_(0.5 + torch.rand(t.shape, generator=gen))
    paths = ckpt_paths(folder, n)
    for k, path in enumerate(paths):
        ckpt = _perturbed(base, seed * 1000 + k + 1)
        for name, t in ckpt.items():
            if name.endswith("num_batches_tracked"):
                t.fill_(1000 * (k + 1))
        torch.save(ckpt, path)
    rng = np.random.default_rng(seed)
    np.save(extra["data"], rng.standard_normal((bn_samples, 3, bn_res, bn_res), dtype=np.float32))
    size = os.path.getsize(paths[0])
    arch = spec.split(":")[-1].split(",")[0]
    s = CkptSet(key="resnet", label=f"resnet ({arch}) {n}x{size / MiB:.0f} MiB", paths=paths,
                file_bytes=size, n_tensors=len(base),
                largest_tensor_bytes=max(t.numel() * t.element_size() for t in base.values()))
    save_manifest(folder, config, [s], extra)
    return s, extra["model"], extra["data"]


def make_many_set(root, count, n, seed):
    """n checkpoints of `count` tensors of 4 float32 elements each (the per-tensor cost case)."""
    folder = os.path.join(root, f"many_{count}")
    config = {"kind": "many", "count": count, "n": n, "seed": seed, "version": 1}
    man = cached_manifest(folder, config)
    if man:
        return CkptSet(**man["sets"][0])
    import collections
    import torch
    os.makedirs(folder, exist_ok=True)
    paths = ckpt_paths(folder, n)
    for k, path in enumerate(paths):
        gen = torch.Generator().manual_seed(seed * 1000 + k)
        data = torch.randn(count, 4, generator=gen)
        torch.save(collections.OrderedDict((f"blocks.{i}.w", data[i].clone()) for i in range(count)), path)
    s = CkptSet(key=f"many_{count}", label=f"{count} tensors, {n}x{os.path.getsize(paths[0]) / MiB:.0f} MiB",
                paths=paths, file_bytes=os.path.getsize(paths[0]), largest_tensor_bytes=16, n_tensors=count)
    save_manifest(folder, config, [s])
    return s


def st_header(entries, dtype_name, itemsize, metadata=None):
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, shape in entries:
        n = math.prod(shape) * itemsize
        header[name] = {"dtype": dtype_name, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return len(text).to_bytes(8, "little") + text


def write_random_safetensors(path, entries, dtype, seed):
    """`entries` [(name, shape)] of float32 or bfloat16 random normals * 0.02 (finite)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal(DISK_BLOCK, dtype=np.float32) * 0.02)
    if dtype == "bfloat16":
        block = (block.view(np.uint32) >> 16).astype(np.uint16)
    raw = block.tobytes()
    itemsize = 4 if dtype == "float32" else 2
    with open(path, "wb") as f:
        f.write(st_header(entries, "F32" if dtype == "float32" else "BF16", itemsize, {"format": "pt"}))
        pos = int(rng.integers(len(raw) // itemsize)) * itemsize
        for _, shape in entries:
            left = math.prod(shape) * itemsize
            while left:
                piece = raw[pos:pos + left]
                f.write(piece)
                left -= len(piece)
                pos = (pos + len(piece)) % len(raw)


def write_sharded_folder(folder, entries, dtype, seed, max_shard_bytes):
    """A Hugging Face folder: greedy shards of at most max_shard_bytes, an index, a config."""
    itemsize = 4 if dtype == "float32" else 2
    groups, size = [[]], 0
    for name, shape in entries:
        n = math.prod(shape) * itemsize
        if groups[-1] and size + n > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append((name, shape))
        size += n
    os.makedirs(folder, exist_ok=True)
    weight_map = {}
    for k, group in enumerate(groups, 1):
        file = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
        write_random_safetensors(os.path.join(folder, file), group, dtype, seed * 100 + k)
        weight_map.update({name: file for name, _ in group})
    total = sum(math.prod(s) * itemsize for _, s in entries)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write('{"model_type": "bench"}\n')
    return len(groups)


def files_of(path):
    """The files a checkpoint argument reads (a folder: its index and shards)."""
    if not os.path.isdir(path):
        return [path]
    return [os.path.join(path, n) for n in sorted(os.listdir(path)) if n != "config.json"]


def make_disk_set(root, key, mib, n, dtype, seed, shard_mib=None):
    """n distinct checkpoints of a transformer of `mib` MiB (float32 sizes), single files or folders."""
    folder = os.path.join(root, key)
    config = {"kind": "disk", "mib": mib, "n": n, "dtype": dtype, "seed": seed, "shard_mib": shard_mib,
              "version": 1}
    man = cached_manifest(folder, config)
    if man:
        return CkptSet(**man["sets"][0])
    entries = transformer_shapes(mib)
    itemsize = 4 if dtype == "float32" else 2
    os.makedirs(folder, exist_ok=True)
    paths, shards = [], 0
    for i in range(n):
        if shard_mib:
            p = os.path.join(folder, f"ckpt_{i:03d}")
            shards = write_sharded_folder(p, entries, dtype, seed * 1000 + i, shard_mib * MiB)
        else:
            p = os.path.join(folder, f"ckpt_{i:03d}.safetensors")
            write_random_safetensors(p, entries, dtype, seed * 1000 + i)
        paths.append(p)
    size = sum(os.path.getsize(f) for f in files_of(paths[0]))
    shape_of = {name: shape for name, shape in entries}
    largest = max(math.prod(s) for s in shape_of.values()) * itemsize
    label = f"{n} x {size / MiB:.0f} MiB {dtype}" + (f", {shards} shards each" if shard_mib else "")
    s = CkptSet(key=key, paths=paths, file_bytes=size, label=label, largest_tensor_bytes=largest,
                n_tensors=len(entries))
    save_manifest(folder, config, [s])
    return s


def make_hf_set(root, mib, n, dtype, seed):
    """n distinct Hugging Face folders (config.json + model.safetensors) of a Llama of `mib` MiB."""
    folder = os.path.join(root, f"hf_{mib}_{dtype}")
    config = {"kind": "hf", "mib": mib, "n": n, "dtype": dtype, "seed": seed, "version": 1}
    man = cached_manifest(folder, config)
    if man:
        return CkptSet(**man["sets"][0])
    entries, model_config = llama_shapes(mib)
    model_config["dtype"] = dtype
    paths = []
    for i in range(n):
        p = os.path.join(folder, f"ckpt_{i:03d}")
        os.makedirs(p, exist_ok=True)
        write_random_safetensors(os.path.join(p, "model.safetensors"), entries, dtype, seed * 1000 + i)
        with open(os.path.join(p, "config.json"), "w") as f:
            json.dump(model_config, f, indent=2)
        paths.append(p)
    size = os.path.getsize(os.path.join(paths[0], "model.safetensors"))
    itemsize = 4 if dtype == "float32" else 2
    s = CkptSet(key=f"hf_{dtype}", paths=paths, file_bytes=size, n_tensors=len(entries),
                label=f"{n} x {size / MiB:.0f} MiB {dtype} Llama folders",
                largest_tensor_bytes=max(math.prod(sh) for _, sh in entries) * itemsize)
    save_manifest(folder, config, [s])
    return s
