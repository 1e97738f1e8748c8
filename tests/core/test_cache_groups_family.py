"""anna-core's test family (anna_core.testing.cache_groups_family): CacheGroupsLM loaded from a folder through
load_model, chosen from config.json, with the capabilities and generation defaults the folder declares."""

import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.loading import load_model
from anna_core.testing.cache_groups_family import FAMILY, plugin_manager, write_config
from anna_core.testing.cache_groups_model import CacheGroupsLM
from anna_core.testing.runner import prefill_logits


def test_a_folder_loads_as_cache_groups_lm_with_its_declared_settings(tmp_path):
    folder = write_config(tmp_path / "some-llama-7b", window=6, vocab_size=96, seed=3, padded_prefill=True,
                          eos_token_id=[1, 2], max_position_embeddings=512)
    loaded = load_model(folder, device="cpu", dtype="fp32", load_format="dummy", pm=plugin_manager())
    assert loaded.family == FAMILY.name and isinstance(loaded.model, CacheGroupsLM)
    assert loaded.model.window == 6 and loaded.model.vocab_size == 96 and loaded.model.capabilities.padded_prefill
    assert loaded.generation.eos_token_ids == [1, 2] and loaded.max_model_len == 512 and loaded.tokenizer is None
    prompt = [5, 17, 33, 2, 90, 41, 7, 8, 9, 10]
    want = CacheGroupsLM(window=6, vocab_size=96, seed=3).reference_logits(prompt)
    torch.testing.assert_close(prefill_logits(loaded.model, prompt), want, rtol=1e-5, atol=1e-5)


def test_the_family_refuses_what_it_cannot_run_and_unknown_config_keys(tmp_path):
    folder = write_config(tmp_path / "tiny")
    with pytest.raises(ModelLoadError, match="float32 on the CPU"):
        load_model(folder, device="cpu", dtype="bf16", load_format="dummy", pm=plugin_manager())
    with pytest.raises(TypeError, match="unknown config keys \\['hidden'\\]"):
        write_config(tmp_path / "bad", hidden=32)
