"""Slots never rotate in a loop that carries a buffer's value from one iteration to the next.

A buffer with two slots takes slot `it % 2`: an iteration that reads what an earlier one wrote (the
write is conditional, comes after the read, or is an accumulator stored every step) would read the
other slot. Explicit `dsl.alloc(..., buffers=2)` buffers like that are E211; inferred tiles keep one
slot in that loop. Each kernel runs natively and in the reference interpreter against torch.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

import dsl
from dsl import GM, Const, f32
from tests.compiler.test_errors import expect
from tests.compiler.test_interpret import both, same, same_runs

rows = 1 + np.arange(8 * 16, dtype=np.float32).reshape(8, 16)


def every_other(x: np.ndarray) -> np.ndarray:
    """Each odd row repeats the even row before it."""
    return np.repeat(x[::2], 2, axis=0)


def slots_of(core: str, name: str) -> int:
    """The slot count of buffer `name` in a core dump (`buffer %name.N: ... (64 B x2, ...)`)."""
    line = next(ln for ln in core.splitlines() if ln.strip().startswith(f"buffer %{name}."))
    return int(line.split(" B x")[1].split(",")[0]) if " B x" in line else 1


# ------------------------------------------------------------------ explicit buffers
@dsl.kernel
def fill_every_other(x: GM, y: GM, NB: Const[int] = 2):
    buf = dsl.alloc(dsl.UB, (16,), x.dtype, buffers=NB)
    for i in dsl.range(x.shape[0]):
        if i % 2 == 0:
            dsl.copy(buf, x[i, :])
        dsl.copy(y[i, :], buf)      # odd rows repeat the even row before them


def line_of(text: str) -> int:
    """The line of this file that holds `text` (the first one)."""
    return next(n for n, ln in enumerate(Path(__file__).read_text().splitlines(), 1) if text in ln)


def test_conditional_write_with_two_slots_is_e211() -> None:
    y = np.zeros_like(rows)
    loop, read = line_of("    for i in dsl.range(x.shape[0]):"), line_of("dsl.copy(y[i, :], buf)      # odd rows")
    text = expect(lambda: fill_every_other[1](rows, y), "E211",
                  f"buffer 'buf' has buffers=2, but the loop at line {loop} reads in one iteration what an earlier "
                  "one wrote into it", caret_under="dsl.alloc(dsl.UB",
                  hint="the buffer carries a value from one iteration to the next, so its slots cannot alternate: "
                       "use buffers=1")
    assert f"note: line {read} reads it before that iteration has written it" in text
    assert not y.any()  # nothing ran


def test_conditional_write_with_one_slot_is_right() -> None:
    na, ia, nr, ir = both(fill_every_other[1], [rows, np.zeros_like(rows)], profile=True, NB=1)
    np.testing.assert_array_equal(na[1], every_other(rows))
    same(na[1], ia[1])
    same_runs(nr, ir)
    assert na[1][:4, 0].tolist() == [1, 1, 33, 33]


@dsl.kernel
def delay_by_one(x: GM, y: GM, NB: Const[int] = 2):
    buf = dsl.alloc(dsl.UB, (16,), x.dtype, buffers=NB)
    for i in dsl.range(x.shape[0] + 1):
        if i > 0:
            dsl.copy(y[i - 1, :], buf)  # the row loaded by the previous iteration
        if i < x.shape[0]:
            dsl.copy(buf, x[i, :])


def test_read_before_write_with_two_slots_is_e211() -> None:
    expect(lambda: delay_by_one[1](rows, np.zeros_like(rows)), "E211", "buffer 'buf' has buffers=2",
           caret_under="dsl.alloc", hint="use buffers=1")
    na, ia, _, _ = both(delay_by_one[1], [rows, np.zeros_like(rows)], NB=1)
    np.testing.assert_array_equal(na[1], rows)
    same(na[1], ia[1])


@dsl.kernel
def load_before_loop(x: GM, y: GM):
    buf = dsl.alloc(dsl.UB, (16,), x.dtype, buffers=2)
    dsl.copy(buf, x[0, :])
    for i in dsl.range(1, x.shape[0]):
        dsl.copy(y[i, :], buf)      # the row loaded by the previous iteration
        dsl.copy(buf, x[i, :])


def test_buffer_used_before_the_loop_has_no_slots_to_rotate() -> None:
    """Touched outside the loop, the buffer never alternated (one slot): right, and no error."""
    y = np.zeros_like(rows)
    na, ia, _, _ = both(load_before_loop[1], [rows, y])
    want = np.concatenate([np.zeros_like(rows[:1]), rows[:-1]])
    np.testing.assert_array_equal(na[1], want)
    same(na[1], ia[1])
    assert slots_of(load_before_loop.emit("core", rows, y), "buf") == 1


@dsl.kernel
def fill_in_inner(x: GM, y: GM, m: int, M: Const[int] = 0):
    buf = dsl.alloc(dsl.UB, (16,), x.dtype, buffers=2)
    for i in dsl.range(x.shape[0]):
        if M > 0:
            for _j in dsl.range(M):         # runs M times for certain
                dsl.copy(buf, x[i, :])
        else:
            for _j in dsl.range(m):         # may run no times: then buf holds the last iteration's row
                dsl.copy(buf, x[i, :])
        dsl.copy(y[i, :], buf)


def test_write_in_a_loop_that_may_not_run_is_e211() -> None:
    expect(lambda: fill_in_inner[1](rows, np.zeros_like(rows), 1), "E211", "buffer 'buf' has buffers=2")


def test_write_in_a_loop_that_runs_keeps_two_slots() -> None:
    y = np.zeros_like(rows)
    na, ia, nr, ir = both(fill_in_inner[1], [rows, y, 1], profile=True, M=2)
    np.testing.assert_array_equal(na[1], rows)
    same(na[1], ia[1])
    same_runs(nr, ir)
    assert slots_of(fill_in_inner.emit("core", rows, y, 1, M=2), "buf") == 2


@dsl.kernel
def write_then_read_in_branch(x: GM, y: GM):
    buf = dsl.alloc(dsl.UB, (16,), x.dtype, buffers=2)
    for i in dsl.range(x.shape[0]):
        if i % 2 == 0:
            dsl.copy(buf, x[i, :])
            dsl.copy(y[i, :], buf)   # read only after this iteration's own write


def test_write_before_read_keeps_two_slots() -> None:
    y = np.zeros_like(rows)
    na, ia, nr, ir = both(write_then_read_in_branch[1], [rows, y], profile=True)
    want = np.zeros_like(rows)
    want[::2] = rows[::2]
    np.testing.assert_array_equal(na[1], want)
    same(na[1], ia[1])
    same_runs(nr, ir)
    assert slots_of(write_then_read_in_branch.emit("core", rows, y), "buf") == 2


# ------------------------------------------------------------------ inferred tiles
@dsl.kernel
def acc_every_step(a: GM, b: GM, c: GM, BK: Const[int] = 32):
    acc = dsl.zeros((a.shape[0], b.shape[1]), f32)
    for k in dsl.range(0, a.shape[1], BK):
        acc += a[:, k] @ b[k, :]
        c[k // BK, :, :] = acc      # every partial product: acc carries into the next k


def test_accumulator_stored_every_step_keeps_one_slot() -> None:
    g = np.random.default_rng(3)
    a = g.standard_normal((16, 128)).astype(np.float32)
    b = g.standard_normal((128, 32)).astype(np.float32)
    c = np.zeros((4, 16, 32), np.float32)
    na, ia, nr, ir = both(acc_every_step[1], [a, b, c], profile=True)
    want = np.stack([a[:, :32 * (i + 1)] @ b[:32 * (i + 1)] for i in range(4)])
    np.testing.assert_allclose(na[2], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ia[2], want, rtol=1e-4, atol=1e-4)
    same_runs(nr, ir)
    core = acc_every_step.emit("core", a, b, c)
    assert slots_of(core, "acc") == 1
    assert slots_of(core, "a1") == 2 and slots_of(core, "b1") == 2  # the operands still alternate


def test_accumulator_of_a_block_loop_keeps_two_slots() -> None:
    """The usual matmul: acc starts at dsl.zeros in each output block and is stored after its k loop."""
    matmul = importlib.import_module("matmul").matmul
    a = np.zeros((256, 64), np.float16)
    b = np.zeros((64, 256), np.float16)
    c = np.zeros((256, 256), np.float16)
    assert slots_of(matmul.emit("core", a, b, c), "acc") == 2


@dsl.kernel
def keep_tile(x: GM, y: GM):
    t = x[0, :]
    for i in dsl.range(x.shape[0]):
        if i % 2 == 0:
            t = x[i, :]             # conditionally re-assigned from GM
        y[i, :] = t                 # stored every iteration


@dsl.kernel
def keep_tile_late(x: GM, y: GM):
    t = x[0, :]
    for i in dsl.range(x.shape[0]):
        y[i, :] = t                 # the row the previous iteration loaded
        t = x[i, :]


@dsl.kernel
def keep_block(x: GM, y: GM, T: Const[int] = 4):
    t = x[0:T, :]
    for r in dsl.tiles(x.shape[0], T):
        if r.start % (2 * T) == 0:
            t = x[r, :]
        y[r, :] = t                 # the second block of each pair repeats the first


@dsl.kernel
def running_sum(x: GM, y: GM, T: Const[int] = 16):
    s = dsl.zeros((T,), f32)
    for t in dsl.tiles(x.shape[0], T):
        s = s + x[t]
        y[t] = s


@pytest.mark.parametrize("kernel, want", [
    (keep_tile, every_other(rows)),
    (keep_tile_late, np.concatenate([rows[:1], rows[:-1]])),
    (keep_block, np.concatenate([rows[:4], rows[:4]])),
    (running_sum, rows.reshape(-1, 16).cumsum(0).reshape(rows.shape)),
])
def test_inferred_tiles_carried_across_iterations(kernel, want: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    x = rows.reshape(-1) if kernel is running_sum else rows
    na, ia, nr, ir = both(kernel[1], [x, np.zeros_like(x)], profile=True)
    np.testing.assert_allclose(na[1].reshape(want.shape), want, rtol=1e-6)
    same(na[1], ia[1])
    same_runs(nr, ir)


def test_torch_tensors_see_the_same() -> None:
    x = torch.from_numpy(rows.copy())
    y = torch.zeros_like(x)
    keep_tile[1](x, y)
    assert y[:4, 0].tolist() == [1, 1, 33, 33]
