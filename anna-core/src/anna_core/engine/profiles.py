"""Scheduler profiles: named sets of scheduler knobs (pure Python).

``interactive`` favours latency (small prefill steps between decodes, short queue waits, no
batching delay); ``throughput`` favours tokens/s (big batches and prefill steps, a short batching
delay); ``none`` leaves every knob at its own default (:class:`~anna_core.engine.config.EngineConfig`).
An explicitly set knob always overrides its profile value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from anna_core.errors import AnnaError

#: The knobs a profile sets (``EngineConfig`` field names).
SCHEDULER_KNOBS = (
    "max_num_seqs", "max_prefill_tokens", "prefill_chunk_size", "max_decode_tokens", "batch_wait_ms",
    "max_queue_wait_ms", "max_waiting_requests", "dynamic_token_budget",
)

PROFILES: dict[str, dict[str, Any]] = {
    "none": {},
    "interactive": {
        "max_num_seqs": 64,
        "max_prefill_tokens": 1024,
        "prefill_chunk_size": 512,
        "max_decode_tokens": 262144,
        "batch_wait_ms": 0.0,
        "max_queue_wait_ms": 250.0,
        "max_waiting_requests": 256,
        "dynamic_token_budget": True,
    },
    "throughput": {
        "max_num_seqs": 256,
        "max_prefill_tokens": 8192,
        "prefill_chunk_size": 0,
        "max_decode_tokens": 0,
        "batch_wait_ms": 20.0,
        "max_queue_wait_ms": 5000.0,
        "max_waiting_requests": 4096,
        "dynamic_token_budget": True,
    },
}


def resolve_profile(profile: str, explicit: Mapping[str, Any]) -> dict[str, Any]:
    """Merge a profile with explicit settings: field default < profile value < explicit value.

    Args:
        profile: ``"interactive"``, ``"throughput"`` or ``"none"``.
        explicit: settings the caller gave; ``None`` values count as "not given".

    Returns:
        ``EngineConfig`` keyword arguments (only fields that differ from their defaults or were
        given).

    Raises:
        AnnaError: unknown profile.
    """
    if profile not in PROFILES:
        raise AnnaError(f"unknown scheduler profile {profile!r}; choose one of {', '.join(PROFILES)}")
    merged = dict(PROFILES[profile])
    merged.update({k: v for k, v in explicit.items() if v is not None})
    return merged
