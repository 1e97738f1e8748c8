"""The byte layout of a TurboQuant-quantized K or V row (one token, one KV head), without torch.

A quantized attention group stores, per owning layer, ``k`` ``[num_blocks + 1, block_size, H_kv, key_row_bytes]``
and ``v`` ``[..., value_row_bytes]``, both ``uint8``. A row is (Zandieh et al., arXiv 2504.19874):

* key row: ``[norm: float32 | residual norm: float32 | (bits - 1) code planes | 1 sign plane]`` —
  ``TurboQuant_prod`` (section 3.2): a ``(bits - 1)``-bit MSE quantizer of the unit key rotated by ``Pi``,
  then the 1-bit QJL transform ``sign(S r)`` of its residual ``r`` (unbiased inner products);
* value row: ``[norm: float32 | bits code planes]`` — ``TurboQuant_mse`` (section 3.1) at ``bits``;
* with ``key_qjl`` off, a key row is laid out as a value row (``bits`` code bits, no QJL stage): a biased but
  lower-variance inner product (measured on tiny models: about 0.4x the logit KL at the same bits).

A *plane* holds one bit of every coordinate: ``D / 8`` bytes, coordinate ``j`` in byte ``j // 8`` at bit
``j % 8``; plane ``p`` holds bit ``p`` of the centroid index (least significant first). Rows are padded
to a multiple of 4 bytes so the norms stay aligned.
"""

from __future__ import annotations

import attrs

from anna_core.errors import AnnaError

BITS = (2, 3, 4)
"""Bits per coordinate TurboQuant caches support (keys: ``bits - 1`` MSE bits plus the QJL sign)."""

NORM_BYTES = 4
"""Bytes of one stored norm (float32)."""


def _pad4(n: int) -> int:
    return -(-n // 4) * 4


@attrs.frozen
class TurboQuantLayout:
    """How one attention group's K/V rows are quantized.

    Attributes:
        bits: bits per coordinate, one of :data:`BITS` (keys: ``bits - 1`` code bits plus one QJL sign bit;
            values: ``bits`` code bits).
        residual_len: the newest positions of each sequence also kept in the serving dtype (a per-slot ring,
            :mod:`anna_core.kv_quant.residual`), read instead of their quantized rows; 0: none.
        key_qjl: keys as ``TurboQuant_prod`` (``bits - 1`` code bits and the QJL sign, unbiased inner products; the
            paper's choice for inner products), else as ``TurboQuant_mse`` at ``bits`` like values.
        seed: seed of the group's random rotation and QJL projection (:mod:`anna_core.kv_quant.tables`).

    Raises:
        AnnaError: bits outside :data:`BITS`, or a negative residual.
    """

    bits: int
    residual_len: int = 0
    key_qjl: bool = True
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        if self.bits not in BITS:
            raise AnnaError(f"TurboQuant KV caches take {BITS} bits, got {self.bits}")
        if self.residual_len < 0:
            raise AnnaError(f"kv_cache_residual_len must be at least 0, got {self.residual_len}")

    @property
    def key_bits(self) -> int:
        """Code bits of a key coordinate (the MSE stage; with ``key_qjl`` the QJL sign is one more)."""
        return self.bits - 1 if self.key_qjl else self.bits

    @property
    def value_bits(self) -> int:
        """Code bits of a value coordinate."""
        return self.bits

    @staticmethod
    def check_head_dim(head_dim: int) -> None:
        """Raises AnnaError unless ``head_dim`` is a positive multiple of 8 (whole bytes per plane)."""
        if head_dim < 8 or head_dim % 8:
            raise AnnaError(f"a TurboQuant KV cache needs a head_dim that is a multiple of 8, got {head_dim}")

    def key_row_bytes(self, head_dim: int) -> int:
        """Bytes of one key row: two norms, ``bits - 1`` code planes and the sign plane, padded to 4 (without
        ``key_qjl``: a value row's)."""
        self.check_head_dim(head_dim)
        if not self.key_qjl:
            return self.value_row_bytes(head_dim)
        return _pad4(2 * NORM_BYTES + self.bits * head_dim // 8)

    def value_row_bytes(self, head_dim: int) -> int:
        """Bytes of one value row: the norm and ``bits`` code planes, padded to 4."""
        self.check_head_dim(head_dim)
        return _pad4(NORM_BYTES + self.bits * head_dim // 8)
