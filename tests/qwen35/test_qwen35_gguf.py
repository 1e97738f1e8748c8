"""Dense Qwen3.5 from a GGUF in llama.cpp's layout (``qwen35``): the same logits and greedy tokens as
transformers loading the same file, the config from the metadata, the tokenizer, and load errors."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.testing.oracle import hf_model, hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_core.weights.gguf_reader import GGUFModelFile
from anna_qwen35.config import Qwen35Config

from tests.qwen35.conftest import load_anna, rel_err
from tests.qwen35.gguf_checks import (
    TOL,
    check_greedy_32_tokens_match_hf_loading_the_same_gguf,
    check_logits_match_hf_loading_the_same_gguf,
)
from tests.qwen35.tiny_gguf import hf_from_gguf, load_selected, write_qwen35_gguf

L, F = "linear_attention", "full_attention"
VARIANTS = {"f32-mtp": dict(outtype="f32", mtp=True), "q8_0": dict(outtype="q8_0")}
"""The float32 file carries a multi-token-prediction block (skipped by both); the Q8_0 one stores the
matrices as Q8_0, the rows not a multiple of 32 as F16, the norms and vectors as F32."""


@pytest.fixture(scope="module", autouse=True)
def _tokenizer_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # converted GGUF tokenizers go here, not under ~/.cache
        mp.setenv("ANNA_CACHE_DIR", str(tmp_path_factory.mktemp("anna-cache")))
        yield


@pytest.fixture(scope="module")
def ckpt(anna_tiny_qwen35_factory) -> Path:
    """Untied, and the released layer pattern (every fourth layer full attention), which the file's
    ``full_attention_interval`` states as transformers' GGUF config reads it."""
    return anna_tiny_qwen35_factory(tie=False, layer_types=[L, L, L, F])


@pytest.fixture(scope="module")
def gguf_files(ckpt, tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name, kwargs in VARIANTS.items():
        folder = tmp_path_factory.mktemp(f"gguf-{name}")
        out[name] = write_qwen35_gguf(ckpt, folder / "tiny-qwen35.gguf", **kwargs)
    return out


@pytest.fixture(scope="module")
def hf_models(gguf_files) -> dict[str, object]:
    return {name: hf_from_gguf(path) for name, path in gguf_files.items()}


@pytest.fixture(scope="module")
def anna_models(gguf_files) -> dict[str, object]:
    return {name: load_selected(path) for name, path in gguf_files.items()}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_hf_loading_the_same_gguf(gguf_files, hf_models, anna_models, long_prompt, variant):
    anna = anna_models[variant]
    assert anna.family == "qwen35" and anna.model.config.layout == "gguf"
    assert len(long_prompt) == 150  # more than two gated-delta chunks
    check_logits_match_hf_loading_the_same_gguf(hf_models[variant], anna.model, long_prompt)


def test_greedy_32_tokens_match_hf_loading_the_same_gguf(hf_models, anna_models, long_prompt):
    # on the Q8_0 file (the float32 one agrees to 1e-4 in every logit above; the runner's chunked and
    # batched paths are the safetensors tests')
    check_greedy_32_tokens_match_hf_loading_the_same_gguf(hf_models["q8_0"], anna_models["q8_0"].model, long_prompt)


def test_float32_gguf_keeps_the_checkpoint(ckpt, anna_models, long_prompt):
    # the float32 file is the checkpoint itself: the same logits as transformers on the safetensors
    ref = hf_reference_logits(ckpt, long_prompt[:40])
    assert rel_err(prefill_logits(anna_models["f32-mtp"].model, long_prompt[:40]), ref) <= TOL


def test_config_from_metadata_matches_config_json(ckpt, gguf_files):
    gguf = GGUFModelFile([gguf_files["f32-mtp"]])
    assert gguf.arch_get("block_count") == 5 and gguf.arch_get("nextn_predict_layers") == 1
    mine = Qwen35Config.from_gguf(gguf, vocab_size=384, tied=False)
    hf = Qwen35Config.from_hf(hf_model(ckpt).config.to_dict())
    assert mine.rms_norm_eps == pytest.approx(hf.rms_norm_eps)  # stored as float32
    assert mine.rope_parameters == hf.rope_parameters
    fields = attrs.asdict(mine) | {"layout": hf.layout, "rms_norm_eps": hf.rms_norm_eps, "dtype": hf.dtype}
    assert fields == attrs.asdict(hf)


def test_tokenizer_and_stop_tokens_come_from_the_metadata(ckpt, gguf_files, anna_models):
    from transformers import AutoTokenizer

    tok = anna_models["q8_0"].tokenizer
    path = gguf_files["q8_0"]
    hf_gguf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    source = AutoTokenizer.from_pretrained(str(ckpt))
    text = "<|im_start|>user\nHello, world! caf\u00e9 <think>x</think><|im_end|>"
    assert tok.encode(text) == hf_gguf.encode(text) == source.encode(text)
    assert tok.decode(tok.encode(text)) == "user\nHello, world! caf\u00e9 <think>x</think>"  # specials skipped
    # tokenizer.ggml.pre "qwen35" splits digits one by one (Qwen3.5's rule), unlike the tiny source
    # tokenizer's GPT-2 split: Anna follows the file, as transformers does
    assert tok.encode(" 0123") == hf_gguf.encode(" 0123") == [223, 18, 19, 20, 21] != source.encode(" 0123")
    chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}], enable_thinking=False)
    assert chat == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert anna_models["q8_0"].generation.eos_token_ids == [2, 0]  # <|im_end|> (the file's), <|endoftext|>


