"""Qwen3.5 MoE from a GGUF in llama.cpp's layout (``qwen35moe``: stacked ``ffn_{gate,up,down}_exps``, the
shared expert's ``*_shexp``): the same logits and greedy tokens as transformers loading the same file,
the converter's fused variants, and load errors."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.testing.oracle import hf_model, hf_reference_logits
from anna_core.testing.runner import prefill_logits
from anna_core.weights.gguf_reader import GGUFModelFile
from anna_qwen35.config import Qwen35Config

from tests.qwen35.conftest import load_anna, rel_err
from tests.qwen35.gguf_checks import (
    TOL,
    check_greedy_32_tokens_match_hf_loading_the_same_gguf,
    check_logits_match_hf_loading_the_same_gguf,
)
from tests.qwen35.tiny_gguf import hf_from_gguf, load_selected, write_qwen35_gguf
from tests.qwen35_moe.conftest import HIDDEN, MOE_INTERMEDIATE

L, F = "linear_attention", "full_attention"
VARIANTS = {"f32": dict(outtype="f32"), "q8_0": dict(outtype="q8_0")}
"""In the Q8_0 file the expert and attention matrices are Q8_0, the shared expert's down projection (rows of
48 values) F16, the routers, norms and vectors F32."""


@pytest.fixture(scope="module", autouse=True)
def _tokenizer_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # converted GGUF tokenizers go here, not under ~/.cache
        mp.setenv("ANNA_CACHE_DIR", str(tmp_path_factory.mktemp("anna-cache")))
        yield


@pytest.fixture(scope="module")
def ckpt(tiny_moe_factory) -> Path:
    """8 experts, top-2, tied embeddings, per-expert tensors (as ``save_pretrained`` writes them), every
    fourth layer full attention (what the file's ``full_attention_interval`` says)."""
    return tiny_moe_factory(num_experts=8, top_k=2, tie=True, layer_types=(L, L, L, F))


@pytest.fixture(scope="module")
def gguf_files(ckpt, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gguf-moe")
    out = {name: write_qwen35_gguf(ckpt, folder / name / "tiny-moe.gguf", **kw) for name, kw in VARIANTS.items()}
    out["fused"] = write_qwen35_gguf(ckpt, folder / "fused" / "tiny-moe.gguf", fuse_qkv=True, fuse_gate_up_exps=True)
    return out


@pytest.fixture(scope="module")
def anna_models(gguf_files) -> dict[str, object]:
    return {name: load_selected(path) for name, path in gguf_files.items()}


@pytest.fixture(scope="module")
def hf_models(gguf_files) -> dict[str, object]:
    return {name: hf_from_gguf(gguf_files[name]) for name in VARIANTS}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_hf_loading_the_same_gguf(hf_models, anna_models, prompt, variant):
    anna = anna_models[variant].model
    assert anna.config.is_moe and anna.config.tie_word_embeddings and anna.lm_head is None
    assert len(prompt) == 40  # at once; then decode-sized expert calls
    check_logits_match_hf_loading_the_same_gguf(hf_models[variant], anna, prompt)


def test_greedy_32_tokens_match_hf_loading_the_same_gguf(hf_models, anna_models, prompt):
    # on the Q8_0 file (the float32 one agrees to 1e-4 in every logit above; the runner's chunked and
    # batched paths are the safetensors tests')
    check_greedy_32_tokens_match_hf_loading_the_same_gguf(hf_models["q8_0"], anna_models["q8_0"].model, prompt)


def test_float32_gguf_keeps_the_checkpoint(ckpt, anna_models, prompt):
    ref = hf_reference_logits(ckpt, prompt)  # transformers on the per-expert safetensors
    assert rel_err(prefill_logits(anna_models["f32"].model, prompt), ref) <= TOL


def test_fused_qkv_and_gate_up_exps_load_to_the_same_model(anna_models, prompt):
    # --fuse-qkv / --fuse-gate-up-exps files (transformers 5.24 cannot map their attn_qkv /
    # ffn_gate_up_exps) hold the same numbers in fewer tensors
    plain, fused = anna_models["f32"].model, anna_models["fused"].model
    for (name, a), (other, b) in zip(plain.named_parameters(), fused.named_parameters(), strict=True):
        assert name == other and torch.equal(a, b), name
    assert torch.equal(prefill_logits(plain, prompt[:16]), prefill_logits(fused, prompt[:16]))


def test_config_from_metadata_matches_config_json(ckpt, gguf_files):
    mine = Qwen35Config.from_gguf(GGUFModelFile([gguf_files["f32"]]), vocab_size=384, tied=True)
    hf = Qwen35Config.from_hf(hf_model(ckpt).config.to_dict())
    assert (mine.num_experts, mine.num_experts_per_tok, mine.moe_intermediate_size, mine.intermediate_size) == \
        (8, 2, MOE_INTERMEDIATE, 0)
    fields = attrs.asdict(mine) | {"layout": hf.layout, "rms_norm_eps": hf.rms_norm_eps, "dtype": hf.dtype}
    assert fields == attrs.asdict(hf)


def test_wrong_expert_count_is_named(ckpt, tmp_path):
    down = np.zeros((7, HIDDEN, MOE_INTERMEDIATE), np.float32)
    path = write_qwen35_gguf(ckpt, tmp_path / "bad.gguf", drop=("blk.2.ffn_down_exps.weight",),
                             edit={"blk.2.ffn_down_exps.weight": down})
    with pytest.raises(ModelLoadError, match=r"blk\.2\.ffn_down_exps\.weight: file \[7, 64, 32\] vs model \[8, 64, 32\]"):
        load_anna(path)


def test_missing_expert_half_is_named(ckpt, tmp_path):
    path = write_qwen35_gguf(ckpt, tmp_path / "bad.gguf", drop=("blk.1.ffn_up_exps.weight",))
    with pytest.raises(ModelLoadError, match=r"missing tensors.*blk\.1\.ffn_up_exps\.weight "
                                             r"\(for model\.layers\.1\.mlp\.experts\.gate_up_proj\)"):
        load_anna(path)


def test_shared_expert_gate_may_be_one_dimensional(ckpt, gguf_files, tmp_path):
    # llama.cpp's loader asks for ffn_gate_inp_shexp as {n_embd}: a [H] tensor is the same as the [1, H] one
    gate = GGUFModelFile([gguf_files["f32"]]).tensor("blk.0.ffn_gate_inp_shexp.weight").numpy().reshape(-1)
    path = write_qwen35_gguf(ckpt, tmp_path / "flat.gguf", drop=("blk.0.ffn_gate_inp_shexp.weight",),
                             edit={"blk.0.ffn_gate_inp_shexp.weight": gate})
    assert GGUFModelFile([path]).tensors["blk.0.ffn_gate_inp_shexp.weight"].shape == (HIDDEN,)
    flat = load_anna(path).model
    assert torch.equal(dict(flat.named_parameters())["model.layers.0.mlp.shared_expert_gate.weight"],
                       torch.from_numpy(gate).reshape(1, HIDDEN))
