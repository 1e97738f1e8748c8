"""Checkpoint tensor names -> :class:`anna_qwen35.qwen3.model.Qwen3ForCausalLM` parameter names."""

from __future__ import annotations

from collections.abc import Callable

from anna_qwen35.qwen3.config import Qwen3Config


def name_map(cfg: Qwen3Config, prefix: str = "") -> Callable[[str], str | None]:
    """A safetensors name -> parameter name map for the checkpoint layout that puts the text model under
    ``prefix`` (``""``: ``Qwen3ForCausalLM``'s own ``model.*`` / ``lm_head.*``).

    Names outside ``prefix`` (another tower's) map to None (skipped); so do rotary caches and, for a tied head,
    ``lm_head.weight``. Every other name maps to the name under ``prefix`` removed, so one the model lacks is
    reported by the loader as unexpected.
    """

    def mapped(name: str) -> str | None:
        if not name.startswith(prefix):
            return None
        name = name[len(prefix):]
        if name.endswith("rotary_emb.inv_freq"):
            return None
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            return None
        return name

    return mapped


def hf_state_dict(model) -> dict:
    """The loaded weights under transformers' ``Qwen3ForCausalLM`` names (``model.*``, and ``lm_head.weight`` when
    untied), merged projections split back into views of the merged tensors (no copy), so an HF model built on the
    meta device can take them with ``load_state_dict(..., assign=True)`` at no memory cost.

    Args:
        model: a :class:`~anna_qwen35.qwen3.model.Qwen3ForCausalLM`, merged or not.
    """
    state = {name: param.detach() for name, param in model.named_parameters()}
    for i, layer in enumerate(model.model.layers):
        prefix = f"model.layers.{i}."
        attn = layer.self_attn
        if attn.qkv_proj is not None:
            q, kv = attn.num_heads * attn.head_dim, attn.num_kv_heads * attn.head_dim
            for kind in ("weight", "bias"):
                merged = state.pop(f"{prefix}self_attn.qkv_proj.{kind}", None)
                if merged is not None:
                    for part, piece in zip(("q_proj", "k_proj", "v_proj"), merged.split([q, kv, kv]), strict=True):
                        state[f"{prefix}self_attn.{part}.{kind}"] = piece
        if layer.mlp.gate_up_proj is not None:
            state.pop(f"{prefix}mlp.gate_up_proj.weight")
            state.update({f"{prefix}mlp.{k}": v for k, v in layer.mlp.unmerged_weights().items()})
    return state
