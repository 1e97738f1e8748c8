"""The fused top-k LM head (``anna_xpu_kernels.lm_head_topk``) against its reference (full logits, stable sort,
logsumexp) under Triton's interpreter: a dense head and each quantized layout, soft-capping, equal logits, k of 1
and 64, a vocabulary that is no multiple of the tile, several tiles per program, rows on the CUDA cores and on
``tl.dot``.

Bounds: ids exactly; values and logsumexp 1e-5 absolute (float32 summation order; bfloat16 logits are rounded
to bfloat16 by both, bit for bit).
"""

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_core.kernels.reference.lm_head_topk import lm_head_topk as reference  # noqa: E402
from anna_core.weights.gpu_quant import quantize  # noqa: E402

TOL = 1e-5


def _head(vocab, width, scheme, dtype, seed=0):
    w = torch.randn(vocab, width, generator=torch.Generator().manual_seed(seed)) * 0.2
    w[vocab - 3] = w[5]  # equal logits at ids 5 and vocab - 3: the lower id first
    if scheme == "none":
        return w.to(dtype), None, None
    q = quantize(w, scheme, dtype)
    return q.qweight, q.scale, q.zero


def _check(got, want, k, rows):
    values, indices, lse = got
    assert values.shape == (rows, k) and values.dtype == torch.float32
    assert indices.shape == (rows, k) and indices.dtype == torch.int64 and lse.shape == (rows,)
    assert torch.equal(indices, want[1])
    assert (values - want[0]).abs().max().item() <= TOL and (lse - want[2]).abs().max().item() <= TOL


@pytest.mark.parametrize("scheme", ["none", "int4", "int8", "fp8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_the_reference_with_softcap_ties_and_a_ragged_vocabulary(scheme, dtype, poison_outputs):
    from anna_xpu_kernels import lm_head_topk as kernel

    vocab, width = 300, 256  # 300 = 4 tiles of 64 + 44
    args = (*_head(vocab, width, scheme, dtype), scheme)
    for rows, k, cap, sub in ((1, 64, None, 3), (3, 1, 30.0, 1), (2, 7, 2.0, 2)):  # sub > 1: tiles merged
        x = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows)).to(dtype)
        x[0] = 0.0 if rows > 2 else x[0]  # a row of zeros: every logit equal (ids 0..k-1)
        got = kernel.launch(x, *args, k, cap, vocab, sub_tiles=sub)
        _check(got, reference(x, *args, k, cap), k, rows)


@pytest.mark.parametrize("scheme", ["none", "int4"])
def test_many_rows_take_tl_dot(scheme):
    from anna_xpu_kernels import lm_head_topk as kernel

    rows = 20  # > the CUDA-core rows of both: blocks of 32 rows on tl.dot (one tile per program: the interpreter
    # sorts slowly; merges are covered above)
    args = (*_head(200, 128, scheme, torch.bfloat16, seed=3), scheme)
    x = torch.randn(rows, 128, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    vocab = 200
    _check(kernel.launch(x, *args, 64, None, vocab, sub_tiles=1), reference(x, *args, 64, None), 64, rows)


def test_duplicate_logits_within_and_across_tiles_keep_the_lowest_ids():
    from anna_xpu_kernels import lm_head_topk as kernel

    w = torch.zeros(260, 32)
    w[[3, 70, 130, 259], 0] = 1.0  # four equal best logits, in different tiles
    w[[10, 11], 0] = 0.5
    x = torch.zeros(1, 32)
    x[0, 0] = 2.0
    values, indices, lse = kernel.launch(x, w, None, None, "none", 6, None, 260, sub_tiles=2)
    assert indices.tolist() == [[3, 70, 130, 259, 10, 11]]
    assert values.tolist() == [[2.0, 2.0, 2.0, 2.0, 1.0, 1.0]]
    assert abs(lse.item() - torch.logsumexp(x @ w.T, -1).item()) <= TOL


def test_bad_arguments_raise_clear_errors():
    from anna_xpu_kernels import lm_head_topk as kernel

    x, w = torch.randn(1, 32), torch.randn(40, 32)
    with pytest.raises(ValueError, match="lm_head_topk: k must be"):
        kernel.lm_head_topk(x, w, None, None, "none", 65, None)
    with pytest.raises(ValueError, match="lm_head_topk: k must be"):
        kernel.lm_head_topk(x, w[:8], None, None, "none", 9, None)
    with pytest.raises(ValueError, match="softcap"):
        kernel.lm_head_topk(x, w, None, None, "none", 4, 0.0)
    with pytest.raises(ValueError, match="scheme"):
        kernel.lm_head_topk(x, w, None, None, "int3", 4, None)


@pytest.mark.parametrize("lm_head_quant", [None, "int8"])
def test_tiny_qwen35_and_gemma4_heads_take_the_triton_kernel(tmp_path, monkeypatch, lm_head_quant):
    """A model's ``compute_topk`` looks the op up with its head's scheme and, where the Triton kernel is
    registered (``ANNA_TRITON_INTERPRET=1``), gets it: the top 64 of its own ``compute_logits`` (tied or not,
    quantized head, Gemma's soft-cap)."""
    from anna_core.loading import load_model
    from anna_core.testing.checkpoints import build_tiny_qwen35
    from anna_gemma4.tiny import build_tiny_gemma4

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    paths = [build_tiny_qwen35(tmp_path / "q", hidden_size=128, tie=lm_head_quant is None, num_layers=1)]
    if lm_head_quant is None:
        paths.append(build_tiny_gemma4(tmp_path / "g"))
    for path in paths:
        options = {"lm_head_quant": lm_head_quant} if lm_head_quant else None
        model = load_model(path, device="cpu", dtype="fp32", family_options=options).model
        hidden = torch.randn(2, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
        values, indices, lse = model.compute_topk(hidden, 64)
        logits = model.compute_logits(hidden)
        want = logits.sort(dim=-1, descending=True, stable=True)
        assert torch.equal(indices, want.indices[:, :64]), path
        assert (values - want.values[:, :64]).abs().max().item() <= TOL
        assert (lse - torch.logsumexp(logits, -1)).abs().max().item() <= TOL
        assert model.ops.registry.chosen()["lm_head_topk"] == "triton"
