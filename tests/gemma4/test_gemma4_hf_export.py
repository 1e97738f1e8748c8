"""``Gemma4ForCausalLM.hf_export`` (what ``anna bench --compare-hf`` runs transformers on): HF's text-only
``Gemma4ForCausalLM`` built over Anna's own tensors gives Anna's fp32 logits for each variant style
(E2B / E4B: per-layer embeddings, KV sharing, double-wide MLP; 26B-A4B: MoE block, K = V; 31B: K = V) in
both checkpoint layouts and in the released ``config.json`` form (``global_head_dim`` /
``num_global_key_value_heads`` under ``text_config``), shares their storage (no copy), and runs the
bench's timed ``generate`` path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from anna_core.bench.hf_compare import build_hf, hf_generate_time
from anna_core.errors import ModelLoadError
from anna_core.testing.oracle import hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy

from tests.gemma4.conftest import load_anna, rel_err
from tests.gemma4.test_gemma4_config import REFERENCE, RELEASED
from tests.gemma4.tiny import LAYOUTS, VARIANTS, VOCAB, WINDOW

TOL = 1e-4
CASES = [(v, layout) for v in VARIANTS for layout in LAYOUTS]


@torch.inference_mode()
def _hf_logits(hf, ids: list[int]) -> torch.Tensor:
    return hf(torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("variant, layout", CASES)
def test_hf_over_annas_tensors_gives_annas_logits(gemma4_factory, prompt, variant, layout):
    path = gemma4_factory(variant=variant, layout=layout)
    anna = load_anna(path)
    hf = build_hf(anna)
    assert type(hf).__name__ == "Gemma4ForCausalLM" and not hf.training
    ref = _hf_logits(hf, prompt)
    mine = prefill_logits(anna.model, prompt, block_size=8)
    assert len(prompt) > 4 * WINDOW and ref.shape == mine.shape == (len(prompt), VOCAB)
    assert rel_err(mine, ref) <= TOL
    assert (mine.argmax(-1) == ref.argmax(-1)).all()
    # the exported model is the checkpoint: transformers' own load of it gives the same logits
    assert rel_err(ref, hf_reference_logits(path, prompt)) <= TOL


def test_untied_lm_head_is_exported(gemma4_factory, prompt):
    anna = load_anna(gemma4_factory(variant="dense", tie=False))
    hf = build_hf(anna)
    assert hf.lm_head.weight.data_ptr() == anna.model.lm_head.weight.data_ptr()
    assert hf.lm_head.weight.data_ptr() != hf.model.embed_tokens.weight.data_ptr()
    assert rel_err(prefill_logits(anna.model, prompt, block_size=8), _hf_logits(hf, prompt)) <= TOL


def _storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_export_shares_annas_storage(gemma4_factory, variant):
    anna = load_anna(gemma4_factory(variant=variant))
    model = anna.model
    cls, config_cls, kwargs, state = model.hf_export()
    assert (cls, config_cls) == ("Gemma4ForCausalLM", "Gemma4TextConfig")
    assert "model_type" not in kwargs and kwargs["tie_word_embeddings"] is True
    mine = _storages(model.parameters())
    assert _storages(state.values()) == mine
    # the merged gate/up matrix is split back into views of its row halves
    mlp = model.model.layers[0].mlp
    merged = mlp.gate_up_proj.weight
    gate, up = state["model.layers.0.mlp.gate_proj.weight"], state["model.layers.0.mlp.up_proj.weight"]
    assert gate.data_ptr() == merged.data_ptr() and up.data_ptr() == merged[mlp.intermediate].data_ptr()
    assert gate.shape == up.shape == (mlp.intermediate, model.config.hidden_size)
    hf = build_hf(anna)
    persistent = hf.state_dict().values()  # parameters and persistent buffers (layer_scalar)
    assert _storages(persistent) == mine  # every HF weight is one of Anna's tensors, and every one is used
    assert hf.model.layers[0].mlp.gate_proj.weight.data_ptr() == merged.data_ptr()
    if variant == "moe":
        experts = model.model.layers[0].experts
        assert hf.model.layers[0].experts.gate_up_proj.data_ptr() == experts.gate_up_proj.data_ptr()
        assert hf.model.layers[0].experts.down_proj.data_ptr() == experts.down_proj.data_ptr()
        assert hf.model.layers[0].router.per_expert_scale.data_ptr() == model.model.layers[0].router.per_expert_scale.data_ptr()
    # a change to Anna's weights is a change to HF's
    with torch.no_grad():
        merged[0, 0] += 1.0
    assert hf.model.layers[0].mlp.gate_proj.weight[0, 0] == merged[0, 0]


def test_export_without_the_config_json_is_a_load_error(gemma4_factory):
    anna = load_anna(gemma4_factory(variant="dense"))
    anna.model.raw_config = None
    with pytest.raises(ModelLoadError, match="config.json"):
        anna.model.hf_export()


def test_experts_in_another_layout_are_a_load_error(gemma4_factory):
    anna = load_anna(gemma4_factory(variant="moe"))
    experts = anna.model.model.layers[1].experts
    experts.down_proj = torch.nn.Parameter(experts.down_proj.detach().transpose(1, 2), requires_grad=False)
    with pytest.raises(ModelLoadError, match="layer 1: the experts"):
        anna.model.hf_export()


def _shrunk_released_config(name: str) -> dict:
    """The released ``config.json`` of ``name``, text sizes shrunk (same form and flags: nested
    ``text_config``, ``global_head_dim``, ``num_global_key_value_heads``, towers beside it)."""
    raw = json.loads((REFERENCE / name / "config.json").read_text())
    text = raw["text_config"]
    period = text["layer_types"].index("full_attention") + 1
    layers = 2 * period
    shared = (layers - period - 1) if text["num_kv_shared_layers"] else 0
    text.update(vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, hidden_size=64, intermediate_size=96,
                num_attention_heads=4, head_dim=16, global_head_dim=32, sliding_window=WINDOW,
                num_hidden_layers=layers, layer_types=text["layer_types"][:layers], num_kv_shared_layers=shared,
                num_key_value_heads=min(text["num_key_value_heads"], 2))
    if text["hidden_size_per_layer_input"]:
        text["hidden_size_per_layer_input"] = 8
    if text["num_global_key_value_heads"]:
        text["num_global_key_value_heads"] = 1
    if text["enable_moe_block"]:
        text.update(num_experts=4, top_k_experts=2, moe_intermediate_size=32)
    return raw


@pytest.mark.parametrize("name", RELEASED)
def test_released_config_form_exports(tmp_path: Path, prompt, name):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_shrunk_released_config(name)))
    anna = load_anna(folder, load_format="dummy")
    with torch.no_grad():  # random weights: spread the router scores so that no top-k choice is a near tie
        for layer in anna.model.model.layers:
            if layer.has_moe:
                layer.router.proj.weight.mul_(50.0)
    hf = build_hf(anna)
    cfg = hf.config
    assert cfg.layer_types == [spec.kind for spec in anna.model.config.layers]
    assert [cfg.per_layer_config[i].head_dim for i in range(cfg.num_hidden_layers)] == [
        spec.head_dim for spec in anna.model.config.layers]
    assert (cfg.num_kv_shared_layers > 0) == ("E" in name)
    ref = _hf_logits(hf, prompt)
    assert rel_err(prefill_logits(anna.model, prompt, block_size=8), ref) <= TOL


def test_hf_generate_time_runs_on_a_tiny_model(gemma4_factory, prompt):
    """The bench's timing path: one greedy ``generate`` of exactly ``n`` tokens over Anna's tensors."""
    anna = load_anna(gemma4_factory(variant="e2b"))
    hf = build_hf(anna)
    prompts = [prompt[:20], prompt[30:50]]
    seconds, tokens = hf_generate_time(hf, prompts, 6)
    assert seconds > 0 and [len(t) for t in tokens] == [6, 6]
    assert tokens == [simple_greedy(anna.model, p, 6, block_size=8) for p in prompts]


def test_bf16_comparison_leaves_annas_tensors_alone(gemma4_factory, prompt):
    """In bf16 the bench converts HF to float32 as the oracle (``logits_agreement``): HF's own copy, not
    Anna's tensors, which keep their dtype and values."""
    from anna_core.bench.hf_compare import logits_agreement

    anna = load_anna(gemma4_factory(variant="e2b"), dtype=torch.bfloat16)
    hf = build_hf(anna)
    embed = anna.model.model.embed_tokens.weight
    before = embed.clone()
    got = logits_agreement(hf, anna.model, prompt[:30])
    assert embed.dtype == torch.bfloat16 and torch.equal(embed, before)
    assert got["hf_err_vs_fp32"] > 0 and got["anna_err_vs_fp32"] <= 4 * got["hf_err_vs_fp32"] + 0.05 * got["logits_std"]
    assert got["top1_agree"]
