"""torch_npu tutorial, part 2: making tensors on the device, moving them, saving and loading them.

Run: python examples/npu/tensors.py
"""
import io

import torch

import torch_bridge  # noqa: F401

# creation on the device
a = torch.randn(2, 3, device="npu")
b = torch.zeros(2, 3, device="npu:0")
c = torch.ones_like(a)
print(a.device, b.device, c.device)

# movement
cpu = torch.arange(6, dtype=torch.float32).reshape(2, 3)
d = cpu.to("npu")             # or cpu.npu()
e = cpu.npu()
f = (d + e) * 2               # runs on the device's kernels
print("computed on", f.device, "->", f.cpu().tolist())
print(f)                      # printing copies to the host

# modules
model = torch.nn.Linear(3, 4).npu()
print("weights on", next(model.parameters()).device)
print("output", model(d).shape)

# save on npu, load back onto npu or onto the CPU
buf = io.BytesIO()
torch.save({"t": f, "state": model.state_dict()}, buf)
buf.seek(0)
on_npu = torch.load(buf)
buf.seek(0)
on_cpu = torch.load(buf, map_location="cpu")
print("loaded:", on_npu["t"].device, on_cpu["t"].device, torch.equal(on_npu["t"].cpu(), on_cpu["t"]))
