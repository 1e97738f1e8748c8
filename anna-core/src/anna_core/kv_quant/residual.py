"""The residual ring of a TurboQuant attention group: each sequence's newest ``residual_len`` positions kept in the
serving dtype beside their quantized rows (``--kv-cache-residual-len``; KIVI, Liu et al. 2024, keeps a recent
window unquantized the same way).

Per state slot (every running sequence has one, :class:`~anna_core.engine.state_pool.StatePool`) and owning layer,
``k`` / ``v`` ``[num_slots + 1, R, H_kv, D]`` hold the rows *rotated* (``Pi k``, ``Pi v``: the basis the attention
kernels work in) at ring index ``position % R``, and ``pos`` ``[num_slots + 1, R]`` int32 the position each
index holds (-1: none). Every token is written (positions a step overwrites within itself and padding rows go to
the scratch slot, the last), so a prefill chunk leaves its last ``R`` tokens.

The exact window is per query: the query at position ``q`` reads key ``p`` exactly iff ``q - R < p <= q``, else its
quantized row, so a prompt's output does not depend on how its prefill is chunked (the keys a query reads exactly
are the same whole or in chunks). A chunk ``[s, e)`` reads its own positions from the step's rows (``new_k`` /
``new_v`` of ``paged_attention_turboquant``, :func:`rotated_rows`) and earlier ones from the ring as it stood before
the step: :class:`~anna_core.layers.attention.PagedAttention` writes each sequence's first new position (it evicts
``s - R``, in no query's window), attends, then writes the rest (:func:`write_residual`'s ``part``). A decode step
is all written before its attention: its window is then all in the ring. A prefix hit's positions, which the new
slot never saw, stay quantized. A layer that reads another layer's K/V (KV sharing) gets the same per-query window:
in a prefill step its owner holds its step's rows for it (:meth:`ResidualRing.hold`) instead of writing the rest,
each reader attends over the ring as the owner did plus those rows, and the last reader writes the rest
(:meth:`ResidualRing.release`): one write per position, none of it at decode. Only a group's last owning layer
may have readers (:class:`~anna_core.cache_spec.FullAttentionSpec`): its ``"rest"`` write, then the group's last,
updates ``pos``. The engine marks a slot empty when a sequence takes it (:func:`reset_slots`).
"""

from __future__ import annotations

import attrs
import torch


