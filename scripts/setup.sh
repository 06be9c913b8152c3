#!/usr/bin/env bash
# Installs swavg's Debian 12 packages (as root), the pinned Python environment of the reference
# tests (torch 2.14 and the Hugging Face stack, scripts/requirements.txt) and builds swavg into
# build/.
#
# Environment:
#   SWAVG_LIBTORCH  wheel (default): build against the LibTorch inside the pinned PyTorch wheel
#                   (2.14, CUDA compiled in); the tests run with the virtual environment's Python.
#                   system: Debian's libtorch-dev 1.13 (CPU only, the lean build); the tests run
#                   with Debian's python3 and its torch 1.13.
#   SWAVG_VENV      the virtual environment (default /var/lib/swavg/venv: outside the checkout, so
#                   every clone on the machine reuses it; it is reinstalled only when
#                   scripts/requirements.txt changes, from pip's cache).
#   BUILD_DIR       (default build; ccache is used when installed), CMAKE_ARGS (extra arguments for cmake),
#   SWAVG_SKIP_APT=1 to skip the package step (a machine set up already, or no apt).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config ccache clang-format
  libtorch-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev catch2 zlib1g-dev libre2-dev
  python3 python3-venv python3-torch python3-torchvision python3-numpy python3-yaml
  slurm-wlm munge  # the slurm tests' local cluster (scripts/slurm_local.sh)
  man-db groff-base zsh fish  # tests/cli/test_completion.py renders the man page and parses the completions
)
LIBTORCH=${SWAVG_LIBTORCH:-wheel}
case "$LIBTORCH" in
  wheel | system) ;;
  *) echo "swavg: error: SWAVG_LIBTORCH must be 'wheel' or 'system', got '$LIBTORCH'" >&2; exit 2 ;;
esac

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

# The virtual environment: Debian's Python 3.11 with every package pinned. Its stamp is the
# requirements' hash, so an unchanged environment costs nothing and a changed one a reinstall.
VENV=${SWAVG_VENV:-/var/lib/swavg/venv}
stamp="$VENV/.swavg-requirements.sha256"
want=$(sha256sum scripts/requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r scripts/requirements.txt
  echo "$want" > "$stamp"
fi

BUILD_DIR=${BUILD_DIR:-build}
if [ "$LIBTORCH" = wheel ]; then
  python="$VENV/bin/python"
  prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  # The wheel's own folder first, so that its lib/ is searched before the system's.
  search="$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))');$prefix"
else
  python=/usr/bin/python3
  prefix="/usr/lib/$(gcc -dumpmachine)/cmake"
  search=$prefix
fi
# Torch_DIR named outright: a build folder configured before for the other LibTorch follows it.
torch_args=(-DCMAKE_PREFIX_PATH="$search" -DTorch_DIR="$prefix/Torch")
# ccache, keyed on paths relative to the checkout: a fresh clone elsewhere (CI's) reuses the objects.
launcher=()
if command -v ccache > /dev/null; then
  export CCACHE_BASEDIR="$PWD"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release -DSWAVG_PYTHON="$python" "${torch_args[@]}" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
