"""torch.library.opcheck for every torch.ops.npu op (schema, autograd registration, fake kernel,
aot_dispatch_dynamic) on the smallest quick registry case, float32 for all and float16 / bfloat16 for
a handful; gradcheck in f64 of a few ops' references and of torch.ops.npu itself in f32 (loose eps)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_bridge  # noqa: F401
from tests.torch_bridge.samples import cases, extra_sample
from torch_bridge.schemas import SCHEMAS

UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
HALF_OPS = ("linear", "softmax", "layer_norm", "npu_rms_norm", "gelu", "add", "conv2d", "scaled_dot_product_attention",
            "cross_entropy", "npu_swiglu")
EXTRA = ("npu_apply_adam_w.out", "npu_fusion_attention_grad")


def _op(qual: str) -> torch._ops.OpOverload:
    name, _, ov = qual.partition(".")
    return getattr(getattr(torch.ops.npu, name), ov or "default")


def _float_dtype(qual: str) -> torch.dtype:
    return torch.float32


PARAMS = [(q, torch.float32) for q in SCHEMAS] + [(q, d) for q in HALF_OPS for d in (torch.float16, torch.bfloat16)]


@pytest.mark.parametrize("qual,dtype", PARAMS, ids=[f"{q}-{str(d)[6:]}" for q, d in PARAMS])
def test_opcheck(qual: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    if qual in EXTRA:
        args, kwargs = extra_sample(qual)
    else:
        found = cases(qual, dtype)
        if not found:   # ops of int dtypes only at this dtype never happen: every op takes f32
            found = cases(qual, torch.int32)
        assert found, f"no registry case fits npu::{qual}"
        args, kwargs = found[0]
    utils = UTILS
    if qual == "npu_apply_adam_w.out":
        # torch_npu's schema returns its mutated inputs (Tensor(a!) results): torch cannot functionalize a
        # custom op whose outputs alias inputs, so aot_dispatch does not apply (adamw_ is the traceable form)
        utils = UTILS[:3]
    torch.library.opcheck(_op(qual), args, kwargs, test_utils=utils)


def test_every_differentiable_op_has_a_backward_op() -> None:
    from op_library import registry
    from torch_bridge._autograd import ENTRY, EXTRA_BACKWARD, NO_AUTOGRAD
    for qual in SCHEMAS:
        spec = EXTRA_BACKWARD.get(qual) or registry.REGISTRY.get(ENTRY.get(qual, qual.split(".")[0]))
        if spec is None or spec.backward is None or qual in NO_AUTOGRAD:
            continue
        name, _, ov = qual.partition(".")
        assert hasattr(getattr(torch.ops.npu, f"{name}_backward"), ov or "default"), qual


# gradcheck in f64 of the reference where the kernels have no f64 (the registry's fd check proves
# every reference; these pin a few against torch's own ops)
@pytest.mark.parametrize("name", ["npu_rms_norm", "npu_swiglu", "npu_rotary_mul"])
def test_gradcheck_reference_f64(name: str) -> None:
    from op_library import registry
    spec = registry.get(name)
    args, kwargs = cases(name, torch.float32)[0]
    a64 = [t.double().requires_grad_(i in spec.grad_args) if isinstance(t, torch.Tensor) and t.is_floating_point()
           else t for i, t in enumerate(args)]

    def f(*xs: torch.Tensor) -> torch.Tensor:
        out = spec.ref(*xs, **kwargs)
        return out[0] if isinstance(out, tuple) else out
    assert torch.autograd.gradcheck(f, tuple(a64), eps=1e-6, atol=1e-5)


# gradcheck of torch.ops.npu itself through the kernels, in f32 with a loose eps
@pytest.mark.parametrize("case", ["softmax", "layer_norm", "linear", "gelu", "npu_rms_norm", "mse_loss"])
def test_gradcheck_kernels_f32(case: str) -> None:
    torch.manual_seed(0)
    npu = torch.ops.npu
    fns = {
        "softmax": (lambda x: npu.softmax(x, -1), (torch.randn(3, 7),)),
        "layer_norm": (lambda x, w, b: npu.layer_norm(x, [7], w, b), (torch.randn(3, 7), torch.randn(7),
                                                                       torch.randn(7))),
        "linear": (npu.linear, (torch.randn(3, 5), torch.randn(4, 5), torch.randn(4))),
        "gelu": (npu.gelu, (torch.randn(11),)),
        "npu_rms_norm": (lambda x, g: npu.npu_rms_norm(x, g)[0], (torch.randn(3, 7), torch.randn(7))),
        "mse_loss": (npu.mse_loss, (torch.randn(3, 7), torch.randn(3, 7))),
    }
    f, xs = fns[case]
    xs = tuple(x.requires_grad_() for x in xs)
    assert torch.autograd.gradcheck(f, xs, eps=1e-2, atol=2e-2, rtol=2e-2, fast_mode=True)


def test_gradcheck_reference_matches_torch_sdpa_f64() -> None:
    # the attention ops' reference in f64 is torch's own SDPA: its gradient checks out
    q, k, v = (torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c), (q, k, v))
