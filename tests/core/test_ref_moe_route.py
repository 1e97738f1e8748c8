"""The moe_route contract and its torch reference: found through the registry, bit for bit the routers the
Qwen3.5 MoE and Gemma 4 models ran before the op (transformers' rounding), ties to the lower expert index,
and clear errors."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels import KernelRegistry, bind_ops
from anna_core.kernels.ops import CORE_OPS, OPS
from anna_core.kernels.reference.routing import moe_route, top_k_lowest_index


def _qwen35_router(logits, top_k):
    """Qwen3.5 MoE's former ``route`` (transformers' ``Qwen3_5MoeTopKRouter``)."""
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype), experts


def _gemma4_router(logits, top_k, per_expert_scale):
    """Gemma 4's former ``Gemma4Router.forward`` after its projection (transformers' ``Gemma4TextRouter``)."""
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * per_expert_scale[experts], experts


def _logits(t, e, dtype, seed=0):
    """``[T, E]`` logits whose rows hold distinct values, exact in bfloat16: each row a permutation of a grid
    of ``E`` steps of at least 1/32 in [-7, 7) (``torch.topk`` takes any of equal values; these have none)."""
    gen = torch.Generator().manual_seed(seed)
    step = max(1 / 32, 8 / e)
    grid = (torch.arange(e) - e // 2) * step
    shift = torch.randint(-3, 4, (t, 1), generator=gen).float()
    return (grid[torch.argsort(torch.rand(t, e, generator=gen), dim=-1)] + shift).to(dtype)


def test_the_registry_finds_the_op_and_its_reference():
    contract = OPS["moe_route"]
    assert contract.parameters == ["logits", "top_k", "expert_scale", "weights_dtype"]
    assert contract.shape_facts == ("num_experts",)
    ops = bind_ops(KernelRegistry(CORE_OPS), torch.device("cpu"), torch.float32)
    assert ops.get("moe_route", num_experts=8) is moe_route
    assert ops.registry.chosen() == {"moe_route": "reference"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t, e, k", [(1, 8, 2), (37, 16, 4), (64, 256, 8), (5, 8, 8), (9, 128, 1)])
def test_reference_is_the_former_qwen35_router_bit_for_bit(dtype, t, e, k):
    logits = _logits(t, e, dtype, seed=t + e)
    weights, ids = moe_route(logits, k, None, logits.dtype)
    want_weights, want_ids = _qwen35_router(logits, k)
    assert weights.dtype == dtype and ids.dtype == torch.int64 and weights.shape == ids.shape == (t, k)
    assert torch.equal(ids, want_ids) and torch.equal(weights, want_weights)


@pytest.mark.parametrize("dtype, scale_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                                (torch.bfloat16, torch.float32)])
def test_reference_is_the_former_gemma4_router_bit_for_bit(dtype, scale_dtype):
    logits = _logits(29, 128, dtype, seed=1)
    scale = (torch.rand(128, generator=torch.Generator().manual_seed(2)) + 0.5).to(scale_dtype)
    weights, ids = moe_route(logits, 8, scale, torch.float32)
    want_weights, want_ids = _gemma4_router(logits, 8, scale)
    assert want_weights.dtype == weights.dtype == torch.float32
    assert torch.equal(ids, want_ids) and torch.equal(weights, want_weights)


def test_equal_probabilities_go_to_the_lower_expert_index():
    logits = torch.tensor([[1.0, 2.0, 2.0, 2.0, 0.0, 2.0],  # four equal maxima: the three lowest indices
                           [3.0, 3.0, 1.0, 0.0, 5.0, 0.0],  # equal values inside the choice: ascending index
                           [-torch.inf, 0.0, -torch.inf, -torch.inf, -torch.inf, -torch.inf]])  # zeros tie
    weights, ids = moe_route(logits, 3, None, torch.float32)
    assert ids.tolist() == [[1, 2, 3], [4, 0, 1], [1, 0, 2]]
    torch.testing.assert_close(weights[0], torch.full((3,), 1 / 3))
    assert weights[2].tolist() == [1.0, 0.0, 0.0]


def test_top_k_values_are_topks_and_ties_stable_like_a_stable_sort():
    probs = torch.randint(0, 4, (500, 64), generator=torch.Generator().manual_seed(0)).float().softmax(-1)
    values, ids = top_k_lowest_index(probs, 8)
    stable = torch.sort(probs, dim=-1, descending=True, stable=True)
    assert torch.equal(values, torch.topk(probs, 8).values)
    assert torch.equal(values, stable.values[:, :8]) and torch.equal(ids, stable.indices[:, :8])


def test_the_expert_scale_multiplies_in_float32_and_weights_round_once():
    logits = _logits(11, 16, torch.bfloat16)
    scale = torch.linspace(0.5, 2.0, 16, dtype=torch.bfloat16)
    weights, ids = moe_route(logits, 4, scale, torch.bfloat16)
    fp32, _ = moe_route(logits, 4, scale, torch.float32)
    assert weights.dtype == torch.bfloat16 and torch.equal(weights, fp32.to(torch.bfloat16))
    plain, plain_ids = moe_route(logits, 4, None, torch.float32)
    assert torch.equal(ids, plain_ids) and torch.equal(fp32, plain * scale[ids].float())


def test_empty_batches_and_non_finite_rows():
    weights, ids = moe_route(torch.zeros(0, 8), 2, torch.ones(8), torch.float32)
    assert weights.shape == ids.shape == (0, 2)
    logits = torch.tensor([[torch.nan, 1.0, 2.0, 0.0], [torch.inf, 1.0, 2.0, 0.0], [-torch.inf] * 4])
    weights, ids = moe_route(logits, 2, None, torch.float32)
    assert weights.isnan().all() and ((ids >= 0) & (ids < 4)).all()


def test_non_contiguous_logits():
    wide = _logits(6, 24, torch.float32)
    logits = wide[:, 4:20]  # a row stride of 24
    assert all(torch.equal(a, b) for a, b in zip(moe_route(logits, 4, None, torch.float32),
                                                 moe_route(logits.contiguous(), 4, None, torch.float32)))


@pytest.mark.parametrize("args, match", [
    ((torch.zeros(4), 2, None, torch.float32), "logits must have 2 dims"),
    ((torch.zeros(4, 8, dtype=torch.int64), 2, None, torch.float32), "logits must be a float tensor"),
    ((torch.zeros(4, 0), 1, None, torch.float32), r"logits must be \[T, E\] with E >= 1"),
    ((torch.zeros(4, 8), 9, None, torch.float32), r"top_k must be an int in \[1, E=8\], got 9"),
    ((torch.zeros(4, 8), 0, None, torch.float32), "top_k must be an int"),
    ((torch.zeros(4, 8), True, None, torch.float32), "top_k must be an int"),
    ((torch.zeros(4, 8), 2.0, None, torch.float32), "top_k must be an int"),
    ((torch.zeros(4, 8), 2, torch.ones(7), torch.float32), r"expert_scale must be a float \[E=8\]"),
    ((torch.zeros(4, 8), 2, torch.ones(8, dtype=torch.int32), torch.float32), "expert_scale must be a float"),
    ((torch.zeros(4, 8, dtype=torch.bfloat16), 2, None, torch.float16), "weights_dtype must be torch.float32 or"),
])
def test_bad_arguments_raise_value_errors(args, match):
    with pytest.raises(ValueError, match=f"moe_route: {match}"):
        moe_route(*args)
