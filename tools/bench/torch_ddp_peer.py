"""The peer of ddp_step: PyTorch's Python DistributedDataParallel (Debian's
python3-torch) on the same MLP, batch, thread count and timing rule (median
step after warmup, barrier before each step, slowest rank's median). Run
under a launcher that sets torchrun's variables:

    engine-launch --nproc-per-node 2 /usr/bin/python3 tools/bench/torch_ddp_peer.py --model small

On nccl each rank trains on GPU LOCAL_RANK modulo the GPUs (as ddp_step),
and each step's time includes its queued kernels (torch.cuda.synchronize).
--comm-hook registers PyTorch's hook of that name (powersgd: rank 1 from
the third step, its other defaults), as ddp_step does.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

SHAPES = {"small": (1024, 3), "large": (2048, 6), "xl": (4096, 6)}  # as tools/bench/mlp.cc


def mlp(width, hidden_layers):
    layers = []
    for _ in range(hidden_layers):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def rank_device(backend):
    """The rank's device, made current: GPU LOCAL_RANK modulo the GPUs on
    nccl (as the engine's nccl backend picks it), else the CPU."""
    if backend != "nccl":
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def slowest_median_step_ms(model, optimizer, width, args, device):
    """Trains `model` on one random batch (args.batch x width, 10 classes,
    cross-entropy) warmup + steps times, a barrier before each; the slowest
    rank's median time of the timed steps, each to the end of its queued
    kernels."""
    inputs = torch.randn(args.batch, width, device=device)
    labels = torch.randint(10, (args.batch,), device=device)
    times = []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        start = time.perf_counter()
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
        optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append((time.perf_counter() - start) * 1000)
    step_ms = torch.tensor([statistics.median_low(sorted(times))], dtype=torch.float64,
                           device=device)
    dist.all_reduce(step_ms, op=dist.ReduceOp.MAX)
    return step_ms.item()


def register_hook(model, name):
    """PyTorch's hook `name` on `model`, on the default group."""
    if name == "none":
        return
    if name == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                            start_powerSGD_iter=2)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return
    hooks = {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
             "bf16": default_hooks.bf16_compress_hook}
    model.register_comm_hook(None, hooks[name])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--model", default="small", choices=sorted(SHAPES))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--gradient-as-bucket-view", type=int, default=0, choices=(0, 1))
    parser.add_argument("--bucket-cap-mb", type=float, default=25)
    parser.add_argument("--comm-hook", default="none",
                        choices=("none", "allreduce", "fp16", "bf16", "powersgd"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = rank_device(args.backend)
    dist.init_process_group(args.backend)
    width, hidden_layers = SHAPES[args.model]
    view = bool(args.gradient_as_bucket_view)
    model = nn.parallel.DistributedDataParallel(mlp(width, hidden_layers).to(device),
                                                gradient_as_bucket_view=view,
                                                bucket_cap_mb=args.bucket_cap_mb)
    register_hook(model, args.comm_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    parameters = sum(p.numel() for p in model.parameters())
    ms = slowest_median_step_ms(model, optimizer, width, args, device)
    n = dist.get_world_size()
    if dist.get_rank() == 0:
        print("python %-5s %-5s params %8.2fM ranks %d step %9.2f ms  samples/s %9.1f%s  hook %s"
              % (args.backend, args.model, parameters / 1e6, n, ms, 1000.0 * args.batch * n / ms,
                 "  view" if view else "", args.comm_hook), flush=True)


if __name__ == "__main__":
    main()
