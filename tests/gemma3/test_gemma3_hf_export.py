"""``Gemma3ForCausalLM.hf_export`` (what ``anna bench --compare-hf`` runs transformers on): HF's
``Gemma3ForCausalLM`` built over Anna's own tensors gives Anna's fp32 logits in both checkpoint layouts,
tied or not, from the checkpoint's ``config.json`` (5.x or 4.x fields) or, as for a GGUF source, from the
parsed config; it shares Anna's storage and runs the bench's timed ``generate`` path."""

from __future__ import annotations

import json

import pytest
import torch
from anna_core.bench.hf_compare import build_hf, hf_generate_time
from anna_core.testing.oracle import hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_gemma4.gemma3.model import hf_text_config_of

from tests.gemma3.conftest import load_anna
from tests.gemma3.tiny import LAYOUTS, VOCAB, WINDOW
from tests.gemma4.conftest import rel_err

TOL = 1e-4


@torch.inference_mode()
def _hf_logits(hf, ids: list[int]) -> torch.Tensor:
    return hf(torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tie", [True, False])
def test_hf_over_annas_tensors_gives_annas_logits(gemma3_factory, prompt, layout, tie):
    path = gemma3_factory(layout=layout, tie=tie)
    anna = load_anna(path)
    hf = build_hf(anna)
    assert type(hf).__name__ == "Gemma3ForCausalLM"
    ref = _hf_logits(hf, prompt)
    mine = prefill_logits(anna.model, prompt, block_size=8)
    assert len(prompt) > 4 * WINDOW and ref.shape == mine.shape == (len(prompt), VOCAB)
    assert rel_err(mine, ref) <= TOL and (mine.argmax(-1) == ref.argmax(-1)).all()
    assert rel_err(ref, hf_reference_logits(path, prompt)) <= TOL  # the export is the checkpoint
    if not tie:
        assert hf.lm_head.weight.data_ptr() == anna.model.lm_head.weight.data_ptr()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_without_a_config_json_the_parsed_config_is_exported(gemma3_factory, prompt, layout):
    """A GGUF source keeps no ``config.json``: the kwargs come from the parsed config, and describe the
    same model transformers reads from the checkpoint's file."""
    path = gemma3_factory(layout=layout, tie=False)
    anna = load_anna(path)
    from_file = build_hf(anna).config
    anna.model.raw_config = None
    _, config_cls, kwargs, _ = anna.model.hf_export()
    assert config_cls == "Gemma3TextConfig" and kwargs == hf_text_config_of(anna.model.config)
    hf = build_hf(anna)
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "sliding_window", "layer_types", "query_pre_attn_scalar",
                  "rope_parameters", "tie_word_embeddings", "final_logit_softcapping", "rms_norm_eps"):
        assert getattr(hf.config, field) == getattr(from_file, field), field
    assert rel_err(prefill_logits(anna.model, prompt, block_size=8), _hf_logits(hf, prompt)) <= TOL


def test_4x_config_fields_export(tmp_path, prompt):
    """A transformers 4.x ``config.json`` (``rope_theta``, ``rope_local_base_freq``, ``rope_scaling``,
    ``sliding_window_pattern``): transformers converts it as Anna parses it."""
    config = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": VOCAB,
              "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 7, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": WINDOW,
              "sliding_window_pattern": 3, "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
              "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "max_position_embeddings": 4096}
    (tmp_path / "config.json").write_text(json.dumps(config))
    anna = load_anna(tmp_path, load_format="dummy")
    hf = build_hf(anna)
    assert hf.config.layer_types == [spec.kind for spec in anna.model.config.layers]
    assert hf.config.rope_parameters["full_attention"]["factor"] == 8.0
    assert rel_err(prefill_logits(anna.model, prompt, block_size=8), _hf_logits(hf, prompt)) <= TOL


def test_the_export_shares_annas_storage(gemma3_factory):
    anna = load_anna(gemma3_factory(layout="conditional"))
    model = anna.model
    _, _, _, state = model.hf_export()
    mine = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert {t.untyped_storage().data_ptr() for t in state.values()} == mine
    hf = build_hf(anna)
    assert {t.untyped_storage().data_ptr() for t in hf.state_dict().values()} == mine
    mlp = model.model.layers[2].mlp
    assert hf.model.layers[2].mlp.gate_proj.weight.data_ptr() == mlp.gate_up_proj.weight.data_ptr()
    assert hf.model.layers[2].mlp.up_proj.weight.data_ptr() == mlp.gate_up_proj.weight[mlp.intermediate].data_ptr()
    assert hf.model.embed_tokens.weight.data_ptr() == hf.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_hf_generate_time_runs_on_a_tiny_model(gemma3_factory, prompt):
    anna = load_anna(gemma3_factory())
    hf = build_hf(anna)
    seconds, tokens = hf_generate_time(hf, [prompt[:24]], 5)
    assert seconds > 0 and tokens == [simple_greedy(anna.model, prompt[:24], 5, block_size=8)]
