"""torch_npu tutorial, part 4: two streams, events, elapsed_time.

Time here is the simulated device's: each op's kernels are timed on the model of the core and
placed on their stream; kernels on two streams overlap where the AI cores are free.
Run: python examples/npu/streams_events.py
"""
import torch

import torch_bridge  # noqa: F401

x = torch.randn(8192, device="npu")          # small ops: a few cores each
big = torch.randn(1024, 1024, device="npu")  # matmuls that keep every core busy

s1, s2 = torch.npu.Stream(), torch.npu.Stream()
start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)


def timed(work) -> float:
    """Milliseconds of simulated device time of work(), from a point every stream has reached."""
    cur = torch.npu.current_stream()
    for s in (s1, s2):
        cur.wait_stream(s)      # everything queued so far is before `start`
    start.record()
    for s in (s1, s2):
        s.wait_stream(cur)      # and nothing below starts before it
    work()
    for s in (s1, s2):
        cur.wait_stream(s)
    end.record()
    return start.elapsed_time(end)


def one_stream() -> None:
    with torch.npu.stream(s1):
        for _ in range(8):
            torch.sigmoid(x)


def two_streams() -> None:
    for i in range(8):
        with torch.npu.stream(s1 if i % 2 == 0 else s2):
            torch.sigmoid(x)


def matmuls(streams) -> None:
    for i in range(4):
        with torch.npu.stream(streams[i % len(streams)]):
            big @ big


one_stream()   # the first call of each shape times its kernels
print(f"8 small ops, one stream : {timed(one_stream) * 1e3:8.2f} us")
print(f"8 small ops, two streams: {timed(two_streams) * 1e3:8.2f} us   (they overlap: cores are free)")
print(f"4 matmuls, one stream   : {timed(lambda: matmuls([s1])) * 1e3:8.2f} us")
print(f"4 matmuls, two streams  : {timed(lambda: matmuls([s1, s2])) * 1e3:8.2f} us   (cores busy: little to gain)")

# an event orders work across streams: s2 reads what s1 wrote
ready = torch.npu.Event()
with torch.npu.stream(s1):
    y = torch.relu(big)
    ready.record()
s2.wait_event(ready)
with torch.npu.stream(s2):
    z = y.sum()
torch.npu.current_stream().wait_stream(s2)
print("query:", ready.query(), " sum:", float(z.cpu()))
torch.npu.synchronize()
