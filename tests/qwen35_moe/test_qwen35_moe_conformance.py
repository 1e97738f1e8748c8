"""anna-qwen35's mixture-of-experts models pass the family conformance suite (:mod:`anna_core.testing.conformance`):
the family's tiny MoE checkpoint (``tiny_checkpoint("qwen35", variant="moe")``: routed and shared experts on gated
DeltaNet and full-attention layers), and the family's parsers on Qwen3.5's completions. The family's
``tiny_checkpoint`` builder writes both variants, each a folder the family loads with HF's logits."""

import json

import pytest
from anna_core.testing.conformance import FamilyConformance
from anna_qwen35.tiny import build_tiny_checkpoint

from tests.qwen35.parser_samples import QWEN_SAMPLES


class TestQwen35MoeConformance(FamilyConformance):
    family = "qwen35"
    parser_samples = QWEN_SAMPLES

    def build_checkpoint(self, path):
        build_tiny_checkpoint(path, variant="moe", num_experts=8, top_k=2, seed=3)


@pytest.mark.parametrize("layout, model_type", [("text", "qwen3_5_moe_text"), ("vl", "qwen3_5_moe")])
def test_the_family_offers_a_tiny_moe_checkpoint(tiny_checkpoint, anna_plugin_manager, layout, model_type):
    """``tiny_checkpoint("qwen35", variant="moe", ...)`` writes a Qwen3.5 MoE folder the family loads, with its
    tokenizer, whose logits are HF's."""
    from anna_core.testing.tiny import load_against_hf

    folder = tiny_checkpoint("qwen35", variant="moe", layout=layout, seed=2)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == model_type
    text = config.get("text_config", config)
    assert (text["num_experts"], text["num_experts_per_tok"]) == (8, 2)
    loaded, error = load_against_hf(folder, pm=anna_plugin_manager)
    assert loaded.family == "qwen35" and loaded.tokenizer is not None
    assert error <= 1e-4


def test_the_tiny_checkpoint_builder_names_its_variants(tmp_path):
    with pytest.raises(ValueError, match=r"unknown Qwen3.5 variant 'vision'; use one of \('dense', 'moe', 'vl', 'vl-moe'\)"):
        build_tiny_checkpoint(tmp_path, variant="vision")
    assert json.loads((build_tiny_checkpoint(tmp_path / "d", seed=1) / "config.json").read_text())["model_type"] == \
        "qwen3_5_text"


@pytest.mark.parametrize("variant, model_type", [("vl", "qwen3_5"), ("vl-moe", "qwen3_5_moe")])
def test_the_family_offers_a_tiny_vision_language_checkpoint(tiny_checkpoint, anna_plugin_manager, variant, model_type):
    """``tiny_checkpoint("qwen35", variant="vl" | "vl-moe")`` writes a checkpoint that takes images and video: the
    family loads its vision tower and processor."""
    from anna_core.loading import load_model

    folder = tiny_checkpoint("qwen35", variant=variant, seed=4)
    assert json.loads((folder / "config.json").read_text())["model_type"] == model_type
    loaded = load_model(folder, device="cpu", dtype="fp32", pm=anna_plugin_manager)
    assert loaded.family == "qwen35" and loaded.processor is not None
    assert set(loaded.model.capabilities.modalities) == {"image", "video"}
