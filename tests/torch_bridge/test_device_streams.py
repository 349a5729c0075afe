"""Streams and events of the npu device in simulated time (torch_bridge/device/streams.py).

The expected times come from the timing model itself: a kernel's cycles under a full `dsl.record()`
are what an event pair around it must report, and the overlap rules (blocks on the soonest-free core,
in order per stream) give exact expectations for kernels whose work sits on one core.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import dsl
import torch_bridge  # noqa: F401  (registers the npu device)
from torch_bridge.device import memory as _mem
from torch_bridge.device import streams as S

HZ = _mem._hw().clock_mhz * 1e6


def _cycles(fn):
    """The kernels' cycles of fn() on the timing model (a full trace, not the timed cache)."""
    with dsl.record() as rec:
        out = fn()
    return rec.cycles, [r for _, r in rec.runs], out


def _ms(cycles: int) -> float:
    return cycles / HZ * 1e3


def _sync_all(*streams):
    """Make the current stream and `streams` start from the same point (as a benchmark would)."""
    cur = torch.npu.current_stream()
    for s in streams:
        cur.wait_stream(s)
    for s in streams:
        s.wait_stream(cur)


def test_stream_api_shapes():
    s = torch.npu.Stream()
    assert isinstance(s, torch.Stream) and s.device == torch.device("npu", 0)
    assert torch.npu.default_stream().npu_stream == 0 and s.npu_stream != 0
    assert torch.npu.current_stream() == torch.npu.default_stream()
    with torch.npu.stream(s) as got:
        assert got is s and torch.npu.current_stream() == s
    assert torch.npu.current_stream() == torch.npu.default_stream()
    with torch.npu.stream(None):
        assert torch.npu.current_stream() == torch.npu.default_stream()
    torch.npu.set_stream(s)
    try:
        assert torch.npu.current_stream() == s
    finally:
        torch.npu.set_stream(torch.npu.default_stream())
    assert s.query() and s.record_event().query()
    assert "npu_stream=" in repr(s) and isinstance(torch.npu.Event(), torch.Event)


def test_elapsed_time_is_the_kernels_cycles():
    x = torch.randn(256, 384, device="npu")
    w = torch.randn(384, 128, device="npu")
    cycles, runs, ref = _cycles(lambda: x @ w)
    assert cycles > 0
    a, b = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    a.record()
    y = x @ w
    b.record()
    assert a.elapsed_time(b) == pytest.approx(_ms(cycles), rel=1e-9)
    torch.testing.assert_close(y.cpu(), ref.cpu(), rtol=0, atol=0)
    # three on one stream: back to back
    a.record()
    for _ in range(3):
        x @ w
    b.record()
    assert a.elapsed_time(b) == pytest.approx(3 * _ms(cycles), rel=1e-9)


def test_two_streams_overlap_where_cores_are_free():
    x = torch.randn(4096, device="npu")
    cycles, runs, _ = _cycles(lambda: torch.exp(x))
    blocks = sorted((c.end_cycle - c.start_cycle for c in runs[0].profile.per_core), reverse=True)
    assert len(runs) == 1 and blocks[0] == cycles and blocks[1] < cycles   # one long block
    s1, s2 = torch.npu.Stream(), torch.npu.Stream()
    a, b = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)

    def run(streams):
        _sync_all(s1, s2)
        a.record()
        for i in range(8):
            with torch.npu.stream(streams[i % len(streams)]):
                torch.exp(x)
        _sync_all(s1, s2)
        b.record()
        return a.elapsed_time(b)

    one, two = run([s1]), run([s1, s2])
    assert one == pytest.approx(_ms(8 * cycles), rel=1e-9)
    # 4 per stream side by side; the short blocks of both streams share the other cores
    assert _ms(4 * cycles) <= two <= _ms(4 * cycles + 8 * blocks[1]) < 0.6 * one
    assert S._device(0).latest >= S._device(0).clock[s1.stream_id]


def test_full_device_kernels_do_not_overlap():
    """A kernel whose blocks fill every core leaves nothing for another stream's kernel."""
    x = torch.randn(1024, 1024, device="npu")
    cycles, runs, _ = _cycles(lambda: x + x)
    per = [c.end_cycle - c.start_cycle for c in runs[0].profile.per_core]
    assert len(per) == _mem._hw().cores and min(per) > 0.5 * max(per)
    s1, s2 = torch.npu.Stream(), torch.npu.Stream()
    _sync_all(s1, s2)
    a, b = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    a.record()
    with torch.npu.stream(s1):
        x + x
    with torch.npu.stream(s2):
        x + x
    _sync_all(s1, s2)
    b.record()
    assert a.elapsed_time(b) > _ms(int(1.5 * cycles))


def test_wait_event_orders_streams():
    x = torch.randn(4096, device="npu")
    cycles, _, _ = _cycles(lambda: torch.exp(x))
    s1, s2 = torch.npu.Stream(), torch.npu.Stream()
    _sync_all(s1, s2)
    start = torch.npu.Event(enable_timing=True)
    start.record(s1)
    with torch.npu.stream(s1):
        for _ in range(3):
            torch.exp(x)
        done = torch.npu.Event(enable_timing=True)
        done.record()
    s2.wait_event(done)
    with torch.npu.stream(s2):
        torch.exp(x)
    end = s2.record_event(torch.npu.Event(enable_timing=True))
    assert start.elapsed_time(done) == pytest.approx(_ms(3 * cycles), rel=1e-9)
    assert start.elapsed_time(end) == pytest.approx(_ms(4 * cycles), rel=1e-9)
    # an event never recorded is nothing to wait for; waiting is idempotent
    before = s2._clock
    s2.wait_event(torch.npu.Event())
    s2.wait_event(done)
    assert s2._clock == before