def test_llm_serves_the_gguf_file(gguf_files, anna_models):
    # anna_core.LLM over the file: family from general.architecture, the engine, the file's chat template
    from anna_core import LLM, SamplingParams

    llm = LLM(gguf_files["q8_0"], device="cpu", dtype="fp32", num_blocks=32)
    [reply] = llm.chat([{"role": "user", "content": "Hi there"}],
                       SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    assert llm.tokenizer.decode(reply.prompt_token_ids).startswith("user\nHi there")
    assert reply.token_ids == simple_greedy(anna_models["q8_0"].model, reply.prompt_token_ids, 6)


def test_recurrent_layers_key_wins_over_the_interval(anna_tiny_qwen35, tmp_path, long_prompt):
    # The default tiny checkpoint alternates linear / full attention, while the converter writes
    # full_attention_interval 4 (the config's default): llama.cpp reads attention.recurrent_layers first,
    # and so does Anna (transformers 5.24 reads only the interval, so it is no oracle for this file).
    path = write_qwen35_gguf(anna_tiny_qwen35, tmp_path / "alt.gguf")
    anna = load_anna(path)
    assert anna.model.config.layer_types == (L, F, L, F)
    ref = hf_reference_logits(anna_tiny_qwen35, long_prompt[:40])
    assert rel_err(prefill_logits(anna.model, long_prompt[:40]), ref) <= TOL
    # without that key the interval decides
    path = write_qwen35_gguf(anna_tiny_qwen35, tmp_path / "interval.gguf",
                             metadata_edit={"attention.recurrent_layers": None, "full_attention_interval": 2})
    assert Qwen35Config.from_gguf(GGUFModelFile([path]), 384, tied=True).layer_types == (L, F, L, F)


def test_dummy_weights_from_the_metadata(gguf_files, long_prompt):
    loaded = load_anna(gguf_files["q8_0"], load_format="dummy")
    assert prefill_logits(loaded.model, long_prompt[:8]).isfinite().all()
    with pytest.raises(ModelLoadError, match="--load-format safetensors does not fit"):
        load_anna(gguf_files["q8_0"], load_format="safetensors")


def _bad(ckpt: Path, tmp_path: Path, name: str = "bad.gguf", **kwargs) -> Path:
    return write_qwen35_gguf(ckpt, tmp_path / name, **kwargs)


def test_missing_tensor_is_named(ckpt, tmp_path):
    path = _bad(ckpt, tmp_path, drop=("blk.3.attn_k_norm.weight",))
    with pytest.raises(ModelLoadError, match=r"missing tensors.*blk\.3\.attn_k_norm\.weight "
                                             r"\(for model\.layers\.3\.self_attn\.k_norm\.weight\)"):
        load_anna(path)


def test_wrong_shape_is_named(ckpt, tmp_path):
    path = _bad(ckpt, tmp_path, drop=("blk.0.ssm_a",), edit={"blk.0.ssm_a": -np.ones(5, np.float32)})
    with pytest.raises(ModelLoadError, match=r"shape mismatches: blk\.0\.ssm_a: file \[5\] vs model \[4\]"):
        load_anna(path)


def test_unexpected_tensor_and_block_are_named(ckpt, tmp_path):
    # a block past block_count is not an MTP block: unexpected like any unknown tensor
    path = _bad(ckpt, tmp_path, edit={"blk.0.ssm_extra.weight": np.ones((2, 64), np.float32),
                                      "blk.4.attn_norm.weight": np.ones(64, np.float32)})
    with pytest.raises(ModelLoadError, match=r"unexpected tensors.*blk\.0\.ssm_extra\.weight.*blk\.4\.attn_norm"):
        load_anna(path)


def test_missing_metadata_is_named(ckpt, tmp_path):
    path = _bad(ckpt, tmp_path, metadata_edit={"ssm.state_size": None})
    with pytest.raises(ModelLoadError, match=r"lacks the metadata key 'qwen35\.ssm\.state_size'"):
        load_anna(path)
    bad = _bad(ckpt, tmp_path, "odd.gguf", metadata_edit={"ssm.inner_size": 63})
    with pytest.raises(ModelLoadError, match="ssm.inner_size 63 is not a multiple of ssm.time_step_rank 4"):
        load_anna(bad)


def test_value_head_reorder_is_undone(ckpt, gguf_files, anna_models):
    # r = 2 value heads per key head: the file holds them tiled, the checkpoint (and Anna) grouped
    from safetensors.torch import load_file

    src = load_file(str(ckpt / "model.safetensors"))
    gguf = GGUFModelFile([gguf_files["f32-mtp"]])
    params = dict(anna_models["f32-mtp"].model.named_parameters())
    for gguf_name, name in (("blk.0.ssm_out.weight", "out_proj.weight"), ("blk.0.ssm_dt.bias", "dt_bias")):
        name = "model.layers.0.linear_attn." + name
        assert not torch.equal(gguf.tensor(gguf_name), src[name])
        assert torch.equal(params[name], src[name])
    a_log = params["model.layers.0.linear_attn.A_log"]  # through -exp in the file: equal to float32 rounding
    assert torch.allclose(a_log, src["model.layers.0.linear_attn.A_log"], rtol=1e-6, atol=1e-6)
