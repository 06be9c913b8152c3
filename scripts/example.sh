#!/usr/bin/env bash
# The main job on a generated example: a small CNN trained for a few epochs leaves training
# checkpoints in example/; swavg averages them (SWA, EMA, and SWA with BatchNorm statistics
# recomputed on the training data) and shows the result.
set -euo pipefail
cd "$(dirname "$0")/.."
SWAVG=${SWAVG:-build/swavg}
rm -rf example && mkdir -p example
/usr/bin/python3 scripts/make_example.py example 6
"$SWAVG" average --sort natural example/ckpt_*.pt -o example/swa.pt --report example/swa_report.json
"$SWAVG" ema --decay 0.9 --sort natural example/ckpt_*.pt -o example/ema.safetensors
"$SWAVG" average --sort natural example/ckpt_*.pt --update-bn --model example/net.ts --data example/train.pt \
  --batch-size 32 -o example/swa_bn.pt
"$SWAVG" inspect example/swa.pt
/usr/bin/python3 - <<'PY'
import torch
for path in ["example/swa.pt", "example/swa_bn.pt"]:
    sd = torch.load(path, weights_only=True)
    print(path, "loads with torch.load(weights_only=True):", len(sd), "tensors")
PY
