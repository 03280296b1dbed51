#!/usr/bin/env bash
# The short simcheck sweep of CI: every target, world sizes 2 and 4, a few
# seeds, swarm fault plans. Any failure or hang fails the test.
set -euo pipefail
exec "$1" --targets ddp,demo,strategy,fsdp,zero --world-sizes 2,4 --seeds 6 --iters 12
