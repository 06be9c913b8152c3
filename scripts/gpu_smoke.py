"""GPU smoke check for swavg built against a PyTorch wheel's LibTorch (run by scripts/gpu_smoke.sh).

Against PyTorch itself, on the CPU and on the GPU: `swavg average` against AveragedModel,
`swavg ema` against AveragedModel with get_ema_multi_avg_fn (bit for bit, and logging which lerp form
swavg-torch's probe found), and `swavg update-bn
--device cuda` against torch.optim.swa_utils.update_bn. Prints one line per check; exits 1 if any
fails. Usage: python3 scripts/gpu_smoke.py BUILD_DIR
"""
import os
import subprocess
import sys
import tempfile

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, update_bn

try:
    from torch.optim.swa_utils import get_ema_multi_avg_fn

    def ema_kwargs(decay):
        return {"multi_avg_fn": get_ema_multi_avg_fn(decay)}
except ImportError:  # PyTorch < 2.1: the same lerp through avg_fn
    def ema_kwargs(decay):
        return {"avg_fn": lambda avg, x, n: avg.lerp(x, 1 - decay)}


def net():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def swavg(build, *args):
    r = subprocess.run([os.path.join(build, "swavg"), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"swavg {' '.join(args)}: exit {r.returncode}\n{r.stderr}")
    return r


def main():
    build = sys.argv[1]
    work = tempfile.mkdtemp(prefix="swavg-gpu-")
    torch.manual_seed(0)
    model = net()
    paths, states = [], []
    for i in range(5):
        sd = {k: (v + 0.05 * torch.randn_like(v)) if v.is_floating_point() else v + i
              for k, v in model.state_dict().items()}
        path = os.path.join(work, f"ckpt_{i}.pt")
        torch.save(sd, path)
        paths.append(path)
        states.append(sd)
    failures = 0

    def compare(label, got, expected, names, exact=True):
        nonlocal failures
        bad = []
        for name in names:
            g, e = got[name].cpu(), expected[name].detach().cpu()
            ok = torch.equal(g, e) if exact else torch.allclose(g, e, rtol=1e-4, atol=1e-5)
            if not ok:
                bad.append(f"{name} (max |diff| {(g.double() - e.double()).abs().max().item():.3g})")
        failures += bool(bad)
        print(f"{'PASS' if not bad else 'FAIL'}  {label}: {len(names) - len(bad)}/{len(names)} tensors "
              f"{'equal' if exact else 'close'}" + ("; differ: " + ", ".join(bad[:5]) if bad else ""))

    params = [k for k, _ in model.named_parameters()]
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if len(devices) == 1:
        print("no GPU visible: the cuda checks are skipped")
    gpu = devices[-1]
    for device in devices:
        for mode, kwargs, args in [("average", {}, ["average"]),
                                   ("ema", ema_kwargs(0.9), ["ema", "--decay", "0.9"])]:
            current = net().to(device)
            avg = AveragedModel(current, **kwargs)
            for sd in states:
                current.load_state_dict(sd)
                avg.update_parameters(current)
            out = os.path.join(work, f"{mode}_{device}.pt")
            r = swavg(build, "-v", *args, *paths, "--device", device, "-o", out)
            for line in r.stderr.splitlines():
                if "lerp of" in line or "needs LibTorch" in line:
                    print("      " + line)
            got = torch.load(out, weights_only=True)
            compare(f"{mode} --device {device} vs AveragedModel on {device}", got,
                    dict(avg.module.named_parameters()), params)

    # update-bn on the GPU against update_bn on the GPU.
    scripted = os.path.join(work, "net.ts")
    torch.jit.save(torch.jit.script(net()), scripted)
    data = torch.randn(96, 3, 24, 24)
    data_path = os.path.join(work, "data.pt")
    torch.save(data, data_path)
    out = os.path.join(work, "bn.pt")
    weights = os.path.join(work, f"average_{gpu}.pt")
    swavg(build, "update-bn", "--model", scripted, "--checkpoint", weights,
          "--data", data_path, "--batch-size", "32", "--device", gpu, "-o", out)
    got = torch.load(out, weights_only=True)
    ref = net()
    ref.load_state_dict(torch.load(weights, weights_only=True))
    ref = ref.to(gpu)
    update_bn([b.to(gpu) for b in data.split(32)], ref, device=torch.device(gpu))
    expected = ref.state_dict()
    compare(f"update-bn --device {gpu} vs update_bn on {gpu}", got, expected,
            [k for k in expected if "running" in k or "num_batches" in k], exact=False)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
