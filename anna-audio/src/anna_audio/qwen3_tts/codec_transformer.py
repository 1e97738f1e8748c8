"""The codec decoder's transformer: causal sliding-window attention over code frames, layer-scaled residuals.

Math after the reference (QwenLM/Qwen3-TTS ``tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py``:
``Qwen3TTSTokenizerV2DecoderTransformerModel`` and its layer, attention, MLP, RMSNorm and LayerScale). Each layer:
``h = x + s_attn * attn(rms(x))``, ``y = h + s_mlp * mlp(rms(h))`` with a SwiGLU MLP, rotary positions (NeoX
halves, the absolute frame index) and no q/k norms; a query at frame ``i`` sees frames ``i - window + 1 .. i``
(transformers' sliding-window mask). Streaming keeps each layer's rotated keys and values of the last
``window - 1`` frames per stream (zeros before the stream's first frame, masked by its position), so a chunk's
shapes do not depend on where its streams are; streams at different positions batch together. Parameter names follow the checkpoint's ``decoder.pre_transformer.*``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from anna_core.layers.rotary import RotaryEmbedding
from torch import nn

from anna_audio.qwen3_tts.config import CodecDecoderConfig
from anna_audio.qwen3_tts.layers import LayerScale, RMSNorm, SwiGLU
from anna_audio.qwen3_tts.stream_state import ChunkContext, ContextLayer


class WindowAttention(ContextLayer):
    """Multi-head causal attention over the last ``window`` frames (grouped key/value heads allowed)."""

    def __init__(self, config: CodecDecoderConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        s = config.shape
        self.heads, self.kv_heads, self.head_dim = s.num_heads, s.num_kv_heads, s.head_dim
        self.window = config.sliding_window
        self.q_proj = nn.Linear(s.hidden_size, s.num_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.num_heads * s.head_dim, s.hidden_size, bias=False)
        self.rotary = rotary

    @property
    def context_shape(self) -> tuple[int, ...]:
        """``(2, H_kv, window - 1, Dh)``: the rotated keys and values of the frames before the chunk."""
        return (2, self.kv_heads, self.window - 1, self.head_dim)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, state: ChunkContext | None) -> torch.Tensor:
        """x: ``[B, T, D]`` at frame ``positions`` ``[B, T]`` (each row continues its own stream) -> ``[B, T, D]``."""
        b, t, _ = x.shape
        cos_sin = self.rotary.cos_sin(positions.reshape(-1))  # one row per (stream, frame)
        q = self.rotary.rotate(self.q_proj(x).view(b * t, self.heads, self.head_dim), cos_sin)
        k = self.rotary.rotate(self.k_proj(x).view(b * t, self.kv_heads, self.head_dim), cos_sin)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)  # [B, H, T, Dh]
        k = k.view(b, t, self.kv_heads, -1).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        # key j sits `rel[j]` frames from the chunk's first frame; a query at i sees rel in (i - window, i]
        held = 0 if state is None else self.window - 1
        rel = torch.arange(-held, t, device=x.device)
        query = torch.arange(t, device=x.device)[:, None]
        allowed = ((rel[None, :] <= query) & (rel[None, :] > query - self.window))[None]  # [1, T, K]
        if state is not None:
            past = state.get(self)  # [B, 2, H_kv, window - 1, Dh]
            k = torch.cat((past[:, 0], k), dim=2)
            v = torch.cat((past[:, 1], v), dim=2)
            state.put(self, torch.stack((k[:, :, t:], v[:, :, t:]), dim=1))
            # and no further back than the stream's first frame (the held keys before it are zeros)
            first = -positions[:, :1].clamp(max=held)  # [B, 1]: rel of the stream's first frame, or of the window
            allowed = allowed & (rel[None, None, :] >= first[:, :, None])  # [B, T, K]
        groups = self.heads // self.kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])  # [B, H, T, Dh]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class TransformerLayer(nn.Module):
    def __init__(self, config: CodecDecoderConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        s = config.shape
        self.self_attn = WindowAttention(config, rotary)
        self.mlp = SwiGLU(s.hidden_size, s.intermediate_size)
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(s.hidden_size)
        self.mlp_layer_scale = LayerScale(s.hidden_size)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, state: ChunkContext | None) -> torch.Tensor:
        x = self.self_attn_layer_scale.residual(x, self.self_attn(self.input_layernorm(x), positions, state))
        return self.mlp_layer_scale.residual(x, self.mlp(self.post_attention_layernorm(x)))


class CodecTransformer(nn.Module):
    """``output_proj(norm(layers(input_proj(x))))``: ``[B, T, latent_dim]`` -> ``[B, T, latent_dim]``.

    Parameters:
        input_proj ``[D, latent]`` + bias, output_proj ``[latent, D]`` + bias, norm.weight ``[D]``, and per layer
        the attention / MLP projections, two norms and two layer scales.
    """

    def __init__(self, config: CodecDecoderConfig) -> None:
        super().__init__()
        s = config.shape
        self.rotary = RotaryEmbedding(s.head_dim, s.head_dim, {"rope_type": "default", "rope_theta": s.rope_theta})
        self.layers = nn.ModuleList([TransformerLayer(config, self.rotary) for _ in range(s.num_layers)])
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.input_proj = nn.Linear(config.latent_dim, s.hidden_size)
        self.output_proj = nn.Linear(s.hidden_size, config.latent_dim)

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        starts = state.starts if state is not None else x.new_zeros(x.shape[0], dtype=torch.int64)
        positions = starts[:, None] + torch.arange(x.shape[1], device=x.device)[None, :]  # [B, T]
        h = self.input_proj(x)
        for layer in self.layers:
            h = layer(h, positions, state)
        return self.output_proj(self.norm(h))
