"""The peer for the gloo backend: PyTorch's own torch.distributed over Gloo
(Debian's python3-torch), float32, with the same ops, sweep, timing rule and
table as `collectives`: all_reduce (sum, in place), broadcast (from rank 0),
all_gather (size/n per rank into a preallocated list). Run under a launcher
that sets torchrun's variables:

    engine-launch --nproc-per-node 2 /usr/bin/python3 tools/bench/torch_gloo_peer.py --ops all_reduce,all_gather

With --backend nccl it is the nccl backend's peer: the tensors are on GPU
LOCAL_RANK modulo the GPUs, and the timed calls end with
torch.cuda.synchronize() (PyTorch's calls return once queued).
"""
import argparse
import math
import time

import torch
import torch.distributed as dist

from torch_ddp_peer import rank_device


def parse_bytes(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    return int(text[:-1] if scale != 1 else text) * scale


def iterations_for(nbytes, base):
    # The rule of tools/bench/sweep.h.
    scaled = base * max(1, (1 << 20) // max(nbytes, 1))
    return max(base, min(scaled, 2000))


DEVICE = torch.device("cpu")  # the rank's GPU on nccl (main)


def pattern(count, salt):
    return ((torch.arange(count) + salt) % 7 - 3).float().to(DEVICE)


class AllReduce:
    factor = staticmethod(lambda n: 2 * (n - 1) / n)

    def __init__(self, nbytes, rank, n):
        self.data = pattern(max(nbytes // 4, 1), rank)
        self.expected = sum(pattern(self.data.numel(), r) for r in range(n))

    def run(self):
        dist.all_reduce(self.data)

    def results(self):
        return [self.data], [self.expected]


class Broadcast:
    factor = staticmethod(lambda n: 1.0)

    def __init__(self, nbytes, rank, n):
        count = max(nbytes // 4, 1)
        self.data = pattern(count, 11) if rank == 0 else torch.zeros(count, device=DEVICE)
        self.expected = pattern(count, 11)

    def run(self):
        dist.broadcast(self.data, 0)

    def results(self):
        return [self.data], [self.expected]


class AllGather:
    factor = staticmethod(lambda n: (n - 1) / n)

    def __init__(self, nbytes, rank, n):
        count = max(nbytes // 4 // n, 1)
        self.data = pattern(count, rank)
        self.outputs = [torch.empty(count, device=DEVICE) for _ in range(n)]
        self.expected = [pattern(count, r) for r in range(n)]

    def run(self):
        dist.all_gather(self.outputs, self.data)

    def results(self):
        return self.outputs, self.expected


OPS = {"all_reduce": AllReduce, "broadcast": Broadcast, "all_gather": AllGather}


def measure(name, nbytes, args, rank, n):
    op = OPS[name](nbytes, rank, n)
    for _ in range(args.warmup):
        op.run()
    dist.barrier()
    iters = iterations_for(nbytes, args.iters)
    calls = []
    start = time.perf_counter()
    for _ in range(iters):
        call_start = time.perf_counter()
        op.run()
        calls.append(time.perf_counter() - call_start)
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    # The mean, then the median and 99th percentile of single calls (nearest
    # rank, as collectives_main.cc), each the slowest rank's.
    calls.sort()
    p50, p99 = (calls[max(math.ceil(q * len(calls)), 1) - 1] for q in (0.5, 0.99))
    times = torch.tensor([(time.perf_counter() - start) / iters, p50, p99], dtype=torch.float64,
                         device=DEVICE)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    seconds = times[0]
    on_host = DEVICE.type == "cpu"
    p50_us, p99_us = (times[i].item() * 1e6 if on_host else float("nan") for i in (1, 2))
    op = OPS[name](nbytes, rank, n)  # fresh buffers: one exact check
    op.run()
    got, expected = op.results()
    wrong = torch.tensor([sum(int((g != e).sum()) for g, e in zip(got, expected))],
                         device=DEVICE)
    dist.all_reduce(wrong)
    algbw = nbytes / seconds.item() / 1e9
    if rank == 0:
        print(" %15s %12d %11.1f %9.1f %9.1f %12.3f %12.3f %8d" % (
            name, nbytes, seconds.item() * 1e6, p50_us, p99_us, algbw, algbw * op.factor(n),
            wrong.item()), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--ops", default="all_reduce")
    parser.add_argument("--min-bytes", default="4K")
    parser.add_argument("--max-bytes", default="64M")
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    ops = args.ops.split(",")
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        parser.error(f"unknown op(s) {unknown}; choose from {sorted(OPS)}")
    torch.set_num_threads(1)
    global DEVICE
    DEVICE = rank_device(args.backend)
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"# peer: PyTorch {torch.__version__} torch.distributed {args.backend}, {n} ranks",
              flush=True)
        print("#%15s %12s %11s %9s %9s %12s %12s %8s" % (
            "collective", "size(B)", "time(us)", "p50(us)", "p99(us)", "algbw(GB/s)",
            "busbw(GB/s)", "#wrong"), flush=True)
    for name in ops:
        nbytes = parse_bytes(args.min_bytes)
        while nbytes <= parse_bytes(args.max_bytes):
            measure(name, nbytes, args, rank, n)
            nbytes *= args.factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
