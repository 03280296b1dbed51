#!/usr/bin/env bash
# Gathers what the GPU machines lack and ci/gpu.sh needs into .gpu-deps/usr,
# laid out as under /usr so that CMake finds each as a package there:
# GoogleTest and RapidCheck (static libraries, headers, CMake configs),
# nlohmann-json's headers and zlib's headers and library, from this machine's
# Debian packages (tools/setup.sh installs them). About 6 MB; the device
# tool carries it beside the working tree (its `carry` list).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libgtest-dev librapidcheck-dev nlohmann-json3-dev zlib1g-dev)
rm -rf .gpu-deps
for package in "${packages[@]}"; do
  dpkg -L "$package" | while read -r path; do
    case "$path" in
      /usr/src/* | /usr/share/doc/* | /usr/share/man/*) continue ;;
    esac
    if [[ -f $path || -L $path ]]; then
      mkdir -p ".gpu-deps$(dirname "$path")"
      cp -P "$path" ".gpu-deps$path"
    fi
  done
done
# libz.so links to the runtime library of zlib1g, which the dev package does
# not list.
cp -P /usr/lib/x86_64-linux-gnu/libz.so.1* .gpu-deps/usr/lib/x86_64-linux-gnu/
du -sh .gpu-deps
