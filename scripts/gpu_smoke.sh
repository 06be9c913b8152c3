#!/usr/bin/env bash
# Builds swavg against the LibTorch inside a PyTorch wheel (2.x with CUDA) and runs the quick GPU
# checks: the kernel unit tests (which also report ATen's lerp form) and scripts/gpu_smoke.py
# (average, ema and update-bn with --device cuda against PyTorch on the GPU). A shorter
# scripts/check_wheel_build.sh for machines with little time. Needs deps/ from
# scripts/gather_deps.sh. Usage: scripts/gpu_smoke.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
python=${PYTHON:-python3}
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSWAVG_DEPS_DIR="$PWD/deps" \
  -DCMAKE_PREFIX_PATH="$prefix" -DSWAVG_PYTHON="$(command -v "$python")" > "$build.cmake.log" 2>&1 \
  || { tail -30 "$build.cmake.log"; exit 1; }
start=$(date +%s)
cmake --build "$build" -j"$(nproc)" --target swavg swavg-torch test_native_kernels > "$build.build.log" 2>&1 \
  || { grep -E "error|Error" "$build.build.log" | head -30; exit 1; }
echo "built in $(( $(date +%s) - start )) s"
"$build/tests/test_native_kernels"
"$build/swavg" --version
"$python" scripts/gpu_smoke.py "$build"
