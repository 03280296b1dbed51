"""Checks that PyTorch reads the engine's checkpoints as mmengine's: torch.load
with weights_only=True (PyTorch's safe loader, which refuses any global but
tensors, containers, numbers and strings) on the newest iter_*.pth of a work
dir, which must hold meta, state_dict (tensors) and optimizer entries; then
torch.save's the model weights to OUT for the engine to load back.

  python torch_loads.py WORK_DIR OUT     (the GPU runner's torch_loads step)
"""
import glob
import os
import re
import sys

import torch


def newest_checkpoint(work_dir):
    paths = glob.glob(os.path.join(work_dir, "iter_*.pth"))
    if not paths:
        sys.exit("no iter_*.pth in %s: did the run save a checkpoint?" % work_dir)
    return max(paths, key=lambda p: int(re.search(r"iter_(\d+)\.pth$", p).group(1)))


def main():
    work_dir, out = sys.argv[1], sys.argv[2]
    path = newest_checkpoint(work_dir)
    checkpoint = torch.load(path, weights_only=True)
    missing = [key for key in ("meta", "state_dict", "optimizer") if key not in checkpoint]
    if missing:
        sys.exit("%s lacks %s (has %s)" % (path, missing, sorted(checkpoint)))
    weights = checkpoint["state_dict"]
    if not weights or not all(isinstance(t, torch.Tensor) for t in weights.values()):
        sys.exit("%s: state_dict is not a non-empty dict of tensors" % path)
    torch.save({"state_dict": weights, "meta": checkpoint["meta"]}, out)
    print("torch %s loaded %s (weights_only): %d tensors, meta %s; wrote %s" %
          (torch.__version__, path, len(weights), sorted(checkpoint["meta"]), out))


if __name__ == "__main__":
    main()
