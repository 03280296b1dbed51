"""The peer of sharded_step: PyTorch 2.x's own DDP, FullyShardedDataParallel
(FSDP1: FULL_SHARD or SHARD_GRAD_OP, each Linear a unit, as sharded_step
wraps), fully_shard (FSDP2, each Linear and then the root) or DDP with
ZeroRedundancyOptimizer (ZeRO-1), on the same MLP, batch and Adam (lr 1e-4)
as sharded_step, with the same timing rule as ddp_step's peer (median step
after warmup, barrier before each step, slowest rank's median). Adam is
PyTorch's fastest on the device unless --adam says otherwise: fused=True
(on the CPU too since PyTorch 2.4). Prints the step time and the largest
peak RSS of the ranks. On gloo it trains on the CPU; on nccl on GPU
LOCAL_RANK modulo the GPUs, each step's time including its queued kernels.

    engine-launch --nproc-per-node 2 .venv/bin/python tools/bench/torch_sharded_peer.py \\
        --model large --strategy full_shard
"""
import argparse
import resource

import torch
import torch.distributed as dist
import torch.nn as nn

from torch_ddp_peer import SHAPES, mlp, rank_device, slowest_median_step_ms

STRATEGIES = ("ddp", "zero1", "full_shard", "shard_grad_op", "fsdp2")
# fused: one kernel over every parameter; foreach: one op per state tensor
# list; single: a loop over the parameters (PyTorch's CPU default).
ADAMS = {"fused": {"fused": True}, "foreach": {"foreach": True},
         "single": {"foreach": False}}


def wrap(strategy, net, device):
    if strategy in ("ddp", "zero1"):
        return nn.parallel.DistributedDataParallel(net.to(device))
    if strategy == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for module in net:
            if isinstance(module, nn.Linear):
                fully_shard(module)
        return fully_shard(net.to(device))
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    sharding = ShardingStrategy.FULL_SHARD if strategy == "full_shard" \
        else ShardingStrategy.SHARD_GRAD_OP
    return FullyShardedDataParallel(net, sharding_strategy=sharding,
                                    auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
                                    device_id=device)


def adam(strategy, model, options):
    if strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                       lr=1e-4, **options)
    return torch.optim.Adam(model.parameters(), lr=1e-4, **options)


def peak_rss_mb(device):
    """The largest peak RSS of the ranks (ru_maxrss is in KiB)."""
    mine = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    peak = torch.tensor([mine], dtype=torch.float64, device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return peak.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--model", default="large", choices=sorted(SHAPES))
    parser.add_argument("--strategy", default="full_shard", choices=STRATEGIES)
    parser.add_argument("--adam", default="fused", choices=sorted(ADAMS))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = rank_device(args.backend)
    dist.init_process_group(args.backend)
    width, hidden_layers = SHAPES[args.model]
    net = mlp(width, hidden_layers)
    parameters = sum(p.numel() for p in net.parameters())
    model = wrap(args.strategy, net, device)
    optimizer = adam(args.strategy, model, ADAMS[args.adam])
    ms = slowest_median_step_ms(model, optimizer, width, args, device)
    rss = peak_rss_mb(device)
    if dist.get_rank() == 0:
        print("torch %-4s %-5s %-13s params %6.1fM ranks %d step %9.1f ms  adam %-7s "
              "peak-rss %7.0f MB" % (args.backend, args.model, args.strategy, parameters / 1e6,
                                     dist.get_world_size(), ms, args.adam, rss), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
