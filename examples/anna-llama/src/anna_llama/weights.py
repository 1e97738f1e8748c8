"""Checkpoint tensor names -> :class:`anna_llama.model.LlamaForCausalLM` parameter names.

Safetensors checkpoints already use HF's names. GGUF files use llama.cpp's names
(``blk.{i}.attn_q.weight``, ...), and llama.cpp's converter stores the rows of ``attn_q`` /
``attn_k`` permuted for its interleaved-pairs rotary: within each head, the two NeoX halves
``[x_0..x_{D/2-1} | x_{D/2}..x_{D-1}]`` are stored as pairs ``(x_0, x_{D/2}), (x_1, x_{D/2+1}), ...``.
:func:`gguf_transform` puts the rows back (HF's GGUF loader does the same).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch

from anna_llama.config import LlamaConfig


def safetensors_name_map(cfg: LlamaConfig) -> Callable[[str], str | None]:
    """HF names map to themselves; rotary caches and, for a tied head, ``lm_head.weight`` are ignored."""

    def name_map(name: str) -> str | None:
        if name.endswith("rotary_emb.inv_freq"):
            return None
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            return None
        return name

    return name_map


_GGUF_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_GGUF_LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GGUF_LAYER_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")


def gguf_name_map(name: str) -> str | None:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``.

    Unknown names map to themselves, so the loader reports them as unexpected.
    """
    if name in _GGUF_GLOBAL:
        return _GGUF_GLOBAL[name]
    m = _GGUF_LAYER_RE.match(name)
    if m and m[2] in _GGUF_LAYER:
        return f"model.layers.{m[1]}.{_GGUF_LAYER[m[2]]}.{m[3]}"
    return name


def unpermute_rotary_rows(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation.

    w: ``[num_heads * D, ...]`` (weight ``[H*D, in]`` or bias ``[H*D]``), rows of each head stored
    as interleaved pairs -> rows in NeoX half order.
    """
    rows = w.shape[0]
    head_dim = rows // num_heads
    rest = w.shape[1:]
    # stored row 2i + j of a head is NeoX row i + j * D/2
    return w.reshape(num_heads, head_dim // 2, 2, *rest).transpose(1, 2).reshape(rows, *rest)


def gguf_transform(cfg: LlamaConfig) -> Callable[[str, torch.Tensor], torch.Tensor]:
    """The per-tensor fix-up applied after dequantization (q/k row order)."""

    def transform(name: str, t: torch.Tensor) -> torch.Tensor:
        m = _GGUF_LAYER_RE.match(name)
        if m and m[2] == "attn_q":
            return unpermute_rotary_rows(t, cfg.num_attention_heads)
        if m and m[2] == "attn_k":
            return unpermute_rotary_rows(t, cfg.num_key_value_heads)
        return t

    return transform
