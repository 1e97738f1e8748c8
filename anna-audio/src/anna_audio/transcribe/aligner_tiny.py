"""A tiny random Qwen3 forced-aligner checkpoint, saved by transformers (for tests of ``--asr-aligner-dir``)."""

from __future__ import annotations

from pathlib import Path

ALIGNER_TEMPLATE = (
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- for c in m.content %}"
    "{%- if c.type == 'audio' %}<|audio_start|><|audio_pad|><|audio_end|>"
    "{%- elif c.type == 'text' %}{{ c.text }}<timestamp><timestamp>{%- endif %}"
    "{%- endfor %}{%- endif %}{%- endfor %}")
"""The aligner's input: the audio, then every word followed by two ``<timestamp>`` slots (start and end)."""


def build_tiny_aligner(path: str | Path, *, seed: int = 0, num_bins: int = 64) -> Path:
    """Save a tiny random ``Qwen3ASRForTokenClassification`` and its ``Qwen3ASRProcessor`` (the tiny BPE tokenizer
    of :mod:`anna_core.testing` plus the audio and ``<timestamp>`` tokens, :data:`ALIGNER_TEMPLATE`) to ``path``.

    Args:
        seed: weights seed (the classifier head is drawn wide, so bins vary along the audio).
        num_bins: time classes (80 ms each).

    Returns:
        ``Path(path)``.
    """
    import torch
    from anna_core.testing.checkpoints import build_tiny_tokenizer
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen3ASRConfig,
        Qwen3ASRFeatureExtractor,
        Qwen3ASRForTokenClassification,
        Qwen3ASRProcessor,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    base = build_tiny_tokenizer(path)
    base.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|audio_start|>", "<|audio_pad|>",
                                                           "<|audio_end|>", "<timestamp>"]})
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=base.backend_tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        extra_special_tokens={"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                              "audio_eos_token": "<|audio_end|>"})
    cfg = Qwen3ASRConfig(
        audio_config={"d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 64, "output_dim": 64,
                          "num_mel_bins": 128, "n_window": 50, "n_window_infer": 100, "downsample_hidden_size": 16},
        text_config={"vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 4096},
        audio_token_id=tokenizer.convert_tokens_to_ids("<|audio_pad|>"), num_labels=num_bins)
    cfg.timestamp_token_id = tokenizer.convert_tokens_to_ids("<timestamp>")
    torch.manual_seed(seed)
    model = Qwen3ASRForTokenClassification(cfg).eval()
    with torch.no_grad():
        model.score.weight.normal_(0.0, 2.0)
    model.save_pretrained(str(path))
    Qwen3ASRProcessor(feature_extractor=Qwen3ASRFeatureExtractor(), tokenizer=tokenizer,
                      chat_template=ALIGNER_TEMPLATE).save_pretrained(str(path))
    return path
