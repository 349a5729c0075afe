"""AMP on the npu device: torch.autocast("npu") casts as CUDA autocast does, GradScaler's two ops run
as DSL kernels and match torch's CPU kernels, and AMP training with GradScaler tracks CPU."""
from __future__ import annotations

import copy
import re
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dsl
import torch_bridge
from torch_bridge.device import amp

LOW = (torch.float16, torch.bfloat16)
TOL = {torch.float16: 2e-2, torch.bfloat16: 8e-2}


def npu(t: torch.Tensor) -> torch.Tensor:
    return t.to("npu")


# ------------------------------------------------------------------ the policy lists are torch's
def _header_lists() -> dict[str, set[str]]:
    """The AT_FORALL_* lists of the installed torch's autocast_mode.h, as "op" / "op.overload"."""
    text = (Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h").read_text()
    out = {}
    for macro in ("LOWER_PRECISION_FP", "FP32", "FP32_SET_OPT_DTYPE", "PROMOTE"):
        body = text.split(f"#define AT_FORALL_{macro}(_)", 1)[1].split("\n\n", 1)[0]
        out[macro] = {".".join(p.strip() for p in m.split(",")) for m in re.findall(r"_\(([^()]*)\)", body)}
    body = text.split("#define AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(_)", 1)[1].split("\n\n", 1)[0]
    out["FP32_APPEND_DTYPE"] = set(re.findall(r'"(norm\.\w+)"', body))
    return out


def test_policy_lists_are_torch_2_13s():
    lists = _header_lists()
    assert set(amp.LOWER_PRECISION_FP) == lists["LOWER_PRECISION_FP"]
    assert set(amp.FP32) == lists["FP32"]
    assert set(amp.FP32_SET_OPT_DTYPE) == lists["FP32_SET_OPT_DTYPE"]
    assert set(amp.FP32_APPEND_DTYPE) == lists["FP32_APPEND_DTYPE"]
    assert set(amp.PROMOTE) == lists["PROMOTE"]


def _registered(key: str) -> set[str]:
    names = set()
    for op in torch._C._dispatch_get_all_op_names():
        if op.startswith("aten::") and any(line.startswith(key + ":")
                                           for line in torch._C._dispatch_dump(op).splitlines()):
            names.add(op.removeprefix("aten::"))
    return names


def test_same_ops_as_autocast_cuda_and_fallthrough():
    """Every op torch registers for AutocastCUDA (but the cudnn-only convolutions) has an
    AutocastPrivateUse1 kernel, and nothing else; other ops fall through (torch 2.13 has no
    AutocastPrivateUse1 fallthrough of its own: `add` under npu autocast would raise)."""
    cuda = _registered("AutocastCUDA") - {"cudnn_convolution", "cudnn_convolution_transpose"}
    assert _registered("AutocastPrivateUse1") == cuda == set(amp.policies())
    x = npu(torch.randn(3))
    with torch.autocast("npu"):
        assert (x + x).dtype == torch.float32     # fallthrough: runs in the dtype it is given


# ------------------------------------------------------------------ which dtype each op runs in
@pytest.mark.parametrize("low", LOW)
def test_autocast_output_dtypes(low):
    torch.manual_seed(0)
    x = npu(torch.randn(4, 8))
    w = npu(torch.randn(5, 8))
    b3 = npu(torch.randn(2, 4, 8))
    img = npu(torch.randn(2, 3, 6, 6))
    conv = nn.Conv2d(3, 4, 3).to("npu")
    lin = nn.Linear(8, 5).to("npu")
    q = npu(torch.randn(1, 2, 4, 8))
    tgt = npu(torch.tensor([0, 1, 2, 3]))
    with torch.autocast("npu", dtype=low):
        assert torch.npu.is_autocast_enabled() and torch.npu.get_autocast_dtype() == low
        y = lin(x)
        lowered = {"linear": y, "matmul": x @ w.t(), "mm": torch.mm(x, w.t()), "addmm": torch.addmm(y, x, w.t()),
                   "bmm": torch.bmm(b3, b3.transpose(1, 2)), "baddbmm": torch.baddbmm(b3[:, :, :4], b3, b3[:, :4].transpose(1, 2)),
                   "conv2d": conv(img), "sdpa": F.scaled_dot_product_attention(q, q, q)}
        f32 = {"softmax": F.softmax(y, -1), "log_softmax": F.log_softmax(y, -1), "layer_norm": F.layer_norm(y, (5,)),
               "cross_entropy": F.cross_entropy(y, tgt), "mse_loss": F.mse_loss(y, y.detach() * 0.5),
               "sum": y.sum(), "sum_dim": y.sum(0), "exp": y.exp(), "log": y.abs().log(), "pow": y.pow(2),
               "rsqrt": y.abs().rsqrt(), "cumsum": y.cumsum(1), "norm.Scalar": torch.ops.aten.norm.Scalar(y, 2),
               "addcmul(promote)": torch.addcmul(y, x[:, :5], y)}
        kept = {"relu": F.relu(y), "add": y + y, "sum(dtype=low)": y.sum(dtype=low), "f32 relu": F.relu(x)}
        with torch.autocast("npu", enabled=False):
            off = lin(x)
    assert {k: v.dtype for k, v in lowered.items()} == {k: low for k in lowered}
    assert {k: v.dtype for k, v in f32.items()} == {k: torch.float32 for k in f32}
    assert [v.dtype for v in kept.values()] == [low, low, low, torch.float32]
    assert off.dtype == torch.float32 and not torch.npu.is_autocast_enabled()
    assert all(v.device.type == "npu" for v in (*lowered.values(), *f32.values()))


def test_binary_cross_entropy_is_banned_as_on_cuda():
    p = npu(torch.rand(4))
    with torch.autocast("npu"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, p)
    assert F.binary_cross_entropy_with_logits(p, p).dtype == torch.float32   # outside autocast: fine


def test_promote_rejects_mixed_low_dtypes():
    a, b = npu(torch.randn(3)).half(), npu(torch.randn(3)).bfloat16()
    with torch.autocast("npu", dtype=torch.float16), pytest.raises(RuntimeError, match="prioritize"):
        torch.addcmul(a, b, a)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8 * 6 * 6)
        self.fc = nn.Linear(8 * 6 * 6, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv(x)).flatten(1)
        return F.log_softmax(self.fc(self.norm(h)), -1)


