"""Checkpoint tensor names -> Anna parameter names for both Gemma 4 layouts.

* conditional generation (``Gemma4ForConditionalGeneration``): ``model.language_model.X`` -> ``model.X``;
  the vision and audio towers and their embedders (``model.vision_tower.*``, ``model.audio_tower.*``,
  ``model.embed_vision.*``, ``model.embed_audio.*``) are ignored for text serving.
* causal (``Gemma4ForCausalLM``): ``model.X`` -> ``model.X``.

``lm_head.weight`` maps to itself unless the embeddings are tied, where it is ignored if present.
Anything else maps to itself, so the loader reports it as unexpected (e.g. K/V projections of a
KV-shared layer, which the model does not have).

The other way, for ``anna bench --compare-hf`` (:func:`hf_state_dict`, :func:`hf_text_config`): a loaded
Gemma 3 or Gemma 4 model's tensors under the names of transformers' ``Gemma3ForCausalLM`` /
``Gemma4ForCausalLM``, and the text part of its ``config.json`` as that class's config kwargs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from anna_core.errors import ModelLoadError

from anna_gemma4.config import Gemma4Config
from anna_gemma4.decoder import Gemma4DecoderLayer
from anna_gemma4.moe import Gemma4Experts

_LANGUAGE_PREFIX = "model.language_model."
_IGNORED_PREFIXES = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.")


def name_map(cfg: Gemma4Config) -> Callable[[str], str | None]:
    """A ``checkpoint name -> parameter name | None`` function for :func:`~anna_core.weights.safetensors_loader.load_safetensors`."""

    def map_name(name: str) -> str | None:
        if name == "lm_head.weight":
            return None if cfg.tie_word_embeddings else name
        if cfg.layout == "conditional":
            if name.startswith(_IGNORED_PREFIXES):
                return None
            if name.startswith(_LANGUAGE_PREFIX):
                return "model." + name[len(_LANGUAGE_PREFIX):]
        return name

    return map_name


_CONFIG_ONLY_KEYS = ("model_type", "architectures", "transformers_version", "auto_map")
"""``config.json`` keys that describe the file rather than the text model (left out of the config kwargs)."""


def hf_text_config(raw: dict[str, Any] | None, tie_word_embeddings: bool) -> dict[str, Any]:
    """The text model's config kwargs from a checkpoint's ``config.json`` dict: its ``text_config`` in the
    conditional-generation layout, else the whole (causal) dict, less :data:`_CONFIG_ONLY_KEYS`, with
    ``tie_word_embeddings`` as Anna serves it (the conditional layout keeps it beside ``text_config``).

    The kwargs are passed on as the file has them (no filtering against one transformers version's
    fields): Gemma's text configs take every field of the released and the ``save_pretrained`` forms
    (``global_head_dim`` / ``num_global_key_value_heads`` or ``per_layer_config``) in transformers 5.17
    and 5.24 alike, and keep unknown keys as attributes.

    Raises:
        ModelLoadError: ``raw`` is None (the loader kept no ``config.json``: a GGUF source).
    """
    if raw is None:
        raise ModelLoadError("hf_export needs the checkpoint's config.json (set by the loader as raw_config)")
    nested = raw.get("text_config")
    text = dict(nested if isinstance(nested, dict) else raw)
    for key in _CONFIG_ONLY_KEYS:
        text.pop(key, None)
    text["tie_word_embeddings"] = tie_word_embeddings
    return text


def hf_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """A loaded Gemma 3 / Gemma 4 model's tensors under HF ``Gemma3ForCausalLM`` / ``Gemma4ForCausalLM``
    names (``model.*``, ``lm_head.weight`` when untied), as views of its parameters (same storage, dtype
    and device: no copy, so the 31B fits once in memory).

    Anna's names are HF's but for three things that are rewritten: each dense MLP's merged
    ``mlp.gate_up_proj.weight`` ``[2I, hidden]`` goes back to ``mlp.gate_proj.weight`` /
    ``mlp.up_proj.weight`` ``[I, hidden]`` (row halves, :meth:`~anna_core.layers.mlp.SwiGLUMLP.unmerged_weights`),
    each attention's merged ``self_attn.qkv_proj`` to ``q_proj`` / ``k_proj`` / ``v_proj`` (row slices,
    :meth:`~anna_gemma4.attention.GemmaAttention.unmerged_weights`),
    and a Gemma 4 MoE layer exports exactly ``experts.gate_up_proj`` ``[E, 2I, hidden]`` and
    ``experts.down_proj`` ``[E, hidden, I]`` (the layout transformers 5 holds in memory; any other tensor
    the experts module keeps for its own kernels is left out). The layer scalar, a parameter here, is a
    buffer in transformers (``load_state_dict`` fills both).

    Args:
        model: a :class:`~anna_gemma4.common.GemmaCausalLM` (Gemma 3 or 4), merged or not.

    Raises:
        ModelLoadError: a MoE layer's expert tensors are not in that layout.
    """
    state = {name: param.detach() for name, param in model.named_parameters()}
    for i, layer in enumerate(model.model.layers):
        prefix = f"model.layers.{i}."
        for name in [n for n in state if n.startswith(prefix + "mlp.")]:
            del state[name]
        state.update({prefix + "mlp." + k: v for k, v in layer.mlp.unmerged_weights().items()})
        unmerged_attn = layer.self_attn.unmerged_weights()
        if unmerged_attn:
            for name in [n for n in state if n.startswith(prefix + "self_attn.qkv_proj.")]:
                del state[name]
            state.update({prefix + "self_attn." + k: v for k, v in unmerged_attn.items()})
        if isinstance(layer, Gemma4DecoderLayer) and layer.has_moe:
            for name in [n for n in state if n.startswith(prefix + "experts.")]:
                del state[name]
            state.update({prefix + "experts." + k: v for k, v in _hf_experts(layer.experts, i).items()})
    return state


def _hf_experts(experts: Gemma4Experts, layer: int) -> dict[str, torch.Tensor]:
    """``{"gate_up_proj": [E, 2I, hidden], "down_proj": [E, hidden, I]}`` of a Gemma 4 MoE layer (views).

    Raises:
        ModelLoadError: the two tensors' shapes do not fit together in that layout.
    """
    gate_up, down = experts.gate_up_proj.detach(), experts.down_proj.detach()
    if (gate_up.dim() != 3 or down.dim() != 3 or gate_up.shape[0] != down.shape[0]
            or gate_up.shape[1] != 2 * down.shape[2] or gate_up.shape[2] != down.shape[1]):
        raise ModelLoadError(f"layer {layer}: the experts' gate_up_proj {tuple(gate_up.shape)} / down_proj "
                             f"{tuple(down.shape)} are not the [E, 2I, hidden] / [E, hidden, I] layout transformers holds")
    return {"gate_up_proj": gate_up, "down_proj": down}
