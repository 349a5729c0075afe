"""torch_npu tutorial: a traced CNN (torch.jit.trace on the device, device "npu").

The TorchScript tutorial's steps: trace the model with an example input on the device, look at the
graph, run it on new inputs, save it and load it back onto the device.

Run: python examples/npu/traced_cnn.py
"""
import os
import tempfile

import torch
import torch.nn as nn

import torch_bridge


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(x, 1))


torch.manual_seed(0)
model = Net().eval()
cpu_model = Net().eval()
cpu_model.load_state_dict(model.state_dict())
model = model.to("npu")

example = torch.rand(1, 3, 8, 8, device="npu")
traced = torch.jit.trace(model, example)
print(traced.code)

x = torch.rand(4, 3, 8, 8)
with torch.no_grad():
    before = torch_bridge.fallback_ops()
    out = traced(x.to("npu"))
    ran_on_cpu = {k: v - before.get(k, 0) for k, v in torch_bridge.fallback_ops().items() if v != before.get(k, 0)}
    print("traced output on", out.device, tuple(out.shape))
    print("max |traced - eager| on npu:", (out - model(x.to("npu"))).abs().max().item())
    print("max |npu - cpu|:", (out.cpu() - cpu_model(x)).abs().max().item())
print("ops of the traced graph that ran on the CPU fallback:", ran_on_cpu or "none")

path = os.path.join(tempfile.mkdtemp(), "traced_cnn.pt")
torch.jit.save(traced, path)
loaded = torch.jit.load(path, map_location="npu")
with torch.no_grad():
    same = torch.equal(loaded(x.to("npu")).cpu(), out.cpu())
print("loaded onto", next(loaded.parameters()).device, "same output:", same)
