"""Test helpers for Anna and its plugin authors: tiny checkpoints, the HF oracle, a greedy driver,
an engine driver, output parsers on scripted streams.

Submodules import torch / transformers lazily through these names.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "build_tiny_qwen35": "anna_core.testing.checkpoints:build_tiny_qwen35",
    "build_tiny_tokenizer": "anna_core.testing.checkpoints:build_tiny_tokenizer",
    "hide_fla": "anna_core.testing.oracle:hide_fla",
    "hf_model": "anna_core.testing.oracle:hf_model",
    "hf_reference_logits": "anna_core.testing.oracle:hf_reference_logits",
    "hf_greedy": "anna_core.testing.oracle:hf_greedy",
    "allocate_caches": "anna_core.testing.runner:allocate_caches",
    "build_batch": "anna_core.testing.runner:build_batch",
    "prefill_logits": "anna_core.testing.runner:prefill_logits",
    "simple_greedy": "anna_core.testing.runner:simple_greedy",
    "simple_greedy_batch": "anna_core.testing.runner:simple_greedy_batch",
    "run_to_completion": "anna_core.testing.engine_run:run_to_completion",
    "write_tiny_checkpoint": "anna_core.testing.tiny:write_tiny_checkpoint",
    "ParserSample": "anna_core.testing.parser_streams:ParserSample",
    "check_sample": "anna_core.testing.parser_streams:check_sample",
    "parse_stream": "anna_core.testing.parser_streams:parse_stream",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from anna_core.registry import resolve

        return resolve(_LAZY[name])
    raise AttributeError(f"module 'anna_core.testing' has no attribute {name!r}")
