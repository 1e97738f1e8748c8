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


def _config(bn, bk, sub, warps=4, stages=2):
    from anna_xpu_kernels.lm_head_topk import TopkHeadConfig

    return TopkHeadConfig(bn, bk, sub, warps, stages)


@pytest.mark.parametrize("scheme", ["none", "int4", "int8", "fp8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_pass_matches_the_reference_with_softcap_ties_and_a_ragged_vocabulary(scheme, dtype, poison_outputs):
    from anna_xpu_kernels import lm_head_topk as kernel

    vocab, width = 300, 256  # 300 = 4 tiles of 64 + 44
    args = (*_head(vocab, width, scheme, dtype), scheme)
    bk = 128 if scheme != "none" else 64  # two K tiles of a quantized head (whole groups), four of a dense one
    # (rows, k, soft-cap, config): tiles merged (sub > 1), tiles wider than 64 cut by tl.topk, both at once
    for rows, k, cap, cfg in ((1, 64, None, _config(64, bk, 3)), (3, 1, 30.0, _config(128, 256, 1)),
                              (2, 7, 2.0, _config(128, bk, 2))):
        x = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows)).to(dtype)
        x[0] = 0.0 if rows > 2 else x[0]  # a row of zeros: every logit equal (ids 0..k-1)
        got = kernel.one_pass(x, *args, k, cap, vocab, config=cfg)
        _check(got, reference(x, *args, k, cap), k, rows)


@pytest.mark.parametrize("scheme", ["none", "int4"])
def test_many_rows_take_tl_dot(scheme):
    from anna_xpu_kernels import lm_head_topk as kernel

    vocab = 200
    args = (*_head(vocab, 128, scheme, torch.bfloat16, seed=3), scheme)
    for rows, cfg in ((20, _config(64, 128, 1)), (32, _config(128, 128, 1))):  # blocks of 32 rows on tl.dot
        x = torch.randn(rows, 128, generator=torch.Generator().manual_seed(rows)).to(torch.bfloat16)
        _check(kernel.one_pass(x, *args, 64, None, vocab, config=cfg), reference(x, *args, 64, None), 64, rows)


def test_every_candidate_configuration_matches_the_reference():
    """Each configuration of both tuning spaces (the autotuner may pick any), on a dense and an int4 head."""
    from anna_xpu_kernels import lm_head_topk as kernel

    vocab, width = 130, 256  # a ragged third tile; K tiles of 512 masked past the row
    for scheme in ("none", "int4"):
        args = (*_head(vocab, width, scheme, torch.float32, seed=4), scheme)
        for rows, space in ((1, kernel.CUDA_CORE_SPACE), (5, kernel.DOT_SPACE)):
            x = torch.randn(rows, width, generator=torch.Generator().manual_seed(5))
            want = reference(x, *args, 64, 30.0)
            for cfg in space:
                if scheme != "none" and cfg.block_k % 128:
                    continue  # pruned: quantized heads take whole groups
                _check(kernel.one_pass(x, *args, 64, 30.0, vocab, config=cfg), want, 64, rows)


def _logits_of(x, weight, scale, zero, scheme):
    """The full head's logits as the GEMV kernels give them (the full path's own rounding)."""
    from anna_xpu_kernels import gemv, wq_gemv

    if scheme == "none":
        return gemv.linear(x, weight, None)
    return wq_gemv.wq_linear(x, weight, scale, zero, scheme, None)


def _top_of(logits, k, cap):
    logits = logits.float()
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    order = logits.sort(dim=-1, descending=True, stable=True)
    return order.values[:, :k], order.indices[:, :k], torch.logsumexp(logits, -1)


