"""PyTorch's side of the cross-implementation test (cross_check.sh).

    torch_reference.py inputs DIR
        writes the case: the MLP's initial weights and every step's global
        batch, as a tensor folder (below), and the training settings
    torch_reference.py train INPUTS OUT      (under a launcher, gloo)
        trains the case with PyTorch's DistributedDataParallel,
        FullyShardedDataParallel (FULL_SHARD) and ZeroRedundancyOptimizer
        (over DDP), each with SGD (momentum) and Adam, clipping by norm; rank 0
        writes each run's final parameters, optimizer state and per-step loss
        and gradient norm to OUT
    torch_reference.py compare TORCH ENGINE
        the engine's runs (cross_check_main.cc: ddp, full_shard, and zero1-3,
        each against ZeroRedundancyOptimizer) against these: the same tensors,
        each element within TOLERANCE (below); exits 1 naming what differs

A tensor folder is plain: tensors.json maps each name to its dtype and shape,
and NAME.raw holds its elements, little-endian, in row-major order.
cross_check_main.cc reads and writes the same.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# The case. WIDTH and HIDDEN_LAYERS make tools/bench/mlp.cc's MLP: 2 x (13 ->
# 13, ReLU) -> 10, 534 parameters (odd sizes: FULL_SHARD pads its shards).
CASE = {
    "width": 13,
    "hidden_layers": 2,
    "batch": 8,  # global; each of the 2 ranks trains on its half
    "steps": 6,
    "max_norm": 0.45,
    "optimizers": {
        "sgd": {"type": "SGD", "lr": 0.1, "momentum": 0.9},
        "adam": {"type": "Adam", "lr": 0.01},
        "adam_fused": {"type": "Adam", "lr": 0.01, "fused": True},
    },
}
WRAPPERS = ("ddp", "full_shard", "zero")
# The engine's run -> PyTorch's run it must match.
COUNTERPARTS = {"ddp": "ddp", "full_shard": "full_shard", "zero1": "zero", "zero2": "zero",
                "zero3": "zero"}
# |engine - torch| <= ATOL + RTOL * |torch| for every element. Both sides run
# the same float32 kernels of the same LibTorch on the same values; they may
# differ only where they sum in another order (the loss averaged across ranks,
# the squared norms of shards rather than of parameters when clipping), a few
# units in the last place (1 ulp = 6e-8 relative) per step. RTOL allows 160
# ulps; a wrong rule (clipping skipped, no momentum, Adam's eps off by 100x)
# moves the results by 1e-4 to 1e-1 (testing/cross_check/README.md).
RTOL, ATOL = 1e-5, 1e-6
DTYPES = {"float32": torch.float32, "int64": torch.int64}


def write_folder(folder, tensors):
    os.makedirs(folder, exist_ok=True)
    index = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach().contiguous().cpu()
        index[name] = {"dtype": str(tensor.dtype).removeprefix("torch."),
                       "shape": list(tensor.shape)}
        path = os.path.join(folder, name + ".raw")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(tensor.numpy().tobytes())
    with open(os.path.join(folder, "tensors.json"), "w") as out:
        json.dump(index, out, indent=1, sort_keys=True)


def read_folder(folder):
    with open(os.path.join(folder, "tensors.json")) as index_file:
        index = json.load(index_file)
    tensors = {}
    for name, entry in index.items():
        with open(os.path.join(folder, name + ".raw"), "rb") as data:
            raw = bytearray(data.read())
        dtype = DTYPES[entry["dtype"]]
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(entry["shape"]).clone()
    return tensors


class Mlp(nn.Module):
    """tools/bench/mlp.cc's MLP, with the same parameter names."""

    def __init__(self, width, hidden_layers):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Linear(width, width) for _ in range(hidden_layers)] + [nn.Linear(width, 10)])

    def forward(self, x):
        for i, linear in enumerate(self.layers):
            x = linear(x)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return x


def make_inputs(folder):
    torch.manual_seed(20261126)
    net = Mlp(CASE["width"], CASE["hidden_layers"])
    tensors = {"init/" + name: value for name, value in net.state_dict().items()}
    for step in range(CASE["steps"]):
        tensors["batch/%d/inputs" % step] = torch.randn(CASE["batch"], CASE["width"])
        tensors["batch/%d/labels" % step] = torch.randint(10, (CASE["batch"],))
    write_folder(folder, tensors)
    with open(os.path.join(folder, "case.json"), "w") as out:
        json.dump(CASE, out, indent=1)


def optimizer_class_and_options(config):
    options = {k: v for k, v in config.items() if k != "type"}
    return getattr(torch.optim, config["type"]), options


