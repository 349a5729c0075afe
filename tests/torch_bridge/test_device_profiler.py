"""torch.profiler on the npu device: torch's table with the simulated device time, its events with
the npu kernels, the Chrome trace with host ops, kernels and per-core pipe tracks; torch_npu's
spellings (torch.npu.profile, torch.npu.profiler); the torch_bridge table of npu aten ops."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import torch_bridge
from simulator.timing import PIPE_NAMES
from torch_bridge.device import profiling

NPU = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    with torch_bridge.record_function("forward"):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.fixture(scope="module")
def run() -> SimpleNamespace:
    """One AdamW step of a stock MLP on npu inside torch.profiler (CPU + PrivateUse1), and the same
    step on a copy without the profiler."""
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    runs = []
    for profiled in (True, False):
        model = _model().to("npu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        xn, yn = x.npu(), y.npu()
        _step(model, opt, xn, yn)           # optimizer state exists: the profiled step is a steady one
        if profiled:
            with profile(activities=NPU, record_shapes=True) as prof:
                loss = _step(model, opt, xn, yn)
        else:
            loss = _step(model, opt, xn, yn)
        runs.append((loss.item(), [p.detach().cpu() for p in model.parameters()]))
    return SimpleNamespace(prof=prof, sim=torch.npu.profiler.simulated_profile(prof), profiled=runs[0],
                           plain=runs[1])


def test_profiling_does_not_change_results(run: SimpleNamespace) -> None:
    assert run.profiled[0] == run.plain[0]
    for p, q in zip(run.profiled[1], run.plain[1]):
        assert torch.equal(p, q)


def test_events_carry_the_simulated_kernels(run: SimpleNamespace) -> None:
    events = run.prof.events()
    kernels = run.sim.kernels()
    dev = [e for e in events if e.device_type == DeviceType.PrivateUse1]
    assert len(kernels) == run.sim.totals.kernels > 10
    assert [e.name for e in dev] == [k.name for k in kernels]
    for e, k in zip(dev, kernels):
        assert e.device_time_total == pytest.approx(k.seconds * 1e6)
    assert sum(e.device_time_total for e in dev) == pytest.approx(run.sim.totals.device_seconds * 1e6)
    assert not [e for e in events if e.name.startswith(profiling._MARK)]      # the markers are gone
    # each kernel is a kernel of torch's event of the op that launched it
    cpu_kernels = Counter((e.name, k.name) for e in events if e.device_type == DeviceType.CPU for k in e.kernels)
    assert cpu_kernels == Counter((k.op.name, k.name) for k in kernels)


def test_table_rows_match_the_simulated_profile(run: SimpleNamespace) -> None:
    rows = {r.key: r for r in run.prof.key_averages()}
    sim = {r.key: r for r in run.sim.key_averages()}
    for op in ("aten::addmm", "aten::mm", "aten::relu", "aten::_log_softmax", "aten::nll_loss_forward",
               "aten::addcdiv_", "aten::lerp_"):
        assert rows[op].self_device_time_total > 0, op
    for key, r in sim.items():
        assert rows[key].self_device_time_total == pytest.approx(r.self_device_time_total), key
    # a range's device time is that of every kernel inside it, children's included
    assert rows["forward"].device_time_total == pytest.approx(sim["forward"].device_time_total)
    assert rows["forward"].device_time_total < run.sim.totals.device_seconds * 1e6
    assert rows["aten::linear"].device_time_total == pytest.approx(
        sim["aten::addmm"].device_time_total)   # linear -> addmm on npu: the child's kernel


def test_table_text(run: SimpleNamespace) -> None:
    text = run.prof.key_averages().table(sort_by="self_npu_time_total", row_limit=5)
    lines = text.splitlines()
    for col in ("Self CPU", "Self NPU", "Self NPU %", "NPU total", "NPU time avg"):
        assert col in lines[1]
    top = max(run.prof.key_averages(), key=lambda r: r.self_device_time_total)
    assert lines[3].split()[0] == top.key.split()[0]
    total = [ln for ln in lines if ln.startswith("Self NPU time total:")]
    assert total and total[0].endswith(f"{run.sim.totals.device_seconds * 1e6:.3f}us")
    # the CUDA tutorials' spelling sorts the same way
    assert run.prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=5).splitlines()[3] == lines[3]


def _on_core(e: dict[str, Any]) -> bool:
    """An event of an npu core's process (kineto also has string pids, e.g. "Spans")."""
    return isinstance(e.get("pid"), int) and e["pid"] >= profiling._NPU_PID0 + 100


