"""The 12 Hz codec encoder's transformer: causal sliding-window attention over 25 Hz frames.

Math after transformers' Mimi (``models/mimi/modeling_mimi.py``: ``MimiTransformerModel`` and its layer, attention,
MLP and layer scale). Each layer: ``h = x + s_attn * attn(ln(x))``, ``y = h + s_mlp * fc2(gelu(fc1(ln(h))))`` with
LayerNorms (weight and bias), the exact (erf) GELU, rotary positions (NeoX halves, the frame index from 0) and
scaled dot-product attention (``1 / sqrt(head_dim)``); a query at frame ``i`` sees frames ``i - window + 1 .. i``.
Parameter names follow the checkpoint's ``encoder.encoder_transformer.*``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from anna_core.layers.rotary import RotaryEmbedding
from torch import nn

from anna_audio.qwen3_tts.codec_encoder_config import CodecEncoderConfig
from anna_audio.qwen3_tts.layers import LayerScale


class EncoderAttention(nn.Module):
    """Causal multi-head attention over the last ``sliding_window`` frames (grouped key/value heads allowed);
    bias-free projections."""

    def __init__(self, config: CodecEncoderConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.window = config.sliding_window
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)
        self.rotary = rotary

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[B, T, D]`` (frames ``0 .. T-1``) -> ``[B, T, D]``."""
        b, t, _ = x.shape
        positions = torch.arange(t, device=x.device)
        cos_sin = self.rotary.cos_sin(positions.repeat(b))
        q = self.rotary.rotate(self.q_proj(x).view(b * t, self.heads, self.head_dim), cos_sin)
        k = self.rotary.rotate(self.k_proj(x).view(b * t, self.kv_heads, self.head_dim), cos_sin)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)  # [B, H, T, Dh]
        k = k.view(b, t, self.kv_heads, -1).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        groups = self.heads // self.kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        key = positions[None, :]
        query = positions[:, None]
        allowed = (key <= query) & (key > query - self.window)  # [T, T]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class EncoderMLP(nn.Module):
    """``fc2(gelu(fc1(x)))``, bias-free."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, config: CodecEncoderConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = EncoderAttention(config, rotary)
        self.mlp = EncoderMLP(d, config.intermediate_size)
        self.input_layernorm = nn.LayerNorm(d, eps=config.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(d, eps=config.norm_eps)
        self.self_attn_layer_scale = LayerScale(d)
        self.mlp_layer_scale = LayerScale(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x)))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class EncoderTransformer(nn.Module):
    """``[B, T, hidden_size]`` -> ``[B, T, hidden_size]`` through ``num_layers`` layers (no final norm).

    Parameters: per layer the q/k/v/o projections, fc1 / fc2, two LayerNorms and two layer scales.
    """

    def __init__(self, config: CodecEncoderConfig) -> None:
        super().__init__()
        self.rotary = RotaryEmbedding(config.head_dim, config.head_dim,
                                      {"rope_type": "default", "rope_theta": config.rope_theta})
        self.layers = nn.ModuleList([EncoderLayer(config, self.rotary) for _ in range(config.num_layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
