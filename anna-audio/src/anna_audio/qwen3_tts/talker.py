"""The talker in plain PyTorch: the oracle-checked form the engine port (paged KV, batching) will follow.

Math after the reference (QwenLM/Qwen3-TTS ``modeling_qwen3_tts.py``: ``Qwen3TTSTalkerModel``,
``Qwen3TTSTalkerForConditionalGeneration``, ``Qwen3TTSTalkerResizeMLP``): Qwen3 layers over input embeddings (no
token ids: a prompt mixes projected text embeddings and codec embeddings), a final RMSNorm, and ``codec_head``
scoring the talker vocabulary (codebook-0 codes, then control ids). Text enters through ``text_embedding``
(``[text_vocab, text_hidden]``) and ``text_projection`` (``fc2(silu(fc1(x)))``, both with bias). Parameter names
follow the checkpoint's ``talker.*`` (``talker.code_predictor.*`` is the :class:`CodePredictor`'s).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from anna_core.layers.rotary import RotaryEmbedding
from torch import nn

from anna_audio.qwen3_tts.config import TalkerConfig
from anna_audio.qwen3_tts.decoder_layer import KV, Qwen3Layer, run_layers
from anna_audio.qwen3_tts.layers import RMSNorm


class TextProjection(nn.Module):
    """``linear_fc2(silu(linear_fc1(x)))``: ``[..., text_hidden]`` -> ``[..., hidden]``."""

    def __init__(self, text_hidden: int, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden)
        self.linear_fc2 = nn.Linear(text_hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class TalkerModel(nn.Module):
    """Parameters (``talker.model.*``): layers, norm, codec_embedding ``[vocab, H]``, text_embedding
    ``[text_vocab, text_hidden]``."""

    def __init__(self, config: TalkerConfig) -> None:
        super().__init__()
        s = config.shape
        self.rotary = RotaryEmbedding(s.head_dim, s.head_dim, {"rope_type": "default", "rope_theta": s.rope_theta})
        self.layers = nn.ModuleList([Qwen3Layer(s, self.rotary) for _ in range(s.num_layers)])
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.codec_embedding = nn.Embedding(config.vocab_size, s.hidden_size)
        self.text_embedding = nn.Embedding(config.text_vocab_size, config.text_hidden_size)


class Talker(nn.Module):
    """One request's talker: embeddings in, final hidden states and codec logits out, keys and values kept in a
    caller-owned cache (a list, empty before the prompt)."""

    def __init__(self, config: TalkerConfig) -> None:
        super().__init__()
        self.config = config
        self.model = TalkerModel(config)
        self.text_projection = TextProjection(config.text_hidden_size, config.shape.hidden_size)
        self.codec_head = nn.Linear(config.shape.hidden_size, config.vocab_size, bias=False)

    def text(self, ids: torch.Tensor) -> torch.Tensor:
        """Text ids ``[..., T]`` -> projected embeddings ``[..., T, H]``."""
        return self.text_projection(self.model.text_embedding(ids))

    def codec(self, ids: torch.Tensor) -> torch.Tensor:
        """Talker ids ``[..., T]`` -> codec embeddings ``[..., T, H]``."""
        return self.model.codec_embedding(ids)

    def forward(self, embeds: torch.Tensor, start: int, cache: list[KV]) -> tuple[torch.Tensor, torch.Tensor]:
        """embeds: ``[B, T, H]`` at positions ``start .. start + T`` (every row's prompt starts at position 0).

        Returns:
            ``(hidden [B, H], logits [B, vocab] float32)`` of the last position.
        """
        h = run_layers(self.model.layers, self.model.rotary, embeds, start, cache)
        hidden = self.model.norm(h[:, -1])
        return hidden, self.codec_head(hidden).float()
