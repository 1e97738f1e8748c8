"""On-device grouping of a MoE layer's (token, choice) pairs by expert, for the grouped GEMMs of
:mod:`anna_xpu_kernels.moe`: one launch, no host sync, every size fixed by ``T``, ``K``, ``E`` and
the row tile ``BLOCK_M``.

Pair ``j = t * K + k`` is token ``t``'s ``k``-th choice, of expert ``expert_ids[t, k]``. Each expert's
pairs form a run in ``sorted_pairs``, padded with the sentinel ``P = T * K`` to a multiple of
``BLOCK_M``, runs in ascending expert order; so every ``BLOCK_M`` rows (a *block*) belong to one
expert, ``block_experts[b]``, and the used blocks come first: ``num_padded`` (a device scalar) is
the runs' total length, block ``b`` is used when ``b * BLOCK_M < num_padded``. With ``h`` experts
hit, the runs take at most ``ceil((P + h * (BLOCK_M - 1)) / BLOCK_M)`` blocks (each run wastes less
than one block), and each block holds at least one pair, so :func:`max_blocks` bounds the blocks
without reading the ids.

One program does it all (``P`` is ``T * K``: 8 at batch-1 decode, 16384 for a 2048-token prompt with
``K = 8``; 4 warps, 8 above 2048 pairs; not yet timed on a GPU): a histogram of the ids (``tl.histogram``, in chunks of ``BLOCK_P`` pairs), the padded
run starts (``tl.cumsum``), each block's expert, the sentinel fill, then a barrier and the scatter
of the pairs, each taking its slot in its expert's run with an atomic add on the run's cursor. The
order of the pairs *within* a run is therefore unspecified; the GEMMs compute every row on its own
(row ``i`` of a product depends only on row ``i`` of its left operand), so the results do not depend
on it. Ids outside ``[0, E)`` are left out of every run (their output rows stay unwritten); the op
contract makes them the caller's error.
"""

from __future__ import annotations

import attrs
import torch

from anna_xpu_kernels import pdl
from anna_xpu_kernels._triton import next_pow2, tl, triton

BLOCK_P = 1024
"""Pairs per step of the histogram and scatter loops."""
BLOCK_FILL = 1024
"""Slots per step of the sentinel fill."""
_COMPARE_VALUES = 8192
"""Most values of the ``[blocks, experts]`` comparison that finds each block's expert (one step)."""


def block_m_for(num_pairs: int, num_experts: int) -> int:
    """The row tile ``BLOCK_M`` of the grouped GEMMs for ``num_pairs`` pairs over ``num_experts``
    experts: 16 while an expert gets at most ~16 pairs on average (decode, small batches: a run is
    then one block and little of the tile is padding), 32 up to ~48, else 64 (prefill)."""
    per_expert = num_pairs / max(num_experts, 1)
    if per_expert <= 16:
        return 16
    return 32 if per_expert <= 48 else 64


