#!/usr/bin/env bash
# The main job on a generated example: a small CNN trained for a few epochs leaves training
# checkpoints in example/; swavg reads them and writes the weights.
set -euo pipefail
cd "$(dirname "$0")/.."
SWAVG=${SWAVG:-build/swavg}
rm -rf example && mkdir -p example
/usr/bin/python3 scripts/make_example.py example 5
"$SWAVG" inspect example/ckpt_4.pt
"$SWAVG" convert example/ckpt_4.pt -o example/last.safetensors
