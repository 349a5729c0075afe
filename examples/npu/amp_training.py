"""torch_npu tutorial: automatic mixed precision (AMP) training with GradScaler.

The PyTorch AMP recipe (recipes/amp_recipe, which torch_npu's AMP guide follows) with "npu" for
"cuda" and `import torch_bridge` for `import torch_npu`: a default-precision baseline, then the same
net under `torch.autocast("npu", dtype=torch.float16)` with `torch.amp.GradScaler("npu")`, a
checkpoint of the scaler, and inference under autocast. Only the sizes are smaller (the recipe's
4096-wide layers and 50 batches of 512 are minutes of simulated chip), so it runs in seconds.
Run: python examples/npu/amp_training.py
"""
import time

import torch

import torch_bridge  # noqa: F401  (makes the simulated chip the `npu` device, as `import torch_npu` does)

device = "npu"
torch.set_default_device(device)
torch.manual_seed(0)


def make_model(in_size, out_size, num_layers):
    layers = []
    for _ in range(num_layers - 1):
        layers.append(torch.nn.Linear(in_size, in_size))
        layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Linear(in_size, out_size))
    return torch.nn.Sequential(*tuple(layers)).to(device)


def start_timer():
    global start_time
    torch.npu.synchronize()
    start_time = time.time()


def end_timer_and_print(local_msg):
    torch.npu.synchronize()
    print(f"\n{local_msg}\nTotal execution time = {time.time() - start_time:.3f} sec")
    print(f"Max memory used by tensors = {torch.npu.max_memory_allocated()} bytes")


batch_size = 32
in_size = 128
out_size = 128
num_layers = 3
num_batches = 6
epochs = 3

# Creates data in default precision.
data = [torch.randn(batch_size, in_size) for _ in range(num_batches)]
targets = [torch.randn(batch_size, out_size) for _ in range(num_batches)]
loss_fn = torch.nn.MSELoss().to(device)

# Default precision (float32) baseline.
net = make_model(in_size, out_size, num_layers)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
start_timer()
for epoch in range(epochs):
    for input, target in zip(data, targets):
        output = net(input)
        loss = loss_fn(output, target)
        loss.backward()
        opt.step()
        opt.zero_grad()
    print(f"epoch {epoch}: loss {loss.item():.5f} ({output.dtype} output)")
end_timer_and_print("Default precision:")

# Mixed precision: autocast + GradScaler, all together.
use_amp = True
net = make_model(in_size, out_size, num_layers)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
scaler = torch.amp.GradScaler(device, enabled=use_amp)
start_timer()
for epoch in range(epochs):
    for input, target in zip(data, targets):
        with torch.autocast(device_type=device, dtype=torch.float16, enabled=use_amp):
            output = net(input)            # Linear layers autocast to float16
            loss = loss_fn(output, target)  # mse_loss autocasts to float32
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    print(f"epoch {epoch}: loss {loss.item():.5f} ({output.dtype} output, {loss.dtype} loss), "
          f"scale {scaler.get_scale():.0f}")
end_timer_and_print("Mixed precision:")

# Saving and resuming: the scaler's state goes into the checkpoint with the model and optimizer.
checkpoint = {"model": net.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict()}
net.load_state_dict(checkpoint["model"])
opt.load_state_dict(checkpoint["optimizer"])
scaler.load_state_dict(checkpoint["scaler"])
print("\nresumed scaler state:", scaler.state_dict())

# Inference/evaluation: autocast alone, no GradScaler.
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.float16):
    output = net(data[0])
    print("eval loss:", loss_fn(output, targets[0]).item())

print("ops that fell back to the CPU:", torch_bridge.fallback_ops())
