"""``int4_linear``: a matrix of 4-bit codes with a (scale, zero) per group of ``g`` columns, times ``x``.

The CPU implementation is torch's own packed-int4 kernel (``aten::_weight_int4pack_mm_for_cpu``),
whose weight is ``w[n, k] = (q[n, k] - 8) * scale[k // g, n] + zero[k // g, n]`` with ``q`` in
``[0, 16)``, ``g`` one of 32, 64, 128, 256 and ``scale_zero`` ``[K / g, N, 2]`` of x's dtype (the
float32 path is exact but about 100x slower than the bfloat16 one on the CPU; see
:mod:`anna_core.layers.quant_linear`). :func:`pack_affine_blocks` lays any
:class:`~anna_core.weights.gguf_blocks.AffineBlocks` out for it, once, at load.

Wider codes (5, 6, 8 bits) are split into 4-bit planes, ``q = q_0 + 16 q_1``, each plane its own
group of columns reading the same ``x`` columns: ``a q + b = 16 a (q_1 + s - 8) + a (q_0 - 8) + z``
with plane 1 stored shifted by ``s = 8 - 2**(bits - 5)`` (centred on 8) and ``z = b + 8 a + 16 a (8 -
s)``, so ``z`` stays small. Groups smaller than 32 (``Q6_K``'s 16) are padded to 32 with columns that
read zero. The packed matrix is then ``[N, K']`` (``K' = K`` for 4-bit codes in groups of 32 or more,
``2K`` for 5..8-bit codes, ``4K`` for ``Q6_K``) and the caller feeds ``x`` laid out to match
(:meth:`PackedInt4.expand`: each group of ``x`` padded with zeros and repeated once per plane), so the product is one kernel call with float32
accumulation and one rounding of the result.
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

from anna_core.kernels.checks import require

KERNEL_GROUPS = (32, 64, 128, 256)
"""Group sizes torch's CPU int4 kernel takes."""


