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
