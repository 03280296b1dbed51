#!/usr/bin/env bash
# Runs a launcher command line as a test: `run_launched.sh LAUNCHER ARGS...`.
exec "$@"
