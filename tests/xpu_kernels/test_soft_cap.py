"""``linear_soft_cap`` (an LM head with Gemma's final-logit soft-capping) as the GEMV plus one Triton launch, against
its torch reference, under the interpreter."""

import pytest
import torch
from anna_core.kernels.reference import linear as ref

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels.soft_cap import linear_soft_cap  # noqa: E402

from tests.xpu_kernels._launches import LaunchCounter  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rows,cap", [(1, 30.0), (3, 2.0)])  # 2.0: most logits saturate
def test_matches_the_reference_in_two_launches(poison_outputs, dtype, rows, cap):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 64, generator=gen).to(dtype)
    weight = torch.randn(4100, 64, generator=gen).to(dtype)  # three programs of 2048 logits, the last one masked
    with LaunchCounter() as c:
        got = linear_soft_cap(x, weight, cap)
    kernels = {k: v for k, v in c.launches.items() if k.startswith("triton:")}
    assert kernels["triton:_soft_cap_kernel"] == 1 and sum(kernels.values()) == 2  # the GEMV, the soft cap
    want = ref.linear_soft_cap(x, weight, cap)
    assert got.dtype == torch.float32 and got.shape == want.shape == (rows, 4100)
    assert got.abs().max() <= cap
    # bf16: the interpreter's GEMV output rounds toward zero (torch to nearest): one bf16 ulp before the cap
    torch.testing.assert_close(got, want, **(tol(torch.float32) if dtype == torch.float32 else tol(dtype)))


def test_bad_arguments_are_clear_errors():
    x, weight = torch.zeros(1, 8), torch.zeros(4, 8)
    for impl in (linear_soft_cap, ref.linear_soft_cap):
        with pytest.raises(ValueError, match="linear_soft_cap: cap must be positive"):
            impl(x, weight, 0.0)
        with pytest.raises(ValueError, match="linear_soft_cap: x must be"):
            impl(x[:, :6], weight, 30.0)
