"""``linear_soft_cap`` (an LM head with Gemma's final-logit soft-capping) as the GEMV plus one Triton launch, and
``linear_soft_cap_argmax`` (its greedy ids) as the GEMV plus two, against their torch references, under the
interpreter."""

import pytest
import torch
from anna_core.kernels.reference import linear as ref

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_core.kernels.examples import linear_soft_cap_argmax as argmax_examples  # noqa: E402
from anna_xpu_kernels.soft_cap import linear_soft_cap, linear_soft_cap_argmax  # noqa: E402

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rows,cap", [(1, 30.0), (3, 2.0)])
def test_argmax_is_the_argmax_of_the_soft_capped_logits_in_three_launches(poison_outputs, dtype, rows, cap):
    """The ids are exactly ``argmax`` of the soft cap kernel's logits (the path they replace on GPUs: the same GEMV and
    the same tanh), over three blocks of 2,048 logits, the last one masked; at cap 2 most logits saturate to equal
    values, where the first column counts."""
    gen = torch.Generator().manual_seed(10 + rows)
    x = torch.randn(rows, 64, generator=gen).to(dtype)
    weight = torch.randn(4100, 64, generator=gen).to(dtype)
    with LaunchCounter() as c:
        got = linear_soft_cap_argmax(x, weight, cap)
    kernels = {k: v for k, v in c.launches.items() if k.startswith("triton:")}
    assert kernels["triton:_soft_cap_argmax_partials_kernel"] == 1 and kernels["triton:_argmax_of_blocks_kernel"] == 1
    assert sum(kernels.values()) == 3  # the GEMV, the blocks' partials, their reduction
    assert got.dtype == torch.int64 and got.shape == (rows,)
    assert got.tolist() == torch.argmax(linear_soft_cap(x, weight, cap), dim=-1).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_argmax_matches_the_reference_on_the_op_examples(dtype):
    """The op's examples plant each row's largest logit twice, in two blocks (the first counts): the reference's ids."""
    for example in argmax_examples("cpu", dtype):
        want = ref.linear_soft_cap_argmax(*example.args)
        assert linear_soft_cap_argmax(*example.args).tolist() == want.tolist()
    assert want.tolist() == [7]  # (the last example: one row, 40 logits)


def test_argmax_bad_arguments_are_clear_errors():
    x, weight = torch.zeros(1, 8), torch.zeros(4, 8)
    for impl in (linear_soft_cap_argmax, ref.linear_soft_cap_argmax):
        with pytest.raises(ValueError, match="linear_soft_cap_argmax: cap must be positive"):
            impl(x, weight, -1.0)
        with pytest.raises(ValueError, match="linear_soft_cap_argmax: weight must have at least one row"):
            impl(x, weight[:0], 30.0)
        with pytest.raises(ValueError, match="linear_soft_cap_argmax: x must be"):
            impl(x[:, :6], weight, 30.0)
