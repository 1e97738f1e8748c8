"""Loading Qwen3-ASR: the released shapes of both layouts on the meta device against HF's model, load errors
for missing, unexpected and mis-shaped tensors in either layout, the forced aligner refused, the family's load
option, and a dummy load from a folder holding only ``config.json``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from anna_audio.features import LogMelFeatures
from anna_audio.qwen3_asr.config import Qwen3ASRConfig, hf_form, layout_of
from anna_audio.qwen3_asr.loader import build_model
from anna_audio.qwen3_asr.weights import name_map
from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.testing.checkpoints import copy_with_tensors

from tests.qwen3_asr.conftest import clip, load_anna

REFERENCE_CONFIGS = Path(__file__).parent / "reference_configs"


def reference(name: str) -> dict:
    return json.loads((REFERENCE_CONFIGS / f"{name}.json").read_text())


@pytest.mark.parametrize("name", ["Qwen3-ASR-0.6B", "Qwen3-ASR-1.7B", "Qwen3-ASR-1.7B-original"])
def test_released_shapes_equal_hf_on_the_meta_device(name):
    from transformers import Qwen3ASRConfig as HFConfig
    from transformers import Qwen3ASRForConditionalGeneration

    raw = reference(name)
    cfg = Qwen3ASRConfig.from_hf(raw)
    assert cfg.layout == ("original" if name.endswith("original") else "hf")
    features = LogMelFeatures(n_window=cfg.encoder.n_window)
    model = build_model(cfg, bind_ops(KernelRegistry([]), "cpu", torch.bfloat16), torch.bfloat16, 32, features)
    mine = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert all(p.is_meta and p.dtype == torch.bfloat16 for p in model.parameters())
    hf_cfg = {k: v for k, v in hf_form(raw).items() if k not in ("model_type", "architectures", "support_languages")}
    with torch.device("meta"):
        hf = Qwen3ASRForConditionalGeneration(HFConfig(**hf_cfg))
    mapped = name_map("hf", cfg.text.tie_word_embeddings)
    theirs = {mapped(n): tuple(p.shape) for n, p in hf.named_parameters() if mapped(n) is not None}
    assert mine == theirs
    assert model.capabilities.modalities == ("audio",) and model.lm_head is None
    assert cfg.encoder.output_dim == cfg.text.hidden_size and cfg.audio_token_id == 151676


def test_the_original_config_converts_to_the_converted_one():
    original, converted = Qwen3ASRConfig.from_hf(reference("Qwen3-ASR-1.7B-original")), Qwen3ASRConfig.from_hf(
        reference("Qwen3-ASR-1.7B"))
    assert original.text == converted.text  # the M-RoPE sections dropped: the same 1-D rotary
    assert original.encoder == converted.encoder  # 13 sinusoid positions, not the original's 1500
    assert len(original.support_languages) == 30 and converted.support_languages == ()


@pytest.mark.parametrize("layout", ["hf", "original"])
def test_missing_unexpected_and_misshaped_tensors_are_load_errors(tiny_asr, tiny_asr_original, tmp_path, layout):
    src = tiny_asr if layout == "hf" else tiny_asr_original
    proj = "model.multi_modal_projector.linear_1.weight" if layout == "hf" else "thinker.audio_tower.proj1.weight"
    conv = "model.audio_tower.conv2d2.weight" if layout == "hf" else "thinker.audio_tower.conv2d2.weight"
    layer = "model.language_model.layers.1.mlp.up_proj.weight" if layout == "hf" else \
        "thinker.model.layers.1.mlp.up_proj.weight"

    missing = copy_with_tensors(src, tmp_path / "missing", lambda t: t.pop(proj))
    with pytest.raises(ModelLoadError, match=r"missing tensors .*multi_modal_projector\.linear_1\.weight"):
        load_anna(missing)
    extra = copy_with_tensors(src, tmp_path / "extra", lambda t: t.update({conv.replace("conv2d2", "conv2d4"): t[conv].clone()}))
    with pytest.raises(ModelLoadError, match="unexpected tensors .*conv2d4"):
        load_anna(extra)
    shaped = copy_with_tensors(src, tmp_path / "shaped", lambda t: t.update({layer: t[layer][:, :-1].contiguous()}))
    with pytest.raises(ModelLoadError, match=r"shape mismatches: .*up_proj"):
        load_anna(shaped)


def test_an_hf_checkpoint_renamed_as_original_is_refused(tiny_asr, tmp_path):
    """Config and weights must agree: hf-layout tensors under an original-layout config are all unexpected."""
    folder = tmp_path / "mixed"
    shutil.copytree(tiny_asr, folder)
    config = json.loads((folder / "config.json").read_text())
    nested = {"thinker_config": {"audio_config": config.pop("audio_config"), "text_config": config.pop("text_config"),
                                 "audio_token_id": config["audio_token_id"]}}
    (folder / "config.json").write_text(json.dumps({**config, **nested}))
    assert layout_of(json.loads((folder / "config.json").read_text())) == "original"
    with pytest.raises(ModelLoadError, match="missing tensors"):
        load_anna(folder)


def test_the_forced_aligner_is_not_a_transcription_model(tiny_asr, tmp_path):
    folder = tmp_path / "aligner"
    shutil.copytree(tiny_asr, folder)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["Qwen3ASRForTokenClassification"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="forced-aligner"):
        load_anna(folder)
    original = reference("Qwen3-ASR-1.7B-original")
    original["thinker_config"]["classify_num"] = 5000
    with pytest.raises(UnsupportedModelError, match="forced-aligner"):
        Qwen3ASRConfig.from_hf(original)


def test_the_batch_bound_is_a_load_option_of_this_family_only(tiny_asr, tmp_path):
    from anna_core.loading import load_model
    from anna_core.plugins import model_families

    [spec] = [f for f in model_families() if f.name == "qwen3_asr"]
    assert spec.load_options == ("asr_max_inference_batch_size",) and spec.distribution == "anna-audio"
    assert load_anna(tiny_asr).model.max_encoder_batch == 32
    with pytest.raises(ModelLoadError, match="positive integer"):
        load_anna(tiny_asr, asr_max_inference_batch_size=0)
    from anna_qwen35.qwen3.tiny import build_tiny_checkpoint

    text = build_tiny_checkpoint(tmp_path / "qwen3")
    with pytest.raises(UnsupportedModelError, match=r"'qwen3' family .* takes no load option \['asr_max_"):
        load_model(text, device="cpu", dtype="fp32", family_options={"asr_max_inference_batch_size": 4})


def test_a_config_only_folder_loads_with_dummy_weights(tiny_asr, tmp_path):
    from anna_core.loading import load_model

    folder = tmp_path / "config-only"
    folder.mkdir()
    shutil.copy(tiny_asr / "config.json", folder / "config.json")
    loaded = load_model(folder, device="cpu", dtype="fp32", load_format="dummy")
    assert loaded.family == "qwen3_asr" and loaded.tokenizer is None
    ids, mm = loaded.processor.process([7, loaded.processor.audio_token_id, 8], {"audio": [clip(500.0, 1.2, 0)]})
    [rows] = loaded.model.encode(list(mm.items))
    assert rows.shape == (mm.items[0].length, 64) and torch.isfinite(rows).all() and rows.std() > 0
    assert len(ids) == 2 + mm.items[0].length


def test_hf_export_gives_the_text_decoder(tiny_asr):
    """``anna bench --compare-hf`` builds transformers' Qwen3 over the decoder's tensors: its logits equal Anna's."""
    import transformers
    from anna_core.testing.runner import prefill_logits

    loaded = load_anna(tiny_asr)
    model_name, config_name, kwargs, state = loaded.model.hf_export()
    assert (model_name, config_name) == ("Qwen3ForCausalLM", "Qwen3Config")
    assert not any(k.startswith(("audio_tower.", "multi_modal_projector.")) for k in state)
    hf = getattr(transformers, model_name)(getattr(transformers, config_name)(**kwargs)).eval()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied: the head is the embeddings
    ids = [1, 40, 41, 42, 43, 7, 200, 2]
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([ids])).logits[0]
    assert (prefill_logits(loaded.model, ids) - ref).abs().max() < 1e-4
