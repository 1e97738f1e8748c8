"""Tiny random checkpoints of any installed family, through the family's declared builder
(``ModelFamilySpec.tiny_checkpoint``): what the ``tiny_checkpoint`` fixture calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_tiny_checkpoint(family: str, path: str | Path, *, pm: Any = None, **overrides: Any) -> Path:
    """Write a tiny random checkpoint of the model family named ``family`` into the folder ``path``.

    Args:
        family: a ``ModelFamilySpec.name`` registered in ``pm`` (``"llama"``, ``"qwen35"``, ``"gemma4"``).
        path: the folder to write (created).
        pm: the plugin manager whose families are searched (default: the process-wide one).
        overrides: keyword arguments of the family's builder (``seed=3``, ``tie=False``, ...).

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: no registered family has that name, or the family offers no tiny checkpoint (both
            messages name the families that offer one).
    """
    from anna_core.plugins import model_families
    from anna_core.registry import resolve

    families = {spec.name: spec for spec in model_families(pm)}
    offering = ", ".join(sorted(name for name, spec in families.items() if spec.tiny_checkpoint)) or "none"
    spec = families.get(family)
    if spec is None:
        raise ValueError(f"no registered model family is named {family!r} (families offering a tiny checkpoint: "
                         f"{offering})")
    if not spec.tiny_checkpoint:
        raise ValueError(f"the {family!r} family (from {spec.distribution or 'a plugin'}) declares no "
                         f"tiny_checkpoint builder (families offering one: {offering})")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    resolve(spec.tiny_checkpoint)(path, **overrides)
    return path


def load_against_hf(folder: str | Path, *, pm: Any = None, text: str = "The quick brown fox",
                    block_size: int = 16) -> tuple[Any, float]:
    """Load ``folder`` (a tiny checkpoint with its tokenizer) in float32 on the CPU and compare its prefill logits of
    ``text`` with HF transformers' on the same folder.

    Returns:
        ``(loaded, error)``: the :class:`~anna_core.loading.LoadedModel` and the max absolute logit difference
        relative to HF's largest logit magnitude.
    """
    from anna_core.loading import load_model
    from anna_core.testing.oracle import hf_reference_logits
    from anna_core.testing.runner import prefill_logits

    loaded = load_model(folder, device="cpu", dtype="fp32", pm=pm)
    ids = loaded.tokenizer.encode(text)
    ref = hf_reference_logits(folder, ids)
    got = prefill_logits(loaded.model, ids, block_size=block_size)
    return loaded, ((got - ref).abs().max() / ref.abs().max()).item()
