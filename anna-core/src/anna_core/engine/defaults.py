"""Checkpoint generation defaults -> :class:`SamplingParams` for the fields a caller left unset."""

from __future__ import annotations

from typing import Any

import attrs

from anna_core.engine.sampling_params import SamplingParams
from anna_core.model import GenerationDefaults

_RENAMES = {"max_new_tokens": "max_tokens"}


def default_sampling_fields(generation: GenerationDefaults) -> dict[str, Any]:
    """The checkpoint's sampling defaults as ``SamplingParams`` fields.

    Keys of ``generation.sampling`` that name a field (``temperature``, ``top_p``, ``top_k``,
    ``min_p``, ``repetition_penalty``, ...; ``max_new_tokens`` maps to ``max_tokens``) are kept;
    ``do_sample: false`` means greedy (``temperature = 0``), as in HF ``generate``.
    """
    names = {f.name for f in attrs.fields(SamplingParams)}
    fields = {}
    for key, value in generation.sampling.items():
        key = _RENAMES.get(key, key)
        if key in names and value is not None:
            fields[key] = value
    if generation.sampling.get("do_sample") is False:
        fields["temperature"] = 0.0
    return fields


def sampling_params_with_defaults(generation: GenerationDefaults, **explicit: Any) -> SamplingParams:
    """``SamplingParams`` from the caller's ``explicit`` fields, the checkpoint's defaults filling
    every field the caller did not give.

    Raises:
        InvalidRequestError: a resulting field is out of range.
    """
    return SamplingParams(**{**default_sampling_fields(generation), **explicit})
