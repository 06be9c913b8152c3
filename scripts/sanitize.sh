#!/usr/bin/env bash
# Builds the parsers (swavg_formats), their unit tests, the fuzz targets (as replay drivers) and
# swavg-replay (swavg inspect without LibTorch: tests/fuzz/replay.cpp) with AddressSanitizer and
# UndefinedBehaviorSanitizer into build-asan/, then runs under them: the reader unit tests, the
# malformed-input suite through swavg-replay, and every fuzz target over the suite and the
# regression inputs. Nothing here compiles LibTorch code, which keeps it to a few minutes.
#
# SWAVG_SANITIZE_FULL=1 also builds the swavg binary itself sanitized (LibTorch code: about 15 more
# CPU-minutes) and runs the whole suite and the durability tests through it.
# Run after scripts/setup.sh (same packages). Environment: BUILD_DIR (default build-asan),
# JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)

# ccache as in setup.sh (keyed on paths relative to the checkout, so a fresh clone reuses objects).
launcher=()
if command -v ccache > /dev/null; then
  export CCACHE_BASEDIR="$PWD"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# -O1 keeps the instrumented binaries quick without the compile time of -O2/-O3.
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
      -DSWAVG_SANITIZE=ON ${CMAKE_ARGS:-}
targets=(test_pickle test_pickle_literals test_pickle_keys test_pickle_deny_list test_zip_reader test_zip_writer
         test_crc32 test_safetensors test_torch_file test_sharded_input test_sha256
         fuzz_targets test_legacy_torch_file test_dcp_metadata test_deepspeed_checkpoint test_regular_file
         swavg-replay)
tests='^(make_fixtures|pickle:|pickle_literals:|pickle_keys:|pickle_deny_list:|zip_reader:|zip_writer:|crc32:|safetensors:|torch_file:|sharded_input:|sha256:|fuzz_replay:|hostile_replay)'
if [ "${SWAVG_SANITIZE_FULL:-0}" = 1 ]; then
  targets+=(swavg)
  tests='^(make_fixtures|pickle:|pickle_literals:|pickle_keys:|pickle_deny_list:|zip_reader:|zip_writer:|crc32:|safetensors:|torch_file:|sharded_input:|sha256:|fuzz_replay:|hostile_replay|cli:test_hostile|cli:test_durability)'
fi
cmake --build "$BUILD_DIR" -j"$JOBS" --target "${targets[@]}"

# Any report is fatal. Leaks too, except with the full build: LibTorch is not instrumented and
# keeps allocations alive until exit (its registries), leak checking would only report those.
leaks=1
[ "${SWAVG_SANITIZE_FULL:-0}" = 1 ] && leaks=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=$leaks:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" -R "$tests"
# The newer readers' unit cases (their fixture cases need torch 2.x fixtures, which this build's
# Python may not write).
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" -L unit \
  -R '^(legacy_torch_file:|dcp_metadata:|deepspeed_checkpoint:|regular_file:)'
echo "sanitizer build and tests: $(( $(date +%s) - start )) s"
