"""Checks that PyTorch reads the engine's checkpoints as mmengine's: torch.load
with weights_only=True (PyTorch's safe loader, which refuses any global but
tensors, containers, numbers and strings) on the newest iter_*.pth of a work
dir, which must hold meta, state_dict (tensors) and optimizer entries, the
optimizer's in the layout of optimizer.state_dict() (a torch.optim.SGD takes
it with load_state_dict and steps); then torch.save's the model weights to
OUT for the engine to load back.

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
    momentum = sgd_from(checkpoint["optimizer"], path)
    torch.save({"state_dict": weights, "meta": checkpoint["meta"]}, out)
    print("torch %s loaded %s (weights_only): %d tensors, meta %s, an SGD state of %d momentum "
          "buffers; wrote %s" % (torch.__version__, path, len(weights),
                                 sorted(checkpoint["meta"]), momentum, out))


def sgd_from(state_dict, path):
    """A torch.optim.SGD over parameters shaped as the saved momentum buffers
    takes the optimizer entry and steps; returns how many buffers it had."""
    states = state_dict["state"]
    groups = state_dict["param_groups"]
    count = sum(len(group["params"]) for group in groups)
    if sorted(states) != list(range(count)):
        sys.exit("%s: optimizer state for parameters %s of %d" % (path, sorted(states), count))
    params = [torch.zeros_like(states[i]["momentum_buffer"], requires_grad=True)
              for i in range(count)]
    sgd = torch.optim.SGD(params, lr=1.0)
    sgd.load_state_dict(state_dict)
    if sgd.param_groups[0]["momentum"] != groups[0]["momentum"]:
        sys.exit("%s: load_state_dict did not take the saved momentum" % path)
    for param in params:
        param.grad = torch.zeros_like(param)
    sgd.step()
    return count


if __name__ == "__main__":
    main()
