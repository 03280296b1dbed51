"""Writes the torch.save files that checkpoint_test reads.

torch_saved.pth: an mmengine-style checkpoint as PyTorch 2.x writes it:
meta, a model's weights and an optimizer's state_dict (state keyed by int),
with fixed values so the test can check them exactly. The weights are
dict(model.state_dict()): LibTorch's unpickler cannot build the OrderedDict
that state_dict() returns, which carries a `_metadata` attribute;
state_dict_ordered.pth holds exactly that, for the error that says so.
Run with the pinned wheel's Python: .venv/bin/python engine/checkpoint/testdata/make_torch_saved.py
"""
import os

import torch

model = torch.nn.Linear(3, 2)
with torch.no_grad():
    model.weight.copy_(torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4)
    model.bias.copy_(torch.tensor([0.5, -0.5]))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.ones(1, 3)).sum().backward()
optimizer.step()
checkpoint = {
    "meta": {"epoch": 3, "iter": 120, "mmengine_version": "0.10.7"},
    "state_dict": dict(model.state_dict()),
    "optimizer": optimizer.state_dict(),
}
here = os.path.dirname(os.path.abspath(__file__))
torch.save(checkpoint, os.path.join(here, "torch_saved.pth"))
torch.save(model.state_dict(), os.path.join(here, "state_dict_ordered.pth"))
