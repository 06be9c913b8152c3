#!/usr/bin/env bash
# The main job on a generated example: a small CNN trained for a few epochs leaves training
# checkpoints in example/; swavg averages them (SWA, EMA, and SWA with BatchNorm statistics
# recomputed on the training data) and shows the result.
set -euo pipefail
cd "$(dirname "$0")/.."
SWAVG=${SWAVG:-build/swavg}
rm -rf example && mkdir -p example
# The run is made by Debian's python3-torch, whose training on a fixed seed is the same on every
# machine, so the example's outputs are byte-identical from one swavg version to the next.
/usr/bin/python3 scripts/make_example.py example 6
"$SWAVG" average --sort natural example/ckpt_*.pt -o example/swa.pt --report example/swa_report.json
"$SWAVG" ema --decay 0.9 --sort natural example/ckpt_*.pt -o example/ema.safetensors
"$SWAVG" average --sort natural example/ckpt_*.pt --update-bn --model example/net.ts --data example/train.pt \
  --batch-size 32 -o example/swa_bn.pt
"$SWAVG" inspect example/swa.pt
# Loaded back by the torch of the pinned environment (scripts/setup.sh), as a user's torch 2.x would.
"${SWAVG_PYTHON:-${SWAVG_VENV:-/var/lib/swavg/venv}/bin/python}" - <<'PY'
import torch
for path in ["example/swa.pt", "example/swa_bn.pt"]:
    sd = torch.load(path, weights_only=True)
    print(path, "loads with torch %s's torch.load(weights_only=True):" % torch.__version__, len(sd), "tensors")
PY
