"""The Triton kernels of the ops Gemma's decoder fuses (``post_norm_residual``, ``q_norm_rope``, and the MoE
layer's ``dual_post_norm_residual`` and ``rms_norm_pair``) against their torch references (interpreter), and a tiny Gemma 4 (E2B style: KV sharing, per-layer embeddings) and
Gemma 3 through the engine with the Triton kernels giving the reference model's greedy tokens."""

import pytest
import torch
from anna_core.kernels.reference import norms as ref_norms
from anna_core.kernels.reference import qk_norm_rope as ref_qk
from anna_core.layers.rotary import RotaryEmbedding

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels.norms import (
    dual_post_norm_residual,
    post_norm_residual,
    post_norm_residual_norm_pair,
    rms_norm_pair,
)
from anna_xpu_kernels.qk_norm_rope import q_norm_rope


@pytest.fixture(autouse=True)
def _fused_attention_opted_in(monkeypatch):
    """The fused Gemma 4 attention pre-processing (``q_norm_rope_attention``, ``qkv_norm_rope_cache_attention``) and
    per-layer-input block (``post_norm_residual_gated_linear``) are opt-in until measured on a GPU; these tests run
    the models with them."""
    monkeypatch.setenv("ANNA_Q_NORM_ROPE_ATTENTION", "1")
    monkeypatch.setenv("ANNA_QKV_NORM_ROPE_ATTENTION", "1")
    monkeypatch.setenv("ANNA_POST_NORM_GATED_LINEAR", "1")


def _tol(dtype):
    return tol(dtype) if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}  # two bf16 roundings in a row


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("scaled,with_next,zero_centered", [(True, True, False), (False, False, False),
                                                            (False, True, True)])
def test_post_norm_residual_matches_reference(poison_outputs, dtype, scaled, with_next, zero_centered):
    gen = torch.Generator().manual_seed(7)
    T, D = 5, 48  # D not a power of two: masked columns
    x, residual = (3 * torch.randn(2, T, D, generator=gen)).to(dtype)
    w, nw = (1 + 0.3 * torch.randn(2, D, generator=gen)).to(dtype)
    scale = torch.tensor([0.37], dtype=dtype) if scaled else None
    got_y, got_r = post_norm_residual(x, residual, w, 1e-6, zero_centered, scale, nw if with_next else None)
    want_y, want_r = ref_norms.post_norm_residual(x, residual, w, 1e-6, zero_centered, scale,
                                                  nw if with_next else None)
    torch.testing.assert_close(got_r, want_r, **_tol(dtype))
    assert (got_y is None) == (want_y is None) == (not with_next)
    if with_next:
        torch.testing.assert_close(got_y, want_y, **_tol(dtype))
    # the reference is the torch expression the unfused decoder computed
    manual = residual + ref_norms.rms_norm(x, w, 1e-6, zero_centered)
    if scaled:
        manual = manual * scale
    torch.testing.assert_close(want_r, manual, rtol=0, atol=0)