def check_int4_linear(x: torch.Tensor, packed: torch.Tensor, scale_zero: torch.Tensor, group_size: int) -> None:
    """Shapes and dtypes of :func:`int4_linear`'s arguments (no sync; the messages are only built on failure:
    decode calls this once per projection per step).

    Raises:
        ValueError: x not ``[M, K]``, packed not ``[N, K/2]`` uint8, scale_zero not ``[K/g, N, 2]`` of
            x's dtype, or a group size the kernel does not take.
    """
    k = x.shape[-1]
    if (group_size in KERNEL_GROUPS and x.dim() == 2 and packed.dtype == torch.uint8 and packed.dim() == 2
            and packed.shape[1] * 2 == k and k % group_size == 0 and scale_zero.dtype == x.dtype
            and scale_zero.shape == (k // group_size, packed.shape[0], 2)):
        return
    op = "int4_linear"
    require(group_size in KERNEL_GROUPS, op, f"group_size must be one of {KERNEL_GROUPS}, got {group_size}")
    require(x.dim() == 2, op, f"x must be [M, K], got shape {tuple(x.shape)}")
    require(packed.dtype == torch.uint8 and packed.dim() == 2, op,
            f"packed must be [N, K/2] uint8, got {tuple(packed.shape)} {packed.dtype}")
    n = packed.shape[0]
    require(packed.shape[1] * 2 == k and k % group_size == 0, op,
            f"packed {tuple(packed.shape)} does not hold x's K={k} columns in groups of {group_size}")
    require(tuple(scale_zero.shape) == (k // group_size, n, 2), op,
            f"scale_zero must be [K/g={k // group_size}, N={n}, 2], got {tuple(scale_zero.shape)}")
    require(scale_zero.dtype == x.dtype, op, f"scale_zero ({scale_zero.dtype}) must have x's dtype ({x.dtype})")


def int4_linear(x: torch.Tensor, packed: torch.Tensor, scale_zero: torch.Tensor, group_size: int) -> torch.Tensor:
    """``x @ w^T`` with ``w[n, k] = (q[n, k] - 8) * scale_zero[k // g, n, 0] + scale_zero[k // g, n, 1]``.

    Args:
        x: ``[M, K]`` float32 / bfloat16 / float16 on the CPU.
        packed: ``[N, K/2]`` uint8, the codes ``q`` as ``aten::_convert_weight_to_int4pack_for_cpu`` packs them.
        scale_zero: ``[K/g, N, 2]`` of x's dtype.
        group_size: ``g`` (32, 64, 128 or 256).

    Returns:
        ``[M, N]`` in x's dtype (float32 accumulation).
    """
    check_int4_linear(x, packed, scale_zero, group_size)
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size, scale_zero)


@attrs.frozen
class PackedInt4:
    """An :class:`~anna_core.weights.gguf_blocks.AffineBlocks` matrix laid out for :func:`int4_linear`.

    Attributes:
        packed: ``[N, K'/2]`` uint8.
        scale_zero: ``[K'/group, N, 2]`` in the compute dtype.
        group: the kernel's group size.
        planes: 1, or 2 for 5..8-bit codes (each group of ``x`` is read once per plane).
        source_group: the blocks' group ``g`` (under 32: each group of ``x`` is padded with zeros to 32).
        in_features: ``K``.
        out_features: ``N``; the kernel's rows are padded to a multiple of 16 (rows of zeros), so the result
            has ``packed.shape[0]`` columns of which the first ``N`` are the product.
    """

    packed: torch.Tensor
    scale_zero: torch.Tensor
    group: int
    planes: int
    source_group: int
    in_features: int
    out_features: int

    def expand(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[M, K]`` -> ``[M, K']``, the kernel's input (x itself for 4-bit codes in groups of 32 or more)."""
        if self.planes == 1 and self.source_group == self.group:
            return x
        m, g = x.shape[0], self.source_group
        h = x.reshape(m, -1, 1, g)  # [M, G, 1, g]
        if g != self.group:
            h = F.pad(h, (0, self.group - g))  # zero columns up to the kernel's group
        return h.expand(m, h.shape[1], self.planes, self.group).reshape(m, -1)


def pack_affine_blocks(blocks, compute_dtype: torch.dtype = torch.bfloat16) -> PackedInt4:
    """Lay ``blocks`` (an :class:`~anna_core.weights.gguf_blocks.AffineBlocks`) out for :func:`int4_linear`.

    Exact in float32: plane ``p``'s scale is ``16**p * a``; plane 1's codes are stored plus ``s = 8 -
    2**(bits - 5)`` (centred on 8) and plane 0 carries the zero ``b + 8 a + 16 a (8 - s)`` (``b + 8 a`` for
    4-bit codes): ``8 a`` for every GGML type but ``Q4_1`` / ``Q4_K`` / ``Q5_1`` / ``Q5_K``, whose zero
    is ``8 a`` plus their min. In ``compute_dtype`` scale and zero round once (bfloat16: relative
    ``2**-9``).
    """
    n, k = blocks.shape
    g = blocks.group
    groups = k // g
    planes = 1 if blocks.bits <= 4 else 2
    kg = max(g, 32)  # the kernel's group; a smaller group is padded to it
    q = blocks.q.view(n, groups, 1, g).to(torch.int32)
    # plane 1 is shifted to centre its range on 8 (so the zero stays small: bf16 rounds it relative to itself)
    shift = 8 - 2 ** (blocks.bits - 5) if planes > 1 else 0
    codes = torch.cat([q & 15, (q >> 4) + shift][:planes], dim=2)  # [N, G, P, g]
    if kg != g:
        codes = torch.cat([codes, torch.full((n, groups, planes, kg - g), 8, dtype=torch.int32)], dim=3)
    codes = codes.reshape(n, groups * planes * kg)
    a, b = blocks.a.float(), blocks.b.float()
    rows = -n % 16  # the kernel takes N a multiple of 16: zero rows (code 8, scale and zero 0)
    if rows:
        codes = torch.cat([codes, torch.full((rows, codes.shape[1]), 8, dtype=torch.int32)])
        a, b = (torch.cat([t, t.new_zeros(rows, t.shape[1])]) for t in (a, b))
        n += rows
    scale = torch.stack([a * 16**p for p in range(planes)], dim=2)  # [N, G, P]
    zero = torch.zeros_like(scale)
    zero[:, :, 0] = b + 8 * a + (16 * (8 - shift) * a if planes > 1 else 0)
    scale_zero = torch.stack([scale, zero], dim=-1).reshape(n, groups * planes, 2).transpose(0, 1)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.contiguous(), 1)
    return PackedInt4(packed, scale_zero.to(compute_dtype).contiguous(), kg, planes, g, k, blocks.shape[0])
