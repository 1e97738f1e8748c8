"""Checkpoint tensor names -> :class:`~anna_gemma4.gemma3.model.Gemma3ForCausalLM` parameter names.

* causal (``Gemma3ForCausalLM``): ``model.X`` -> ``model.X``;
* conditional generation (``Gemma3ForConditionalGeneration``), either naming: transformers 5's
  ``model.language_model.X`` -> ``model.X`` or the 4.x one the released checkpoints use,
  ``language_model.model.X`` -> ``model.X`` and ``language_model.lm_head.weight`` -> ``lm_head.weight``;
  the vision tower and projector (``[model.]vision_tower.*``, ``[model.]multi_modal_projector.*``) are
  ignored for text serving;
* GGUF (llama.cpp's names): ``token_embd``, ``output_norm``, ``output``, ``blk.{i}.attn_norm|attn_q|attn_k|
  attn_v|attn_output|attn_q_norm|attn_k_norm|post_attention_norm|ffn_norm|ffn_gate|ffn_up|ffn_down|
  post_ffw_norm``. llama.cpp stores every RMSNorm weight as ``w + 1`` (its norms multiply by the stored
  weight): :func:`gguf_transform` subtracts the one (in float32, as transformers' GGUF loader does), so
  the ``1 + w`` norms compute what the file means. No q/k row permutation (Gemma's RoPE is NeoX-style
  in llama.cpp too).

``lm_head.weight`` is ignored when the embeddings are tied. Anything else maps to itself, so the
loader reports it as unexpected.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch

from anna_gemma4.gemma3.config import Gemma3Config

_PREFIXES = ("model.language_model.", "language_model.model.")
_IGNORED = ("model.vision_tower.", "model.multi_modal_projector.", "vision_tower.", "multi_modal_projector.")
_HEADS = ("lm_head.weight", "language_model.lm_head.weight")


def name_map(cfg: Gemma3Config) -> Callable[[str], str | None]:
    """A ``checkpoint name -> parameter name | None`` function for
    :func:`~anna_core.weights.safetensors_loader.load_safetensors`."""

    def map_name(name: str) -> str | None:
        if name in _HEADS and (cfg.layout == "conditional" or name == "lm_head.weight"):
            return None if cfg.tie_word_embeddings else "lm_head.weight"
        if cfg.layout == "conditional":
            if name.startswith(_IGNORED):
                return None
            for prefix in _PREFIXES:
                if name.startswith(prefix):
                    return "model." + name[len(prefix):]
        return name

    return map_name


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
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_GGUF_LAYER_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
_GGUF_NORMS = {"output_norm"} | {k for k in _GGUF_LAYER if k.endswith("norm")}


def gguf_name_map(name: str) -> str | None:
    """``blk.3.ffn_norm.weight`` -> ``model.layers.3.pre_feedforward_layernorm.weight``; unknown names map
    to themselves (reported as unexpected)."""
    if name in _GGUF_GLOBAL:
        return _GGUF_GLOBAL[name]
    m = _GGUF_LAYER_RE.match(name)
    if m and m[2] in _GGUF_LAYER:
        return f"model.layers.{m[1]}.{_GGUF_LAYER[m[2]]}.{m[3]}"
    return name


def is_gguf_norm(name: str) -> bool:
    """Whether GGUF tensor ``name`` is an RMSNorm weight (stored as ``w + 1``)."""
    if name == "output_norm.weight":
        return True
    m = _GGUF_LAYER_RE.match(name)
    return bool(m and m[2] in _GGUF_NORMS and m[3] == "weight")


def gguf_transform(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """The fix-up after dequantization (float32): norm weights ``w + 1`` -> ``w``; others unchanged."""
    return tensor - 1.0 if is_gguf_norm(name) else tensor
