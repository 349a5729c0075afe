"""conv2d's argument checks (torch's messages) and unbatched (C, H, W) input, forward and backward."""
import pytest
import torch
import torch.nn.functional as F

import op_library as L


def test_unbatched_input_forward_and_backward() -> None:
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 9, 7), torch.randn(4, 3, 3, 3), torch.randn(4)
    y = L.conv2d(x, w, b, padding=1)
    ref = F.conv2d(x, w, b, padding=1)
    assert y.shape == ref.shape == (4, 9, 7)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    gy = torch.randn_like(ref)
    gx, gw, gb = L.conv2d_backward(gy, x, w, padding=1)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    F.conv2d(xr, wr, br, padding=1).backward(gy)
    for got, want in ((gx, xr.grad), (gw, wr.grad), (gb, br.grad)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("args, text", [
    ((torch.randn(3, 4), torch.randn(2, 3, 3, 3)), "Expected 3D (unbatched) or 4D (batched) input to conv2d"),
    ((torch.randn(1, 3, 8, 8), torch.randn(2, 3, 3)), "weight should have 4 dimensions"),
    ((torch.randn(1, 3, 8, 8).long(), torch.randn(2, 3, 3, 3)), "input has dtype torch.int64"),
    ((torch.randn(1, 3, 8, 8), torch.randn(2, 3, 3, 3).half()), "Input type (torch.float32) and weight type"),
    ((torch.randn(1, 3, 8, 8), torch.randn(2, 3, 3, 3), torch.randn(2).half()), "and bias type (torch.float16)"),
])
def test_bad_arguments_raise_torch_errors(args: tuple, text: str) -> None:
    with pytest.raises(RuntimeError) as e:
        L.conv2d(*args)
    assert text in str(e.value)
