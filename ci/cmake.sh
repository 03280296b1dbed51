#!/usr/bin/env bash
# The CMake build against the official LibTorch 2.x (the pinned torch wheel
# that tools/setup.sh installs into .venv): the engine's libraries and
# engine-launch, installed into a prefix, then examples/cmake_consumer built
# against that install with find_package(DistEngine), and its tests run.
# The engine's build folder is the GPU runner's (ci/gpu.sh, same options),
# so after its rehearsal nothing is compiled twice.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/gpu
prefix=$PWD/build/install
torch_cmake=$(.venv/bin/python -W ignore -c 'import torch; print(torch.utils.cmake_prefix_path)')

cmake -S . -B "$build" -G Ninja -DDIST_ENGINE_GPU_SUITES=ON \
  -DCMAKE_PREFIX_PATH="$torch_cmake;$PWD/.gpu-deps/usr" -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
cmake --build "$build"
cmake --install "$build" >/dev/null

cmake -S examples/cmake_consumer -B build/consumer -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix;$torch_cmake" >/dev/null
cmake --build build/consumer
OPENBLAS_NUM_THREADS=1 ctest --test-dir build/consumer --output-on-failure
