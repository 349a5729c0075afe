"""torch_bridge.profiler: the per-op table (calls, host / device time, self vs total) and the
Chrome trace of a training step, first with op_library calls wrapped by hand through
`_run_profiled`, then with the registered `torch.ops.npu.*` ops and autograd."""
from __future__ import annotations

import gzip
import json
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch

import op_library as L
from dsl.record import record
from op_library.registry import get
from torch_bridge import profiler as P

B, IN, OUT = 8, 32, 16


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(B, IN, generator=g), torch.randn(OUT, IN, generator=g),
            torch.randn(OUT, generator=g), torch.randint(0, OUT, (B,), generator=g))


def _op(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """What the impl wrapper in ops.py does for every registered op."""
    return P._run_profiled(name, fn, args, kwargs)


def _manual_step() -> torch.Tensor:
    """linear -> relu -> cross_entropy, then the backward ops in autograd's order."""
    x, w, b, t = _inputs()
    h = _op("linear", L.linear, x, w, b)
    r = _op("relu", L.relu, h)
    loss = _op("cross_entropy", L.cross_entropy, r, t)
    gr, = _op("cross_entropy_backward", get("cross_entropy").backward, torch.ones(()), loss, (r, t), {})
    gh, = _op("relu_backward", get("relu").backward, gr, r, (h,), {})
    _op("linear_backward", get("linear").backward, gh, h, (x, w, b), {})
    return loss


def _kernels_of_manual_step() -> dict[str, list[str]]:
    """The kernels each op of the step launches, recorded without the profiler."""
    out: dict[str, list[str]] = {}
    orig = P._run_profiled

    def rec(name: str, fn: Any, args: tuple, kwargs: dict) -> Any:
        with record() as r:
            res = fn(*args, **kwargs)
        out.setdefault(name, []).extend(r.kernels())
        return res

    P._run_profiled = rec  # type: ignore[assignment]
    try:
        _manual_step()
    finally:
        P._run_profiled = orig  # type: ignore[assignment]
    return out


@pytest.fixture(scope="module")
def manual() -> P.profile:
    _manual_step()   # compile outside the profile
    with P.profile(record_shapes=True) as prof:
        _manual_step()
    return prof


def _nesting_ok(events: list[dict[str, Any]]) -> list[str]:
    """Slices on one track must nest or be disjoint (what Perfetto needs to draw them)."""
    bad = []
    tracks: dict[tuple[int, int], list[tuple[int, int, str]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            s = round(e["ts"] * 1000)
            tracks[(e["pid"], e["tid"])].append((s, s + round(e["dur"] * 1000), e["name"]))
    for key, sl in tracks.items():
        sl.sort(key=lambda v: (v[0], -v[1]))
        open_: list[tuple[int, int, str]] = []
        for s, e, n in sl:
            while open_ and open_[-1][1] <= s:
                open_.pop()
            if open_ and e > open_[-1][1]:
                bad.append(f"{key}: {n} [{s}, {e}] overlaps {open_[-1]}")
            open_.append((s, e, n))
    return bad


# -------------------------------------------------------------------------------------------
# the table


def test_rows_calls_and_kernels(manual: P.profile) -> None:
    rows = {r.key: r for r in manual.key_averages()}
    expected = _kernels_of_manual_step()
    assert set(rows) == set(expected)
    for name, kernels in expected.items():
        r = rows[name]
        assert r.count == 1, name
        assert r.kernels == Counter(kernels), name
        assert r.kernel_count == len(kernels)
        assert r.self_device_cycles == r.device_cycles_total > 0   # no nesting in this step
        assert r.self_cpu_time_total == r.cpu_time_total > 0
    assert rows["linear_backward"].kernels["mm_kernel"] == 2


def test_device_times_add_up(manual: P.profile) -> None:
    t = manual.totals
    kernels = manual.kernels()
    rows = manual.key_averages()
    assert t.kernels == len(kernels) == sum(r.kernel_count for r in rows)
    assert t.device_cycles == sum(k.run.cycles for k in kernels)
    assert t.device_seconds == pytest.approx(sum(k.run.seconds for k in kernels))
    assert t.device_seconds == pytest.approx(t.device_cycles / (t.clock_mhz * 1e6))
    assert sum(r.self_device_time_total for r in rows) == pytest.approx(t.device_seconds * 1e6)
    assert sum(r.self_device_cycles for r in rows) == t.device_cycles
    assert t.op_calls == 6
    assert 0 < t.op_host_seconds <= t.host_seconds
    util = t.pipe_utilization
    assert set(util) == {"S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX"}
    assert all(0 <= u <= 1 for u in util.values()) and util["M"] > 0 and util["V"] > 0
    busy_m = sum(k.run.profile.busy["M"] for k in kernels)
    assert util["M"] == pytest.approx(busy_m / (t.device_cycles * t.cores))


def test_stream_is_back_to_back_in_launch_order(manual: P.profile) -> None:
    ks = manual.kernels()
    assert [k.op.name for k in ks if k.op] == [
        "linear", "relu", *["cross_entropy"] * 3, *["cross_entropy_backward"] * 3,
        "relu_backward", *["linear_backward"] * 3]
    cycle = ns = 0
    for k in ks:
        assert (k.start_cycle, k.start_ns) == (cycle, ns)
        assert k.end_ns > k.start_ns
        cycle, ns = cycle + k.cycles, k.end_ns


def test_table_text(manual: P.profile) -> None:
    ka = manual.key_averages()
    text = ka.table(sort_by="device_time_total", row_limit=3)
    lines = text.splitlines()
    head = lines[1]
    for col in ("Name", "Self CPU %", "CPU total", "Self NPU", "Self NPU %", "NPU total",
                "Self cycles", "# Kernels", "# of Calls"):
        assert col in head
    body = lines[3:6]
    assert lines[6].startswith("---")
    # descending by device total; the top row is the op with the most device time
    top = max(ka, key=lambda r: r.device_time_total)
    assert body[0].split()[0] == top.key
    assert "Self CPU time total:" in text and "Self NPU time total:" in text
    assert f"{manual.totals.device_cycles} cycles at 1850 MHz" in text
    assert "Pipe utilisation" in text and "timing model" in text
    shares = [float(ln.split()[7].rstrip("%")) for ln in ka.table(row_limit=None).splitlines()[3:9]]
    assert sum(shares) == pytest.approx(100.0, abs=0.05)
    by_count = ka.table(sort_by="self_cpu_time_total", row_limit=-1)
    assert len(by_count.splitlines()) == len(text.splitlines()) + 3


def test_kernel_averages(manual: P.profile) -> None:
    ka = manual.kernel_averages()
    rows = {r.key: r for r in ka}
    assert rows["linear_backward/mm_kernel"].count == 2
    assert set(rows) == {k.label for k in manual.kernels()}
    assert sum(r.self_device_cycles for r in ka) == manual.totals.device_cycles
    for r in ka:
        runs = [k.run for k in manual.kernels() if k.label == r.key]
        assert r.efficiency == pytest.approx(sum(x.bound for x in runs) / sum(x.cycles for x in runs))
        assert r.bound_pipe in {x.profile.bound_pipe for x in runs}
    text = ka.table(sort_by="device_cycles_total")
    head = text.splitlines()[1]
    assert "Efficiency" in head and "Bound pipe" in head and "Self CPU" not in head
    assert "Self CPU time total" not in text and "Self NPU time total" in text
    first = text.splitlines()[3].split()
    assert first[0] == max(ka, key=lambda r: r.device_cycles_total).key


def test_table_bad_sort_key(manual: P.profile) -> None:
    with pytest.raises(ValueError, match=r"sort_by must be one of .*device_time_total.*got 'gpu'"):
        manual.key_averages().table(sort_by="gpu")


def test_group_by_input_shape(manual: P.profile) -> None:
    rows = manual.key_averages(group_by_input_shape=True)
    lin = next(r for r in rows if r.key == "linear")
    assert lin.input_shapes == ((B, IN), (OUT, IN), (OUT,))
    assert "Input Shapes" in rows.table() and "[[8, 32], [16, 32], [16]]" in rows.table()
    with P.profile() as plain:
        pass
    with pytest.raises(RuntimeError, match="record_shapes=True"):
        plain.key_averages(group_by_input_shape=True)


# -------------------------------------------------------------------------------------------
# nesting, direct launches, threads, errors


def test_nested_ops_self_and_total() -> None:
    x = torch.randn(4, 64)

    def outer_fn(v: torch.Tensor) -> torch.Tensor:
        y = L.relu(v)                                   # outer's own kernel
        return _op("sigmoid", L.sigmoid, y)             # a registered op inside

    _op("outer", outer_fn, x)
    with P.profile() as prof:
        _op("outer", outer_fn, x)
        _op("outer", outer_fn, x)
    rows = {r.key: r for r in prof.key_averages()}
    assert set(rows) == {"outer", "sigmoid"}
    outer, sig = rows["outer"], rows["sigmoid"]
    assert outer.count == 2 and sig.count == 2
    assert outer.kernels == Counter({"unary_kernel": 2}) and sig.kernel_count == 2
    assert outer.device_cycles_total == outer.self_device_cycles + sig.device_cycles_total
    assert outer.self_cpu_time_total < outer.cpu_time_total
    assert outer.self_cpu_time_total + sig.cpu_time_total == pytest.approx(outer.cpu_time_total)
    evs = prof.events()
    assert [e.name for e in evs] == ["outer", "sigmoid", "outer", "sigmoid"]
    assert evs[1].parent is evs[0] and evs[0].children == [evs[1]] and evs[1].depth == 1
    labels = [k.label for k in prof.kernels()]
    assert labels == ["outer/unary_kernel", "sigmoid/unary_kernel"] * 2
    assert prof.totals.op_calls == 4


def test_direct_launches_and_record_function() -> None:
    x = torch.randn(4, 64)
    L.exp(x)
    with P.profile() as prof:
        L.exp(x)                                        # not a registered op
        with P.record_function("my_block"):
            L.exp(x)                                    # owned by the range
            _op("relu", L.relu, x)
    rows = {r.key: r for r in prof.key_averages()}
    assert set(rows) == {"[kernel] unary_kernel", "my_block", "relu"}
    assert rows["[kernel] unary_kernel"].is_kernel and rows["[kernel] unary_kernel"].count == 1
    assert rows["my_block"].is_user_annotation and rows["my_block"].kernel_count == 1
    assert rows["my_block"].device_cycles_total == (rows["my_block"].self_device_cycles
                                                    + rows["relu"].device_cycles_total)
    assert [k.label for k in prof.kernels()] == [
        "unary_kernel", "my_block/unary_kernel", "relu/unary_kernel"]
    assert prof.totals.op_calls == 1


def test_op_on_another_thread_joins_the_stream(tmp_path: Path) -> None:
    x = torch.randn(4, 64)
    _op("relu", L.relu, x)

    def worker() -> None:
        _op("sigmoid", L.sigmoid, x)

    with P.profile() as prof:
        _op("relu", L.relu, x)
        th = threading.Thread(target=worker, name="autograd-worker")
        th.start()
        th.join()
        _op("relu", L.relu, x)
    assert [k.label for k in prof.kernels()] == ["relu/unary_kernel", "sigmoid/unary_kernel",
                                                 "relu/unary_kernel"]
    assert {e.thread_name for e in prof.events()} == {threading.current_thread().name,
                                                     "autograd-worker"}
    prof.export_chrome_trace(tmp_path / "t.json", instructions=False)
    ev = _load(tmp_path / "t.json")["traceEvents"]
    tracks = {e["args"]["name"] for e in ev if e["name"] == "thread_name" and e["pid"] == 1}
    assert tracks == {"stream 0 kernels", f"ops ({threading.current_thread().name})", "ops (autograd-worker)"}
    assert _nesting_ok(ev) == []


def test_failing_op_is_recorded_and_profiling_goes_on() -> None:
    def bad(v: torch.Tensor) -> None:
        L.relu(v)
        raise RuntimeError("kernel failed")

    x = torch.randn(4, 64)
    with P.profile() as prof:
        with pytest.raises(RuntimeError, match="kernel failed"):
            _op("bad", bad, x)
        _op("relu", L.relu, x)
    assert [e.name for e in prof.events()] == ["bad", "relu"]
    assert prof.events()[1].depth == 0
    assert [k.label for k in prof.kernels()] == ["bad/unary_kernel", "relu/unary_kernel"]


def test_no_profile_no_recording() -> None:
    assert P._ACTIVE == []
    x = torch.randn(4, 64)
    with record() as rec:
        y = P._run_profiled("relu", L.relu, (x,), {})
    assert rec.kernels() == ["unary_kernel"]     # just the call, no extra events anywhere
    torch.testing.assert_close(y, torch.relu(x))
    with P.record_function("nothing"):
        pass


def test_lifecycle_errors() -> None:
    prof = P.profile()
    with pytest.raises(RuntimeError, match="key_averages.*after the"):
        prof.key_averages()
    with pytest.raises(RuntimeError, match="not running"):
        prof.stop()
    prof.start()
    try:
        assert P._ACTIVE == [prof]
        with pytest.raises(RuntimeError, match="already running"):
            prof.start()
        with pytest.raises(RuntimeError, match="totals.*after the"):
            _ = prof.totals
    finally:
        prof.stop()
    assert P._ACTIVE == []
    assert prof.totals.kernels == 0 and prof.key_averages() == []
    assert "0 kernels" in prof.table()


# -------------------------------------------------------------------------------------------
# the Chrome trace


def _load(path: Path) -> dict[str, Any]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            return json.load(f)
    return json.loads(path.read_text())


def test_chrome_trace(manual: P.profile, tmp_path: Path) -> None:
    path = tmp_path / "step.json"
    manual.export_chrome_trace(path)
    doc = _load(path)
    ev = doc["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in ev if e["ph"] == "M"
             and e["name"] in ("process_name", "thread_name")}
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert procs[0].startswith("host") and procs[1].startswith("npu stream")
    cores = sorted(p - 100 for p in procs if p >= 100)
    assert cores and all(procs[100 + c] == f"npu core {c}" for c in cores)
    pipes = {names[k] for k in names if k[0] >= 100 and e_is_thread(ev, k)}
    assert {"V", "M", "MTE2", "MTE3"} <= pipes

    host = [e for e in ev if e["ph"] == "X" and e["pid"] == 0]
    assert [e["name"] for e in host] == [e.name for e in manual.events()]
    kern = [e for e in ev if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == 1]
    assert [e["name"] for e in kern] == [k.label for k in manual.kernels()]
    assert all(e["name"] == "linear/linear_kernel" for e in kern[:1])
    # the kernels are back to back on the stream (whole nanoseconds)
    for a, b in zip(kern, kern[1:]):
        assert round((a["ts"] + a["dur"]) * 1000) == round(b["ts"] * 1000)
    # every launch has its op/kernel slice on each core track it used, instructions inside
    on_cores = Counter(e["name"] for e in ev if e["ph"] == "X" and e["pid"] >= 100
                       and e["cat"] == "kernel")
    for k in manual.kernels():
        assert on_cores[k.label] >= 1
    instrs = {e["name"] for e in ev if e["ph"] == "X" and e["pid"] >= 100 and e["cat"] != "kernel"}
    assert "MMAD" in instrs and any(n.startswith("COPY_GM") for n in instrs)
    # flows come in start/finish pairs with unique ids
    flows = Counter((e["id"], e["ph"]) for e in ev if e["ph"] in "sf")
    assert flows and all(n == 1 for n in flows.values())
    assert {i for i, _ in flows} == {i for i, ph in flows if ph == "s"} == {
        i for i, ph in flows if ph == "f"}
    assert _nesting_ok(ev) == []
    other = doc["otherData"]
    assert other["device_cycles"] == manual.totals.device_cycles
    assert set(other["pipe_utilization"]) == set(manual.totals.pipe_utilization)


def e_is_thread(ev: list[dict[str, Any]], key: tuple[int, Any]) -> bool:
    return any(e["name"] == "thread_name" and (e["pid"], e["tid"]) == key for e in ev)


def test_chrome_trace_kernels_only_gz(manual: P.profile, tmp_path: Path) -> None:
    path = tmp_path / "step.json.gz"
    manual.export_chrome_trace(path, instructions=False)
    ev = _load(path)["traceEvents"]
    on_cores = [e for e in ev if e["ph"] == "X" and e["pid"] >= 100]
    assert on_cores and all(e["cat"] == "kernel" for e in on_cores)
    assert _nesting_ok(ev) == []


# -------------------------------------------------------------------------------------------
# the registered ops (torch.ops.npu.*, autograd)


def _npu_ops() -> bool:
    import torch_bridge  # noqa: F401  (registers torch.ops.npu.*)

    try:
        return hasattr(torch.ops.npu, "softmax")
    except (AttributeError, RuntimeError):
        return False


def test_training_step_on_torch_ops_npu(tmp_path: Path) -> None:
    assert _npu_ops(), "import torch_bridge must register torch.ops.npu.*"
    x, w, b, t = _inputs()
    w.requires_grad_(True)
    b.requires_grad_(True)

    def step() -> None:
        h = torch.ops.npu.linear(x, w, b)
        loss = torch.ops.npu.cross_entropy(torch.ops.npu.relu(h), t)
        loss.backward()

    step()
    with P.profile() as prof:
        with P.record_function("forward"):
            h = torch.ops.npu.linear(x, w, b)
            loss = torch.ops.npu.cross_entropy(torch.ops.npu.relu(h), t)
        loss.backward()
    rows = {r.key.removeprefix("npu::"): r for r in prof.key_averages()}
    fwd = rows.pop("forward")
    assert fwd.is_user_annotation and fwd.kernel_count == 0
    assert fwd.device_cycles_total == sum(rows[n].device_cycles_total
                                          for n in ("linear", "relu", "cross_entropy"))
    assert fwd.cpu_time_total > sum(rows[n].cpu_time_total for n in ("linear", "relu", "cross_entropy"))
    for name in ("linear", "relu", "cross_entropy", "linear_backward", "relu_backward",
                 "cross_entropy_backward"):
        assert rows[name].count == 1, (name, sorted(rows))
        assert rows[name].kernel_count >= 1
    assert not [k for k in rows if k.startswith("[kernel]")]
    t_ = prof.totals
    assert sum(r.self_device_time_total for r in rows.values()) == pytest.approx(t_.device_seconds * 1e6)
    assert sum(r.self_device_cycles for r in rows.values()) == t_.device_cycles
    path = tmp_path / "step.json"
    prof.export_chrome_trace(path)
    ev = _load(path)["traceEvents"]
    kern = [e["name"] for e in ev if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == 1]
    assert kern == [k.label for k in prof.kernels()]
    assert any(n.split("/")[0].endswith("linear_backward") for n in kern)
    assert _nesting_ok(ev) == []