def wrap(wrapper, net, optimizer_config):
    """The model as trained, its optimizer, and a clip that returns the
    total norm before clipping."""
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel
    optimizer_class, options = optimizer_class_and_options(optimizer_config)
    max_norm = CASE["max_norm"]
    if wrapper == "full_shard":
        model = FullyShardedDataParallel(net, sharding_strategy=ShardingStrategy.FULL_SHARD,
                                         device_id=torch.device("cpu"))
        return model, optimizer_class(model.parameters(), **options), \
            lambda: model.clip_grad_norm_(max_norm)
    model = DistributedDataParallel(net)
    if wrapper == "zero":
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_class,
                                            **options)
    else:
        optimizer = optimizer_class(model.parameters(), **options)
    return model, optimizer, lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def full_optimizer_state(wrapper, model, optimizer, names):
    """Every parameter's optimizer state by parameter name, on rank 0
    (collective)."""
    if wrapper == "full_shard":
        from torch.distributed.fsdp import FullyShardedDataParallel
        state = FullyShardedDataParallel.full_optim_state_dict(model, optimizer)
        return {name: state["state"].get(name, {}) for name in names} if state else None
    if wrapper == "zero":
        optimizer.consolidate_state_dict(to=0)
        if dist.get_rank() != 0:
            return None
    state = optimizer.state_dict()["state"]
    return {name: state.get(index, {}) for index, name in enumerate(names)}


def full_parameters(wrapper, model):
    if wrapper == "full_shard":
        from torch.distributed.fsdp import (FullStateDictConfig, FullyShardedDataParallel,
                                            StateDictType)
        config = FullStateDictConfig(rank0_only=True)
        with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                                      config):
            return model.state_dict()
    return model.module.state_dict()


def train_one(wrapper, optimizer_name, inputs):
    rank, world = dist.get_rank(), dist.get_world_size()
    net = Mlp(CASE["width"], CASE["hidden_layers"])
    net.load_state_dict({name[len("init/"):]: value for name, value in inputs.items()
                         if name.startswith("init/")})
    names = [name for name, _ in net.named_parameters()]
    model, optimizer, clip = wrap(wrapper, net, CASE["optimizers"][optimizer_name])
    share = CASE["batch"] // world
    losses, norms = [], []
    for step in range(CASE["steps"]):
        mine = slice(rank * share, (rank + 1) * share)
        x = inputs["batch/%d/inputs" % step][mine]
        y = inputs["batch/%d/labels" % step][mine]
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        norms.append(float(clip()))
        optimizer.step()
        optimizer.zero_grad()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        losses.append(float(mean_loss) / world)
    state = full_optimizer_state(wrapper, model, optimizer, names)
    params = full_parameters(wrapper, model)
    if rank != 0:
        return {}
    run = "%s_%s/" % (wrapper, optimizer_name)
    result = {run + "param/" + name: value for name, value in params.items()}
    for name, values in state.items():
        for key, value in values.items():
            result[run + "state/" + name + "/" + key] = torch.as_tensor(value, dtype=torch.float32)
    result[run + "loss"] = torch.tensor(losses, dtype=torch.float32)
    result[run + "grad_norm"] = torch.tensor(norms, dtype=torch.float32)
    return result


def train(inputs_folder, out_folder):
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    inputs = read_folder(inputs_folder)
    results = {}
    for wrapper in WRAPPERS:
        for optimizer_name in CASE["optimizers"]:
            results.update(train_one(wrapper, optimizer_name, inputs))
    if dist.get_rank() == 0:
        write_folder(out_folder, results)
    # Every rank done before any tears down: a rank that left while rank 0
    # still wrote was seen to abort in PyTorch 2.14's gloo teardown.
    dist.barrier()
    dist.destroy_process_group()


def compare(torch_folder, engine_folder):
    expected, actual = read_folder(torch_folder), read_folder(engine_folder)
    problems = []
    for run, counterpart in COUNTERPARTS.items():
        for optimizer_name in CASE["optimizers"]:
            mine, theirs = run + "_" + optimizer_name + "/", counterpart + "_" + optimizer_name + "/"
            wanted = {name[len(theirs):] for name in expected if name.startswith(theirs)}
            got = {name[len(mine):] for name in actual if name.startswith(mine)}
            for name in sorted(wanted ^ got):
                problems.append("%s%s: only in %s" % (mine, name,
                                                      "PyTorch's" if name in wanted else "ours"))
            worst, worst_name = 0.0, None
            for name in sorted(wanted & got):
                a, b = actual[mine + name], expected[theirs + name]
                if a.shape != b.shape:
                    problems.append("%s%s: shape %s, PyTorch's %s" % (mine, name, list(a.shape),
                                                                     list(b.shape)))
                    continue
                difference = (a - b).abs().max().item() if a.numel() else 0.0
                if difference > worst:
                    worst, worst_name = difference, name
                if not torch.allclose(a, b, rtol=RTOL, atol=ATOL):
                    problems.append("%s%s: differs from PyTorch's %s%s by up to %.3g" % (
                        mine, name, theirs, name, difference))
            print("%-22s against %-22s %3d tensors, largest difference %.3g%s" % (
                mine[:-1], theirs[:-1], len(wanted & got), worst,
                " (%s)" % worst_name if worst_name else ""))
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems or not expected else 0


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "inputs":
        make_inputs(sys.argv[2])
    elif command == "train":
        train(sys.argv[2], sys.argv[3])
    elif command == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit("usage: torch_reference.py inputs DIR | train INPUTS OUT | compare TORCH ENGINE")
