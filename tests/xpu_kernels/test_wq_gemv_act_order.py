"""Act-order GPTQ weights (a scattered ``g_idx``: repacked with their input rows sorted by group and the column order
``perm`` kept, :func:`anna_core.weights.prequant.repack_gptq`) through the quantized GEMVs, which read ``x[perm]``
(and, in the norm prologue, ``residual[perm]`` and ``norm_weight[perm]``) as they load their activation tiles,
under Triton's interpreter: equal to the reference's gather + norm + GEMV and to the dense weight in the original
column order, on every path (the decode kernel, the tiled kernel's CUDA and tensor cores, dequantize + ``F.linear``,
the norm apart past its fused width); and a tiny act-order Qwen3.5 whose decode step launches exactly what the
same checkpoint without act-order launches (no gather, the norm fused into the GEMV).

Bounds: float32 1e-5 of the largest output (as the other quantized-GEMV tests). float16 activations (int4 scales
in that dtype): 2e-3 (outputs rounded after float32 sums in another order). bfloat16: 3e-2 against the torch
reference, since Triton's interpreter rounds float32 -> bfloat16 toward zero (the residual sum and the normalised
row: measured 1.7-2.0e-2 of the largest output with and without a ``perm``); the same kernel fed the columns
gathered beforehand, a quarter of each bound (measured: equal, the norm's statistic summed in another order).
"""

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_core.kernels.reference import norms as ref_norms  # noqa: E402
from anna_core.kernels.reference import wq_linear as ref  # noqa: E402
from anna_core.kernels.reference.activations import act_and_mul  # noqa: E402
from anna_core.testing.prequant_checkpoints import act_order_int4, gptq_tensors  # noqa: E402
from anna_core.weights.prequant import PrequantConfig, repack_gptq  # noqa: E402

from tests.xpu_kernels._wq_cases import rel  # noqa: E402

TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 2e-3}
EPS = 1e-6


def _act_order_weight(n, k, dtype, seed):
    """``(QuantizedWeight with a perm, dense [N, K] float32 in the original column order)`` of a random weight
    quantized by act-order round-to-nearest (GPTQ v1 tensors), scales in ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * 0.1
    q, z, s, g_idx = act_order_int4(w, torch.randperm(k, generator=gen), 128, False, gen, 1)
    t = gptq_tensors(q, z, s, 128, True, g_idx)
    weight = repack_gptq("layer", t["qweight"], t["qzeros"], t["scales"], t["g_idx"],
                         PrequantConfig("gptq", "gptq", zero_offset=1), dtype)
    g = g_idx.long()
    assert weight.perm is not None and not torch.equal(g, torch.arange(k) // 128)  # the groups are scattered
    return weight, ((q - z[g]).float() * s.float()[g]).t()


def _tensors(weight, perm_dtype=torch.int32):
    return weight.qweight, weight.scale, weight.zero, "int4", None, weight.perm.to(perm_dtype)


@pytest.mark.parametrize("rows", [1, 3, 12, 70])  # decode kernel (1 row, 3 rows), tensor cores, F.linear
@pytest.mark.parametrize("perm_dtype", [torch.int32, torch.int64])
def test_wq_linear_reads_the_columns_in_the_stored_order(rows, perm_dtype, poison_outputs):
    """float32 scales and activations: the result is the dense weight's product in the original column order."""
    from anna_xpu_kernels import wq_gemv

    weight, dense = _act_order_weight(40, 384, torch.float32, seed=rows)
    gen = torch.Generator().manual_seed(rows)
    x, bias = torch.randn(rows, 384, generator=gen), torch.randn(40, generator=gen)
    qweight, scale, zero, scheme, _, perm = _tensors(weight, perm_dtype)
    got = wq_gemv.wq_linear(x, qweight, scale, zero, scheme, bias, perm)
    assert got.shape == (rows, 40) and rel(got, x @ dense.t() + bias) <= TOL[torch.float32]
    assert rel(got, ref.wq_linear(x, qweight, scale, zero, scheme, bias, perm)) <= TOL[torch.float32]
    # the order matters: the stored weight read in x's own order is another product
    assert rel(wq_gemv.wq_linear(x, qweight, scale, zero, scheme, bias), x @ dense.t() + bias) > 0.1


