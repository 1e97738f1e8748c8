"""``Qwen3ForCausalLM.hf_export`` (what ``anna bench --compare-hf`` runs transformers on): HF's ``Qwen3ForCausalLM``
built over Anna's own tensors gives the checkpoint's logits, shares Anna's storage (no copy) and runs the bench's
timed ``generate`` path; a dummy load of a released shape exports too."""

from __future__ import annotations

import pytest
import torch
from anna_core.bench.hf_compare import build_hf, hf_generate_time
from anna_core.errors import ModelLoadError
from anna_core.testing.oracle import hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_qwen35.qwen3.tiny import build_tiny_checkpoint

from tests.qwen3.conftest import load_anna, rel_err

PROMPT = [5, 17, 99, 3, 250, 42, 7, 7, 130, 64, 11, 200, 31, 8, 77]


@torch.inference_mode()
def _hf_logits(hf, ids: list[int]) -> torch.Tensor:
    return hf(torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("case", [{"tie": False}, {"tie": True, "attention_bias": True}], ids=["untied", "tied-bias"])
def test_hf_over_annas_tensors_gives_the_checkpoints_logits(tmp_path, case):
    path = build_tiny_checkpoint(tmp_path, seed=6, **case)
    anna = load_anna(path)
    hf = build_hf(anna)
    assert type(hf).__name__ == "Qwen3ForCausalLM" and not hf.training
    ref = _hf_logits(hf, PROMPT)
    assert rel_err(ref, hf_reference_logits(path, PROMPT)) <= 1e-6  # the same weights as transformers' own load
    assert rel_err(prefill_logits(anna.model, PROMPT), ref) <= 1e-4
    anna_storages = {p.untyped_storage().data_ptr() for p in anna.model.parameters()}
    assert {p.untyped_storage().data_ptr() for p in hf.parameters()} <= anna_storages  # views, no copies
    if not case["tie"]:
        assert hf.lm_head.weight.data_ptr() == anna.model.lm_head.weight.data_ptr()
    seconds, tokens = hf_generate_time(hf, [PROMPT], 8)
    assert seconds > 0 and tokens == [simple_greedy(anna.model, PROMPT, 8)]


def test_a_dummy_released_shape_exports(tmp_path):
    import json
    import shutil
    from pathlib import Path

    shutil.copy(Path(__file__).parent / "reference_configs" / "Qwen3-ASR-0.6B-text.json", tmp_path / "config.json")
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(num_hidden_layers=1, vocab_size=512)  # the released widths, one layer, a small vocabulary
    (tmp_path / "config.json").write_text(json.dumps(config))
    anna = load_anna(tmp_path, load_format="dummy")
    hf = build_hf(anna)
    assert hf.config.head_dim == 128 and hf.config.num_key_value_heads == 8
    assert rel_err(prefill_logits(anna.model, [1, 2, 3]), _hf_logits(hf, [1, 2, 3])) <= 1e-4


def test_export_needs_the_raw_config(tmp_path):
    anna = load_anna(build_tiny_checkpoint(tmp_path, tokenizer=False))
    anna.model.raw_config = None
    with pytest.raises(ModelLoadError, match="hf_export needs the checkpoint's config.json"):
        anna.model.hf_export()
