"""Building a pass's :class:`~anna_core.layers.state_checkpoints.StateCheckpoints` from the scheduled
sequences' checkpoint positions (host lists, a few small copies to the device)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from anna_core.engine.sampler import host_tensor
from anna_core.layers.state_checkpoints import CheckpointRound, StateCheckpoints


@attrs.define
class CheckpointTarget:
    """Where a pass's checkpoints go: the snapshot store's tensors (per recurrent layer), its scratch
    entry (for checkpoint positions a captured prefill computes but nobody reserved) and the interval.

    Attributes:
        conv_store: ``[N + 1, C, W-1]`` per recurrent layer; recurrent_store: ``[N + 1, H_v, K, V]`` float32.
        scratch: the entry written by unreserved checkpoints (``N``).
        interval: tokens between snapshot boundaries (``EngineConfig.snapshot_interval``).
    """

    conv_store: Sequence[torch.Tensor]
    recurrent_store: Sequence[torch.Tensor]
    scratch: int
    interval: int

    @property
    def conv_width(self) -> int:
        """``W - 1``: the conv inputs a conv state holds."""
        return int(self.conv_store[0].shape[-1])


@attrs.define
class SeqCheckpoints:
    """One sequence's share of a pass, for :func:`build_checkpoints`.

    Attributes:
        row: its first row in the pass; num_rows: its rows; slot: its state slot.
        points: ``(offset, store entry)`` of each checkpoint, ``0 < offset < num_rows``, ascending;
            the state after the sequence's first ``offset`` rows of this pass goes to the entry.
    """

    row: int
    num_rows: int
    slot: int
    points: list[tuple[int, int]]


def build_checkpoints(seqs: Sequence[SeqCheckpoints], conv_width: int, conv_store: Sequence[torch.Tensor],
                      recurrent_store: Sequence[torch.Tensor], device: torch.device) -> StateCheckpoints:
    """The :class:`StateCheckpoints` of a pass from its sequences (host lists, one copy per tensor).

    Args:
        seqs: every sequence of the pass, in row order.
        conv_width: ``W - 1``, the conv inputs a conv state holds.
        conv_store / recurrent_store: the snapshot store's tensors, per recurrent layer.
        device: the pass's device.

    Raises:
        ValueError: a checkpoint within ``W - 1`` rows of its sequence's first row in the pass (its conv
            state would need inputs of an earlier pass), or offsets out of order or range.
    """
    cuts: list[list[int]] = []
    conv_rows: list[list[int]] = []
    conv_dst: list[int] = []
    for s in seqs:
        offsets = [o for o, _ in s.points]
        if offsets != sorted(set(offsets)) or (offsets and not 0 < offsets[0] <= offsets[-1] < s.num_rows):
            raise ValueError(f"checkpoint offsets {offsets} are not ascending within 1..{s.num_rows - 1}")
        for o, dst in s.points:
            if o < conv_width:
                raise ValueError(f"a checkpoint {o} rows into a pass needs the conv inputs of an earlier one")
            conv_rows.append(list(range(s.row + o - conv_width, s.row + o)))
            conv_dst.append(dst)
        cuts.append([0, *offsets, s.num_rows])
    single = len(seqs) == 1
    rounds = []
    for r in range(max(len(c) - 1 for c in cuts)):
        rows: list[int] = []
        lens: list[int] = []
        slots: list[int] = []
        save: list[tuple[int, int]] = []
        for s, c in zip(seqs, cuts):
            if r + 1 >= len(c):
                continue
            lo, hi = c[r], c[r + 1]
            rows += range(s.row + lo, s.row + hi)
            lens.append(hi - lo)
            slots.append(s.slot)
            if r + 2 < len(c):  # the segment ends at a checkpoint
                save.append((s.slot, s.points[r][1]))
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        rounds.append(CheckpointRound(
            rows=slice(seqs[0].row + cuts[0][r], seqs[0].row + cuts[0][r + 1]) if single else _tensor(rows, device),
            cu_seqlens=host_tensor(cu, torch.int32, device),
            slots=_tensor(slots, device),
            save_slots=_tensor([a for a, _ in save], device) if save else None,
            save_dst=_tensor([b for _, b in save], device) if save else None))
    return StateCheckpoints(rounds=rounds, conv_rows=_tensor(conv_rows, device).view(-1, conv_width),
                            conv_dst=_tensor(conv_dst, device), conv_store=conv_store, recurrent_store=recurrent_store)


def _tensor(values: list, device: torch.device) -> torch.Tensor:
    return host_tensor(values, torch.int64, device)
