"""The npu device: queries, creation and movement, printing, save/load, device errors (docs/device.md)."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import torch_bridge
from torch_bridge.device import memory

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # printing uses a few CPU fallbacks (float64 statistics)
        yield


def test_device_queries():
    assert torch.npu is torch_bridge.device.runtime
    assert torch.npu.is_available() and torch.npu.is_initialized()
    assert torch.npu.device_count() == memory.DEVICE_COUNT >= 1
    assert torch.npu.current_device() == 0
    props = torch.npu.get_device_properties(0)
    from simulator.config import load_config
    cfg = load_config()
    assert props.name == cfg.name == torch.npu.get_device_name() == torch.npu.get_device_name("npu:0")
    assert props.multi_processor_count == cfg.cores
    assert props.total_memory == memory.ALLOCATORS[0].limit
    torch.npu.synchronize()
    with torch.npu.device(0):
        assert torch.npu.current_device() == 0
    torch.npu.set_device("npu:0")
    assert torch.npu.current_device() == 0


def test_invalid_device_index():
    n = torch.npu.device_count()
    with pytest.raises(RuntimeError, match=rf"Invalid device ordinal npu:{n}: this process has {n} npu device"):
        torch.randn(2, device=f"npu:{n}")
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.npu.set_device(n + 3)
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.zeros(2).to(f"npu:{n}")
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.npu.memory_allocated(n)
    assert torch.npu.current_device() == 0


def test_creation_and_movement():
    x = torch.randn(3, 3, device="npu")
    assert x.device == torch.device("npu", 0) and x.is_npu and x.shape == (3, 3)
    y = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for z in (y.to("npu"), y.npu(), y.to(torch.device("npu:0")), y.to("npu", non_blocking=True)):
        assert z.is_npu and not z.is_cpu
        assert torch.equal(z.cpu(), y)
    z = y.npu()
    assert z.npu() is z and z.to("npu") is z
    assert torch.equal(z.t().cpu(), y.t()) and torch.equal(z[1:, ::2].cpu(), y[1:, ::2])
    assert torch.equal(z.view(4, 3).cpu(), y.view(4, 3)) and torch.equal(z.reshape(-1).cpu(), y.reshape(-1))
    assert torch.equal(z.clone().cpu(), y) and torch.equal(z.t().contiguous().cpu(), y.t().contiguous())
    assert torch.equal(torch.zeros(2, 3, device="npu").cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.ones(2, 3, device="npu", dtype=torch.float16).cpu(), torch.ones(2, 3, dtype=torch.float16))
    assert torch.equal(torch.full((2,), 7.0, device="npu").cpu(), torch.full((2,), 7.0))
    e = torch.empty(0, 4, device="npu")
    assert e.shape == (0, 4) and e.cpu().shape == (0, 4)
    # int64 tensors move too (the kernels take them where torch does, e.g. targets)
    t = torch.tensor([3, 1, 2]).npu()
    assert t.dtype == torch.int64 and torch.equal(t.cpu(), torch.tensor([3, 1, 2]))
    assert y.npu().double().cpu().dtype == torch.float64


def test_model_npu_and_cpu():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    ref = torch.nn.functional.linear(torch.ones(2, 4), m.weight, m.bias)
    m.npu()
    assert all(p.is_npu for p in m.parameters())
    out = m(torch.ones(2, 4, device="npu"))
    assert out.is_npu
    torch.testing.assert_close(out.cpu(), ref)
    m.cpu()
    assert all(p.is_cpu for p in m.parameters())


def test_cpu_alias_is_zero_copy():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).npu()
    a = torch_bridge._cpu_alias(x)
    assert a.device.type == "cpu" and a.data_ptr() == x.data_ptr() and a.stride() == x.stride()
    a[0, 0] = 42.0
    assert x.cpu()[0, 0].item() == 42.0
    v = x.t()[1:]
    av = torch_bridge._cpu_alias(v)
    assert av.data_ptr() == v.data_ptr() and torch.equal(av, v.cpu())


def test_printing():
    x = torch.tensor([[1.0, 2.5], [-3.0, 4.0]]).npu()
    s = repr(x)
    assert "device='npu:0'" in s and "2.5000" in s and "-3.0000" in s
    assert str(torch.zeros(2, dtype=torch.int32, device="npu")) == "tensor([0, 0], device='npu:0', dtype=torch.int32)"


def test_save_load_map_location():
    x = torch.randn(3, 4)
    buf = io.BytesIO()
    torch.save({"x": x.npu(), "n": 3}, buf)
    for loc, dev in ((None, "npu"), ("cpu", "cpu"), ("npu", "npu"), ("npu:0", "npu"),
                     (torch.device("cpu"), "cpu"), ({"npu:0": "cpu"}, "cpu")):
        buf.seek(0)
        d = torch.load(buf, map_location=loc)
        assert d["x"].device.type == dev and d["n"] == 3
        assert torch.equal(d["x"].cpu(), x)
    m = torch.nn.Linear(3, 2)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, map_location="npu")
    assert all(v.is_npu for v in sd.values())
    m2 = torch.nn.Linear(3, 2).npu()
    m2.load_state_dict(sd)
    assert torch.equal(m2.weight.cpu(), m.weight.detach())


def test_device_mismatch_error():
    a = torch.randn(2, 3, device="npu")
    b = torch.randn(2, 3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but got other is on cpu"):
        a + b
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        b + a
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(a, torch.randn(3, 2))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.nn.functional.linear(a, torch.randn(4, 3))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.flip(a, [0]) + b              # an op on the CPU fallback checks too
    # a 0-dim CPU tensor is a scalar, as torch allows for cuda
    torch.testing.assert_close((a * torch.tensor(2.0)).cpu(), a.cpu() * 2)


def test_rng_state():
    torch.npu.manual_seed(123)
    a = torch.randn(5, device="npu").cpu()
    torch.npu.manual_seed(123)
    assert torch.equal(torch.randn(5, device="npu").cpu(), a)
    state = torch.npu.get_rng_state()
    b = torch.rand(4, device="npu").cpu()
    torch.npu.set_rng_state(state)
    assert torch.equal(torch.rand(4, device="npu").cpu(), b)
    torch.manual_seed(7)   # torch.manual_seed seeds the npu generators too
    c = torch.randn(3, device="npu").cpu()
    torch.manual_seed(7)
    assert torch.equal(torch.randn(3, device="npu").cpu(), c)


_MULTI = """
import torch, torch_bridge, warnings
warnings.simplefilter("ignore")
assert torch.npu.device_count() == 3
x = torch.ones(2, device="npu:2")
assert x.device == torch.device("npu", 2), x.device
y = (x + x).cpu()
assert y.tolist() == [2.0, 2.0]
assert torch.npu.memory_allocated(2) > 0 and torch.npu.memory_allocated(1) == 0
with torch.npu.device(1):
    assert torch.npu.current_device() == 1
    z = torch.zeros(3, device="npu")
    assert z.device.index == 1
assert torch.npu.current_device() == 0
w = x.to("npu:1")
assert w.device.index == 1 and w.cpu().tolist() == [1.0, 1.0]
try:
    x + w
except RuntimeError as e:
    assert "Expected all tensors to be on the same device" in str(e), e
else:
    raise AssertionError("no device mismatch error")
try:
    torch.zeros(1, device="npu:3")
except RuntimeError as e:
    assert "Invalid device ordinal npu:3: this process has 3 npu devices" in str(e), e
print("ok")
"""


def test_multiple_devices_from_env():
    env = dict(os.environ, VINCI_NPU_DEVICES="3", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _MULTI], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_bad_device_env():
    env = dict(os.environ, VINCI_NPU_DEVICES="zero", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", "import torch_bridge"], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode != 0 and "VINCI_NPU_DEVICES='zero': expected a device count" in r.stderr
