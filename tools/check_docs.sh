#!/usr/bin/env bash
# Checks that README.md, docs/ and bench/RESULTS.md name only files that
# exist (Markdown links, and repository paths in backticks), and that the
# README stays a page a newcomer reads in a minute. Run from anywhere;
# ci/test.sh runs it first.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
fail() {
  echo "check_docs: $*" >&2
  status=1
}

readonly max_readme_lines=120
lines=$(wc -l <README.md)
if ((lines > max_readme_lines)); then
  fail "README.md has $lines lines, more than $max_readme_lines: move details into docs/"
fi

# The prose of a Markdown file: code blocks dropped (C++ lambdas look like links).
prose() { awk '/^```/ { in_code = !in_code; next } !in_code' "$1"; }

for doc in README.md docs/*.md bench/RESULTS.md; do
  dir=$(dirname "$doc")
  while read -r target; do
    target=${target%%#*}
    [[ -z $target || $target == http* ]] && continue
    [[ -e $dir/$target ]] || fail "$doc links to $target, which does not exist"
  done < <(prose "$doc" | grep -o '](\([^)]*\))' | sed 's/^](//; s/)$//' | sort -u)
  while read -r path; do
    [[ -e $path ]] || fail "$doc names $path, which does not exist"
  done < <(prose "$doc" | grep -o '`\(engine\|sim\|testing\|tools\|examples\|bench\|docs\|bazel\|ci\|third_party\)/[A-Za-z0-9_./-]*`' |
    tr -d '`' | sort -u)
done
exit "$status"
