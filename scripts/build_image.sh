#!/usr/bin/env bash
# Builds swavg's container images with podman, from a debian:12 base made here with debootstrap
# (no image registry is needed or pulled from):
#
#   lean  (Dockerfile)       the .deb of a build against Debian's LibTorch (scripts/build_deb.sh),
#                            installed with apt on debian:12, which brings Debian's libtorch1.13
#                            runtime (CPU) and its dependencies. 1.1 GB. Tag localhost/swavg:lean.
#   cuda  (Dockerfile.cuda)  the binaries of the default build (the PyTorch wheel's LibTorch, CUDA
#                            compiled in) with the wheel's libraries they link (torch/lib and
#                            nvidia/*/lib, in their wheel layout under /opt/swavg/site-packages) and
#                            swavg-torch's RUNPATH made $ORIGIN-relative with patchelf. 4.5 GB.
#                            Tag localhost/swavg:cuda.
#
# Usage: scripts/build_image.sh [lean|cuda|all]   (default lean)
#
# Steps: installs podman, buildah, debootstrap (and runc, patchelf) with apt when missing; makes
# the base once (debootstrap --variant=minbase bookworm, with this machine's apt sources) and
# imports it as localhost/debian:12, reused while it exists; then `podman build --pull=never`.
# The build's RUN step reaches the Debian mirror (apt) through the host's network; containers run
# with --network none.
#
# Environment:
#   DEB          the swavg_*.deb for the lean image (default: scripts/build_deb.sh makes it in BUILD_DIR)
#   BUILD_DIR    the build folder against Debian's LibTorch for scripts/build_deb.sh (default build-deb)
#   WHEEL_BUILD  the default build whose swavg and swavg-torch the cuda image carries (default build)
#   IMAGE_STATE  where the base's tar is cached (default /var/tmp/swavg-image)
#   MIRROR       the Debian mirror for debootstrap (default http://deb.debian.org/debian)
#
# Prints, last, the podman options that containers of these images need on this machine
# (PODMAN_RUN_OPTS=...): see podman_options below.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-lean}
case "$what" in
  lean | cuda | all) ;;
  *) echo "swavg: error: build_image.sh takes lean, cuda or all, got '$what'" >&2; exit 2 ;;
esac
STATE=${IMAGE_STATE:-/var/tmp/swavg-image}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
BASE=localhost/debian:12

need=()
for tool in podman buildah debootstrap runc patchelf; do
  command -v "$tool" > /dev/null || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need[@]}" || { apt-get update && apt-get install -y --no-install-recommends "${need[@]}"; }
fi

# The base: a minbase Debian 12 with this machine's apt sources, made once.
if ! podman image exists "$BASE"; then
  mkdir -p "$STATE"
  if [ ! -f "$STATE/debian-12.tar" ]; then
    root="$STATE/rootfs"
    rm -rf "$root"
    debootstrap --variant=minbase bookworm "$root" "$MIRROR"
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
      rm -f "$root/etc/apt/sources.list"
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar --numeric-owner -C "$root" -cf "$STATE/debian-12.tar.part" .
    mv "$STATE/debian-12.tar.part" "$STATE/debian-12.tar"
    rm -rf "$root"
  fi
  podman import --change 'CMD ["bash"]' "$STATE/debian-12.tar" "$BASE"
fi

