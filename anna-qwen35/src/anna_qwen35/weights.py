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
