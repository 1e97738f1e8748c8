"""A tiny Qwen3 (``anna_qwen35.qwen3``) through the engine with anna-xpu-kernels' Triton kernels (interpreter): its
attention runs the fused ``qk_norm_rope_cache`` op with plain (not zero-centred) q/k norm weights and gives the
greedy tokens and logits of the model on the torch references."""

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from tests.xpu_kernels.test_gemma_fused_ops import _generate  # noqa: E402


@pytest.mark.parametrize("case", [{"tie": False}, {"tie": True, "attention_bias": True, "num_kv_heads": 1}],
                         ids=["gqa", "mqa-bias"])
def test_qwen3_through_triton_kernels_matches_reference(tmp_path, monkeypatch, case):
    from anna_qwen35.qwen3.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path / "q", seed=4, **case)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 300, (n,), generator=gen).tolist() for n in (5, 11)]
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want, chosen_ref = _generate(path, prompts)
    assert set(chosen_ref.values()) == {"reference"} and "qk_norm_rope_cache" not in chosen_ref
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    got, chosen = _generate(path, prompts)
    assert chosen["qk_norm_rope_cache"] == chosen["paged_attention"] == "triton"
    assert "reshape_and_cache" not in chosen  # the cache write runs inside the fused op
    assert got == want


def test_fused_prefill_logits_match_the_reference_path(monkeypatch, tmp_path):
    """Prefill logits of the fused path (Triton under the interpreter) against the unfused torch references, float32."""
    from anna_core.loading import load_model
    from anna_core.testing.runner import prefill_logits
    from anna_qwen35.qwen3.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path / "q", seed=9, rope_parameters={"rope_type": "linear",
                                                                          "rope_theta": 10000.0, "factor": 2.0})
    prompt = torch.randint(3, 300, (13,), generator=torch.Generator().manual_seed(3)).tolist()
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want = prefill_logits(load_model(path, device="cpu", dtype="fp32").model, prompt, chunk_size=5, block_size=4)
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    gemv = ("linear", "add_rms_norm_linear", "act_mul_linear", "linear_act_mul", "add_rms_norm_linear_act_mul")
    loaded = load_model(path, device="cpu", dtype="fp32", disable_kernels=tuple(f"{op}:triton" for op in gemv))
    assert loaded.model.ops.accelerated("qk_norm_rope_cache", head_dim=32) is not None
    got = prefill_logits(loaded.model, prompt, chunk_size=5, block_size=4)
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
