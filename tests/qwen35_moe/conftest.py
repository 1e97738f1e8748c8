"""Tiny random Qwen3.5 MoE checkpoints (saved by transformers) and helpers of the MoE tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

HIDDEN = 64
MOE_INTERMEDIATE = 32
SHARED_INTERMEDIATE = 48
ROUTER_SCALE = 8.0
"""Router weights are multiplied by this so that, on the test prompts, the k-th and (k+1)-th router
probabilities of every token differ clearly (the tests check the margin)."""


def build_tiny_qwen35_moe(path: Path, *, layout: str = "text", num_experts: int = 8, top_k: int = 2,
                          fused: bool = False, tie: bool = False, seed: int = 0,
                          layer_types: tuple[str, ...] | None = None) -> Path:
    """Save a tiny random Qwen3.5 MoE checkpoint with transformers (4 layers: by default linear, full, linear,
    full; ``layer_types`` overrides).

    Args:
        layout: ``"text"`` (``Qwen3_5MoeForCausalLM``, ``model.*``) or ``"vl"``
            (``Qwen3_5MoeForConditionalGeneration`` with a tiny vision tower, ``model.language_model.*``).
        fused: rewrite the expert tensors transformers saves (per expert, ``mlp.experts.{e}.*``) as the
            fused ``mlp.experts.gate_up_proj [E, 2I, H]`` / ``mlp.experts.down_proj [E, H, I]``.
    """
    from anna_core.testing.checkpoints import _text_config_kwargs, build_tiny_tokenizer
    from anna_core.testing.oracle import hide_fla

    hide_fla()
    from transformers import (
        Qwen3_5MoeConfig,
        Qwen3_5MoeForCausalLM,
        Qwen3_5MoeForConditionalGeneration,
        Qwen3_5MoeTextConfig,
    )

    path.mkdir(parents=True, exist_ok=True)
    text = _text_config_kwargs(
        vocab_size=384, hidden_size=HIDDEN, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_head_dim=16, intermediate_size=0,
        layer_types=None if layer_types is None else list(layer_types), tie=tie, initializer_range=0.1,
        eos_ids=[2, 0])
    text.pop("intermediate_size")
    text.update(num_experts=num_experts, num_experts_per_tok=top_k, moe_intermediate_size=MOE_INTERMEDIATE,
                shared_expert_intermediate_size=SHARED_INTERMEDIATE)
    if layout == "text":
        config = Qwen3_5MoeTextConfig(**text)
        config.architectures = ["Qwen3_5MoeForCausalLM"]
        cls = Qwen3_5MoeForCausalLM
    else:
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=HIDDEN,
                      patch_size=4, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)
        config = Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=tie)
        config.architectures = ["Qwen3_5MoeForConditionalGeneration"]
        cls = Qwen3_5MoeForConditionalGeneration
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        for name, param in model.named_parameters():
            if param.dim() == 1:  # norms, dt_bias: off their init values
                param.add_(torch.randn(param.shape, generator=gen) * 0.2)
            if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
                param.normal_(0.0, 0.1, generator=gen)  # HF leaves them empty until init
            if name.endswith("mlp.gate.weight"):
                param.normal_(0.0, 0.1 * ROUTER_SCALE, generator=gen)
    model.save_pretrained(str(path))
    if fused:
        restack(path, to_fused=True)
    build_tiny_tokenizer(path)
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": [2, 0],
                                                             "pad_token_id": 0}))
    return path


def restack(path: Path, *, to_fused: bool) -> None:
    """Rewrite ``path``'s single-file checkpoint between the per-expert and fused expert layouts."""
    import re

    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path / "model.safetensors"))
    out: dict[str, torch.Tensor] = {}
    if to_fused:
        per: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
        for name, t in tensors.items():
            m = re.match(r"(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$", name)
            if m:
                per.setdefault(m[1], {}).setdefault(int(m[2]), {})[m[3]] = t
            else:
                out[name] = t
        for prefix, experts in per.items():
            order = [experts[e] for e in sorted(experts)]
            out[prefix + ".gate_up_proj"] = torch.stack([torch.cat([w["gate_proj"], w["up_proj"]]) for w in order])
            out[prefix + ".down_proj"] = torch.stack([w["down_proj"] for w in order])
    else:
        for name, t in tensors.items():
            if name.endswith(".mlp.experts.gate_up_proj"):
                gate, up = t.chunk(2, dim=1)
                for e in range(t.shape[0]):
                    out[f"{name[:-len('gate_up_proj')]}{e}.gate_proj.weight"] = gate[e].contiguous()
                    out[f"{name[:-len('gate_up_proj')]}{e}.up_proj.weight"] = up[e].contiguous()
            elif name.endswith(".mlp.experts.down_proj"):
                for e in range(t.shape[0]):
                    out[f"{name[:-len('down_proj')]}{e}.down_proj.weight"] = t[e].contiguous()
            else:
                out[name] = t
    save_file(out, str(path / "model.safetensors"), metadata={"format": "pt"})


@pytest.fixture(scope="session")
def tiny_moe_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    built: dict[tuple[tuple[str, Any], ...], Path] = {}

    def build(**kwargs: Any) -> Path:
        key = tuple(sorted(kwargs.items()))
        if key not in built:
            built[key] = build_tiny_qwen35_moe(tmp_path_factory.mktemp("tiny-qwen35-moe"), **kwargs)
        return built[key]

    return build


@pytest.fixture(scope="session")
def prompt() -> list[int]:
    gen = torch.Generator().manual_seed(4321)
    return torch.randint(3, 320, (40,), generator=gen).tolist()
