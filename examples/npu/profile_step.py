"""torch_npu tutorial: profiling a training step (PyTorch's profiler recipe, device "npu").

Part 1 is the torch.profiler recipe as written for CUDA, with the device string and the activity
changed (ProfilerActivity.CUDA -> ProfilerActivity.PrivateUse1, the npu device). Part 2 is
torch_npu's way: `torch.npu.profiler.profile` with a schedule and `tensorboard_trace_handler`.
Device times are simulated: each kernel is timed on the model of the chip's cores.

Run: python examples/npu/profile_step.py [trace.json]
"""
import os
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

import torch_bridge  # noqa: F401

device = "npu"
torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(8 * 4 * 4, 10),
).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
inputs = torch.randn(4, 3, 8, 8, device=device)
targets = torch.randint(0, 10, (4,), device=device)


def train_step():
    optimizer.zero_grad()
    with record_function("forward"):
        loss = F.cross_entropy(model(inputs), targets)
    with record_function("backward"):
        loss.backward()
    optimizer.step()
    return loss


train_step()    # warm-up: kernels compiled, optimizer state created

# -- part 1: torch.profiler
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], record_shapes=True) as prof:
    train_step()

print(prof.key_averages().table(sort_by="self_npu_time_total", row_limit=12))
print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_npu_time_total", row_limit=5))

path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.mkdtemp(), "npu_step_trace.json")
prof.export_chrome_trace(path)
print(f"Chrome trace written to {path} (open it in https://ui.perfetto.dev): host ops, npu kernels, "
      f"one track per pipe of each core")

# the simulator's view of the same step: cycles, roofline efficiency, the bottleneck pipe per kernel
sim = torch.npu.profiler.simulated_profile(prof)
print(sim.kernel_averages().table(row_limit=6))

# -- part 2: torch_npu's spelling, with a schedule (skip 1 step, warm up 1, record 1)
result_dir = tempfile.mkdtemp()
torch.npu.profiler.set_trace_options(instructions=False)   # kernel slices on the pipes, not every instruction
with torch.npu.profiler.profile(
        activities=[torch.npu.profiler.ProfilerActivity.CPU, torch.npu.profiler.ProfilerActivity.NPU],
        schedule=torch.npu.profiler.schedule(wait=1, warmup=1, active=1, repeat=1),
        on_trace_ready=torch.npu.profiler.tensorboard_trace_handler(result_dir)) as prof:
    for step in range(3):
        train_step()
        prof.step()
print("traces for TensorBoard / Perfetto:", sorted(os.listdir(result_dir)))
print(f"recorded step: {torch.npu.profiler.simulated_profile(prof).totals.device_seconds * 1e6:.3f} us simulated "
      f"NPU time")
