"""torch_npu tutorial, part 1: is there a device, how many, which one, what is it.

The same lines as torch_npu's quick start (and torch.cuda's), with `import torch_bridge` in place of
`import torch_npu`. Run: python examples/npu/device_queries.py
"""
import torch

import torch_bridge  # noqa: F401  (makes the simulated chip the `npu` device, as `import torch_npu` does)

print("available:", torch.npu.is_available())
print("device count:", torch.npu.device_count())
print("current device:", torch.npu.current_device())
print("name:", torch.npu.get_device_name(0))
props = torch.npu.get_device_properties(0)
print("properties:", props)
print(f"  {props.multi_processor_count} AI cores at {props.clock_rate_mhz} MHz, "
      f"{props.total_memory / 2**30:.0f} GiB HBM, UB {props.ub_size // 1024} KiB, L1 {props.l1_size // 1024} KiB")

torch.npu.set_device(0)
with torch.npu.device(0):
    x = torch.ones(2, 2, device="npu")
print("tensor on", x.device, "is_npu:", x.is_npu)

torch.npu.manual_seed(1234)
state = torch.npu.get_rng_state()
a = torch.randn(3, device="npu")
torch.npu.set_rng_state(state)
b = torch.randn(3, device="npu")
print("same draws after set_rng_state:", torch.equal(a.cpu(), b.cpu()))
torch.npu.synchronize()
