"""The peer for the gloo backend: PyTorch's own torch.distributed over Gloo
(Debian's python3-torch), all_reduce float32 sum in place, with the same
sweep, timing rule and table as `collectives`. Run under a launcher that sets
torchrun's variables:

    engine-launch --nproc-per-node 2 /usr/bin/python3 tools/bench/torch_gloo_peer.py --max-bytes 64M
"""
import argparse
import time

import torch
import torch.distributed as dist


def parse_bytes(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    return int(text[:-1] if scale != 1 else text) * scale


def iterations_for(nbytes, base):
    # The rule of tools/bench/sweep.h.
    scaled = base * max(1, (1 << 20) // max(nbytes, 1))
    return max(base, min(scaled, 2000))


def pattern(count, salt):
    return ((torch.arange(count) + salt) % 7 - 3).float()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-bytes", default="4K")
    parser.add_argument("--max-bytes", default="64M")
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"# peer: PyTorch {torch.__version__} torch.distributed gloo all_reduce, {n} ranks", flush=True)
        print("#%15s %12s %11s %12s %12s %8s" % ("collective", "size(B)", "time(us)", "algbw(GB/s)",
                                                   "busbw(GB/s)", "#wrong"), flush=True)
    nbytes = parse_bytes(args.min_bytes)
    while nbytes <= parse_bytes(args.max_bytes):
        count = max(nbytes // 4, 1)
        data = pattern(count, rank)
        for _ in range(args.warmup):
            dist.all_reduce(data)
        dist.barrier()
        iters = iterations_for(nbytes, args.iters)
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(data)
        seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        data = pattern(count, rank)
        dist.all_reduce(data)
        expected = sum(pattern(count, r) for r in range(n))
        wrong = torch.tensor([int((data != expected).sum())])
        dist.all_reduce(wrong)
        algbw = nbytes / seconds.item() / 1e9
        if rank == 0:
            print(" %15s %12d %11.1f %12.3f %12.3f %8d" % ("all_reduce", nbytes, seconds.item() * 1e6, algbw,
                                                            algbw * 2 * (n - 1) / n, wrong.item()), flush=True)
        nbytes *= args.factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
