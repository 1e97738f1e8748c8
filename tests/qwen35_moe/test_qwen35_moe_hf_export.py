"""``hf_export`` of a Qwen3.5 MoE model (what ``anna bench --compare-hf`` runs transformers on): HF's
``Qwen3_5MoeForCausalLM`` over Anna's own tensors, the routed experts in the fused layout transformers 5
holds in memory (``mlp.experts.gate_up_proj`` ``[E, 2I, H]``, ``mlp.experts.down_proj`` ``[E, H, I]``),
gives Anna's fp32 logits for checkpoints of either expert layout and either checkpoint layout, shares
Anna's storage, and runs the bench's timed ``generate`` path."""

from __future__ import annotations

import pytest
import torch
from anna_core.bench.hf_compare import build_hf, hf_generate_time
from anna_core.errors import ModelLoadError
from anna_core.testing.oracle import hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy

from tests.qwen35.conftest import load_anna, rel_err
from tests.qwen35_moe.conftest import HIDDEN, MOE_INTERMEDIATE
from tests.qwen35_moe.test_qwen35_moe_parity import VARIANTS

TOL = 1e-4


@torch.inference_mode()
def _hf_logits(hf, ids: list[int]) -> torch.Tensor:
    return hf(torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_hf_over_annas_tensors_gives_annas_logits(tiny_moe_factory, prompt, variant):
    path = tiny_moe_factory(**VARIANTS[variant])
    anna = load_anna(path)
    cls, config_cls, _, state = anna.model.hf_export()
    assert (cls, config_cls) == ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig")
    assert not any(".experts.0." in name for name in state)  # fused, whatever the checkpoint held
    hf = build_hf(anna)
    ref = _hf_logits(hf, prompt)
    mine = prefill_logits(anna.model, prompt)
    assert rel_err(mine, ref) <= TOL and (mine.argmax(-1) == ref.argmax(-1)).all()
    assert rel_err(ref, hf_reference_logits(path, prompt)) <= TOL  # the export is the checkpoint


def test_the_export_shares_annas_storage(tiny_moe_factory):
    anna = load_anna(tiny_moe_factory(layout="text", num_experts=8, top_k=2))  # per-expert checkpoint, fused at load
    model = anna.model
    _, _, _, state = model.hf_export()
    mine = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert {t.untyped_storage().data_ptr() for t in state.values()} == mine
    hf = build_hf(anna)
    assert {t.untyped_storage().data_ptr() for t in hf.state_dict().values()} == mine
    experts, hf_experts = model.model.layers[0].mlp.experts, hf.model.layers[0].mlp.experts
    assert hf_experts.gate_up_proj.shape == (8, 2 * MOE_INTERMEDIATE, HIDDEN)
    assert hf_experts.gate_up_proj.data_ptr() == experts.gate_up_proj.data_ptr()
    assert hf_experts.down_proj.data_ptr() == experts.down_proj.data_ptr()
    shared = model.model.layers[0].mlp.shared_expert
    assert hf.model.layers[0].mlp.shared_expert.up_proj.weight.data_ptr() == \
        shared.gate_up_proj.weight[shared.intermediate].data_ptr()


def test_unfused_experts_are_a_load_error(tiny_moe_factory):
    """Views cannot stack per-expert tensors: the export needs the fused experts (the loader fuses them)."""
    from anna_core.kernels.registry import KernelRegistry, bind_ops
    from anna_qwen35.config import Qwen35Config
    from anna_qwen35.loader import build_model
    from anna_qwen35.weights import hf_text_state_dict

    anna = load_anna(tiny_moe_factory(layout="text", num_experts=8, top_k=2))
    cfg = Qwen35Config.from_hf(anna.model.raw_config)
    unfused = build_model(cfg, bind_ops(KernelRegistry.from_plugins(), "cpu", torch.float32), torch.float32,
                          per_expert=True)
    with pytest.raises(ModelLoadError, match="not fused"):
        hf_text_state_dict(unfused)


def test_hf_generate_time_runs_on_a_tiny_model(tiny_moe_factory, prompt):
    anna = load_anna(tiny_moe_factory(layout="vl", num_experts=8, top_k=2, fused=True))
    hf = build_hf(anna)
    seconds, tokens = hf_generate_time(hf, [prompt[:10]], 6)
    assert seconds > 0 and tokens == [simple_greedy(anna.model, prompt[:10], 6)]
