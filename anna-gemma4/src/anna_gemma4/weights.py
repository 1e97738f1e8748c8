"""Checkpoint tensor names -> Anna parameter names for both Gemma 4 layouts.

* conditional generation (``Gemma4ForConditionalGeneration``): ``model.language_model.X`` -> ``model.X``;
  the vision and audio towers and their embedders (``model.vision_tower.*``, ``model.audio_tower.*``,
  ``model.embed_vision.*``, ``model.embed_audio.*``) are ignored for text serving.
* causal (``Gemma4ForCausalLM``): ``model.X`` -> ``model.X``.

``lm_head.weight`` maps to itself unless the embeddings are tied, where it is ignored if present.
Anything else maps to itself, so the loader reports it as unexpected (e.g. K/V projections of a
KV-shared layer, which the model does not have).
"""

from __future__ import annotations

from collections.abc import Callable

from anna_gemma4.config import Gemma4Config

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
