"""Checkpoint tensor names -> Anna parameter names for both Qwen3.5 layouts.

* vision-language (``Qwen3_5ForConditionalGeneration``): ``model.language_model.X`` -> ``model.X``;
  ``model.visual.X`` -> ``visual.X`` when the model has a vision tower (:mod:`anna_qwen35.vision`), else ignored
  (text serving).
* text-only (``Qwen3_5ForCausalLM``): ``model.X`` -> ``model.X``.

``mtp.*`` (the multi-token-prediction head) is ignored in both. MoE expert weights come either fused
(``mlp.experts.gate_up_proj`` ``[E, 2I, H]``, ``mlp.experts.down_proj`` ``[E, H, I]``) or per expert
(``mlp.experts.{e}.{gate,up,down}_proj.weight``, what transformers' ``save_pretrained`` writes); see
:func:`expert_layout`. ``lm_head.weight`` maps to
``lm_head.weight`` unless the embeddings are tied, where it is ignored if present.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from anna_core.errors import ModelLoadError
from torch import nn

from anna_qwen35.config import Qwen35Config
from anna_qwen35.moe import SparseMoeBlock

_VL_PREFIX = "model.language_model."
_VISUAL_PREFIX = "model.visual."
_IGNORED_PREFIXES = (_VISUAL_PREFIX, "mtp.")


def name_map(cfg: Qwen35Config, vision: bool = False) -> Callable[[str], str | None]:
    """A ``checkpoint name -> parameter name | None`` function for :func:`load_safetensors`.

    ``vision``: the model has a vision tower, so ``model.visual.*`` loads into ``visual.*`` (a missing or
    mis-shaped vision tensor is then a load error, like any other).

    Names that are neither ignored nor recognised map to themselves, so the loader reports them
    as unexpected tensors.
    """

    def map_name(name: str) -> str | None:
        if vision and name.startswith(_VISUAL_PREFIX):
            return "visual." + name[len(_VISUAL_PREFIX):]
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

    In a MoE model (``Qwen3_5MoeForCausalLM``) each layer's ``mlp.`` exports the router ``gate.weight``
    ``[E, H]``, the shared expert's ``shared_expert.{gate,up,down}_proj.weight`` (split back),
    ``shared_expert_gate.weight`` ``[1, H]`` and the routed experts in the fused layout transformers 5
    holds in memory: exactly ``experts.gate_up_proj`` ``[E, 2I, H]`` and ``experts.down_proj`` ``[E, H, I]``
    (any other tensor the experts module keeps for its own kernels is left out).

    Args:
        model: a :class:`~anna_qwen35.model.Qwen35ForCausalLM`, merged or not (a MoE model's experts
            must be fused: :meth:`~anna_qwen35.model.Qwen35ForCausalLM.merge_projections`, which the
            loader runs).

    Raises:
        ModelLoadError: a MoE layer's experts are still per expert, or not in that layout.
    """
    state = {}
    for name, param in model.named_parameters():
        if not name.startswith("visual."):  # the text model only
            state[name] = param.detach()
    for prefix, module in model.named_modules():
        prefix = prefix + "."
        if isinstance(module, SparseMoeBlock):
            _export_experts(state, prefix + "experts.", module.experts)
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
        if isinstance(getattr(module, "gate_up_proj", None), nn.Linear):  # not MoE experts' [E, 2I, H]
            w = state.pop(prefix + "gate_up_proj.weight")
            state[prefix + "gate_proj.weight"], state[prefix + "up_proj.weight"] = w.split(module.intermediate)
    return state


def hf_vl_state_dict(model) -> dict:
    """Anna's loaded weights under HF ``Qwen3_5ForConditionalGeneration`` names: the text model's
    (:func:`hf_text_state_dict`) under ``model.language_model.*``, the vision tower's ``visual.*`` under
    ``model.visual.*`` (Anna keeps the tower's checkpoint names and layouts), ``lm_head.weight`` as it is, and the
    value of HF's non-persistent ``model.visual.rotary_pos_emb.inv_freq`` (the tower's ``[head_dim / 4]`` float32
    frequencies on the CPU). Views of ``model``'s tensors, no copies.

    Raises:
        ModelLoadError: as :func:`hf_text_state_dict`.
    """
    state = {}
    for name, t in hf_text_state_dict(model).items():
        state[_VL_PREFIX + name[len("model."):] if name.startswith("model.") else name] = t
    for name, param in model.named_parameters():
        if name.startswith("visual."):
            state["model." + name] = param.detach()
    # the tower's rotary frequencies, a buffer HF computes in a constructor whose signature changed across releases
    state["model.visual.rotary_pos_emb.inv_freq"] = model.visual._inv_freq
    return state


def _export_experts(state: dict, prefix: str, experts: nn.Module) -> None:
    """Replace ``state``'s ``{prefix}*`` entries by the fused ``gate_up_proj`` / ``down_proj`` views of
    ``experts`` (a :class:`~anna_qwen35.moe.RoutedExperts`).

    Raises:
        ModelLoadError: the experts are per expert (not fused), or their tensors are not ``[E, 2I, H]`` /
            ``[E, H, I]``.
    """
    if experts.gate_up_proj is None or experts.down_proj is None:
        raise ModelLoadError(f"{prefix[:-1]}: the per-expert weights are not fused yet (merge_projections)")
    gate_up, down = experts.gate_up_proj.detach(), experts.down_proj.detach()
    if (gate_up.dim() != 3 or down.dim() != 3 or gate_up.shape[0] != down.shape[0]
            or gate_up.shape[1] != 2 * down.shape[2] or gate_up.shape[2] != down.shape[1]):
        raise ModelLoadError(f"{prefix[:-1]}: gate_up_proj {tuple(gate_up.shape)} / down_proj {tuple(down.shape)} "
                             "are not transformers' fused [E, 2I, H] / [E, H, I] layout")
    for name in [n for n in state if n.startswith(prefix)]:
        del state[name]
    state[prefix + "gate_up_proj"] = gate_up
    state[prefix + "down_proj"] = down


_PER_EXPERT = re.compile(r"\.mlp\.experts\.\d+\.")
_FUSED = re.compile(r"\.mlp\.experts\.(gate_up_proj|down_proj)$")


def expert_layout(names: Iterable[str]) -> bool:
    """Whether a MoE checkpoint's tensor ``names`` hold per-expert weights (True) or fused ones (False).

    Raises:
        ModelLoadError: the checkpoint mixes both layouts, or holds no expert weights at all.
    """
    per_expert = fused = None
    for name in names:
        if name.startswith(_IGNORED_PREFIXES):
            continue
        if per_expert is None and _PER_EXPERT.search(name):
            per_expert = name
        elif fused is None and _FUSED.search(name):
            fused = name
    if per_expert and fused:
        raise ModelLoadError(f"the checkpoint mixes per-expert ({per_expert}) and fused ({fused}) MoE expert tensors")
    if not (per_expert or fused):
        raise ModelLoadError("the MoE checkpoint holds no expert tensors (mlp.experts.*)")
    return per_expert is not None
