"""The tiny Qwen3-TTS checkpoints' shapes: sizes, codec and language ids, the byte-level BPE text tokenizer and
the ``config.json`` of each released kind and of the 12 Hz codec (a part of ``make_qwen3_tts_fixtures.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# --- sizes ------------------------------------------------------------------------------------------------------

CODEBOOK = 64
"""Entries per codebook (released: 2048). The talker's first ``CODEBOOK`` ids are codes, as in the release."""
SPECIAL_ROWS = 1024
"""Talker ids past the codebook (released 3072 - 2048): the reference suppresses ``[vocab - 1024, vocab)``."""
TALKER_VOCAB = CODEBOOK + SPECIAL_ROWS
CODE_GROUPS = 4
"""Codebooks per 12.5 Hz frame (released: 16): the talker predicts the first, the code predictor the rest."""
TALKER_HIDDEN = 32
PREDICTOR_HIDDEN = 24
"""Differs from the talker's width so the ``small_to_mtp_projection`` linear exists (as in the 1.7B)."""
TEXT_HIDDEN = 48

# Codec control ids: the released offsets past the codebook (e.g. pad = 2048 + 100), moved onto the tiny codebook.
CODEC_IDS = {
    "codec_pad_id": CODEBOOK + 100, "codec_bos_id": CODEBOOK + 101, "codec_eos_token_id": CODEBOOK + 102,
    "codec_think_id": CODEBOOK + 106, "codec_nothink_id": CODEBOOK + 107, "codec_think_bos_id": CODEBOOK + 108,
    "codec_think_eos_id": CODEBOOK + 109,
}
LANGUAGES = {"english": CODEBOOK + 2, "german": CODEBOOK + 5, "spanish": CODEBOOK + 6, "chinese": CODEBOOK + 7,
             "japanese": CODEBOOK + 10, "french": CODEBOOK + 13, "beijing_dialect": CODEBOOK + 26}
SPEAKERS = {"serena": CODEBOOK + 400, "dylan": CODEBOOK + 401, "ryan": CODEBOOK + 402}
SPEAKER_DIALECTS = {"serena": False, "dylan": "beijing_dialect", "ryan": False}

KIND_SEEDS = {"base": 1101, "custom_voice": 2202, "voice_design": 3303}
CODEC_SEED = 4404
"""The three kinds share one 12 Hz codec, as the released checkpoints do."""

MAX_FRAMES = 24
"""Frames each run may generate (max_new_tokens); the codec's attention window is 8 frames, so it slides."""
TALKER_LOGIT_STEPS = 4
"""Talker steps whose raw logits are kept."""

# --- the text tokenizer -----------------------------------------------------------------------------------------

QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
               r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
"""Qwen2's pre-tokenizer split, so a tokenizer rebuilt from vocab.json / merges.txt by transformers' Qwen2Tokenizer
splits text exactly as tokenizer.json does."""
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_bos|>", "<|tts_eos|>"]
TOKENIZER_VOCAB = 384
TRAINING_TEXT = """\
assistant user assistant user assistant user assistant user
Hello, world! The quick brown fox jumps over the lazy dog. Speak slowly and warmly, with a calm voice.
A bright young voice, cheerful and fast. Good morning; the weather is fine today. Numbers: 0123456789.
Anna turns text into speech: twelve frames each second, four codebooks per frame, one waveform out.
"""


def build_tokenizer(folder: Path) -> dict[str, int]:
    """Train the byte-level BPE tokenizer on :data:`TRAINING_TEXT` and save it to ``folder``; returns the ids of
    :data:`SPECIAL_TOKENS`. Raises ``RuntimeError`` when ``assistant`` / ``user`` / a newline are not single tokens
    (the reference slices the prompt's ids at fixed offsets that assume they are)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TRAINING_TEXT] * 8, trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 unk_token=None, bos_token=None, additional_special_tokens=SPECIAL_TOKENS[1:])
    for word in ("assistant", "user", "\n"):
        if len(hf.encode(word, add_special_tokens=False)) != 1:
            raise RuntimeError(f"{word!r} is not one token of the tiny tokenizer")
    folder.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(folder))
    tok.model.save(str(folder))  # vocab.json + merges.txt, the files the released checkpoints ship too
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "Qwen2Tokenizer"
    config["model_max_length"] = 32768
    config_path.write_text(json.dumps(config, indent=2))
    return {text: hf.convert_tokens_to_ids(text) for text in SPECIAL_TOKENS}


# --- configs ----------------------------------------------------------------------------------------------------

def talker_config(text_vocab: int) -> dict[str, Any]:
    """The ``talker_config`` block of a tiny checkpoint, in the released ``config.json``'s keys."""
    return {
        "attention_bias": False, "attention_dropout": 0, "head_dim": 16, "hidden_act": "silu",
        "hidden_size": TALKER_HIDDEN, "initializer_range": 0.02, "intermediate_size": 64,
        "max_position_embeddings": 32768, "model_type": "qwen3_tts_talker", "num_attention_heads": 4,
        "num_code_groups": CODE_GROUPS, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "position_id_per_seconds": 13, "rms_norm_eps": 1e-06,
        # released: sections [24, 20, 20] of a 128-wide head; here [4, 2, 2] of a 16-wide one, interleaved
        "rope_scaling": {"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default", "type": "default"},
        "rope_theta": 1000000, "sliding_window": None, "text_hidden_size": TEXT_HIDDEN,
        "text_vocab_size": text_vocab, "use_cache": True, "use_sliding_window": False, "vocab_size": TALKER_VOCAB,
        **CODEC_IDS, "codec_language_id": dict(LANGUAGES), "spk_id": {}, "spk_is_dialect": {},
        "code_predictor_config": {
            "attention_bias": False, "attention_dropout": 0, "head_dim": 8, "hidden_act": "silu",
            "hidden_size": PREDICTOR_HIDDEN, "initializer_range": 0.02, "intermediate_size": 48,
            "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 65536,
            "max_window_layers": 28, "model_type": "qwen3_tts_talker_code_predictor", "num_attention_heads": 4,
            "num_code_groups": CODE_GROUPS, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
            "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "use_cache": True,
            "use_sliding_window": False, "vocab_size": CODEBOOK,
        },
    }


