"""The Python side of scripts/bench.py: what users run today instead of swavg, and the I/O floor.

Each subcommand runs as its own process, so that bench.py can time it and read its peak RSS:

  average   torch.load every checkpoint, fold it into a running average exactly as
            torch.optim.swa_utils.AveragedModel does (first copy, then
            avg.copy_(avg + (x - avg) / (n_averaged + 1)) per tensor, n_averaged an int64
            tensor), torch.save the result. Buffers (running_mean, running_var,
            num_batches_tracked) and integer tensors are taken from the last checkpoint, as
            swavg's defaults (--buffers latest, --int latest) do. float16/bfloat16 tensors are
            accumulated in float32 and rounded once at the end, like swavg's --accumulate auto.
  ema       the same with avg.lerp_(x, 1 - decay) (get_ema_multi_avg_fn).
            With --fsync (bench.py --peers) both fsync the output and its folder, as swavg does.
  inspect   torch.load a checkpoint and print every tensor's name, dtype and shape.
  update-bn torch.optim.swa_utils.update_bn on the eager model given by --arch, with the weights of
            --checkpoint and the batches of a .npy array; torch.save of the resulting state_dict.
  floor     the I/O floor: read every input once (16 MiB readinto calls into one reused
            bytearray; from the page cache when warm) and write one output as large as the first
            input (or --out-bytes), fsynced, as swavg fsyncs its output. Imports no torch.
            --ahead N also keeps N bytes ahead of the reads under POSIX_FADV_WILLNEED.
Inputs may be torch.save files, safetensors files or Hugging Face folders (shards and an index, or
one model.safetensors / pytorch_model.bin).
  runner    bench.py's process launcher (see cmd_runner).

The model builders (a torchvision-compatible ResNet written by hand) live here too, because the
update-bn peer needs the eager model that bench.py scripts for swavg.
"""
import argparse
import importlib.util
import os
import sys

BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")
FLOOR_CHUNK = 16 << 20


# ---------------------------------------------------------------------------------------------
# Models


def resnet_spec(quick):
    """The architecture spec bench.py uses: torchvision's resnet50 when available (full runs)."""
    if quick:
        return "hand:width=8,layers=1-1-1-1,classes=10"
    if importlib.util.find_spec("torchvision") is not None:
        return "torchvision:resnet50"
    return "hand:width=64,layers=3-4-6-3,classes=1000"


def build_model(spec):
    """An eager model: 'torchvision:resnet50' or 'hand:width=W,layers=a-b-c-d,classes=C'."""
    kind, _, rest = spec.partition(":")
    if kind == "torchvision":
        import torchvision.models
        return getattr(torchvision.models, rest)()
    if kind == "hand":
        opts = dict(kv.split("=") for kv in rest.split(","))
        return _hand_resnet(int(opts["width"]), [int(x) for x in opts["layers"].split("-")],
                            int(opts["classes"]))
    raise ValueError(f"unknown model spec {spec!r}")


