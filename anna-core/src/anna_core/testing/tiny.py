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
