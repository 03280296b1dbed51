"""The peer of the Fashion-MNIST demo: the same CNN, data, batch, optimiser
and schedule with PyTorch's own DDP (Debian's python3-torch, gloo), in
`--ranks` processes of this machine. Prints the time per training iteration
(validation excluded) and the test accuracy after the same iterations.

    /usr/bin/python3 tools/bench/fashion_mnist_ddp.py --ranks 4   # Debian's Python

Compare with `bazel run //examples:train` (4 simulated ranks, the same
config: examples/fashion_mnist.json).
"""
import argparse
import gzip
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

ROOT = "/usr/share/datasets/fashion-mnist"
MEAN, DEVIATION = 0.2860, 0.3530


def read_split(prefix):
    with gzip.open(f"{ROOT}/{prefix}-images-idx3-ubyte.gz") as f:
        images = torch.frombuffer(bytearray(f.read()[16:]), dtype=torch.uint8)
    with gzip.open(f"{ROOT}/{prefix}-labels-idx1-ubyte.gz") as f:
        labels = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8)
    images = (images.reshape(-1, 1, 28, 28).float() / 255 - MEAN) / DEVIATION
    return images, labels.long()


class Cnn(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.conv1 = nn.Conv2d(1, model["conv1"], 5, padding=2)
        self.norm1 = nn.BatchNorm2d(model["conv1"])
        self.conv2 = nn.Conv2d(model["conv1"], model["conv2"], 5)
        self.norm2 = nn.BatchNorm2d(model["conv2"])
        self.hidden = nn.Linear(model["conv2"] * 25, model["hidden"])
        self.output = nn.Linear(model["hidden"], model["classes"])

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.norm1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.norm2(self.conv2(x))), 2)
        return self.output(F.relu(self.hidden(x.flatten(1))))


def run(rank, world_size, config, iters, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(config["strategy"]["seed"])
    train_images, train_labels = read_split("train")
    test_images, test_labels = read_split("t10k")
    # PyTorch 1.13's SyncBatchNorm refuses CPU modules: the peer normalises
    # with each rank's own batch statistics (the demo synchronises them).
    ddp = nn.parallel.DistributedDataParallel(Cnn(config["model"]), bucket_cap_mb=25)
    optim = config["optim_wrapper"]["optimizer"]
    sgd = torch.optim.SGD(ddp.parameters(), lr=optim["lr"], momentum=optim["momentum"],
                          weight_decay=optim["weight_decay"])
    schedule = config["param_scheduler"]
    scheduler = torch.optim.lr_scheduler.MultiStepLR(sgd, schedule["milestones"], schedule["gamma"])
    batch = config["train"]["batch_size"]
    flip = config["train_data"]["flip"]
    sampler = torch.utils.data.DistributedSampler(range(len(train_labels)), world_size, rank,
                                                  shuffle=True, seed=config["strategy"]["seed"])
    per_epoch = (len(sampler) + batch - 1) // batch
    generator = torch.Generator().manual_seed(rank)
    seconds = 0.0
    ddp.train()
    for it in range(iters):
        if it % per_epoch == 0:
            sampler.set_epoch(it // per_epoch)
            order = torch.tensor(list(sampler))
        started = time.perf_counter()
        index = order[(it % per_epoch) * batch:(it % per_epoch + 1) * batch]
        images = train_images[index]
        mirrored = torch.rand(len(index), 1, 1, 1, generator=generator) < flip
        images = torch.where(mirrored, images.flip(3), images)
        loss = F.cross_entropy(ddp(images), train_labels[index])
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        scheduler.step()
        seconds += time.perf_counter() - started
    ddp.eval()
    correct = torch.zeros(1)
    with torch.no_grad():
        for start in range(rank * batch, len(test_labels), batch * world_size):
            logits = ddp.module(test_images[start:start + batch])
            correct += (logits.argmax(1) == test_labels[start:start + batch]).sum()
    dist.all_reduce(correct)
    if rank == 0:
        results.put((seconds, correct.item() / len(test_labels)))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--iters", type=int, default=None, help="default: the config's max_iters")
    parser.add_argument("--config", default="examples/fashion_mnist.json")
    parser.add_argument("--port", type=int, default=29533)
    args = parser.parse_args()
    with open(args.config) as f:
        config = json.load(f)
    iters = args.iters or config["train"]["max_iters"]
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(run, (args.ranks, config, iters, args.port, results), nprocs=args.ranks)
    seconds, accuracy = results.get()
    print(f"python DDP, {args.ranks} processes (gloo): {iters} iterations, "
          f"{1000 * seconds / iters:.1f} ms per iteration, {seconds:.1f} s; "
          f"test accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
