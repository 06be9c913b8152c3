#!/usr/bin/env bash
# Installs swavg's Debian 12 packages (as root) and builds it into build/.
# Environment: BUILD_DIR (default build), CMAKE_ARGS (extra arguments for cmake),
# SWAVG_SKIP_APT=1 to skip the package step (a machine set up already, or no apt).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config
  libtorch-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev catch2 zlib1g-dev libre2-dev
  python3 python3-torch python3-torchvision python3-numpy python3-yaml
  slurm-wlm munge  # the slurm tests' local cluster (scripts/slurm_local.sh)
)

if [ "${SWAVG_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
  fi
fi

BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