@pytest.mark.parametrize("scheme", ["none", "int4", "int8", "fp8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemv_select_is_the_top_k_of_the_full_heads_logits(scheme, dtype, poison_outputs):
    """The GEMV + selection implementation gives exactly the top k of the full path's own logits (the GEMV kernel
    the full head runs), and in float32 the reference's."""
    from anna_xpu_kernels import lm_head_topk as kernel

    vocab, width = 300, 256
    args = (*_head(vocab, width, scheme, dtype), scheme)
    for rows, k, cap in ((1, 64, None), (3, 1, 30.0), (17, 7, 2.0)):  # 17 rows: past the GEMV's 16 (F.linear)
        x = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows)).to(dtype)
        x[0] = 0.0
        got = kernel.gemv_select(x, *args, k, cap)
        _check(got, _top_of(_logits_of(x, *args), k, cap), k, rows)
        if dtype == torch.float32:
            _check(got, reference(x, *args, k, cap), k, rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_selection_over_several_chunk_passes(dtype, poison_outputs):
    """topk_of_logits with small chunks: a ragged vocabulary, one chunk pass over the keys before the final one,
    ties inside and across chunks, k of 1, 7 and 64, a vocabulary below 64."""
    from anna_xpu_kernels import topk_select

    for vocab, rows, k, cap in ((1000, 3, 64, None), (1000, 1, 1, 30.0), (333, 2, 7, 2.0), (40, 1, 40, None)):
        logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(vocab + k)).to(dtype)
        logits[:, vocab - 1] = logits[:, 3]  # equal logits in the first and the last chunk
        logits[:, 200 % vocab] = logits[:, 3]
        got = topk_select.topk_of_logits(logits, k, cap, chunk=128, final_keys=256)  # 8 chunks: 512 keys -> 256
        _check(got, _top_of(logits, k, cap), k, rows)


def test_duplicate_logits_within_and_across_tiles_keep_the_lowest_ids():
    from anna_xpu_kernels import lm_head_topk as kernel

    w = torch.zeros(260, 32)
    w[[3, 70, 130, 259], 0] = 1.0  # four equal best logits, in different tiles
    w[[10, 11], 0] = 0.5
    x = torch.zeros(1, 32)
    x[0, 0] = 2.0
    for got in (kernel.one_pass(x, w, None, None, "none", 6, None, 260, config=_config(64, 32, 2)),
                kernel.gemv_select(x, w, None, None, "none", 6, None)):
        values, indices, lse = got
        assert indices.tolist() == [[3, 70, 130, 259, 10, 11]]
        assert values.tolist() == [[2.0, 2.0, 2.0, 2.0, 1.0, 1.0]]
        assert abs(lse.item() - torch.logsumexp(x @ w.T, -1).item()) <= TOL


def test_the_impl_tuner_times_each_shape_once_never_while_capturing_and_obeys_the_knob(monkeypatch):
    from anna_xpu_kernels.lm_head_topk import ImplTuner

    monkeypatch.delenv("ANNA_LM_HEAD_TOPK", raising=False)
    speed = {"one_pass": 2.0, "gemv_select": 1.0}
    timed, capturing = [], [True]
    runners = {name: (lambda name=name: name) for name in speed}
    tuner = ImplTuner(timer=lambda fn: timed.append(fn()) or speed[fn()], capturing=lambda: capturing[0])
    key = ("bfloat16", 1, 300, 256, "none", True)
    assert tuner.choose(key, True, runners) == "gemv_select" and timed == []  # capturing: not timed, not kept
    capturing[0] = False
    assert tuner.choose(key, True, runners) == "gemv_select" and sorted(timed) == ["gemv_select", "one_pass"]
    speed.update(one_pass=0.5)
    capturing[0] = True  # the graph captured after the warm-up takes the warm-up's choice, without timing again
    assert tuner.choose(key, True, runners) == "gemv_select" and len(timed) == 2
    capturing[0] = False
    assert tuner.choose(key[:2] + (301,) + key[3:], True, runners) == "one_pass"  # another shape: its own timing
    assert tuner.choose(key, False, runners) == "one_pass"  # not CUDA: the one-pass kernel, untimed
    monkeypatch.setenv("ANNA_LM_HEAD_TOPK", "gemv_select")
    assert tuner.choose(key[:2] + (302,) + key[3:], True, runners) == "gemv_select" and len(timed) == 4


@pytest.mark.parametrize("impl", ["one_pass", "gemv_select"])
def test_the_op_runs_the_chosen_implementation_without_host_reads(monkeypatch, impl):
    """The op runs what its tuner chooses (here forced by the knob), both implementations without a host read (so
    they capture in a graph: the fake graphs' check), and both give the reference's result."""
    from anna_core.testing.host_reads import NoHostReads
    from anna_xpu_kernels import lm_head_topk as kernel

    monkeypatch.setenv("ANNA_LM_HEAD_TOPK", impl)
    calls = []
    for name in kernel.IMPLS:
        real = getattr(kernel, name)
        monkeypatch.setattr(kernel, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k))
    args = (*_head(150, 64, "none", torch.float32, seed=2), "none")
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode(), NoHostReads():
        got = kernel.lm_head_topk(x, *args, 64, 30.0)
    assert calls == [impl]
    _check(got, reference(x, *args, 64, 30.0), 64, 2)


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