def max_blocks(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Upper bound of the blocks the padded runs of ``num_pairs`` pairs over ``num_experts`` experts
    take (see the module docstring): ``min(P, (P + min(E, P) * (BLOCK_M - 1)) // BLOCK_M)``."""
    hit = min(num_experts, num_pairs)
    return min(num_pairs, (num_pairs + hit * (block_m - 1)) // block_m)


@triton.jit(do_not_specialize=["num_pairs", "num_blocks"])
def _moe_align_kernel(ids_ptr, sorted_ptr, block_expert_ptr, num_padded_ptr, cursor_ptr,
                      num_pairs, num_experts, num_blocks,
                      BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_B: tl.constexpr,
                      BLOCK_P: tl.constexpr, BLOCK_FILL: tl.constexpr, USE_PDL: tl.constexpr):
    pdl.enter(USE_PDL)
    experts = tl.arange(0, BLOCK_E)
    counts = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for start in range(0, num_pairs, BLOCK_P):
        offs = start + tl.arange(0, BLOCK_P)
        ids = tl.load(ids_ptr + offs, mask=offs < num_pairs, other=-1)
        ok = (ids >= 0) & (ids < num_experts)
        counts += tl.histogram(tl.where(ok, ids, 0).to(tl.int32), BLOCK_E, mask=ok)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)  # run e is [ends[e] - padded[e], ends[e])
    total = tl.sum(padded, 0)
    tl.store(cursor_ptr + experts, ends - padded, mask=experts < num_experts)
    tl.store(num_padded_ptr, total)
    for b0 in range(0, num_blocks, BLOCK_B):
        blocks = b0 + tl.arange(0, BLOCK_B)
        first = blocks * BLOCK_M
        # a block's expert: the first whose run ends after the block's first slot (empty runs end where
        # the run before ends, so they are skipped); unused blocks get -1
        owner = tl.sum((ends[None, :] <= first[:, None]).to(tl.int32), axis=1)
        tl.store(block_expert_ptr + blocks, tl.where(first < total, owner, -1), mask=blocks < num_blocks)
    for s0 in range(0, num_blocks * BLOCK_M, BLOCK_FILL):
        slots = s0 + tl.arange(0, BLOCK_FILL)
        tl.store(sorted_ptr + slots, tl.full((BLOCK_FILL,), 0, tl.int32) + num_pairs,
                 mask=slots < num_blocks * BLOCK_M)
    tl.debug_barrier()  # the cursors and the sentinels are written before any pair takes a slot
    for start in range(0, num_pairs, BLOCK_P):
        offs = start + tl.arange(0, BLOCK_P)
        ids = tl.load(ids_ptr + offs, mask=offs < num_pairs, other=-1)
        ok = (ids >= 0) & (ids < num_experts)
        slot = tl.atomic_add(cursor_ptr + tl.where(ok, ids, 0), 1, mask=ok, sem="relaxed")
        tl.store(sorted_ptr + slot, offs, mask=ok)


@attrs.frozen
class Blocks:
    """The pairs of one call grouped by expert (see the module docstring), all on the device.

    Attributes:
        sorted_pairs: ``[num_blocks * block_m]`` int32 pair indices, ``num_pairs`` in padding slots.
        block_experts: ``[num_blocks]`` int32 expert of each block, -1 for unused blocks.
        num_padded: ``[1]`` int32 the used slots (a multiple of ``block_m``).
        block_m: the row tile; num_pairs: ``P = T * K``; top_k: ``K``.
    """

    sorted_pairs: torch.Tensor
    block_experts: torch.Tensor
    num_padded: torch.Tensor
    block_m: int
    num_pairs: int
    top_k: int

    @property
    def num_blocks(self) -> int:
        """The static bound of the used blocks (:func:`max_blocks`): the grouped GEMMs' grid rows."""
        return self.block_experts.shape[0]


def align(expert_ids: torch.Tensor, num_experts: int, block_m: int) -> Blocks:
    """Group the pairs of ``expert_ids`` by expert (one launch, no host sync).

    Args:
        expert_ids: ``[T, K]`` int32 / int64 (any strides; a contiguous copy is made when needed).
        num_experts: ``E``; block_m: the row tile (:func:`block_m_for`).

    Returns:
        The :class:`Blocks` on ids' device, ``max_blocks(T * K, E, block_m)`` blocks.
    """
    flat = expert_ids.reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    num_pairs = flat.numel()
    blocks = max_blocks(num_pairs, num_experts, block_m)
    slots = blocks * block_m
    # one allocation: sorted pairs, block experts, the used count, the run cursors (scratch)
    buf = torch.empty(slots + blocks + 1 + num_experts, dtype=torch.int32, device=flat.device)
    sorted_pairs, block_experts = buf[:slots], buf[slots:slots + blocks]
    num_padded, cursor = buf[slots + blocks:slots + blocks + 1], buf[slots + blocks + 1:]
    block_e = max(16, next_pow2(num_experts))
    _moe_align_kernel[(1,)](flat, sorted_pairs, block_experts, num_padded, cursor, num_pairs, num_experts, blocks,
                            BLOCK_M=block_m, BLOCK_E=block_e, BLOCK_B=max(16, _COMPARE_VALUES // block_e),
                            BLOCK_P=BLOCK_P, BLOCK_FILL=BLOCK_FILL, num_warps=4 if num_pairs <= 2 * BLOCK_P else 8,
                            **pdl.launch_options(flat))
    return Blocks(sorted_pairs, block_experts, num_padded, block_m, num_pairs, expert_ids.shape[-1])