def _hand_resnet(width, layers, classes):
    """A bottleneck ResNet with torchvision's names (resnet50: width=64, layers=3-4-6-3)."""
    import torch
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            identity = x
            if self.downsample is not None:
                identity = self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.relu(self.bn3(self.conv3(out)) + identity)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inplanes = width
            self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            self.layer1 = self._layer(width, layers[0], 1)
            self.layer2 = self._layer(width * 2, layers[1], 2)
            self.layer3 = self._layer(width * 4, layers[2], 2)
            self.layer4 = self._layer(width * 8, layers[3], 2)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(width * 8 * 4, classes)

        def _layer(self, planes, blocks, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes * 4:
                downsample = nn.Sequential(
                    nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes * 4))
            mods = [Bottleneck(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * 4
            mods += [Bottleneck(self.inplanes, planes, 1, None) for _ in range(1, blocks)]
            return nn.Sequential(*mods)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


# ---------------------------------------------------------------------------------------------
# Peers


def _state_dict(obj):
    return obj.get("state_dict", obj) if isinstance(obj, dict) else obj


def _read_safetensors(path):
    """A safetensors file read whole, as safetensors.torch.load_file does (no package here)."""
    import json
    import struct
    import numpy as np
    import torch
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
              "I64": torch.int64, "I32": torch.int32}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = torch.from_numpy(np.frombuffer(data, dtype=np.uint8, count=end - b, offset=b).copy())
        out[name] = raw.view(dtypes[e["dtype"]]).reshape(e["shape"])
    return out


def load_checkpoint(path):
    """torch.load, a safetensors file, or a Hugging Face folder of shards (merged, as people do)."""
    import json
    import torch
    if os.path.isdir(path):
        for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            if os.path.exists(os.path.join(path, index)):
                with open(os.path.join(path, index)) as f:
                    shards = dict.fromkeys(json.load(f)["weight_map"].values())
                sd = {}
                for shard in shards:
                    sd.update(load_checkpoint(os.path.join(path, shard)))
                return sd
        for single in ("model.safetensors", "pytorch_model.bin"):  # one shard: no index
            if os.path.exists(os.path.join(path, single)):
                return load_checkpoint(os.path.join(path, single))
        raise SystemExit(f"{path}: no index")
    if path.endswith(".safetensors"):
        return _read_safetensors(path)
    return _state_dict(torch.load(path, map_location="cpu", weights_only=False))


def _is_averaged(name, t):
    return t.is_floating_point() and not name.endswith(BUFFER_SUFFIXES)


def fold(paths, out, update, fsync=False):
    """torch.load each input, fold its averaged tensors with update(avg, x, n), torch.save; with
    fsync, fsync the output file and its folder before returning (swavg's durability)."""
    import torch
    avg, n = None, 0
    for path in paths:
        sd = load_checkpoint(path)
        if avg is None:
            # First checkpoint: AveragedModel copies it; half types get a float32 accumulator.
            avg = {k: v.float() if _is_averaged(k, v) and v.dtype in (torch.float16, torch.bfloat16)
                   else v.clone() for k, v in sd.items()}
            dtypes = {k: v.dtype for k, v in sd.items()}
        else:
            for k, x in sd.items():
                if _is_averaged(k, x):
                    update(avg[k], x.to(avg[k].dtype), n)
                else:
                    avg[k] = x  # buffers and integers: the latest
        n += 1
        del sd
    result = {k: v.to(dtypes[k]) for k, v in avg.items()}
    torch.save(result, out)
    if fsync:
        folder = os.path.dirname(os.path.abspath(out))
        for p, flags in ((out, os.O_RDONLY), (folder, os.O_RDONLY | os.O_DIRECTORY)):
            fd = os.open(p, flags)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def cmd_average(args):
    import torch

    def update(avg, x, n):
        # AveragedModel.update_parameters with its default avg_fn; n_averaged is an int64 tensor.
        n_averaged = torch.tensor(n, dtype=torch.long)
        avg.copy_(avg + (x - avg) / (n_averaged + 1))

    fold(args.inputs, args.out, update, args.fsync)


def cmd_ema(args):
    weight = 1.0 - args.decay
    fold(args.inputs, args.out, lambda avg, x, n: avg.lerp_(x, weight), args.fsync)


def cmd_inspect(args):
    import torch
    sd = _state_dict(torch.load(args.input, map_location="cpu", weights_only=False))
    for k, v in sd.items():
        print(k, str(v.dtype).replace("torch.", ""), list(v.shape))


def cmd_update_bn(args):
    import numpy as np
    import torch
    from torch.optim.swa_utils import update_bn
    model = build_model(args.arch)
    model.load_state_dict(_state_dict(torch.load(args.checkpoint, map_location="cpu", weights_only=False)))
    data = torch.from_numpy(np.load(args.data))
    update_bn(data.split(args.batch_size), model)
    torch.save(model.state_dict(), args.out)


def cmd_floor(args):
    buf = bytearray(FLOOR_CHUNK)
    view = memoryview(buf)
    for path in args.inputs:
        with open(path, "rb", buffering=0) as f:
            if args.ahead:
                os.posix_fadvise(f.fileno(), 0, args.ahead, os.POSIX_FADV_WILLNEED)
            pos = 0
            while True:
                if args.ahead:  # keep --ahead bytes asked for ahead of the reads
                    os.posix_fadvise(f.fileno(), pos + args.ahead, FLOOR_CHUNK, os.POSIX_FADV_WILLNEED)
                got = f.readinto(view)
                if not got:
                    break
                pos += got
    left = args.out_bytes if args.out_bytes is not None else os.path.getsize(args.inputs[0])
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while left > 0:
            left -= os.write(fd, view[:min(left, FLOOR_CHUNK)])
        os.fsync(fd)
    finally:
        os.close(fd)


def cmd_runner(args):
    """Run commands for bench.py and time them: one JSON line in ({"argv", "stderr", "sample"})
    and one out ({"wall_s", "maxrss_bytes", "rc", "user_s", "sys_s"}) per command; stdout is
    discarded.

    With "sample": true the child's /proc status is polled for the peak anonymous and file-backed
    RSS (a sample, so a short peak can be missed; ru_maxrss is exact but only gives the sum).

    bench.py starts this small process before it imports torch or allocates anything: a child's
    ru_maxrss starts at the RSS of the process that forks it (the kernel carries the old mm's high
    water mark across exec, and subprocess uses vfork), so children of a large parent would all
    report at least the parent's RSS. Forked from here, they carry this process's ~10 MB at most.
    """
    import json
    import subprocess
    import time

    def wait(pid, sample):
        """os.wait4, polling /proc/PID/status every 2 ms for peak RssAnon/RssFile if sample."""
        peak = {}
        while sample:
            done = os.wait4(pid, os.WNOHANG)
            if done[0]:
                return done, peak
            try:
                with open(f"/proc/{pid}/status") as f:
                    for row in f:
                        key = {"RssAnon:": "peak_anon_bytes", "RssFile:": "peak_file_bytes"}.get(
                            row.split(None, 1)[0])
                        if key:
                            peak[key] = max(peak.get(key, 0), int(row.split()[1]) * 1024)
            except OSError:
                pass
            time.sleep(0.002)
        return os.wait4(pid, 0), peak

    for line in sys.stdin:
        job = json.loads(line)
        with open(job["stderr"], "wb") as stderr:
            t0 = time.perf_counter()
            try:
                proc = subprocess.Popen(job["argv"], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=stderr)
            except OSError as e:
                stderr.write(f"cannot run {job['argv'][0]}: {e}\n".encode())
                result = {"wall_s": 0.0, "maxrss_bytes": 0, "rc": 127, "user_s": 0.0, "sys_s": 0.0}
            else:
                (_, status, ru), peak = wait(proc.pid, job.get("sample", False))
                wall = time.perf_counter() - t0
                proc.returncode = os.waitstatus_to_exitcode(status)
                result = {"wall_s": wall, "maxrss_bytes": ru.ru_maxrss * 1024,
                          "rc": proc.returncode, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
                          **peak}
        print(json.dumps(result), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, fn in (("average", cmd_average), ("ema", cmd_ema), ("floor", cmd_floor)):
        s = sub.add_parser(name)
        s.add_argument("inputs", nargs="+")
        s.add_argument("--out", required=True)
        s.set_defaults(fn=fn)
        if name == "ema":
            s.add_argument("--decay", type=float, required=True)
        if name in ("average", "ema"):
            s.add_argument("--fsync", action="store_true",
                           help="fsync the output and its folder (bench.py --peers)")
        if name == "floor":
            s.add_argument("--out-bytes", type=int, help="output size [the first input's]")
            s.add_argument("--ahead", type=int, default=0,
                           help="keep this many bytes of each input under POSIX_FADV_WILLNEED ahead of the "
                                "reads (bench.py's floor-ahead: the floor with the kernel's readahead helped)")
    s = sub.add_parser("inspect")
    s.add_argument("input")
    s.set_defaults(fn=cmd_inspect)
    s = sub.add_parser("update-bn")
    s.add_argument("--arch", required=True)
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--batch-size", type=int, required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_update_bn)
    sub.add_parser("runner").set_defaults(fn=cmd_runner)
    args = p.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
