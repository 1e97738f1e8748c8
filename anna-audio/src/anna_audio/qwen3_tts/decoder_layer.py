"""A Qwen3 decoder layer in plain PyTorch, shared by the code predictor and the plain talker.

Math after the reference (QwenLM/Qwen3-TTS ``modeling_qwen3_tts.py``: ``Qwen3TTSDecoderLayer`` /
``Qwen3TTSTalkerDecoderLayer`` and their attention): pre-norm residual blocks, q and k RMS-normalised per head before
the rotary (NeoX halves), grouped key/value heads, causal attention, a SwiGLU MLP. The talker's M-RoPE gives every
frequency the same position when the three position rows agree, as they do for speech prompts, so the one plain
rotary serves both. Tensors are ``[B, T, D]``; keys and values of earlier positions are passed in and returned
(``[B, H_kv, T_past + T, Dh]`` each).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from anna_core.layers.rotary import RotaryEmbedding
from torch import nn

from anna_audio.qwen3_tts.config import AttentionShape
from anna_audio.qwen3_tts.layers import RMSNorm, SwiGLU

KV = tuple[torch.Tensor, torch.Tensor]


class Qwen3Attention(nn.Module):
    """Causal grouped-query attention with per-head q/k RMSNorm; keys and values of earlier positions come in as
    ``past``."""

    def __init__(self, s: AttentionShape, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.num_heads, s.num_kv_heads, s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, s.num_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.num_heads * s.head_dim, s.hidden_size, bias=False)
        self.q_norm = RMSNorm(s.head_dim, s.rms_norm_eps)
        self.k_norm = RMSNorm(s.head_dim, s.rms_norm_eps)
        self.rotary = rotary

    def forward(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor],
                past: KV | None) -> tuple[torch.Tensor, KV]:
        """x: ``[B, T, D]`` (positions continue ``past``) -> (``[B, T, D]``, keys and values through this call,
        ``[B, H_kv, T_past + T, Dh]`` each)."""
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim))
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = self.rotary.rotate(q.transpose(0, 1).reshape(t, b * self.heads, -1), cos_sin)
        q = q.view(t, b, self.heads, -1).permute(1, 2, 0, 3)  # [B, H, T, Dh]
        k = self.rotary.rotate(k.transpose(0, 1).reshape(t, b * self.kv_heads, -1), cos_sin)
        k = k.view(t, b, self.kv_heads, -1).permute(1, 2, 0, 3)
        if past is not None:
            k = torch.cat((past[0], k), dim=2)
            v = torch.cat((past[1], v), dim=2)
        groups = self.heads // self.kv_heads
        kk = k.repeat_interleave(groups, dim=1) if groups > 1 else k
        vv = v.repeat_interleave(groups, dim=1) if groups > 1 else v
        held = k.shape[2] - t
        allowed = torch.arange(k.shape[2], device=x.device)[None, :] <= torch.arange(held, held + t,
                                                                                     device=x.device)[:, None]
        out = F.scaled_dot_product_attention(q, kk, vv, attn_mask=allowed)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), (k, v)


class Qwen3Layer(nn.Module):
    def __init__(self, s: AttentionShape, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.self_attn = Qwen3Attention(s, rotary)
        self.mlp = SwiGLU(s.hidden_size, s.intermediate_size)
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor],
                past: KV | None) -> tuple[torch.Tensor, KV]:
        attn, kv = self.self_attn(self.input_layernorm(x), cos_sin, past)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), kv


def run_layers(layers: nn.ModuleList, rotary: RotaryEmbedding, h: torch.Tensor, start: int,
               cache: list[KV]) -> torch.Tensor:
    """Run ``h`` (``[B, T, D]`` at positions ``start .. start + T``) through ``layers``, extending ``cache`` (one
    entry per layer, empty before the first call) with this call's keys and values; returns ``[B, T, D]``."""
    positions = torch.arange(start, start + h.shape[1], device=h.device)
    cos_sin = rotary.cos_sin(positions)
    for i, layer in enumerate(layers):
        h, kv = layer(h, cos_sin, cache[i] if i < len(cache) else None)
        if i < len(cache):
            cache[i] = kv
        else:
            cache.append(kv)
    return h
