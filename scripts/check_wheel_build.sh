#!/usr/bin/env bash
# Builds and tests swavg against the LibTorch inside a PyTorch wheel (2.x, possibly with CUDA), on a
# machine without Debian packages. Needs the header-only dependencies gathered by
# scripts/gather_deps.sh into deps/ (copied along), cmake and a C++17 compiler.
# Usage: scripts/check_wheel_build.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-wheel}
python=${PYTHON:-python3}
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSWAVG_DEPS_DIR="$PWD/deps" \
  -DCMAKE_PREFIX_PATH="$prefix" -DSWAVG_PYTHON="$(command -v "$python")"
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