@pytest.mark.parametrize("low", LOW)
def test_autocast_matches_cpu_autocast(low):
    """Forward and backward under npu autocast against CPU autocast of the same dtype."""
    torch.manual_seed(1)
    cpu = _Net()
    dev = copy.deepcopy(cpu).to("npu")
    x = torch.randn(4, 3, 6, 6)
    tgt = torch.randint(0, 10, (4,))
    outs = []
    for m, d in ((cpu, "cpu"), (dev, "npu")):
        with torch.autocast(d, dtype=low):
            y = m(x.to(d))
            loss = F.nll_loss(y, tgt.to(d))
        loss.backward()
        outs.append((y, loss, [p.grad for p in m.parameters()]))
    (yc, lc, gc), (yn, ln, gn) = outs
    assert yn.dtype == torch.float32 and ln.dtype == torch.float32   # log_softmax / nll_loss in f32
    torch.testing.assert_close(yn.cpu(), yc.float(), atol=TOL[low], rtol=TOL[low])
    torch.testing.assert_close(ln.cpu(), lc.float(), atol=TOL[low], rtol=TOL[low])
    for a, b in zip(gn, gc, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.cpu(), b, atol=TOL[low], rtol=TOL[low])


# ------------------------------------------------------------------ GradScaler's ops
def _grads(dtype: torch.dtype, special: float | None) -> list[torch.Tensor]:
    torch.manual_seed(2)
    g = torch.randn(300, 7) * 1000
    if special is not None:
        g[123, 4] = special
    return [g.to(dtype), torch.randn(33).to(dtype), torch.randn(6, 5).to(dtype).t(), torch.empty(0, dtype=dtype)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("special", [None, float("inf"), float("-inf"), float("nan")])
def test_unscale_matches_cpu(dtype, special):
    cpu = _grads(dtype, special)
    dev = [npu(t) for t in cpu]
    dev[2] = npu(cpu[2].t().contiguous()).t()          # a transposed (dense, non-contiguous) grad
    for found0 in (0.0, 1.0):
        c, d = [t.clone() for t in cpu], [t.clone() for t in dev]
        fc, fd = torch.tensor(found0), npu(torch.tensor(found0))
        torch._amp_foreach_non_finite_check_and_unscale_(c, fc, torch.tensor(1 / 1024))
        with dsl.record() as rec:
            torch._amp_foreach_non_finite_check_and_unscale_(d, fd, npu(torch.tensor(1 / 1024)))
        assert fd.item() == fc.item() == (1.0 if special is not None or found0 else 0.0)
        for a, b in zip(d, c, strict=True):
            assert a.device.type == "npu"
            torch.testing.assert_close(a.cpu(), b, atol=0, rtol=0, equal_nan=True)   # bit for bit
        assert [n for n, _ in rec.runs] == ["unscale_kernel"] * 3 + ["flag_kernel"]


def test_unscale_errors_and_float64_fallback():
    g = [npu(torch.randn(4))]
    with pytest.raises(RuntimeError, match="found_inf must be a float tensor."):
        torch._amp_foreach_non_finite_check_and_unscale_(g, npu(torch.zeros((), dtype=torch.int32)),
                                                         npu(torch.ones(())))
    with pytest.raises(RuntimeError, match="inv_scale must be a 1-element tensor."):
        torch._amp_foreach_non_finite_check_and_unscale_(g, npu(torch.zeros(())), npu(torch.ones(2)))
    with pytest.raises(RuntimeError, match="found_inf must be an npu tensor."):
        torch._amp_foreach_non_finite_check_and_unscale_(g, torch.zeros(()), npu(torch.ones(())))
    torch._amp_foreach_non_finite_check_and_unscale_([], torch.zeros(()), npu(torch.ones(())))  # no grads: no-op
    d = npu(torch.tensor([1.0, float("inf")], dtype=torch.float64))
    found = npu(torch.zeros(()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._amp_foreach_non_finite_check_and_unscale_([d], found, npu(torch.tensor(0.5)))
    assert found.item() == 1.0 and d.cpu().tolist() == [0.5, float("inf")]
    assert "aten::_amp_foreach_non_finite_check_and_unscale_" in torch_bridge.fallback_ops()


@pytest.mark.parametrize("growth, backoff, interval", [(2.0, 0.5, 2), (1.1, 0.3, 1), (3.3, 0.77, 3)])
def test_update_scale_matches_cpu(growth, backoff, interval):
    """The scale / tracker sequence of torch's CPU kernel, bit for bit, also for factors that are not
    f32 numbers (torch multiplies by the double), and no growth past the f32 range."""
    gen = torch.Generator().manual_seed(3)
    for start in (65536.0, 3.0e38, 1.7e-30):
        s, k = torch.tensor(start), torch.tensor(0, dtype=torch.int32)
        sd, kd = npu(s), npu(k)
        for _ in range(10):
            f = torch.tensor(float(torch.rand((), generator=gen) < 0.3))
            torch._amp_update_scale_(s, k, f, growth, backoff, interval)
            with dsl.record() as rec:
                out = torch._amp_update_scale_(sd, kd, npu(f), growth, backoff, interval)
            assert out is sd and [n for n, _ in rec.runs] == ["update_scale_kernel"]
            assert (sd.item(), kd.item()) == (s.item(), k.item())


def test_update_scale_errors():
    s, k, f = npu(torch.ones(())), npu(torch.zeros((), dtype=torch.int32)), npu(torch.zeros(()))
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor."):
        torch._amp_update_scale_(s, k.float(), f, 2.0, 0.5, 10)
    with pytest.raises(RuntimeError, match="current_scale must be a 1-element tensor."):
        torch._amp_update_scale_(npu(torch.ones(2)), k, f, 2.0, 0.5, 10)
    with pytest.raises(RuntimeError, match="found_inf must be an npu tensor."):
        torch._amp_update_scale_(s, k, torch.zeros(()), 2.0, 0.5, 10)
    assert s.item() == 1.0 and k.item() == 0   # untouched by the failed calls


def test_grad_scaler_skips_non_finite_steps_like_cpu():
    """The same gradients (some with an inf or NaN) through GradScaler on npu and on CPU: the same
    steps are skipped (parameters untouched), the same scale sequence."""
    torch.manual_seed(4)
    w0 = torch.randn(16)
    poison = {2: float("inf"), 3: float("nan"), 7: float("-inf")}
    runs = {}
    for d in ("cpu", "npu"):
        w = w0.clone().to(d).requires_grad_()
        opt = torch.optim.SGD([w], lr=0.1)
        sc = torch.amp.GradScaler(d, init_scale=1024.0, growth_interval=2)
        scales, weights = [], []
        for i in range(10):
            opt.zero_grad()
            loss = (w * torch.arange(16.0, device=d)).sum()
            sc.scale(loss).backward()
            if i in poison:
                with torch.no_grad():
                    w.grad[5] = poison[i]
            before = w.detach().cpu().clone()
            sc.step(opt)
            sc.update()
            skipped = torch.equal(before, w.detach().cpu())
            scales.append(sc.get_scale())
            weights.append((skipped, w.detach().cpu().clone()))
        runs[d] = (scales, weights)
    assert runs["npu"][0] == runs["cpu"][0] == [1024.0, 2048.0, 1024.0, 512.0, 512.0, 1024.0, 1024.0, 512.0,
                                                 512.0, 1024.0]
    assert [s for s, _ in runs["npu"][1]] == [i in poison for i in range(10)]
    for (_, a), (_, b) in zip(runs["npu"][1], runs["cpu"][1], strict=True):
        torch.testing.assert_close(a, b)


def test_npu_amp_api():
    assert torch.npu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.npu.is_bf16_supported()
    with torch.npu.amp.autocast(dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("npu") and torch.get_autocast_dtype("npu") == torch.bfloat16
        assert (npu(torch.randn(2, 3)) @ npu(torch.randn(3, 2))).dtype == torch.bfloat16
    scaler = torch.npu.amp.GradScaler(init_scale=8.0)
    assert scaler._device == "npu" and scaler.scale(npu(torch.ones(()))).item() == 8.0
    from torch.npu.amp import autocast  # type: ignore[import-not-found]  # torch_npu's import path
    assert autocast is torch.npu.amp.autocast
    with pytest.warns(UserWarning, match="npu Autocast only supports dtypes of torch.float16, torch.bfloat16"):
        with torch.autocast("npu", dtype=torch.float32):
            assert not torch.is_autocast_enabled("npu")


# ------------------------------------------------------------------ training
def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


def _cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


@pytest.mark.parametrize("kind, low", [("mlp", torch.float16), ("cnn", torch.bfloat16)])
def test_amp_training_tracks_cpu(kind, low):
    """AMP training (autocast + GradScaler + AdamW) on npu: the loss falls, tracks the same loop on
    CPU, the scale sequence is CPU's (init_scale 2**24 overflows f16 gradients at first: skipped steps
    and backoff), and the loop needs no CPU fallback but GradScaler's float64 reciprocal."""
    torch.manual_seed(5)
    if kind == "mlp":
        model, x = _mlp(), torch.randn(32, 16)
        y = x[:, :4].argmax(1)                       # learnable targets
    else:
        model, x = _cnn(), torch.randn(16, 4, 8, 8) + torch.randn(16, 4, 1, 1)
        y = x.mean((2, 3)).argmax(1)
    runs = {}
    for d in ("cpu", "npu"):
        m = copy.deepcopy(model).to(d)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-2)
        sc = torch.amp.GradScaler(d, init_scale=2.0 ** 24, growth_interval=4)
        xd, yd = x.to(d), y.to(d)
        losses, scales = [], []
        before = dict(torch_bridge.fallback_ops())
        for _ in range(8):
            opt.zero_grad()
            with torch.autocast(d, dtype=low):
                out = m(xd)
                loss = F.cross_entropy(out, yd)
            assert out.dtype == low and loss.dtype == torch.float32
            sc.scale(loss).backward()
            sc.step(opt)
            sc.update()
            losses.append(loss.item())
            scales.append(sc.get_scale())
        fell = {k for k, v in torch_bridge.fallback_ops().items() if v != before.get(k)}
        runs[d] = (losses, scales, fell)
    (lc, sc_cpu, _), (ln, sc_npu, fell) = runs["cpu"], runs["npu"]
    assert ln[-1] < 0.7 * ln[0]
    torch.testing.assert_close(torch.tensor(ln), torch.tensor(lc), atol=1e-2, rtol=1e-2)
    assert sc_npu == sc_cpu
    if low == torch.float16:   # 2**24 overflows f16 gradients: steps skipped, the scale backed off
        assert sc_npu[:4] == [2.0 ** 23, 2.0 ** 22, 2.0 ** 21, 2.0 ** 20]
    assert fell <= {"aten::reciprocal"}   # GradScaler.unscale_'s scale.double().reciprocal(): no f64 in the DSL
