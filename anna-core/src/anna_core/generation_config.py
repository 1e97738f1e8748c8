"""A checkpoint's ``generation_config.json`` as :class:`~anna_core.model.GenerationDefaults`.

Family loaders call :func:`read_generation_defaults` so every family reads the file the same way:
EOS ids from ``generation_config.json``, else from ``config.json``, else from the tokenizer; sampling
defaults are the :data:`SAMPLING_KEYS` the file sets (``do_sample: false`` means greedy).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anna_core.errors import ModelLoadError
from anna_core.model import GenerationDefaults

GENERATION_CONFIG = "generation_config.json"

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty")
"""``generation_config.json`` fields taken as default :class:`SamplingParams` fields (same names)."""


def read_generation_config(root: str | Path) -> dict[str, Any]:
    """The parsed ``generation_config.json`` of the folder ``root``, or ``{}`` when there is none.

    Raises:
        ModelLoadError: the file is not valid JSON.
    """
    path = Path(root) / GENERATION_CONFIG
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{str(path)!r} is not valid JSON: {exc}") from exc


def read_generation_defaults(root: str | Path, *, config_eos: int | list[int] | tuple[int, ...] | None = None,
                             tokenizer: Any = None) -> GenerationDefaults:
    """EOS ids and sampling defaults of the checkpoint in ``root``.

    Args:
        root: checkpoint folder (``generation_config.json`` may be absent).
        config_eos: ``eos_token_id`` from ``config.json`` (an id, a list of ids, or None).
        tokenizer: object with an ``eos_token_id`` attribute, or None.

    Returns:
        ``GenerationDefaults`` whose EOS ids are the first of (``generation_config.json``'s
        ``eos_token_id``, ``config_eos``, the tokenizer's EOS) that is neither None nor empty,
        else ``[]``; sampling holds the non-null :data:`SAMPLING_KEYS` of the file, with
        ``temperature`` 0 when it sets ``do_sample: false``.

    Raises:
        ModelLoadError: ``generation_config.json`` is not valid JSON.
    """
    gen = read_generation_config(root)
    tokenizer_eos = None if tokenizer is None else tokenizer.eos_token_id
    eos: Any = None
    for candidate in (gen.get("eos_token_id"), config_eos, tokenizer_eos):
        if candidate is not None and not (isinstance(candidate, (list, tuple)) and not candidate):
            eos = candidate
            break
    eos_ids = [] if eos is None else [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
    sampling = {k: gen[k] for k in SAMPLING_KEYS if gen.get(k) is not None}
    if gen.get("do_sample") is False:
        sampling["temperature"] = 0.0
    return GenerationDefaults(eos_token_ids=eos_ids, sampling=sampling)