def test_post_norm_residual_bad_arguments():
    x = torch.zeros(2, 8)
    with pytest.raises(ValueError, match="scale must hold one element"):
        post_norm_residual(x, x, torch.ones(8), 1e-6, False, torch.ones(2), None)
    for impl in (post_norm_residual, ref_norms.post_norm_residual):  # a float32 scale on bf16 rows
        with pytest.raises(ValueError, match="of x's dtype"):
            impl(x.bfloat16(), x.bfloat16(), torch.ones(8), 1e-6, False, torch.ones(1), None)
    with pytest.raises(ValueError, match="next_weight must be"):
        post_norm_residual(x, x, torch.ones(8), 1e-6, False, None, torch.ones(7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("T,D,scaled,with_next,zero_centered", [(5, 48, True, True, False), (3, 2816, True, True, False),
                                                                (2, 640, False, False, False), (4, 96, True, False, True)])
def test_dual_post_norm_residual_matches_reference(poison_outputs, dtype, T, D, scaled, with_next, zero_centered):
    gen = torch.Generator().manual_seed(D)
    x1, x2, residual = (3 * torch.randn(3, T, D, generator=gen)).to(dtype)
    w1, w2, w, nw = (1 + 0.3 * torch.randn(4, D, generator=gen)).to(dtype)
    scale = torch.tensor([0.37], dtype=dtype) if scaled else None
    args = (x1, w1, x2, w2, residual, w, 1e-6, zero_centered, scale, nw if with_next else None)
    got_y, got_r = dual_post_norm_residual(*args)
    want_y, want_r = ref_norms.dual_post_norm_residual(*args)
    torch.testing.assert_close(got_r, want_r, **_tol(dtype))
    assert (got_y is None) == (want_y is None) == (not with_next)
    if with_next:
        torch.testing.assert_close(got_y, want_y, **_tol(dtype))
    # the reference is the torch expression of the unfused Gemma 4 MoE tail, bit for bit
    m = ref_norms.rms_norm(x1, w1, 1e-6, zero_centered) + ref_norms.rms_norm(x2, w2, 1e-6, zero_centered)
    manual_y, manual_r = ref_norms.post_norm_residual(m, residual, w, 1e-6, zero_centered, scale,
                                                      nw if with_next else None)
    torch.testing.assert_close(want_r, manual_r, rtol=0, atol=0)
    if with_next:
        torch.testing.assert_close(want_y, manual_y, rtol=0, atol=0)


def test_dual_post_norm_residual_bad_arguments():
    x = torch.zeros(2, 8)
    for impl in (dual_post_norm_residual, ref_norms.dual_post_norm_residual):
        with pytest.raises(ValueError, match="x2 must match"):
            impl(x, torch.ones(8), torch.zeros(2, 7), torch.ones(8), x, torch.ones(8), 1e-6, False, None, None)
        with pytest.raises(ValueError, match="residual must match"):
            impl(x, torch.ones(8), x, torch.ones(8), x.bfloat16(), torch.ones(8), 1e-6, False, None, None)
    with pytest.raises(ValueError, match="weight_2 must be"):
        dual_post_norm_residual(x, torch.ones(8), x, torch.ones(7), x, torch.ones(8), 1e-6, False, None, None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("T,D,zero_centered", [(5, 48, False), (3, 2816, False), (2, 640, True)])
def test_rms_norm_pair_matches_reference(poison_outputs, dtype, T, D, zero_centered):
    gen = torch.Generator().manual_seed(D + 1)
    x = (3 * torch.randn(T, D, generator=gen)).to(dtype)
    w, sw = (1 + 0.3 * torch.randn(2, D, generator=gen)).to(dtype)
    factor = D ** -0.5
    got_y, got_s = rms_norm_pair(x, w, 1e-6, zero_centered, sw, factor)
    want_y, want_s = ref_norms.rms_norm_pair(x, w, 1e-6, zero_centered, sw, factor)
    torch.testing.assert_close(got_y, want_y, **_tol(dtype))
    torch.testing.assert_close(got_s, want_s, **_tol(dtype))
    # the reference: the unfused norm, and transformers' router expression (rounded after each step), bit for bit
    torch.testing.assert_close(want_y, ref_norms.rms_norm(x, w, 1e-6, zero_centered), rtol=0, atol=0)
    ones = torch.ones(D, dtype=dtype)
    torch.testing.assert_close(want_s, ref_norms.rms_norm(x, ones, 1e-6, False) * sw * factor, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("T,D,zero_centered", [(5, 48, False), (3, 2816, False), (2, 640, True)])
def test_post_norm_residual_norm_pair_matches_reference(poison_outputs, dtype, T, D, zero_centered):
    gen = torch.Generator().manual_seed(D + 2)
    x, residual = (3 * torch.randn(2, T, D, generator=gen)).to(dtype)
    w, nw, pw, sw = (1 + 0.3 * torch.randn(4, D, generator=gen)).to(dtype)
    args = (x, residual, w, 1e-6, zero_centered, nw, pw, sw, D ** -0.5)
    got, want = post_norm_residual_norm_pair(*args), ref_norms.post_norm_residual_norm_pair(*args)
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r, **_tol(dtype))
    # the reference is the unfused post_norm_residual, then rms_norm_pair of its new residual, bit for bit
    y, r = ref_norms.post_norm_residual(x, residual, w, 1e-6, zero_centered, None, nw)
    for a, b in zip(want, (y, *ref_norms.rms_norm_pair(r, pw, 1e-6, zero_centered, sw, D ** -0.5), r), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim,rope", [(32, {"rope_theta": 1e4}),
                                      (64, {"rope_type": "proportional", "rope_theta": 1e6,
                                            "partial_rotary_factor": 0.25})])
def test_q_norm_rope_matches_reference(poison_outputs, dtype, dim, rope):
    gen = torch.Generator().manual_seed(dim)
    T, H = 4, 3
    merged = torch.randn(T, H * dim + 16, generator=gen).to(dtype)
    q = merged[:, : H * dim].view(T, H, dim)  # a strided column slice, as the merged projection gives it
    w = (1 + 0.2 * torch.randn(dim, generator=gen)).to(dtype)
    positions = torch.tensor([0, 5, 77, 1000])
    inv_freq = RotaryEmbedding(dim, dim, rope)._inv_freq
    got = q_norm_rope(q, w, 1e-6, False, positions, inv_freq)
    want = ref_qk.q_norm_rope(q, w, 1e-6, False, positions, inv_freq)
    assert got.shape == (T, H, dim) and got.is_contiguous()
    torch.testing.assert_close(got, want, **_tol(dtype))
    # the reference equals the unfused norm + rotary
    rot = RotaryEmbedding(dim, dim, rope)
    torch.testing.assert_close(want, rot.rotate(ref_norms.rms_norm(q, w, 1e-6, False), rot.cos_sin(positions)),
                               rtol=0, atol=0)


def test_registered_ops(monkeypatch):
    from anna_core.kernels import KernelRegistry, ProbeRequest
    from anna_core.plugins import make_plugin_manager

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get("q_norm_rope", ProbeRequest("cpu", "float32", {"head_dim": 512})) is q_norm_rope
    assert registry.get("post_norm_residual", ProbeRequest("cpu", "bfloat16")) is post_norm_residual
    assert registry.get("dual_post_norm_residual", ProbeRequest("cpu", "bfloat16")) is dual_post_norm_residual
    assert registry.get("rms_norm_pair", ProbeRequest("cpu", "float32", {"dim": 2816})) is rms_norm_pair
    assert registry.get("rms_norm_pair", ProbeRequest("cpu", "float32", {"dim": 32768})) is ref_norms.rms_norm_pair
    assert registry.get("post_norm_residual_norm_pair", ProbeRequest("cpu", "bfloat16")) is post_norm_residual_norm_pair
    assert registry.get("q_norm_rope", ProbeRequest("cpu", "float32")) is ref_qk.q_norm_rope


def _generate(path, prompts, *, dtype="fp32"):
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.sampling_params import SamplingParams
    from anna_core.loading import load_model
    from anna_core.testing.engine_run import run_to_completion

    # the GEMV kernels are tested elsewhere, and slow under the interpreter: the projections stay torch here
    gemv = ("linear", "add_rms_norm_linear", "act_mul_linear", "linear_act_mul", "add_rms_norm_linear_act_mul")
    loaded = load_model(path, device="cpu", dtype=dtype, disable_kernels=tuple(f"{op}:triton" for op in gemv))
    engine = LLMEngine.from_loaded(loaded, EngineConfig(max_num_seqs=4, num_blocks=64, block_size=4,
                                                        max_model_len=96, max_prefill_tokens=2048,
                                                        enable_prefix_caching=False))
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    outs = run_to_completion(engine, prompts, params, prefix="")
    for out in outs:
        assert out.error is None, out.error
    return [list(out.token_ids) for out in outs], engine.runner.model.ops.registry.chosen()


@pytest.mark.parametrize("family", ["gemma4-e2b", "gemma4-moe", "gemma3"])
def test_gemma_through_triton_kernels_matches_reference(tmp_path, monkeypatch, family):
    if family == "gemma3":
        from tests.gemma3.tiny import build_tiny_gemma3 as build

        path = build(tmp_path / "g")
    else:
        from tests.gemma4.tiny import build_tiny_gemma4

        path = build_tiny_gemma4(tmp_path / "g", variant=family.removeprefix("gemma4-"))
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 300, (n,), generator=gen).tolist() for n in (4, 9)]
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want, chosen_ref = _generate(path, prompts)
    assert set(chosen_ref.values()) == {"reference"} and "qk_norm_rope_cache" not in chosen_ref
    assert "qkv_norm_rope_cache" not in chosen_ref
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    got, chosen = _generate(path, prompts)
    # Gemma 4's q/k/v norms, rotary, cache write and attention run as one op (qkv_norm_rope_cache_attention: one
    # launch at decode, the pre-processing kernel then the attention kernel for prompts); Gemma 3 has no v norm
    if family == "gemma3":
        assert chosen["qk_norm_rope_cache"] == chosen["paged_attention"] == "triton"
    else:
        assert chosen["qkv_norm_rope_cache_attention"] == "triton"
        assert "qk_norm_rope_cache" not in chosen and "qkv_norm_rope_cache" not in chosen
    assert chosen.get("post_norm_residual") == (None if family == "gemma4-moe" else "triton")  # MoE: the fused tails
    if family == "gemma4-e2b":
        # KV-shared layers (the query norm and rotary inside the attention), the per-layer-input block in one op
        # (prompts: its two unfused kernels inside it, not chosen apart)
        assert chosen["q_norm_rope_attention"] == chosen["post_norm_residual_gated_linear"] == "triton"
        assert "q_norm_rope" not in chosen and "gated_linear" not in chosen
        assert chosen["post_norm_residual_linear"] == "triton"  # the tails inside the next projections
    if family == "gemma4-moe":  # the MoE layers' fused norms, router and experts
        fused = ("post_norm_residual_norm_pair", "dual_post_norm_residual", "moe_route", "moe_experts")
        assert all(chosen[op] == "triton" for op in fused) and "rms_norm_pair" not in chosen
    assert "reshape_and_cache" not in chosen  # the cache write runs inside the fused op
    assert got == want


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("activation", ["gelu_tanh", "silu"])
def test_gated_linear_matches_reference(poison_outputs, dtype, rows, activation):
    from anna_core.kernels.reference.fused_linear import gated_linear as reference
    from anna_xpu_kernels.fused_linear import gated_linear

    gen = torch.Generator().manual_seed(rows)
    K, N, L = 40, 24, 3
    gate = torch.randn(rows, K, generator=gen).to(dtype)
    table = torch.randn(rows, L, K, generator=gen).to(dtype)
    up = table[:, 1]  # a strided row view, as the per-layer inputs [T, L, P] give it
    w = (torch.randn(N, K, generator=gen) * K**-0.5).to(dtype)
    got = gated_linear(gate, up, w, activation)
    want = reference(gate, up, w, activation)
    assert got.shape == (rows, N)
    torch.testing.assert_close(got, want, **_tol(dtype))
    with pytest.raises(ValueError, match="gate and up must be one"):
        gated_linear(gate, up[:, :-1], w, activation)