@pytest.mark.parametrize("rows", [1, 3, 12, 70])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant", ["residual-silu", "plain"])
def test_norm_prologue_reads_the_permuted_columns(rows, dtype, variant, poison_outputs):
    """``add_rms_norm_wq_linear`` with a ``perm`` equals the reference's gather + norm + GEMV: the norm of the
    whole row (in x's order), its columns gathered, then the GEMV (and the gated product)."""
    from anna_xpu_kernels import wq_gemv

    k, n = 384, 2 * 20  # 3 groups; 20 gated outputs
    weight, _ = _act_order_weight(n, k, dtype, seed=rows + 7)
    gen = torch.Generator().manual_seed(rows)
    x, nw = torch.randn(rows, k, generator=gen).to(dtype), torch.randn(k, generator=gen).to(dtype)
    res = torch.randn(rows, k, generator=gen).to(dtype) if variant == "residual-silu" else None
    activation = "silu" if variant == "residual-silu" else None
    qweight, scale, zero, scheme, _, perm = _tensors(weight)
    got, new_residual = wq_gemv.add_rms_norm_wq_linear(x, res, nw, EPS, True, qweight, scale, zero, scheme, activation,
                                                       perm)
    h, want_residual = ref_norms.add_rms_norm(x, res, nw, EPS, True)  # gather + norm + GEMV, one op each
    want = ref.wq_linear(h.index_select(-1, weight.perm), qweight, scale, zero, scheme, None)
    want = want if activation is None else act_and_mul(want, activation)
    assert got.shape == want.shape and rel(got, want) <= TOL[dtype]
    assert rel(new_residual, want_residual) <= TOL[dtype]
    # the same kernel on the columns gathered beforehand (what the layer launched before): the same result
    p = weight.perm
    pre, _ = wq_gemv.add_rms_norm_wq_linear(x[:, p].contiguous(), None if res is None else res[:, p].contiguous(),
                                            nw[p].contiguous(), EPS, True, qweight, scale, zero, scheme, activation)
    assert rel(got, pre) <= TOL[dtype] / 4
    # the op's torch reference agrees too
    assert rel(got, ref.add_rms_norm_wq_linear(x, res, nw, EPS, True, qweight, scale, zero, scheme, activation,
                                                perm)[0]) <= TOL[dtype]


def test_wide_rows_run_the_norm_apart_and_the_gemv_permuted(poison_outputs):
    """Past the fused norm's width the Triton norm runs first, then the GEMV reads the normalised row through
    ``perm``: still no gather launch."""
    from anna_xpu_kernels import wq_gemv

    k = wq_gemv.NORM_PROLOGUE_MAX_K + 256
    weight, _ = _act_order_weight(40, k, torch.float32, seed=2)
    gen = torch.Generator().manual_seed(1)
    x, res, nw = torch.randn(1, k, generator=gen), torch.randn(1, k, generator=gen), torch.randn(k, generator=gen)
    qweight, scale, zero, scheme, _, perm = _tensors(weight)
    got = wq_gemv.add_rms_norm_wq_linear(x, res, nw, EPS, False, qweight, scale, zero, scheme, "silu", perm)
    want = ref.add_rms_norm_wq_linear(x, res, nw, EPS, False, qweight, scale, zero, scheme, "silu", perm)
    assert got[0].shape == (1, 20) and rel(got[0], want[0]) <= TOL[torch.float32] and torch.equal(got[1], want[1])