def model_config(kind: str, special: dict[str, int], text_vocab: int) -> dict[str, Any]:
    """``config.json`` of a tiny checkpoint of ``kind``. What differs per kind, as in the released configs: the
    ``tts_model_type``; CustomVoice lists speakers (``spk_id``, ``spk_is_dialect``); only Base carries a speaker
    encoder (``speaker_encoder_config``'s weights exist in Base checkpoints alone)."""
    talker = talker_config(text_vocab)
    if kind == "custom_voice":
        talker["spk_id"] = dict(SPEAKERS)
        talker["spk_is_dialect"] = dict(SPEAKER_DIALECTS)
    return {
        "architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts", "dtype": "bfloat16",
        "assistant_token_id": None, "im_start_token_id": special["<|im_start|>"],
        "im_end_token_id": special["<|im_end|>"], "tts_pad_token_id": special["<|tts_pad|>"],
        "tts_bos_token_id": special["<|tts_bos|>"], "tts_eos_token_id": special["<|tts_eos|>"],
        # mel_dim stays 128: the reference computes 128 mel bins whatever the config says
        "speaker_encoder_config": {"enc_dim": TALKER_HIDDEN, "sample_rate": 24000, "mel_dim": 128,
                                   "enc_channels": [32, 32, 32, 32, 96], "enc_kernel_sizes": [5, 3, 3, 3, 1],
                                   "enc_dilations": [1, 2, 3, 4, 1], "enc_attention_channels": 16,
                                   "enc_res2net_scale": 8, "enc_se_channels": 16},
        "talker_config": talker, "tokenizer_type": "qwen3_tts_tokenizer_12hz", "transformers_version": "4.57.3",
        "tts_model_size": "1b7", "tts_model_type": kind,
    }


def codec_config() -> dict[str, Any]:
    """``speech_tokenizer/config.json``: the released 12 Hz codec's structure (Mimi encoder, 1920 samples per frame
    both ways, split RVQ with one semantic quantizer) at tiny widths; its decoder attends over an 8-frame window
    (released: 72)."""
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"], "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_valid_num_quantizers": CODE_GROUPS, "input_sample_rate": 24000, "output_sample_rate": 24000,
        "decode_upsample_rate": 1920, "encode_downsample_rate": 1920, "transformers_version": "4.57.3",
        "decoder_config": {
            "attention_bias": False, "attention_dropout": 0.0, "codebook_dim": 16, "codebook_size": CODEBOOK,
            "decoder_dim": 32, "head_dim": 8, "hidden_act": "silu", "hidden_size": 32, "intermediate_size": 64,
            "latent_dim": 32, "layer_scale_initial_scale": 0.01, "max_position_embeddings": 8000,
            "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 4,
            "num_quantizers": CODE_GROUPS, "rms_norm_eps": 1e-05, "rope_theta": 10000, "sliding_window": 8,
            "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2],
        },
        "encoder_config": {
            "_frame_rate": 12.5, "audio_channels": 1, "codebook_dim": 8, "codebook_size": CODEBOOK, "compress": 2,
            "dilation_growth_rate": 2, "head_dim": 8, "hidden_act": "gelu", "hidden_size": 16,
            "intermediate_size": 32, "kernel_size": 7, "last_kernel_size": 3, "layer_scale_initial_scale": 0.01,
            "max_position_embeddings": 8000, "model_type": "mimi", "norm_eps": 1e-05, "num_attention_heads": 2,
            "num_filters": 4, "num_hidden_layers": 1, "num_key_value_heads": 2, "num_quantizers": 2 * CODE_GROUPS,
            "num_residual_layers": 1, "num_semantic_quantizers": 1, "pad_mode": "constant",
            "residual_kernel_size": 3, "rope_theta": 10000.0, "sampling_rate": 24000, "sliding_window": 250,
            "trim_right_ratio": 1.0, "upsample_groups": 16, "upsampling_ratios": [8, 6, 5, 4],
            "use_causal_conv": True, "use_conv_shortcut": False, "use_streaming": False,
            "vector_quantization_hidden_dimension": 8,
        },
    }


GENERATION_CONFIG = {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
                     "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0,
                     "subtalker_top_k": 50, "max_new_tokens": 8192}
"""``generation_config.json`` in the released checkpoints' keys (sampling on; the fixtures' runs turn it off)."""

CODEC_PREPROCESSOR = {"feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
                      "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
                      "sampling_rate": 24000, "chunk_length_s": None, "overlap": None}
