#!/usr/bin/env bash
# The quick GPU check, for machines with little time: builds only swavg, swavg-torch and the kernel
# tests against the LibTorch inside a PyTorch wheel (2.x with CUDA; scripts/check_wheel_build.sh,
# which needs deps/), runs the kernel tests, then scripts/gpu_smoke.py (average, ema and update-bn
# on CPU and with --device cuda against PyTorch). Usage: scripts/gpu_smoke.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
TARGETS="swavg swavg-torch test_native_kernels" SKIP_CTEST=1 bash scripts/check_wheel_build.sh "$build" \
  > "$build.log" 2>&1 || { grep -E "error|Error" "$build.log" | head -30; exit 1; }
grep "built in" "$build.log"
"$build/tests/test_native_kernels"
"$build/swavg" --version
"${PYTHON:-python3}" scripts/gpu_smoke.py "$build"
