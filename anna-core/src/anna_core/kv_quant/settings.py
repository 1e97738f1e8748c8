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

AUTO_TIERS: tuple[tuple[float, int | None, int], ...] = (
    (2e9, None, 0),  # small models: the KV cache is small next to the weights, and they lose the most
    (24e9, 4, 128),  # quality-neutral in the paper's LongBench runs from 3.5 bits per channel up
    (float("inf"), 3, 128),  # large models: KV memory dominates long contexts
)
"""``auto``'s presets: ``(parameters below, bits, residual_len)`` in order; bits None keeps K/V in the serving
dtype. The residual keeps the newest 128 positions exact (KIVI's window; the attention mass of recent tokens)."""


def check_mode(mode: str, bits: int | None, residual_len: int | None = None) -> None:
    """Raises AnnaError for an unknown mode, bits outside :data:`BITS` or a negative residual (None: unset)."""
    if mode not in MODES:
        raise AnnaError(f"kv_cache_quantization must be one of {MODES}, got {mode!r}")
    if bits is not None and bits not in BITS:
        raise AnnaError(f"kv_cache_quant_bits must be one of {BITS}, got {bits}")
    if residual_len is not None and residual_len < 0:
        raise AnnaError(f"kv_cache_residual_len must be at least 0, got {residual_len}")


def resolve_kv_quant(mode: str, bits: int | None, *, num_params: int, supported: bool,
                     residual_len: int | None = None, key_qjl: bool = True) -> TurboQuantLayout | None:
    """The layout the engine applies to every attention group, or None.

    Args:
        mode: one of :data:`MODES`.
        bits: the requested bits (``turboquant``: default :data:`DEFAULT_BITS`; ``auto``: overrides the tier's).
        num_params: the model's parameter count (``auto``'s tier).
        supported: the model declares ``ModelCapabilities.quantized_kv``.
        residual_len: newest positions kept in the serving dtype (``turboquant``: default 0; ``auto``: overrides the
            tier's).
        key_qjl: keys with the QJL stage (the paper's ``TurboQuant_prod``), else quantized as values.

    Raises:
        AnnaError: ``turboquant`` for a model that does not declare ``quantized_kv``, or a bad mode / bits.
    """
    check_mode(mode, bits, residual_len)
    if mode == "none":
        return None
    if mode == "turboquant":
        if not supported:
            raise AnnaError("this model does not declare a quantized KV cache (ModelCapabilities.quantized_kv): "
                            "serve it with --kv-cache-quantization none")
        return TurboQuantLayout(bits or DEFAULT_BITS, residual_len=residual_len or 0, key_qjl=key_qjl)
    tier, tier_residual = next((b, r) for limit, b, r in AUTO_TIERS if num_params < limit)
    if not supported or tier is None:
        return None
    return TurboQuantLayout(bits or tier, residual_len=tier_residual if residual_len is None else residual_len,
                            key_qjl=key_qjl)
