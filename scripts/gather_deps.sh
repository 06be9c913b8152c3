#!/usr/bin/env bash
# Gathers the header-only dependencies (CLI11, nlohmann/json, spdlog, fmt, Catch2 v2 with its CMake
# modules) and RE2 (headers and the self-contained static libre2.a) from this Debian machine's
# packages into one folder, to copy to a machine that has
# LibTorch (e.g. from a PyTorch wheel) but no Debian packages:
#   scripts/gather_deps.sh deps
#   cmake -S . -B build -DSWAVG_DEPS_DIR=$PWD/deps \
#     -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
set -euo pipefail
out=${1:-deps}
mkdir -p "$out/include" "$out/cmake" "$out/lib"
for d in CLI nlohmann spdlog fmt catch2 re2; do
  [ -d "/usr/include/$d" ] || { echo "missing /usr/include/$d: run scripts/setup.sh first" >&2; exit 1; }
  rm -rf "${out:?}/include/$d"
  cp -r "/usr/include/$d" "$out/include/$d"
done
cp /usr/lib/cmake/Catch2/Catch.cmake /usr/lib/cmake/Catch2/CatchAddTests.cmake "$out/cmake/"
cp "$(pkg-config --variable=libdir re2)/libre2.a" "$out/lib/"
echo "header-only dependencies gathered in $out"
