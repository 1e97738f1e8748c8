"""The tiny Qwen3.5 MoE and Gemma 4 MoE models with the Triton moe_route and moe_experts ops (interpreter;
every other op stays with its torch reference, to keep this fast) give the logits of the all-reference
models."""

import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()


MOE_OPS = ("moe_route", "moe_experts")


def _load(family_loader, path, monkeypatch, *, triton_moe: bool):
    from anna_core.kernels.registry import KernelRegistry
    from anna_core.model_dir import inspect_model_dir
    from anna_xpu_kernels.plugin import TRITON_KERNELS

    if triton_moe:
        monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    else:
        monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    others = [f"{op}:triton" for op in TRITON_KERNELS if op not in MOE_OPS]
    registry = KernelRegistry.from_plugins(disabled=others)
    return family_loader(inspect_model_dir(path), device=torch.device("cpu"), dtype=torch.float32,
                         load_format="auto", kernels=registry).model


def _logits_both_ways(loader, path, monkeypatch, prompt):
    from anna_core.testing.runner import prefill_logits

    want = prefill_logits(_load(loader, path, monkeypatch, triton_moe=False), prompt)
    model = _load(loader, path, monkeypatch, triton_moe=True)
    got = prefill_logits(model, prompt)  # 10 tokens at once, then two single-token (decode-sized) steps
    got_steps = prefill_logits(model, prompt[:2], chunk_size=1)
    assert all(model.ops.registry.chosen()[op] == "triton" for op in MOE_OPS)
    return got, got_steps, want


PROMPT = [5, 17, 33, 101, 7, 250, 3, 64, 90, 12]


def test_qwen35_moe_with_the_triton_router_and_experts(tmp_path, monkeypatch):
    from anna_qwen35.loader import load
    from anna_qwen35.tiny import build_tiny_qwen35_moe

    path = build_tiny_qwen35_moe(tmp_path / "qwen", num_experts=8, top_k=2, fused=True)
    got, got_steps, want = _logits_both_ways(load, path, monkeypatch, PROMPT)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_steps, want[:2], atol=1e-4, rtol=1e-4)


def test_gemma4_moe_with_the_triton_router_and_experts(tmp_path, monkeypatch):
    from anna_gemma4.loader import load

    from tests.gemma4.tiny import build_tiny_gemma4

    path = build_tiny_gemma4(tmp_path / "gemma", variant="moe")
    got, got_steps, want = _logits_both_ways(load, path, monkeypatch, PROMPT)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_steps, want[:2], atol=1e-4, rtol=1e-4)
