"""``per_layer_inputs`` (Gemma 4's per-layer inputs of a step's tokens) in one Triton launch against its torch
reference, under the interpreter."""

import pytest
import torch
from anna_core.kernels.reference import norms as ref

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels.per_layer_inputs import per_layer_inputs  # noqa: E402

from tests.xpu_kernels._launches import LaunchCounter  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("tokens,groups,p,zero_centered", [(1, 5, 32, False), (3, 2, 24, True)])
def test_matches_the_reference_in_one_launch(poison_outputs, dtype, tokens, groups, p, zero_centered):
    gen = torch.Generator().manual_seed(p + tokens)
    projected = (4 * torch.randn(tokens, groups * p, generator=gen)).to(dtype)
    table = torch.randn(9, groups * p, generator=gen).to(dtype)
    ids = torch.tensor([8, 0, 3][:tokens])
    weight = (1 + 0.3 * torch.randn(p, generator=gen)).to(dtype)
    args = (projected, ids, table, 16.0, weight, 1e-6, zero_centered, 1536 ** -0.5, 2 ** -0.5)
    with LaunchCounter() as c:
        got = per_layer_inputs(*args)
    assert {k: v for k, v in c.launches.items() if k.startswith("triton:")} == {"triton:_per_layer_inputs_kernel": 1}
    want = ref.per_layer_inputs(*args)
    assert got.shape == want.shape == (tokens, groups, p) and got.dtype == dtype
    # bf16: the interpreter rounds toward zero at each of the five roundings, torch to nearest
    torch.testing.assert_close(got, want, **(tol(dtype) if dtype == torch.float32 else {"atol": 4e-2, "rtol": 4e-2}))
    # the reference is the expression Gemma 4's model computed with the unfused ops
    rows = torch.nn.functional.embedding(ids, table) * 16.0
    manual = (ref.rms_norm((projected * 1536 ** -0.5).view(tokens, groups, p), weight, 1e-6, zero_centered)
              + rows.view(tokens, groups, p)) * 2 ** -0.5
    torch.testing.assert_close(want, manual, rtol=0, atol=0)


def test_bad_arguments_are_clear_errors():
    projected, table, weight = torch.zeros(2, 64), torch.zeros(5, 64), torch.ones(32)
    ids = torch.tensor([1, 2])
    for impl in (per_layer_inputs, ref.per_layer_inputs):
        with pytest.raises(ValueError, match="per_layer_inputs: projected must be"):
            impl(projected[:, :40], ids, table[:, :40], 1.0, weight, 1e-6, False, 1.0, 1.0)
        with pytest.raises(ValueError, match="per_layer_inputs: ids must be"):
            impl(projected, ids.float(), table, 1.0, weight, 1e-6, False, 1.0, 1.0)
        with pytest.raises(ValueError, match="per_layer_inputs: table must be"):
            impl(projected, ids, table.double(), 1.0, weight, 1e-6, False, 1.0, 1.0)
