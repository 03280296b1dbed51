#!/usr/bin/env bash
# None of the programs given calls std::filesystem::remove_all: one that
# links PyTorch 2.11's libtorch.so would run that library's broken copy of it
# (engine/io/file_system.h); engine::io::remove_all is the one to call.
#   no_std_remove_all_test.sh PROGRAM...
set -euo pipefail
for program in "$@"; do
  undefined=$(nm --dynamic --demangle --undefined-only "$program")
  if ! grep -q 'std::' <<<"$undefined"; then
    echo "FAIL: $program needs no C++ runtime symbol: not a dynamically linked C++ program?" >&2
    exit 1
  fi
  calls=$(grep 'std::filesystem::remove_all' <<<"$undefined" || true)
  if [[ -n "$calls" ]]; then
    echo "FAIL: $program calls std::filesystem::remove_all; call engine::io::remove_all:" >&2
    echo "$calls" >&2
    exit 1
  fi
done
echo "no std::filesystem::remove_all in $# program(s)"
