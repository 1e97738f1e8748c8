"""Qwen3-ASR passes the family conformance suite (:mod:`anna_core.testing.conformance`) on its tiny checkpoint:
its text path (prompts without audio: HF's model embeds the same tokens and runs the same decoder) through logits,
greedy tokens, batching, prefix caching, chunked prefill, cache release and the HTTP chat route. The audio path
has its own parity tests (``test_qwen3_asr_parity.py``)."""

from anna_audio.qwen3_asr.tiny import build_tiny_checkpoint
from anna_core.testing.conformance import FamilyConformance


class TestQwen3ASRConformance(FamilyConformance):
    family = "qwen3_asr"
    greedy_tokens = 16

    def build_checkpoint(self, path):
        build_tiny_checkpoint(path, tie=False, seed=5)


def test_the_family_offers_a_tiny_checkpoint(tiny_checkpoint):
    import json

    path = tiny_checkpoint("qwen3_asr", seed=3)
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "qwen3_asr" and "thinker_config" not in config
    original = tiny_checkpoint("qwen3_asr", layout="original")
    assert "thinker_config" in json.loads((original / "config.json").read_text())
