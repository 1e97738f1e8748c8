"""Released Qwen3.5 shapes built on the meta device: parameter counts equal HF's text model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_qwen35.config import Qwen35Config
from anna_qwen35.loader import build_model

REFERENCE_CONFIGS = Path(__file__).parent / "reference_configs"
DENSE = ["Qwen3.5-0.8B", "Qwen3.5-2B", "Qwen3.5-4B", "Qwen3.5-9B", "Qwen3.5-27B"]


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # shared (tied) parameters counted once


@pytest.mark.parametrize("name", DENSE)
def test_meta_parameter_count_matches_hf(name):
    from anna_core.testing.oracle import hide_fla

    hide_fla()
    from transformers import AutoConfig, AutoModelForCausalLM

    config = json.loads((REFERENCE_CONFIGS / name / "config.json").read_text())
    cfg = Qwen35Config.from_hf(config)
    model = build_model(cfg, bind_ops(KernelRegistry([]), "cpu", torch.bfloat16), torch.bfloat16)
    assert all(p.is_meta for p in model.parameters())
    hf_config = AutoConfig.from_pretrained(REFERENCE_CONFIGS / name)
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(hf_config)
    assert _count(model) == _count(hf)
    spec = model.cache_spec
    attention, recurrent = spec.groups
    assert sorted(attention.layers + recurrent.layers) == list(range(cfg.num_hidden_layers))
    assert attention.kind == "full_attention" and recurrent.kind == "recurrent"
    assert attention.head_dim == 256 and recurrent.state_shape[1:] == (128, 128)
