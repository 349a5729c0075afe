"""matmul / bmm / linear check their tensors before any kernel runs, in torch's words, naming the argument."""
import pytest
import torch

import op_library as L


@pytest.mark.parametrize("call, text", [
    (lambda: L.linear(torch.randn(3, 4).long(), torch.randn(2, 4)), "argument 'input' has dtype torch.int64"),
    (lambda: L.linear(torch.randn(3, 4), torch.randn(2, 5)), "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x2)"),
    (lambda: L.linear(torch.randn(2, 3, 4), torch.randn(2, 5)), "cannot be multiplied (6x4 and 5x2)"),
    (lambda: L.linear(torch.randn(3, 4), torch.randn(2, 4).half()),
     "expected input and weight to have the same dtype, but got: torch.float32 != torch.float16"),
    (lambda: L.linear(torch.randn(3, 4), torch.randn(2, 4), torch.randn(2).bfloat16()), "expected input and bias"),
    (lambda: L.matmul(torch.randn(3, 4), torch.randn(4, 2).double()), "argument 'b' has dtype torch.float64"),
    (lambda: L.bmm(torch.randn(2, 3, 4).half(), torch.randn(2, 4, 2)), "expected a and b to have the same dtype"),
])
def test_bad_tensors_raise_runtime_errors(call, text: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuntimeError) as e:
        call()
    assert text in str(e.value)


def test_a_non_tensor_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="argument 'weight' must be a Tensor, not list"):
        L.linear(torch.randn(3, 4), [[1.0] * 4])
