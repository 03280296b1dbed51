"""The peer of activation_memory: the same residual MLP blocks in PyTorch
2.x, with torch.utils.checkpoint (non-reentrant, PyTorch's recommendation)
around each block or without it, measured as activation_memory measures:
malloc's bytes in use after the forward less before it, the process's peak
RSS, the median step time. One mode per process.

    .venv/bin/python tools/bench/torch_checkpoint_peer.py --checkpoint 1
"""
import argparse
import ctypes
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]


libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2


def malloc_in_use():
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


class ResidualBlock(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


class ResidualMlp(torch.nn.Module):
    def __init__(self, width, blocks, checkpointed):
        super().__init__()
        self.blocks = torch.nn.ModuleList(ResidualBlock(width) for _ in range(blocks))
        self.head = torch.nn.Linear(width, 10)
        self.checkpointed = checkpointed

    def forward(self, x, labels):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return F.cross_entropy(self.head(x), labels)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=int, default=0)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(1)
    model = ResidualMlp(args.width, args.blocks, bool(args.checkpoint))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(args.batch, args.width)
    labels = torch.randint(10, (args.batch,))
    seconds = []
    held = 0
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        before = malloc_in_use()
        loss = model(inputs, labels)
        held = malloc_in_use() - before
        loss.backward()
        optimizer.step()
        if step >= args.warmup:
            seconds.append(time.perf_counter() - start)
    parameters = sum(p.numel() for p in model.parameters())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peer torch {torch.__version__} checkpoint={args.checkpoint} parameters={parameters} "
          f"batch={args.batch} held_after_forward_mib={held / 1048576:.1f} "
          f"peak_rss_mib={peak:.1f} median_step_s={statistics.median(seconds):.3f}")


if __name__ == "__main__":
    main()