# The options a container needs here. A plain `podman run` works on an ordinary Debian 12 host.
# Without CAP_SYS_RESOURCE (a sandbox) the runtime cannot raise RLIMIT_NOFILE and RLIMIT_NPROC to
# podman's defaults: the container asks for the hard limits the runtime already has (conmon starts
# it with at most 32768 processes). crun also refuses a hybrid cgroup v1/v2 hierarchy whose v2 side
# has controllers, which runc accepts.
podman_options() {
  local nofile nproc
  opts=()
  podman run --rm --network none "$BASE" true > /dev/null 2>&1 && return 0
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi  # conmon's own limit
  opts=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
  podman run --rm --network none "${opts[@]}" "$BASE" true > /dev/null 2>&1 && return 0
  opts=(--runtime runc "${opts[@]}")
  podman run --rm --network none "${opts[@]}" "$BASE" true > /dev/null 2>&1 && return 0
  echo "swavg: error: podman cannot run a container of $BASE here:" >&2
  podman run --rm --network none "${opts[@]}" "$BASE" true >&2 || true
  exit 1
}
podman_options
# The runtime as podman's global option, the ulimits as build's (and run's) own.
global=()
build_opts=()
for ((i = 0; i < ${#opts[@]}; i += 2)); do
  if [ "${opts[i]}" = --runtime ]; then global=(--runtime "${opts[i + 1]}"); else build_opts+=("${opts[i]}" "${opts[i + 1]}"); fi
done

# podman build, then the image the tag named before removed (a rebuild would leave it dangling).
build_image() {
  local tag=$1 old
  shift
  old=$(podman image inspect --format '{{.Id}}' "$tag" 2> /dev/null || true)
  podman "${global[@]}" build --pull=never --network host "${build_opts[@]}" -t "$tag" "$@"
  if [ -n "$old" ] && [ "$old" != "$(podman image inspect --format '{{.Id}}' "$tag")" ]; then
    podman rmi "$old" > /dev/null 2>&1 || true  # kept while a container or another tag uses it
  fi
}

context=$(mktemp -d "${TMPDIR:-/tmp}/swavg-image-XXXXXX")
trap 'rm -rf "$context"' EXIT

if [ "$what" != cuda ]; then
  deb=${DEB:-}
  if [ -z "$deb" ]; then
    BUILD_DIR=${BUILD_DIR:-build-deb} scripts/build_deb.sh
    deb=$(ls "${BUILD_DIR:-build-deb}"/swavg_*.deb)
  fi
  mkdir "$context/lean"
  cp "$deb" "$context/lean/"
  build_image localhost/swavg:lean -f Dockerfile "$context/lean"
fi

if [ "$what" != lean ]; then
  build=${WHEEL_BUILD:-build}
  torch_lib=$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
  torch_lib="${torch_lib%/share/cmake/Torch}/lib"
  site=$(dirname "$(dirname "$torch_lib")")
  if [ ! -f "$torch_lib/libtorch_cpu.so" ]; then
    echo "swavg: error: $build/ does not link a PyTorch wheel's LibTorch (no $torch_lib/libtorch_cpu.so)" >&2
    exit 2
  fi
  stage="$context/cuda"
  mkdir -p "$stage/bin" "$stage/site-packages"
  cp "$build/swavg" "$build/swavg-torch" "$stage/bin/"
  # swavg-torch finds the wheel's libraries relative to itself; they keep the wheel's layout, so
  # their own RUNPATHs ($ORIGIN/../../nvidia/...) resolve as in site-packages.
  # shellcheck disable=SC2016  # $ORIGIN is the dynamic loader's, not the shell's
  patchelf --set-rpath '$ORIGIN/../site-packages/torch/lib' "$stage/bin/swavg-torch"
  # The shared libraries alone (no headers, no Python), libtorch_python.so left out (it needs libpython).
  dirs=(torch/lib)
  if [ -d "$site/nvidia" ]; then dirs+=(nvidia); fi
  (cd "$site" && find "${dirs[@]}" \( -type f -o -type l \) -name '*.so*' ! -name libtorch_python.so \
    -exec cp -a --parents -t "$stage/site-packages/" {} +)
  echo "cuda image: staged $(du -sh "$stage" | cut -f1) ($stage)"
  build_image localhost/swavg:cuda -f Dockerfile.cuda "$stage"
fi

podman images --filter reference='localhost/swavg' --filter reference="$BASE"
echo "PODMAN_RUN_OPTS=${global[*]:+${global[*]} }${build_opts[*]}"
