"""Checkpoint tensor names -> Anna parameter names for both Qwen3.5 layouts.

* vision-language (``Qwen3_5ForConditionalGeneration``): ``model.language_model.X`` -> ``model.X``;
  ``model.visual.*`` is ignored for text serving.
* text-only (``Qwen3_5ForCausalLM``): ``model.X`` -> ``model.X``.

``mtp.*`` (the multi-token-prediction head) is ignored in both. ``lm_head.weight`` maps to
``lm_head.weight`` unless the embeddings are tied, where it is ignored if present.
"""

from __future__ import annotations

from collections.abc import Callable

from anna_qwen35.config import Qwen35Config

_VL_PREFIX = "model.language_model."
_IGNORED_PREFIXES = ("model.visual.", "mtp.")


def name_map(cfg: Qwen35Config) -> Callable[[str], str | None]:
    """A ``checkpoint name -> parameter name | None`` function for :func:`load_safetensors`.

    Names that are neither ignored nor recognised map to themselves, so the loader reports them
    as unexpected tensors.
    """

    def map_name(name: str) -> str | None:
        if name.startswith(_IGNORED_PREFIXES):
            return None
        if name == "lm_head.weight":
            return None if cfg.tie_word_embeddings else name
        if name.startswith(_VL_PREFIX):
            return "model." + name[len(_VL_PREFIX):]
        return name

    return map_name


def hf_text_state_dict(model) -> dict:
    """Anna's loaded weights under HF ``Qwen3_5ForCausalLM`` names (``model.*``, ``lm_head.weight``).

    Merged projections are split back into views of the merged tensors, so the result shares
    memory with ``model`` (``load_state_dict(..., assign=True)`` into a meta-built HF model then
    costs no memory): the HF side-by-side benchmark runs both on the same random weights.

    Args:
        model: a :class:`~anna_qwen35.model.Qwen35ForCausalLM`, merged or not.
    """
    state = {}
    for name, param in model.named_parameters():
        state[name] = param.detach()
    for prefix, module in model.named_modules():
        prefix = prefix + "."
        merged_gdn = getattr(module, "in_proj_all", None)
        if merged_gdn is not None:
            w = state.pop(prefix + "in_proj_all.weight")
            sizes = [module.conv_dim, module.value_dim, module.num_v_heads, module.num_v_heads]
            for part, t in zip(("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"), w.split(sizes)):
                state[f"{prefix}{part}.weight"] = t
        if getattr(module, "qkv_proj", None) is not None:
            q_size, kv_size = 2 * module.num_heads * module.head_dim, module.num_kv_heads * module.head_dim
            for kind in ("weight", "bias"):
                t = state.pop(f"{prefix}qkv_proj.{kind}", None)
                if t is not None:
                    for part, piece in zip(("q_proj", "k_proj", "v_proj"), t.split([q_size, kv_size, kv_size])):
                        state[f"{prefix}{part}.{kind}"] = piece
        if getattr(module, "gate_up_proj", None) is not None:
            w = state.pop(prefix + "gate_up_proj.weight")
            state[prefix + "gate_proj.weight"], state[prefix + "up_proj.weight"] = w.split(module.intermediate)
    return state
