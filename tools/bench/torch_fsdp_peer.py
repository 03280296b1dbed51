"""The peer of sharded_step --strategy full_shard: PyTorch's
FullyShardedDataParallel (FULL_SHARD, each Linear a unit, as sharded_step
wraps) on the same MLP, batch, Adam(lr 1e-4) and timing rule as ddp_step's
peer (median step after warmup, barrier before each step, slowest rank's
median). On gloo it trains on the CPU (device_id cpu); on nccl on GPU
LOCAL_RANK modulo the GPUs, each step's time including its queued kernels.

    engine-launch --nproc-per-node 2 .venv/bin/python tools/bench/torch_fsdp_peer.py --model large
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from torch_ddp_peer import SHAPES, mlp, rank_device, slowest_median_step_ms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--model", default="large", choices=sorted(SHAPES))
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
    model = FullyShardedDataParallel(net, sharding_strategy=ShardingStrategy.FULL_SHARD,
                                     auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
                                     device_id=device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    ms = slowest_median_step_ms(model, optimizer, width, args, device)
    if dist.get_rank() == 0:
        print("python %-4s %-5s full_shard    params %6.1fM ranks %d step %9.1f ms"
              % (args.backend, args.model, parameters / 1e6, dist.get_world_size(),
                 ms), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
