#!/usr/bin/env bash
# Runs a test binary in N processes under torchrun, the launcher users
# already have (Debian's python3-torch, or the wheel's beside an official
# LibTorch: @libtorch//:torchrun), on this machine only:
#   run_torchrun.sh TORCHRUN N BINARY [ARGS...]
# torchrun's agent hosts the store at MASTER_PORT (a free port picked here);
# the ranks join it (engine/launch/launch.h, agent_store_prefix).
#
# --redirects 9:0 --tee 9:0: Debian 12's torchrun 1.13 fails on Python 3.11
# with its default "0" (Std.from_str finds no flag for 0, because iterating an
# IntFlag no longer yields its zero member, and to_map then reads None). A map
# naming only local rank 9 parses, and every actual rank keeps the default.
set -euo pipefail
torchrun=$1 ranks=$2
shift 2
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
exec "$torchrun" --nproc_per_node "$ranks" --master_addr 127.0.0.1 --master_port "$port" \
  --max_restarts 0 --redirects 9:0 --tee 9:0 --no_python "$@"
