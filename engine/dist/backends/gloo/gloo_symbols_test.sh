#!/usr/bin/env bash
# The gloo backend's objects refer to the engine's copy of Gloo only
# (dist_engine_gloo::), never to a `gloo::` symbol, which the Gloo inside
# LibTorch would resolve (third_party/gloo/README.md).
#   gloo_symbols_test.sh ARCHIVE...
set -euo pipefail
checked=0
for archive in "$@"; do
  case "$archive" in *.a | *.lo) ;; *) continue ;; esac
  undefined=$(nm --demangle --undefined-only "$archive")
  foreign=$(grep -E '(^|[^_:[:alnum:]])gloo::' <<<"$undefined" | grep -v 'dist_engine_gloo::' || true)
  if [[ -n "$foreign" ]]; then
    echo "FAIL: $archive refers to another Gloo's symbols:" >&2
    echo "$foreign" >&2
    exit 1
  fi
  if ! grep -q 'dist_engine_gloo::' <<<"$undefined"; then
    echo "FAIL: $archive refers to no dist_engine_gloo:: symbol: not the gloo backend?" >&2
    exit 1
  fi
  checked=$((checked + 1))
done
if ((checked == 0)); then
  echo "FAIL: no archive among: $*" >&2
  exit 1
fi
echo "gloo symbols: $checked archive(s) refer to dist_engine_gloo:: only"
