"""What a crash costs a job restarted by engine-launch --max-restarts 1.

The demo (examples/train) on --nproc-per-node gloo processes (2), its last
rank SIGKILLed as it draws batch --kill-at, restarted from the newest state
saved: the peer (torchrun's way) from the last checkpoint on disk (every
--checkpoint-interval iterations), ours from a snapshot in memory (every
--snapshot-interval iterations) as well, written while the next iteration
trains in mode "overlapped" (--snapshot-overlap 1). The --modes alternate
round by round. Each run prints one line: where it resumed, the iterations
computed twice, the time from the kill to the restarted job's first step and
to the end of the iteration it was killed in (the job back where it was), its
mean step after the restart (checkpoints and snapshots included) and the
mean snapshot. Lines come timestamped as the launcher relays them.

  python3 tools/bench/recovery.py --config examples/train_config.json \
      --iters 60 --checkpoint-interval 20 --snapshot-interval 1 --kill-at 39

With --hosts N (root), the job spans N emulated hosts on this machine
(testing/hosts/run_on_hosts.sh: a network namespace each, joined by a
bridge), --nproc-per-node ranks on each; the killed rank is the last host's,
and every host's launcher restarts. The hosts share this machine's cores and
one filesystem (the checkpoints' folder, as a cluster's shared storage is).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time


def timed_lines(command, env):
    """The command's output (stdout and stderr) as (seconds, line) pairs,
    run with `env` added to the environment."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1, env={**os.environ, **env})
    lines = [(time.monotonic(), line.rstrip("\n")) for line in process.stdout]
    if process.wait() != 0:
        raise SystemExit("recovery: the job failed:\n" + "\n".join(l for _, l in lines[-20:]))
    return lines


def first(lines, pattern, after=0.0):
    """The first (seconds, match) whose line matches `pattern` at or after `after`."""
    for seconds, line in lines:
        match = re.search(pattern, line)
        if match and seconds >= after:
            return seconds, match
    raise SystemExit(f"recovery: no line matches {pattern!r}")


# What each mode adds to the job's command line.
MODES = {
    "checkpoint": lambda args: [],
    "snapshots": lambda args: ["--snapshot-interval", str(args.snapshot_interval)],
    "overlapped": lambda args: ["--snapshot-interval", str(args.snapshot_interval),
                                "--snapshot-overlap", "1"],
}


def run(args, config, mode, work):
    command = [args.launch, "--nproc-per-node", str(args.nproc_per_node)]
    if args.hosts > 1:
        # run_on_hosts.sh gives each host's launcher --nnodes, --node-rank,
        # --nproc-per-node and the store's address.
        command = ["bash", "testing/hosts/run_on_hosts.sh", str(args.hosts),
                   str(args.nproc_per_node), args.launch]
    command += ["--max-restarts", "1", args.train,
                "--config", config, "--launcher", "pytorch", "--backend", "gloo",
                "--iters", str(args.iters), "--checkpoint-interval", str(args.checkpoint_interval),
                "--resume", "auto", "--work-dir", work, "--fail-after-batches", str(args.kill_at)]
    command += MODES[mode](args)
    # run_on_hosts.sh ends each host's launcher after 300 s by default, a
    # test's bound: a 100M run on a busy machine takes longer.
    lines = timed_lines(command, {"RUN_ON_HOSTS_LIVE": "1", "RUN_ON_HOSTS_TIMEOUT": "3600"})
    killed, _ = first(lines, r"this rank kills itself now")
    resumed, match = first(lines, r"resumed from \S+ at iteration (\d+)", killed)
    resumed_at = int(match.group(1)) if match else 0
    first_step, _ = first(lines, r"\] iter \d+/", resumed)
    back, _ = first(lines, rf"\] iter {args.kill_at}/", resumed)
    last, _ = first(lines, rf"\] iter {args.iters}/", back)
    snapshot = re.search(r"snapshots took ([0-9.]+) ms", "\n".join(l for _, l in lines))
    step_ms = 1000 * (last - first_step) / (args.iters - resumed_at - 1)
    return (f"{mode}: resumed at {resumed_at}, "
            f"{args.kill_at - 1 - resumed_at} iterations again; kill to first step "
            f"{first_step - killed:.2f} s, to iteration {args.kill_at} done {back - killed:.2f} s; "
            f"step with saving {step_ms:.1f} ms" +
            (f", snapshot {snapshot.group(1)} ms" if snapshot else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launch", default="bazel-bin/tools/launch/engine-launch")
    parser.add_argument("--train", default="bazel-bin/examples/train")
    parser.add_argument("--config", default="examples/train_config.json")
    parser.add_argument("--model", type=json.loads, help="replaces the config's model (JSON)")
    parser.add_argument("--strategy", type=json.loads, help="replaces its strategy (JSON)")
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--hosts", type=int, default=1,
                        help="emulated hosts the job spans (root; at most 9)")
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--checkpoint-interval", type=int, default=20)
    parser.add_argument("--snapshot-interval", type=int, default=1)
    parser.add_argument("--kill-at", type=int, default=39)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="checkpoint,snapshots",
                        help="comma-separated, run in this order each round: " + ", ".join(MODES))
    args = parser.parse_args()
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        parser.error(f"--modes takes {', '.join(MODES)}; got {args.modes}")
    with open(args.config) as f:
        config = json.load(f)
    config["train"]["log_interval"] = 1
    config["train"]["val_interval"] = 0
    if args.model:
        config["model"] = args.model
        for data in ("train_data", "val_data"):
            config[data]["features"] = args.model["features"]
    if args.strategy:
        config["strategy"] = args.strategy
    scratch = tempfile.mkdtemp(prefix="recovery-")
    try:
        path = os.path.join(scratch, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        for round_number in range(args.rounds):
            for mode in modes:
                work = os.path.join(scratch, f"work_{round_number}_{mode}")
                print(f"round {round_number}, {run(args, path, mode, work)}", flush=True)
                shutil.rmtree(work)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
