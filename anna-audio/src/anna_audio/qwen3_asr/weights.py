"""Checkpoint tensor names of both Qwen3-ASR layouts -> :class:`~anna_audio.qwen3_asr.model.Qwen3ASRModel` names.

Anna's parameters: ``model.*`` / ``lm_head.*`` (the Qwen3 decoder, :mod:`anna_qwen35.qwen3`), ``audio_tower.*``
(transformers' ``Qwen3ASREncoder``) and ``multi_modal_projector.linear_1|linear_2.*``.

================================================  ==========================================  ==============
``hf`` layout                                     ``original`` layout                         Anna
================================================  ==========================================  ==============
``model.language_model.X``                        ``thinker.model.X``                         ``model.X``
``lm_head.X``                                     ``thinker.lm_head.X``                       ``lm_head.X``
``model.audio_tower.X``                           ``thinker.audio_tower.X``                   ``audio_tower.X``
``model.multi_modal_projector.linear_{1,2}.X``    ``thinker.audio_tower.proj{1,2}.X``         ``multi_modal_projector.linear_{1,2}.X``
================================================  ==========================================  ==============

Every other name is kept as it is, so a tensor the model lacks is reported by the loader as unexpected; a tied
``lm_head.weight`` and rotary caches are skipped.
"""

from __future__ import annotations

from collections.abc import Callable

PREFIXES = {
    "hf": (("model.language_model.", "model."), ("lm_head.", "lm_head."),
           ("model.audio_tower.", "audio_tower."), ("model.multi_modal_projector.", "multi_modal_projector.")),
    "original": (("thinker.model.", "model."), ("thinker.lm_head.", "lm_head."),
                 ("thinker.audio_tower.proj1.", "multi_modal_projector.linear_1."),
                 ("thinker.audio_tower.proj2.", "multi_modal_projector.linear_2."),
                 ("thinker.audio_tower.", "audio_tower.")),
}
"""Per layout, ``(checkpoint prefix, Anna prefix)`` pairs, the first match wins."""


def name_map(layout: str, tie_word_embeddings: bool) -> Callable[[str], str | None]:
    """A safetensors name -> parameter name map for ``layout`` (``"hf"`` or ``"original"``).

    Raises:
        ValueError: an unknown layout.
    """
    if layout not in PREFIXES:
        raise ValueError(f"unknown Qwen3-ASR layout {layout!r}; known: {sorted(PREFIXES)}")
    pairs = PREFIXES[layout]

    def mapped(name: str) -> str | None:
        if name.endswith("rotary_emb.inv_freq"):
            return None
        for old, new in pairs:
            if name.startswith(old):
                name = new + name[len(old):]
                break
        if name == "lm_head.weight" and tie_word_embeddings:
            return None
        return name

    return mapped


def original_name(hf_name: str) -> str:
    """The original layout's name of an ``hf``-layout tensor name (the inverse rewrite, for tests that turn a
    converted checkpoint back into a release-layout one).

    Raises:
        ValueError: a name under none of the ``hf`` prefixes.
    """
    pairs = (("model.language_model.", "thinker.model."), ("lm_head.", "thinker.lm_head."),
             ("model.multi_modal_projector.linear_1.", "thinker.audio_tower.proj1."),
             ("model.multi_modal_projector.linear_2.", "thinker.audio_tower.proj2."),
             ("model.audio_tower.", "thinker.audio_tower."))
    for old, new in pairs:
        if hf_name.startswith(old):
            return new + hf_name[len(old):]
    raise ValueError(f"{hf_name!r} is not a Qwen3-ASR hf-layout tensor name")
