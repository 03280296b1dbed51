#!/usr/bin/env bash
# The short simcheck sweep of CI: every target, world sizes 2 and 4, a few
# seeds, swarm fault plans; then two plans the sweep once judged wrongly: a
# survivor that shares no call with the stopped ranks finishes, and two
# ranks that never arrive at their first call. Any failure or hang fails the
# test.
set -euo pipefail
simcheck=$1
"$simcheck" --targets ddp,demo,strategy,fsdp,zero --world-sizes 2,4 --seeds 6 --iters 12
"$simcheck" --targets ddp --world-sizes 4 --first-seed 16 --seeds 1 --iters 20 \
  --plan 'crash:2@8,never:3@5'
"$simcheck" --targets ddp --world-sizes 4 --first-seed 7 --seeds 1 --iters 20 \
  --plan 'delay:0@1+283ms,never:2@1,never:1@1'
