"""Qwen3-TTS configuration (:mod:`anna_audio.qwen3_tts.config`): the three kinds of the tiny fixture checkpoints
(what differs per kind), the released Base configs' talker, code predictor and speaker encoder (meta-device
shapes), and the errors a malformed config raises."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from anna_audio.qwen3_tts.code_predictor import CodePredictor
from anna_audio.qwen3_tts.config import load_config, parse_config, parse_speaker_encoder, parse_talker
from anna_core.errors import ModelLoadError

from tests.audio.tts_golden import CHECKPOINTS

RELEASED = Path(__file__).parent / "reference_configs"


def _checkpoint_json(kind: str) -> tuple[dict, dict]:
    folder = CHECKPOINTS[kind]
    if not folder.is_dir():
        pytest.skip(f"tiny checkpoint {folder} absent (tools/tts_fixtures/make_qwen3_tts_fixtures.py)")
    return (json.loads((folder / "config.json").read_text()),
            json.loads((folder / "speech_tokenizer" / "config.json").read_text()))


@pytest.mark.parametrize("kind, speaker, instructions, reference_audio", [
    ("base", False, False, True), ("custom_voice", True, True, False), ("voice_design", False, True, False)])
def test_kinds(kind, speaker, instructions, reference_audio):
    _checkpoint_json(kind)
    config = load_config(CHECKPOINTS[kind])
    assert config.kind == kind
    assert (config.accepts_speaker, config.accepts_instructions, config.accepts_reference_audio) == (
        speaker, instructions, reference_audio)
    assert (config.speaker_encoder is not None) == (kind == "base")
    assert bool(config.talker.speakers) == (kind == "custom_voice")
    assert config.codec.decoder.samples_per_frame == 1920 == config.codec.decode_upsample_rate
    assert config.talker.num_code_groups == config.predictor.num_code_groups == config.codec.decoder.num_quantizers


def test_custom_voice_speakers_and_dialects():
    _checkpoint_json("custom_voice")
    talker = load_config(CHECKPOINTS["custom_voice"]).talker
    assert set(talker.speakers) == {"serena", "dylan", "ryan"}
    assert talker.speaker_dialects["dylan"] == "beijing_dialect" and talker.speaker_dialects["serena"] is None
    assert talker.languages["beijing_dialect"] in range(talker.vocab_size)


def test_small_custom_voice_takes_no_instructions():
    config, codec = _checkpoint_json("custom_voice")
    config["tts_model_size"] = "0b6"
    assert not parse_config(config, codec).accepts_instructions


@pytest.mark.parametrize("name, hidden, projected", [("Qwen3-TTS-12Hz-0.6B-Base", 1024, False),
                                                     ("Qwen3-TTS-12Hz-1.7B-Base", 2048, True)])
def test_released_shapes(name, hidden, projected):
    config = json.loads((RELEASED / f"{name}.json").read_text())
    talker, predictor = parse_talker(config["talker_config"])
    speaker = parse_speaker_encoder(config["speaker_encoder_config"])
    assert talker.shape.hidden_size == hidden == speaker.enc_dim
    assert (talker.vocab_size, talker.text_vocab_size, talker.num_code_groups) == (3072, 151936, 16)
    assert talker.mrope_section == (24, 20, 20) and talker.mrope_interleaved
    assert talker.languages["english"] == 2050 and talker.ids.eos == 2150
    # reference class defaults fill what the released speaker_encoder_config leaves out
    assert speaker.channels == (512, 512, 512, 512, 1536) and speaker.mel_dim == 128
    assert (predictor.shape.hidden_size, predictor.shape.num_layers, predictor.vocab_size) == (1024, 5, 2048)
    with torch.device("meta"):
        model = CodePredictor(predictor, talker_hidden=talker.shape.hidden_size)
    names = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert names["model.codec_embedding.14.weight"] == (2048, hidden)
    assert names["lm_head.14.weight"] == (2048, 1024)
    assert names["model.layers.4.self_attn.q_proj.weight"] == (16 * 128, 1024)
    assert ("small_to_mtp_projection.weight" in names) == projected


def _mutated(edit) -> tuple[dict, dict]:
    config, codec = _checkpoint_json("base")
    config, codec = copy.deepcopy(config), copy.deepcopy(codec)
    edit(config, codec)
    return config, codec


@pytest.mark.parametrize("edit, message", [
    (lambda c, k: c.update(tokenizer_type="qwen3_tts_tokenizer_25hz"), "tokenizer_type"),
    (lambda c, k: c.update(tts_model_type="singing"), "tts_model_type 'singing'"),
    (lambda c, k: k.update(model_type="mimi"), "model_type 'mimi'"),
    (lambda c, k: k["decoder_config"].pop("codebook_dim"), "codebook_dim"),
    (lambda c, k: k["decoder_config"].update(num_quantizers=8), "decodes 8 codebooks"),
    (lambda c, k: k["decoder_config"].update(upsample_rates=[8, 5, 4, 2]), "multiply to 1280"),
    (lambda c, k: c["talker_config"]["rope_scaling"].update(mrope_section=[4, 2, 1]), "must sum to head_dim"),
    (lambda c, k: c["talker_config"].update(codec_eos_token_id=5000), "codec_eos_token_id"),
    (lambda c, k: c["talker_config"].update(num_attention_heads=3), "not a multiple"),
    (lambda c, k: c["talker_config"]["code_predictor_config"].update(vocab_size=32), "codebook size 32"),
    (lambda c, k: c["speaker_encoder_config"].update(enc_dim=16), "enc_dim 16"),
    (lambda c, k: c["talker_config"].update(hidden_size="wide"), "must be an integer"),
])
def test_errors(edit, message):
    config, codec = _mutated(edit)
    with pytest.raises(ModelLoadError, match=message.replace("(", r"\(")):
        parse_config(config, codec)


def test_dialect_without_language():
    config, codec = _checkpoint_json("custom_voice")
    config = copy.deepcopy(config)
    config["talker_config"]["codec_language_id"].pop("beijing_dialect")
    with pytest.raises(ModelLoadError, match="dialect 'beijing_dialect'"):
        parse_config(config, codec)


def test_missing_codec_config(tmp_path):
    config, _ = _checkpoint_json("base")
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="speech_tokenizer/config.json' is missing"):
        load_config(tmp_path)
