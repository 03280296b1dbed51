#!/usr/bin/env bash
# Installs what dist-engine needs on Debian 12. Idempotent: when every package
# is present it only checks and returns in about a second.
set -euo pipefail

# OpenBLAS: the pthread build, because the serial one is not safe when several
# threads call it at once, and the simulator's ranks are threads
# (testing/model/concurrent_ops_test.cc). Tests run it single-threaded
# (OPENBLAS_NUM_THREADS=1 in .bazelrc).
packages=(
  bazel-bootstrap bazel-rules-java bazel-rules-proto bazel-platforms
  g++ libtorch-dev libgtest-dev librapidcheck-dev
  libopenmpi-dev openmpi-bin libgloo-dev
  libopenblas0-pthread nlohmann-json3-dev zlib1g-dev python3-torch
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
