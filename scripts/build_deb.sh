#!/usr/bin/env bash
# Builds the Debian package swavg_<version>_<arch>.deb (cmake/packaging.cmake): configures a build
# folder against Debian's LibTorch (libtorch-dev 1.13, CPU; the packages scripts/setup.sh installs),
# builds the binaries, the man page and the completions, and runs cpack -G DEB in it. Its Depends
# are the Debian packages of the libraries the binaries link (dpkg-shlibdeps), so
# `apt-get install ./swavg_*.deb` works on any Debian 12 machine.
#
# Environment:
#   BUILD_DIR  (default build-deb) a folder made here, or one made before against Debian's LibTorch
#              (build-system/ of `SWAVG_LIBTORCH=system scripts/setup.sh` works too); never one made
#              against a PyTorch wheel's LibTorch, whose libraries live in a virtual environment.
#   JOBS       parallel build jobs (default: the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-deb}
prefix="/usr/lib/$(gcc -dumpmachine)/cmake"
if [ ! -f "$prefix/Torch/TorchConfig.cmake" ]; then
  echo "swavg: error: $prefix/Torch/TorchConfig.cmake not found; install Debian's libtorch-dev (scripts/setup.sh)" >&2
  exit 2
fi
fresh=(-DSWAVG_BUILD_TESTS=OFF)  # a folder of its own needs the binaries alone
if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
  fresh=()
  torch_dir=$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
  if [ "$torch_dir" != "$prefix/Torch" ]; then
    echo "swavg: error: $BUILD_DIR/ was configured against the LibTorch in $torch_dir, not Debian's;" \
      "choose another BUILD_DIR (a fresh folder)" >&2
    exit 2
  fi
fi

launcher=()
if command -v ccache > /dev/null; then
  export CCACHE_BASEDIR="$PWD"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release "${fresh[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$prefix/Torch"
cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}"
(cd "$BUILD_DIR" && cpack -G DEB)
ls "$BUILD_DIR"/swavg_*.deb
