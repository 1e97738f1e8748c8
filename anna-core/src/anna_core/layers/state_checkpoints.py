"""Recurrent-state checkpoints taken inside one prefill pass (prefix caching of models with a recurrent
cache group).

A prefix-cache hit of such a model resumes from a snapshot of every recurrent layer's conv and
recurrent state, taken every ``snapshot_interval`` prompt tokens. Ending a prefill chunk at each such
boundary costs a step, and an eager forward pass, per interval. Instead a chunk may span boundaries
and carry :class:`StateCheckpoints`: a recurrent layer then

1. copies, for each checkpoint, the ``W - 1`` conv inputs before it into the snapshot store
   (:func:`save_conv_checkpoints`, one gather per layer), and
2. runs its recurrent rule in *rounds* (:func:`run_in_rounds`): round ``r`` computes segment ``r``
   of every sequence that has one, from the state the previous round left in the sequence's slot,
   and after it the states at the checkpoints just reached are copied into the store.

Everything else (projections, conv, norms, attention, MLP) runs once over the whole pass. Segment
ends are checkpoint positions, so the rule computes exactly what it computes when the scheduler cuts
chunks there. A model opts in with ``ModelCapabilities(state_checkpoints=True)`` (:mod:`anna_core.model`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs
import torch

if TYPE_CHECKING:  # forward_batch imports this module's types
    from anna_core.engine.forward_batch import ForwardBatch

Rule = Callable[[slice | torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``rule(rows, cu_seqlens, slots) -> o``: a recurrent rule on some rows of a pass (see :class:`CheckpointRound`)."""


@attrs.define
class CheckpointRound:
    """One round of the recurrent rule over a pass.

    Attributes:
        rows: the pass rows computed in this round, in sequence order: a ``slice`` (one sequence) or
            an ``[R]`` int64 index tensor.
        cu_seqlens: ``[B_r + 1]`` int32 offsets of the round's sequences within its rows.
        slots: ``[B_r]`` int64 state slots of those sequences.
        save_slots: ``[K_r]`` int64 slots whose state is a checkpoint after this round, or None.
        save_dst: ``[K_r]`` int64 snapshot-store entries those states go to (with ``save_slots``).
    """

    rows: slice | torch.Tensor
    cu_seqlens: torch.Tensor
    slots: torch.Tensor
    save_slots: torch.Tensor | None = None
    save_dst: torch.Tensor | None = None


@attrs.define
class StateCheckpoints:
    """The checkpoints of one prefill pass and where they go.

    Attributes:
        rounds: the recurrent rule's rounds, in order (their rows partition the pass).
        conv_rows: ``[K, W-1]`` int64 pass rows of the conv inputs before each checkpoint, oldest first.
        conv_dst: ``[K]`` int64 snapshot-store entry of each checkpoint.
        conv_store: per recurrent layer, the store's conv states ``[N, C, W-1]``.
        recurrent_store: per recurrent layer, the store's recurrent states ``[N, H_v, K, V]`` float32.
    """

    rounds: list[CheckpointRound]
    conv_rows: torch.Tensor
    conv_dst: torch.Tensor
    conv_store: Sequence[torch.Tensor]
    recurrent_store: Sequence[torch.Tensor]


def save_conv_checkpoints(ckpt: StateCheckpoints, layer: int, x: torch.Tensor) -> None:
    """Copy the conv state at each checkpoint of recurrent layer ``layer`` into the store.

    Args:
        ckpt: the pass's checkpoints.
        layer: the layer's index among the recurrent layers (``state_index``).
        x: ``[T, C]`` the conv's inputs (before the conv) of the whole pass.
    """
    store = ckpt.conv_store[layer]  # [N, C, W-1]
    k, width = ckpt.conv_rows.shape
    rows = x.index_select(0, ckpt.conv_rows.reshape(-1)).view(k, width, x.shape[-1])  # [K, W-1, C]
    store.index_copy_(0, ckpt.conv_dst, rows.transpose(1, 2).to(store.dtype))


def run_prefill_rule(batch: ForwardBatch, layer: int, states: torch.Tensor, rule: Rule) -> torch.Tensor:
    """A recurrent layer's rule over a prefill pass: once over every row, or in rounds (:func:`run_in_rounds`)
    when the batch carries checkpoints.

    Args:
        batch: the pass; layer: the layer's index among the recurrent layers; states: its slots
            ``[S, H_v, K, V]`` float32; rule: as in :func:`run_in_rounds`.

    Returns:
        ``[T, ...]`` the rule's output for every row.
    """
    if batch.checkpoints is None:
        return rule(slice(None), batch.cu_seqlens, batch.state_slots)
    return run_in_rounds(batch.checkpoints, layer, states, batch.num_tokens, rule)


def run_in_rounds(ckpt: StateCheckpoints, layer: int, states: torch.Tensor, num_rows: int,
                  rule: Rule) -> torch.Tensor:
    """Run a recurrent rule round by round, saving the checkpoints' states after each round.

    Args:
        ckpt: the pass's checkpoints.
        layer: the layer's index among the recurrent layers.
        states: ``[S, H_v, K, V]`` float32 the layer's recurrent-state slots (the rule reads and writes them).
        num_rows: ``T``, the pass's rows.
        rule: ``rule(rows, cu_seqlens, slots) -> o [R, ...]``: the rule on the round's rows (see
            :class:`CheckpointRound`), updating the sequences' slots in place.

    Returns:
        ``[T, ...]`` the rule's output for every row of the pass.
    """
    out: torch.Tensor | None = None
    for rnd in ckpt.rounds:
        o = rule(rnd.rows, rnd.cu_seqlens, rnd.slots)
        if out is None:
            out = o.new_empty((num_rows, *o.shape[1:]))
        out[rnd.rows] = o
        if rnd.save_slots is not None:
            ckpt.recurrent_store[layer].index_copy_(0, rnd.save_dst, states.index_select(0, rnd.save_slots))
    if out is None:
        raise ValueError("state checkpoints without a round")
    return out
