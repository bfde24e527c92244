#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root), configures and builds oomb into ./build.
# Idempotent: a second run only rebuilds what changed. Set OOMB_BUILD_DIR to build elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake ninja-build git libeigen3-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
      libimgui-dev libglfw3-dev pkg-config zlib1g-dev xvfb xauth libopenblas-openmp-dev libopenmpi-dev openmpi-bin
      libboost-context-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
build=${OOMB_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)"
