"""Released Qwen3 shapes (the text decoders of Qwen3-ASR 0.6B and 1.7B) built on the meta device: parameter counts
equal HF's ``Qwen3ForCausalLM``; one full-attention cache group over every layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_qwen35.qwen3.config import Qwen3Config
from anna_qwen35.qwen3.loader import build_model

REFERENCE_CONFIGS = Path(__file__).parent / "reference_configs"


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied head is counted once


@pytest.mark.parametrize("name", ["Qwen3-ASR-0.6B-text", "Qwen3-ASR-1.7B-text"])
def test_meta_parameter_count_matches_hf(name):
    from transformers import Qwen3Config as HFQwen3Config
    from transformers import Qwen3ForCausalLM

    raw = json.loads((REFERENCE_CONFIGS / f"{name}.json").read_text())
    cfg = Qwen3Config.from_hf(raw)
    model = build_model(cfg, bind_ops(KernelRegistry([]), "cpu", torch.bfloat16), torch.bfloat16)
    assert all(p.is_meta and p.dtype == torch.bfloat16 for p in model.parameters())
    with torch.device("meta"):
        hf = Qwen3ForCausalLM(HFQwen3Config(**{k: v for k, v in raw.items() if k != "model_type"}))
    assert _count(model) == _count(hf)
    assert cfg.tie_word_embeddings and model.lm_head is None
    [group] = model.cache_spec.groups
    assert group.kind == "full_attention" and list(group.layers) == list(range(cfg.num_hidden_layers))
    assert (group.num_kv_heads, group.head_dim) == (cfg.num_key_value_heads, 128)
