"""Anna core: plugin seam, engine, caches, reference kernels and the OpenAI-compatible server.

Public API: :class:`LLM`, :class:`SamplingParams`, :class:`RequestOutput`. Heavy modules
(torch) load lazily so ``import anna_core`` stays cheap for plugin registration.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "LLM": "anna_core.llm:LLM",
    "SamplingParams": "anna_core.engine.sampling_params:SamplingParams",
    "RequestOutput": "anna_core.engine.outputs:RequestOutput",
}

__all__ = ["LLM", "SamplingParams", "RequestOutput", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from anna_core.registry import resolve

        return resolve(_LAZY[name])
    raise AttributeError(f"module 'anna_core' has no attribute {name!r}")