@pytest.mark.parametrize(("perm", "match"), [
    (torch.arange(128), "perm must be \\[K=256\\] int32 or int64"),
    (torch.arange(256).float(), "perm must be \\[K=256\\] int32 or int64"),
    (torch.arange(256).view(16, 16), "perm must be \\[K=256\\] int32 or int64"),
])
def test_a_perm_of_the_wrong_shape_or_dtype_is_refused(perm, match):
    from anna_xpu_kernels import wq_gemv

    weight, _ = _act_order_weight(8, 256, torch.float32, seed=0)
    x = torch.randn(1, 256)
    with pytest.raises(ValueError, match=f"wq_linear: {match}"):
        wq_gemv.wq_linear(x, weight.qweight, weight.scale, weight.zero, "int4", None, perm)
    with pytest.raises(ValueError, match=f"add_rms_norm_wq_linear: {match}"):
        wq_gemv.add_rms_norm_wq_linear(x, None, torch.ones(256), EPS, False, weight.qweight, weight.scale, weight.zero,
                                       "int4", None, perm)


def _decode_step(model, token):
    """``(launches by kernel / aten op, aten ops of anna_core.testing's OpCounts, logits [1, V])`` of one
    single-token forward (a decode step: ``is_decode``)."""
    from anna_core.testing.host_reads import OpCounts
    from anna_core.testing.runner import prefill_logits

    from tests.xpu_kernels._launches import LaunchCounter

    with OpCounts() as ops, LaunchCounter() as counter:
        logits = prefill_logits(model, [token])
    return counter.launches, ops.ops, logits


def test_act_order_qwen35_decode_step_keeps_the_fused_norm(tmp_path, monkeypatch):
    """A tiny act-order GPTQ Qwen3.5 (hidden 256: the projections reading the hidden state have 2 scattered groups)
    through the Triton ops: its decode step gives the logits of the torch references (which gather, then multiply)
    and of the dense oracle, and launches exactly the kernels of the same checkpoint without act-order: one
    quantized GEMV per projection with the norm inside, no ``index_select``, no separate norm launch."""
    from anna_core.layers.wq_linear import WQLinear
    from anna_core.loading import load_model
    from anna_core.testing.checkpoints import build_tiny_qwen35
    from anna_core.testing.prequant_checkpoints import GPTQ, build_prequant
    from anna_core.testing.runner import prefill_logits
    from anna_xpu_kernels import wq_gemv_decode

    # the interpreter runs each program in Python: 64-row programs (8x fewer than the fixed tile) keep this fast
    monkeypatch.setattr(wq_gemv_decode._wq_decode_kernel, "configs", [wq_gemv_decode.WqConfig(64, 256).triton()])
    src = build_tiny_qwen35(tmp_path / "src", hidden_size=256, tie=False, num_layers=2)
    act_dir, dense_dir, _ = build_prequant(src, tmp_path / "act", {**GPTQ, "desc_act": True}, layout="gptq",
                                           act_order="shared")
    plain_dir, _, _ = build_prequant(src, tmp_path / "plain", GPTQ, layout="gptq")
    prompt = [7]

    def load(path):
        return load_model(path, device="cpu", dtype="fp32", family_options={"layout_cache": False}).model

    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want = prefill_logits(load(act_dir), prompt)  # the references: index_select, then the product
    oracle = prefill_logits(load(dense_dir), prompt)
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    model = load(act_dir)
    permuted = {n.rpartition(".")[2] for n, m in model.named_modules() if isinstance(m, WQLinear) and m.perm is not None}
    assert permuted == {"qkv_proj", "in_proj_all", "gate_up_proj"}  # the layers reading 2+ groups (down_proj folded)
    launches, aten_ops, got = _decode_step(model, prompt[0])
    assert rel(got, want) <= 1e-5 and rel(got, oracle) <= 1e-4
    assert model.ops.registry.chosen()["add_rms_norm_wq_linear"] == "triton"
    assert not {"aten:index_select", "aten:gather", "aten:index"} & set(launches)
    assert not {"index_select", "gather", "index"} & set(aten_ops)  # not inside the Triton launches either
    plain_launches, _, _ = _decode_step(load(plain_dir), prompt[0])
    wq = sum(isinstance(m, WQLinear) for m in model.modules())
    assert launches["triton:_wq_decode_kernel"] == wq
    kernels = {name: n for name, n in launches.items() if name.startswith("triton:")}
    assert kernels == {name: n for name, n in plain_launches.items() if name.startswith("triton:")}
