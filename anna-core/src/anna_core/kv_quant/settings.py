"""The server's KV-cache quantization choice (``--kv-cache-quantization``, ``--kv-cache-quant-bits``) and
``auto``'s size tiers, resolved to a :class:`~anna_core.kv_quant.layout.TurboQuantLayout` (or None) once the
model is loaded."""

from __future__ import annotations

from anna_core.errors import AnnaError
from anna_core.kv_quant.layout import BITS, TurboQuantLayout

MODES = ("none", "turboquant", "auto")
"""Values of ``--kv-cache-quantization``: keep K/V in the serving dtype, TurboQuant them, or decide by size."""

DEFAULT_BITS = 4
"""Bits of ``turboquant`` when ``--kv-cache-quant-bits`` is not given."""

AUTO_TIERS: tuple[tuple[float, int | None], ...] = (
    (2e9, None),  # small models: the KV cache is small next to the weights, and they lose the most
    (24e9, 4),  # quality-neutral in the paper's LongBench runs from 3.5 bits per channel up
    (float("inf"), 3),  # large models: KV memory dominates long contexts
)
"""``auto``'s presets: ``(parameters below, bits)`` in order; None keeps K/V in the serving dtype."""


def check_mode(mode: str, bits: int | None) -> None:
    """Raises AnnaError for an unknown mode or bits outside :data:`BITS` (bits may be None)."""
    if mode not in MODES:
        raise AnnaError(f"kv_cache_quantization must be one of {MODES}, got {mode!r}")
    if bits is not None and bits not in BITS:
        raise AnnaError(f"kv_cache_quant_bits must be one of {BITS}, got {bits}")


def resolve_kv_quant(mode: str, bits: int | None, *, num_params: int, supported: bool) -> TurboQuantLayout | None:
    """The layout the engine applies to every attention group, or None.

    Args:
        mode: one of :data:`MODES`.
        bits: the requested bits (``turboquant``: default :data:`DEFAULT_BITS`; ``auto``: overrides the tier's).
        num_params: the model's parameter count (``auto``'s tier).
        supported: the model declares ``ModelCapabilities.quantized_kv``.

    Raises:
        AnnaError: ``turboquant`` for a model that does not declare ``quantized_kv``, or a bad mode / bits.
    """
    check_mode(mode, bits)
    if mode == "none":
        return None
    if mode == "turboquant":
        if not supported:
            raise AnnaError("this model does not declare a quantized KV cache (ModelCapabilities.quantized_kv): "
                            "serve it with --kv-cache-quantization none")
        return TurboQuantLayout(bits or DEFAULT_BITS)
    tier = next(b for limit, b in AUTO_TIERS if num_params < limit)
    if not supported or tier is None:
        return None
    return TurboQuantLayout(bits or tier)
