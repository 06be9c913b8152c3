#!/usr/bin/env bash
# Builds and tests swavg against the LibTorch inside a PyTorch wheel (2.x, possibly with CUDA), on a
# machine without Debian packages. Needs the header-only dependencies gathered by
# scripts/gather_deps.sh into deps/ (copied along), cmake and a C++17 compiler.
# Usage: scripts/check_wheel_build.sh [BUILD_DIR]
# Environment: TARGETS (what to build; default all), SKIP_CTEST=1 (build only).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-wheel}
python=${PYTHON:-python3}
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSWAVG_DEPS_DIR="$PWD/deps" \
  -DCMAKE_PREFIX_PATH="$prefix" -DSWAVG_PYTHON="$(command -v "$python")"
start=$(date +%s)
# shellcheck disable=SC2086
cmake --build "$build" -j"$(nproc)" ${TARGETS:+--target $TARGETS}
echo "built in $(( $(date +%s) - start )) s"
[[ ${SKIP_CTEST:-0} == 1 ]] || ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
