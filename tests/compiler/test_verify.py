"""Every stage's output passes the verifier, for every example and op-library kernel; broken IR fails it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.frontend.lower import lower
from compiler.ir import Flag, For
from compiler.passes import verify as V
from compiler.pipeline import stages
from simulator.config import load_config
from simulator.isa import Pipe


def kernels():  # type: ignore[no-untyped-def]
    import importlib

    import layer_norm
    import matmul as mm_example
    import softmax
    import swish
    import vadd

    L = importlib.import_module("op_library.matmul")  # the module (the package re-exports a function of that name)

    f32 = np.zeros((64, 96), np.float32)
    f16 = f32.astype(np.float16)
    return [
        (vadd.vadd, (f32[0], f32[0], f32[0])),
        (swish.swish_backward, (f32[0], f32[0], f32[0])),
        (softmax.softmax, (f32, f32)),
        (layer_norm.layer_norm, (f32, f32[0], f32[0], f32)),
        (mm_example.matmul, (f16, f16.T.copy(), f32[:, :64].copy())),
        (L.linear_kernel, (f32, f32, f32[0], f32[:, :64].copy())),
        (L.bmm_kernel, (f16[None], f16.T.copy()[None], np.zeros((1, 64, 64), np.float16))),
    ]


@pytest.mark.parametrize("i", range(7))
def test_every_stage_verifies(i: int) -> None:
    k, args = kernels()[i]
    cfg = load_config()
    values, infos = k.bind(args, {})
    params, _ = k.params_for(values, infos)
    ir = lower(k.fdef, k.env, params, k.options)
    V.verify(ir, "tile", cfg)
    for name, fn in stages():
        ir = fn(ir, cfg)
        V.verify(ir, name, cfg)


def _core(i: int = 0):  # type: ignore[no-untyped-def]
    k, args = kernels()[i]
    cfg = load_config()
    values, infos = k.bind(args, {})
    params, _ = k.params_for(values, infos)
    ir = lower(k.fdef, k.env, params, k.options)
    for _, fn in stages():
        ir = fn(ir, cfg)
    return ir, cfg


def test_dropping_a_wait_is_caught() -> None:
    ir, cfg = _core()
    loop = next(s for s in ir.body if isinstance(s, For))
    body = tuple(s for j, s in enumerate(loop.body) if not (isinstance(s, Flag) and s.wait and j == 0))
    broken = dataclasses.replace(ir, body=tuple(dataclasses.replace(s, body=body) if s is loop else s
                                                for s in ir.body))
    with pytest.raises(V.VerifyError, match="unbalanced flags"):
        V.verify(broken, "insert_sync", cfg)


def test_bad_event_id_and_self_flag_are_caught() -> None:
    from compiler import sexpr as S

    ir, cfg = _core()
    bad = dataclasses.replace(ir, body=(Flag(False, Pipe.V, Pipe.MTE2, S.const(9)),
                                        Flag(True, Pipe.V, Pipe.MTE2, S.const(9))) + ir.body)
    with pytest.raises(V.VerifyError, match="event id 9"):
        V.verify(bad, "insert_sync", cfg)


def test_missing_placement_is_caught() -> None:
    ir, cfg = _core()
    with pytest.raises(V.VerifyError, match="has no placement"):
        V.verify(dataclasses.replace(ir, placement={}), "place_buffers", cfg)