@attrs.define
class ResidualRing:
    """One attention group's rings (module docstring).

    Attributes:
        k, v: per owning layer ``[num_slots + 1, R, H_kv, D]`` in the serving dtype (rotated rows).
        pos: ``[num_slots + 1, R]`` int32, the position at each ring index or -1.
        length: ``R``.
        readers: per owning layer, how many layers read its K/V (KV sharing; default none).
        held: per owning layer with readers, the rows of the current prefill step it holds for them (its
            :func:`rotated_rows`) and how many readers have still to attend (:meth:`hold`, :meth:`release`).
    """

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    pos: torch.Tensor
    length: int
    readers: list[int] = attrs.field(default=attrs.Factory(lambda self: [0] * len(self.k), takes_self=True))
    held: dict[int, HeldRows] = attrs.field(factory=dict)

    @classmethod
    def empty(cls, layers: int, num_slots: int, length: int, num_kv_heads: int, head_dim: int,
              device: torch.device | str, dtype: torch.dtype, readers: list[int] | None = None) -> ResidualRing:
        """Zeroed rings of ``layers`` owning layers (``readers``: how many layers read each one's K/V; None:
        none), every position -1."""
        shape = (num_slots, length, num_kv_heads, head_dim)
        return cls(k=[torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)],
                   v=[torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)],
                   pos=torch.full((num_slots, length), -1, dtype=torch.int32, device=device), length=length,
                   readers=[0] * layers if readers is None else list(readers))

    def hold(self, index: int, rows: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """Owning layer ``index`` (with readers) holds ``rows`` (its step's :func:`rotated_rows`, ``[T, H_kv, D]``
        each) for its readers instead of writing its ``"rest"`` part; None (a decode step, fully written): nothing
        held. Every step's owner calls it before its readers run, so nothing of an earlier step is left."""
        if rows is None:
            self.held.pop(index, None)
        else:
            self.held[index] = HeldRows(*rows, left=self.readers[index])

    def release(self, index: int) -> HeldRows | None:
        """A reader of owning layer ``index`` has attended: the held rows if it was the last (its caller then
        writes their ``"rest"`` part), else None."""
        held = self.held.get(index)
        if held is None:
            return None
        held.left -= 1
        return self.held.pop(index) if held.left <= 0 else None


@attrs.define
class HeldRows:
    """An owning layer's rows of a prefill step held for its readers (:meth:`ResidualRing.hold`).

    Attributes:
        k, v: ``[T, H_kv, D]`` the step's rows rotated (:func:`rotated_rows`), in the ring's dtype.
        left: readers still to attend over them.
    """

    k: torch.Tensor
    v: torch.Tensor
    left: int


def token_positions(cu_seqlens: torch.Tensor, seq_lens: torch.Tensor, n_tokens: int) -> tuple[torch.Tensor,
                                                                                             torch.Tensor]:
    """``(sequence [T], position [T])`` int64 of each of a step's ``n_tokens`` tokens: token ``t`` of sequence ``i``
    (rows ``cu_seqlens[i]:cu_seqlens[i+1]``) sits at ``seq_lens[i] - cu_seqlens[i+1] + t``. On the device, no
    host sync."""
    t = torch.arange(n_tokens, device=cu_seqlens.device)
    seq = torch.searchsorted(cu_seqlens[1:].to(torch.int64), t, right=True)
    return seq, seq_lens.to(torch.int64)[seq] - cu_seqlens.to(torch.int64)[seq + 1] + t


def rotated_rows(k: torch.Tensor, v: torch.Tensor, rotation: torch.Tensor,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A step's k, v ``[T, H_kv, D]`` as the ring stores them: ``Pi k``, ``Pi v`` (``rotation`` ``[D, D]``
    float32, computed in float32) cast to ``dtype`` (the ring's). The attention reads a step's own exact rows in
    this form (``new_k`` / ``new_v`` of ``paged_attention_turboquant``), so they equal the ring's rows of the
    same positions bit for bit."""
    return (k.to(torch.float32) @ rotation.T).to(dtype), (v.to(torch.float32) @ rotation.T).to(dtype)


def write_residual(k: torch.Tensor, v: torch.Tensor, ring: ResidualRing, index: int, rotation: torch.Tensor,
                   slots: torch.Tensor, cu_seqlens: torch.Tensor, seq_lens: torch.Tensor,
                   valid_lens: torch.Tensor | None = None, *, part: str = "all",
                   rotated: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """Write a step's k, v ``[T, H_kv, D]`` (rotated by ``rotation`` ``[D, D]`` float32) into layer ``index``'s
    ring at the rows of ``slots`` ``[B]`` (the sequences' state slots): each sequence's positions
    ``valid_lens[i] - R .. valid_lens[i] - 1`` (``valid_lens`` ``[B]``: its real context length, which leaves out
    the padding rows of a padded prefill, :func:`anna_core.layers.padding.valid_lens`; None: ``seq_lens``). Its
    tokens before them and its padding rows go to the scratch slot, so padding never enters a ring nor pushes a
    real position out of it. Positions as :func:`token_positions`. No host sync.

    ``part`` splits the write around the attention (:class:`~anna_core.layers.attention.PagedAttention`): the
    attention reads positions before a sequence's first new one from the ring as it stood before the step, and the
    step's rows evict ring entries its earlier queries still read. ``"first"`` writes each sequence's first new
    position only (the entry it evicts, ``first - R``, is in no query's window: a decode step is then fully
    written), ``"rest"`` the others, ``"all"`` both. ``pos`` is one per group: a ``"rest"`` write updates it only
    from the group's last owning layer (``index == len(ring.k) - 1``, the last to attend; layers run in owning
    order), so every layer's attention sees the positions its own rows held before the step. ``rotated``: :func:`rotated_rows` of k, v when the caller
    has them (else computed here).

    Raises:
        ValueError: an unknown ``part``.
    """
    if part not in ("all", "first", "rest"):
        raise ValueError(f"part must be 'all', 'first' or 'rest', got {part!r}")
    r = ring.length
    seq, pos = token_positions(cu_seqlens, seq_lens, k.shape[0])
    end = (seq_lens if valid_lens is None else valid_lens).to(torch.int64)[seq]  # one past the last real position
    keep = (pos >= end - r) & (pos < end)
    if part != "all":
        start = (seq_lens.to(torch.int64) - (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int64))[seq]
        keep = keep & ((pos == start) if part == "first" else (pos > start))
    scratch = ring.pos.shape[0] - 1
    row = torch.where(keep, slots.to(torch.int64)[seq] * r + pos % r, scratch * r)
    flat = lambda t: t.view(-1, *t.shape[2:])  # noqa: E731
    k_rot, v_rot = rotated if rotated is not None else rotated_rows(k, v, rotation, ring.k[index].dtype)
    flat(ring.k[index]).index_copy_(0, row, k_rot)
    flat(ring.v[index]).index_copy_(0, row, v_rot)
    if part != "rest" or index == len(ring.k) - 1:
        ring.pos.view(-1).index_copy_(0, row, torch.where(keep, pos, -1).to(torch.int32))


def reset_slots(ring: ResidualRing, slots: torch.Tensor) -> None:
    """Mark ``slots`` ``[n]`` int64 empty (a sequence took them)."""
    ring.pos.index_fill_(0, slots, -1)