def _trace(prof: Any, path: Any) -> dict[str, Any]:
    prof.export_chrome_trace(str(path))
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)


def test_chrome_trace_has_host_ops_kernels_and_pipes(run: SimpleNamespace, tmp_path: Any) -> None:
    doc = _trace(run.prof, tmp_path / "step.json")
    ev = doc["traceEvents"]
    assert not [e for e in ev if str(e.get("name", "")).startswith(profiling._MARK)]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    stream = profiling._NPU_PID0
    assert procs[stream] == "npu:0 stream 0 (simulated)"
    host = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    assert {"aten::addmm", "aten::mm", "aten::relu"} <= {e["name"] for e in host}
    kernels = run.sim.kernels()
    slices = [e for e in ev if e.get("ph") == "X" and e["pid"] == stream and e["tid"] == profiling._KERNEL_TID]
    assert [e["name"] for e in slices] == [k.label for k in kernels]
    for a, b in zip(slices, slices[1:]):                 # one stream: in order, never overlapping
        assert b["ts"] >= a["ts"] + a["dur"] - 1e-6
    for e, k in zip(slices, kernels):
        assert e["dur"] == pytest.approx(k.seconds * 1e6)
        assert e["args"]["cycles"] == k.cycles
    # an arrow from each kernel's host op to the kernel, which starts no earlier than the call
    starts = {e["id"]: e for e in ev if e.get("ph") == "s" and e.get("cat") == "ac2g" and e.get("name") == "launch"}
    ends = [e for e in ev if e.get("ph") == "f" and e.get("id") in starts]
    assert len(ends) == len(kernels)
    for f in ends:
        s = starts[f["id"]]
        assert f["ts"] >= s["ts"]
        kernel = next(e for e in slices if e["ts"] == f["ts"])
        op = kernel["args"]["op"]
        assert any(h["name"] == op and (h["pid"], h["tid"]) == (s["pid"], s["tid"])
                   and h["ts"] <= s["ts"] <= h["ts"] + h["dur"] for h in host), op
    # per-core pipe tracks, the kernels' slices and instructions on them
    pipes = {e["args"]["name"] for e in ev if e.get("name") == "thread_name" and _on_core(e)}
    assert {"V", "MTE2", "MTE3", "M"} <= pipes <= set(PIPE_NAMES) | {"ALL"}
    on_cores = {e["name"] for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel" and _on_core(e)}
    assert on_cores == {k.label for k in kernels}
    assert any(e.get("ph") == "X" and _on_core(e) and e.get("cat") != "kernel" for e in ev)
    ops = {e["name"] for e in ev if e.get("ph") == "X" and e.get("cat") == "npu_op"}
    assert {"aten::addmm", "forward"} <= ops
    assert doc["npuSimulated"]["device_cycles"] == run.sim.totals.device_cycles


def test_chrome_trace_gz_and_without_instructions(tmp_path: Any) -> None:
    x = torch.randn(8, 8, device="npu")
    with profile(activities=NPU) as prof:
        torch.sigmoid(x)
    profiling.set_trace_options(instructions=False)
    try:
        doc = _trace(prof, tmp_path / "step.json.gz")
    finally:
        profiling.set_trace_options()
    core = [e for e in doc["traceEvents"] if e.get("ph") == "X" and _on_core(e)]
    assert core and {e["name"] for e in core} == {"aten::sigmoid/" + prof.events()[-1].name}
    assert all(e["cat"] == "kernel" for e in core)     # the pipe slices, no instructions inside


def test_cpu_only_session_is_left_alone() -> None:
    x = torch.randn(4, 4, device="npu")
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch_bridge.profile() as sim:
        with torch_bridge.record_function("block"):
            y = torch.relu(x)
    assert torch.equal(y.cpu(), torch.relu(x.cpu()))
    events = prof.events()
    assert "block" in {e.name for e in events}      # torch_bridge ranges show in torch's session
    assert all(e.device_type == DeviceType.CPU and not e.kernels for e in events)
    assert "NPU" not in prof.key_averages().table()
    with pytest.raises(RuntimeError, match="did not record the npu device.*PrivateUse1"):
        torch.npu.profiler.simulated_profile(prof)
    assert [k.name for k in sim.kernels()] and sim.kernels()[0].op.name == "aten::relu"


def test_torch_npu_spellings(tmp_path: Any) -> None:
    assert torch.npu.profile is torch_bridge.profile
    from torch.npu.profiler import ProfilerActivity as Activity
    from torch.npu.profiler import profile as npu_profile
    from torch.npu.profiler import schedule, tensorboard_trace_handler
    assert Activity.NPU == ProfilerActivity.PrivateUse1
    x = torch.randn(8, 8, device="npu")
    with npu_profile(schedule=schedule(wait=1, warmup=1, active=1, repeat=1),
                     on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(3):
            torch.sigmoid(x)
            prof.step()
    files = list(tmp_path.iterdir())
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    kern = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("pid") == profiling._NPU_PID0]
    assert kern == ["aten::sigmoid/" + torch.npu.profiler.simulated_profile(prof).kernels()[0].name]
    assert prof.key_averages().total_average().self_device_time_total > 0


def test_bridge_rows_overloads_and_fallbacks() -> None:
    x = torch.randn(64, device="npu")
    d = torch.ones(3, dtype=torch.float64, device="npu")
    with torch_bridge.profile() as prof:
        torch.mul(x, x)
        torch.roll(x, 1)                   # no npu kernel: the CPU fallback
        d.mul_(2)                          # an npu kernel that hands float64 to the fallback
    rows = {r.key: r for r in prof.key_averages()}
    assert "aten::mul" in rows and not [k for k in rows if "." in k.split("::")[-1]]
    assert {e.overload_name for e in prof.events() if e.name == "aten::mul"} in ({"out"}, {"Tensor"})
    assert rows["aten::roll"].kernel_count == 0 and rows["aten::mul_"].count == 1
    assert rows["aten::mul"].kernel_count == 1 and rows["aten::mul_"].kernel_count == 0
    assert {e.name for e in prof.events() if e.fallback} == {"aten::roll", "aten::mul_"}
    assert prof.totals.fallbacks == {"aten::roll": 1, "aten::mul_": 1}
    assert "CPU fallback (ran on the host, no device time): aten::mul_ x1, aten::roll x1" in prof.table()
    assert torch.equal(d.cpu(), torch.full((3,), 2.0, dtype=torch.float64))


def test_place_follows_launches_on_one_stream() -> None:
    def k(seq: int | None, us: float, device: int = 0) -> Any:
        op = None if seq is None else SimpleNamespace(seq=seq, device=device, parent=None)
        return SimpleNamespace(op=op, seconds=us * 1e-6)

    ks = [k(1, 2.0), k(1, 1.0), k(2, 1.0), k(None, 0.5), k(3, 1.0, device=1)]
    starts = profiling._place(ks, {1: 10.0, 2: 11.0, 3: 0.0}, t0=5.0)
    # op 1's kernels back to back from its call; op 2 called during them waits; the direct launch
    # follows; device 1 has a stream of its own
    assert starts == [10.0, 12.0, 13.0, 14.0, 5.0]