def test_gemma4_moe_layers_through_the_triton_norm_kernels(tmp_path, monkeypatch):
    """The tiny Gemma 4 MoE model with the Triton ``post_norm_residual_norm_pair`` and ``dual_post_norm_residual``
    (every other op its torch reference, to keep this fast) gives the all-reference logits (there: the attention
    tail as ``post_norm_residual`` then ``rms_norm_pair``), for a prefill and for decode-sized steps."""
    from anna_core.kernels.registry import KernelRegistry
    from anna_core.model_dir import inspect_model_dir
    from anna_core.testing.runner import prefill_logits
    from anna_gemma4.loader import load
    from anna_xpu_kernels.plugin import TRITON_KERNELS

    from tests.gemma4.tiny import build_tiny_gemma4

    fused = ("post_norm_residual_norm_pair", "dual_post_norm_residual")
    path = build_tiny_gemma4(tmp_path / "g", variant="moe")
    prompt = [5, 17, 33, 101, 7, 250, 3, 64]

    def model(triton: bool):
        if triton:
            monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
        else:
            monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
        registry = KernelRegistry.from_plugins(disabled=[f"{op}:triton" for op in TRITON_KERNELS if op not in fused])
        return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=torch.float32, load_format="auto",
                    kernels=registry).model

    want = prefill_logits(model(False), prompt)
    anna = model(True)
    got, got_steps = prefill_logits(anna, prompt), prefill_logits(anna, prompt[:3], chunk_size=1)
    chosen = anna.ops.registry.chosen()
    assert all(chosen[op] == "triton" for op in fused)
    # the attention tail's one launch gives the stream and the MLP's, experts' and router's inputs
    assert "rms_norm_pair" not in chosen and "post_norm_residual" not in chosen
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_steps, want[:3], atol=1e-4, rtol=1e-4)
