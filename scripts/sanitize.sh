#!/usr/bin/env bash
# Builds the parsers, their unit tests, the fuzz targets (as replay drivers) and the swavg binary
# with AddressSanitizer and UndefinedBehaviorSanitizer into build-asan/, then runs under them: the
# reader unit tests, the malformed-input suite and the durability tests through the real binary,
# and every fuzz target over the suite and the regression inputs.
# Run after scripts/setup.sh (same packages). Environment: BUILD_DIR (default build-asan),
# JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)

# -O1 keeps the instrumented binaries quick without the compile time of -O2/-O3.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
      -DSWAVG_SANITIZE=ON ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$JOBS" --target \
  test_pickle test_zip test_safetensors test_torch_file \
  fuzz_unpickle fuzz_zip fuzz_safetensors fuzz_torch_file swavg

# Any report is fatal. LibTorch itself is not instrumented and keeps allocations alive until exit
# (its registries): leak checking would only report those.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" \
  -R '^(make_fixtures|pickle: |zip: |safetensors: |torch_file: |fuzz_replay:|cli:test_hostile|cli:test_durability)'
echo "sanitizer build and tests: $(( $(date +%s) - start )) s"
