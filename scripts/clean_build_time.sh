#!/usr/bin/env bash
# Times a clean build of everything (swavg, swavg-torch, every test) without ccache, as issue 30's
# before/after measure: a fresh build folder configured as scripts/setup.sh does (the PyTorch
# wheel's LibTorch), then `cmake --build -j$(nproc)` under /usr/bin/time. Prints the wall time and
# the CPU seconds (user, system); compare CPU seconds on a shared machine, walls only on an idle one.
#   scripts/clean_build_time.sh [BUILD_DIR]   (default: build-clean, removed first)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-clean}
venv=${VENV:-/var/lib/swavg/venv}
prefix=$("$venv/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
search="$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))');$prefix"
rm -rf "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSWAVG_PYTHON="$venv/bin/python" \
  -DCMAKE_PREFIX_PATH="$search" -DTorch_DIR="$prefix/Torch" > /dev/null
log=$(mktemp)
CCACHE_DISABLE=1 /usr/bin/time -v cmake --build "$build" -j"$(nproc)" > /dev/null 2> "$log" || { cat "$log"; exit 1; }
grep -E "Elapsed|User time|System time" "$log"
rm -f "$log"
