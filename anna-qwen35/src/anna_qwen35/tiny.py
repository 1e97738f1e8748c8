"""Tiny random Qwen3.5 checkpoints, saved with transformers' own classes: the family's ``tiny_checkpoint`` builder
(``ModelFamilySpec.tiny_checkpoint``) covers the dense models (:func:`anna_core.testing.checkpoints.build_tiny_qwen35`)
and the mixture-of-experts ones (:func:`build_tiny_qwen35_moe`, ``model_type`` ``qwen3_5_moe_text`` or, in the
vision-language layout, ``qwen3_5_moe``), which the family's tests use too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

VARIANTS = ("dense", "moe", "vl", "vl-moe")

HIDDEN = 64
MOE_INTERMEDIATE = 32
SHARED_INTERMEDIATE = 48
ROUTER_SCALE = 8.0
"""Router weights are multiplied by this so that, on the test prompts, the k-th and (k+1)-th router
probabilities of every token differ clearly (the tests check the margin)."""


def build_tiny_qwen35_moe(path: str | Path, *, layout: str = "text", num_experts: int = 8, top_k: int = 2,
                          fused: bool = False, tie: bool = False, seed: int = 0,
                          layer_types: tuple[str, ...] | None = None, hidden_size: int = HIDDEN,
                          moe_intermediate_size: int = MOE_INTERMEDIATE) -> Path:
    """Save a tiny random Qwen3.5 MoE checkpoint with transformers (4 layers: by default linear, full, linear,
    full; ``layer_types`` overrides).

    Args:
        layout: ``"text"`` (``Qwen3_5MoeForCausalLM``, ``model.*``) or ``"vl"``
            (``Qwen3_5MoeForConditionalGeneration`` with a tiny vision tower, ``model.language_model.*``).
        num_experts, top_k: routed experts, and how many each token uses (a shared expert besides).
        fused: rewrite the expert tensors transformers saves (per expert, ``mlp.experts.{e}.*``) as the
            fused ``mlp.experts.gate_up_proj [E, 2I, H]`` / ``mlp.experts.down_proj [E, H, I]``.
        tie: tie the LM head to the embeddings.
        seed: weights seed (norms, ``dt_bias`` and the experts randomised too; routers scaled by ``ROUTER_SCALE``).
        hidden_size, moe_intermediate_size: ``H`` and the routed experts' ``I`` (128 each lets int4 groups of 128
            fit the experts, for ``--expert-quant`` tests).

    Returns:
        ``Path(path)``, with the tiny tokenizer of :mod:`anna_core.testing` and ``generation_config.json``.
    """
    if layout not in ("text", "vl"):
        raise ValueError(f"layout must be 'text' or 'vl', got {layout!r}")
    from anna_core.testing.checkpoints import build_tiny_tokenizer, text_config_kwargs, tiny_vision_config
    from anna_core.testing.oracle import hide_fla

    hide_fla()
    from transformers import (
        Qwen3_5MoeConfig,
        Qwen3_5MoeForCausalLM,
        Qwen3_5MoeForConditionalGeneration,
        Qwen3_5MoeTextConfig,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    text = text_config_kwargs(
        vocab_size=384, hidden_size=hidden_size, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_head_dim=16, intermediate_size=0,
        layer_types=None if layer_types is None else list(layer_types), tie=tie, initializer_range=0.1,
        eos_ids=[2, 0])
    text.pop("intermediate_size")
    text.update(num_experts=num_experts, num_experts_per_tok=top_k, moe_intermediate_size=moe_intermediate_size,
                shared_expert_intermediate_size=SHARED_INTERMEDIATE)
    if layout == "text":
        config = Qwen3_5MoeTextConfig(**text)
        config.architectures = ["Qwen3_5MoeForCausalLM"]
        cls = Qwen3_5MoeForCausalLM
    else:
        config = Qwen3_5MoeConfig(text_config=text, vision_config=tiny_vision_config(hidden_size), tie_word_embeddings=tie)
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


def build_tiny_checkpoint(path: str | Path, *, variant: str = "dense", **overrides: Any) -> Path:
    """The family's ``tiny_checkpoint`` builder: a tiny random Qwen3.5 of ``variant`` in ``path``.

    Args:
        variant: ``"dense"`` (:func:`~anna_core.testing.checkpoints.build_tiny_qwen35`), ``"moe"``
            (:func:`build_tiny_qwen35_moe`), or ``"vl"`` / ``"vl-moe"``: a checkpoint that takes images and video
            (:func:`~anna_core.testing.checkpoints.build_tiny_qwen35_vl`, dense or mixture-of-experts).
        overrides: that builder's keyword arguments (``layout="vl"``, ``tie``, ``seed``, ...).

    Raises:
        ValueError: an unknown variant.
    """
    if variant == "dense":
        from anna_core.testing.checkpoints import build_tiny_qwen35

        return build_tiny_qwen35(path, **overrides)
    if variant == "moe":
        return build_tiny_qwen35_moe(path, **overrides)
    if variant in ("vl", "vl-moe"):
        from anna_core.testing.checkpoints import build_tiny_qwen35_vl

        return build_tiny_qwen35_vl(path, moe=variant == "vl-moe", **overrides)
    raise ValueError(f"unknown Qwen3.5 variant {variant!r}; use one of {VARIANTS}")