def test_copies_take_stream_time():
    h = torch.randn(1024, 1024)
    a, b = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    a.record()
    d = h.to("npu")
    b.record()
    nbytes = h.numel() * 4
    assert a.elapsed_time(b) == pytest.approx(nbytes / 32e9 * 1e3, rel=1e-3)
    a.record()
    back = d.cpu()
    b.record()
    assert a.elapsed_time(b) == pytest.approx(nbytes / 32e9 * 1e3, rel=1e-3)
    assert torch.equal(back, h)


def test_event_errors():
    a, b = torch.npu.Event(), torch.npu.Event()
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)
    t1, t2 = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    t1.record()
    with pytest.raises(ValueError, match="Both events must be recorded"):
        t1.elapsed_time(t2)
    with pytest.raises(RuntimeError, match="interprocess"):
        torch.npu.Event(interprocess=True)
    with pytest.raises(TypeError, match="torch.npu.Stream"):
        torch.npu.stream("npu:0")
    with pytest.raises(RuntimeError, match="Invalid device ordinal npu:7"):
        torch.npu.Stream(device=7)
    t2.record()
    with S._untimed(), pytest.raises(RuntimeError, match="VINCI_NPU_TIMING=0"):
        t1.elapsed_time(t2)


def test_untimed_ops_leave_the_clock_alone():
    x = torch.randn(4096, device="npu")
    s = torch.npu.current_stream()
    before = s._clock
    with S._untimed():
        y = torch.exp(x)
    assert s._clock == before
    torch.testing.assert_close(y.cpu(), torch.exp(x.cpu()))


def test_allocator_pools_blocks_per_stream():
    s1 = torch.npu.Stream()
    with torch.npu.stream(s1):
        t = torch.empty(3000, device="npu")
        p1 = t.data_ptr()
        del t
        again = torch.empty(3000, device="npu")
        assert again.data_ptr() == p1          # reused on its own stream
        del again
    other = torch.empty(3000, device="npu")    # the default stream does not see s1's free block
    assert other.data_ptr() != p1


def test_record_stream_delays_reuse_to_the_other_streams_work():
    x = torch.randn(4096, device="npu")
    cycles, _, _ = _cycles(lambda: torch.exp(x))
    side = torch.npu.Stream()
    _sync_all(side)
    t = torch.empty(5000, device="npu")      # allocated on the default stream
    ptr = t.data_ptr()
    with torch.npu.stream(side):
        for _ in range(5):
            torch.exp(x)
        t.record_stream(side)
    side_end = side._clock
    del t
    cur = torch.npu.current_stream()
    assert cur._clock < side_end
    t2 = torch.empty(5000, device="npu")     # the same block: waits for side's work
    assert t2.data_ptr() == ptr
    assert cur._clock == side_end


def test_results_do_not_depend_on_streams():
    torch.manual_seed(0)
    x = torch.randn(64, 32, device="npu")
    w = torch.randn(32, 16, device="npu")
    ref = torch.softmax(x @ w, -1).cpu()
    s = torch.npu.Stream()
    with torch.npu.stream(s):
        y = torch.softmax(x @ w, -1)
    torch.npu.current_stream().wait_stream(s)
    assert torch.equal(y.cpu(), ref)


def test_streams_on_two_devices():
    """Events and record_stream refuse a stream of another device; each device has its own clock."""
    code = textwrap.dedent("""
        import torch, torch_bridge
        s0, s1 = torch.npu.Stream(0), torch.npu.Stream(1)
        with torch.npu.stream(s1):
            assert torch.npu.current_device() == 1 and torch.npu.current_stream() == s1
            y = torch.randn(4096, device="npu").exp()
            assert y.device == torch.device("npu", 1)
        assert torch.npu.current_device() == 0 and torch.npu.current_stream(1) == torch.npu.default_stream(1)
        assert s1._clock > 0 and s0._clock == 0
        e = torch.npu.Event()
        e.record(s0)
        try:
            e.record(s1)
        except RuntimeError as err:
            assert "does not match recording stream's device" in str(err), err
        else:
            raise AssertionError("recorded on two devices")
        t = torch.ones(10, device="npu:0")
        try:
            t.record_stream(s1)
        except RuntimeError as err:
            assert "stream of its own device" in str(err), err
        else:
            raise AssertionError("record_stream took another device's stream")
        assert torch.equal(t.cpu(), torch.ones(10))
        print("ok")
    """)
    env = dict(os.environ, VINCI_NPU_DEVICES="2")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_profile_places_kernels_on_their_streams(tmp_path):
    """torch_bridge.profile's trace puts npu kernels where the stream timeline ran them."""
    import json

    x = torch.randn(4096, device="npu")
    torch.exp(x)
    s1, s2 = torch.npu.Stream(), torch.npu.Stream()
    _sync_all(s1, s2)
    with torch_bridge.profile() as prof:
        for i in range(4):
            with torch.npu.stream(s1 if i % 2 == 0 else s2):
                torch.exp(x)
    ks = prof.kernels()
    assert [k.stream for k in ks] == [s1.stream_id, s2.stream_id] * 2
    assert ks[1].start_ns < ks[0].end_ns            # the two streams overlap
    assert ks[2].start_ns >= ks[0].end_ns           # one stream runs in order
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path), instructions=False)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert {f"stream {s1.stream_id} kernels", f"stream {s2.stream_id} kernels"} <= names
