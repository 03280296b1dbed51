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
  libopenmpi-dev openmpi-bin
  libopenblas0-pthread nlohmann-json3-dev zlib1g-dev python3-torch
  dataset-fashion-mnist
  clang-14 libclang-rt-14-dev
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

# An official LibTorch 2.x for `--config=torch2` builds and PyTorch 2.x as
# the reference (its Python side): the PyPI torch wheel, pinned, in a virtual
# environment of the project's own (.venv). 2.14.1 is the newest release
# built for CUDA 13.0 (the toolkit under /usr/local/cuda); 2.15 moves to 13.2.
# NumPy, which the wheel does not require, because torch.distributed's object
# collectives (FSDP's full optimizer state among them) need it; 2.3.5 is the
# newest release for Debian 12's Python 3.11.
wheels=("torch==2.14.1" "numpy==2.3.5")
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
if ! "$venv/bin/python" -c 'import numpy, torch, sys
sys.exit(torch.__version__.split("+")[0] != "2.14.1" or numpy.__version__ != "2.3.5")' \
  2>/dev/null; then
  echo "setup: installing ${wheels[*]} into $venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${wheels[@]}"
fi
