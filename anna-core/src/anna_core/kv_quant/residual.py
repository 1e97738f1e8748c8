"""The residual ring of a TurboQuant attention group: each sequence's newest ``residual_len`` positions kept in the
serving dtype beside their quantized rows (``--kv-cache-residual-len``; KIVI, Liu et al. 2024, keeps a recent
window unquantized the same way).

Per state slot (every running sequence has one, :class:`~anna_core.engine.state_pool.StatePool`) and owning layer,
``k`` / ``v`` ``[num_slots + 1, R, H_kv, D]`` hold the rows *rotated* (``Pi k``, ``Pi v``: the basis the attention
kernels work in) at ring index ``position % R``, and ``pos`` ``[num_slots + 1, R]`` int32 the position each
index holds (-1: none). Every token is written (positions a step overwrites within itself and padding rows go to
the scratch slot, the last), so a prefill chunk leaves its last ``R`` tokens. Attention over a context of ``L`` real
positions (a padded prefill's ``L`` leaves out its padding rows) reads position ``L - R <= p < L`` from the ring
where ``pos`` says the ring holds it, else its quantized row: a prefix hit's
positions, which the new slot never saw, stay quantized. The engine marks a slot empty when a sequence takes it
(:func:`reset_slots`).
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
    """

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    pos: torch.Tensor
    length: int

    @classmethod
    def empty(cls, layers: int, num_slots: int, length: int, num_kv_heads: int, head_dim: int,
              device: torch.device | str, dtype: torch.dtype) -> ResidualRing:
        shape = (num_slots, length, num_kv_heads, head_dim)
        return cls(k=[torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)],
                   v=[torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)],
                   pos=torch.full((num_slots, length), -1, dtype=torch.int32, device=device), length=length)


def token_positions(cu_seqlens: torch.Tensor, seq_lens: torch.Tensor, n_tokens: int) -> tuple[torch.Tensor,
                                                                                             torch.Tensor]:
    """``(sequence [T], position [T])`` int64 of each of a step's ``n_tokens`` tokens: token ``t`` of sequence ``i``
    (rows ``cu_seqlens[i]:cu_seqlens[i+1]``) sits at ``seq_lens[i] - cu_seqlens[i+1] + t``. On the device, no
    host sync."""
    t = torch.arange(n_tokens, device=cu_seqlens.device)
    seq = torch.searchsorted(cu_seqlens[1:].to(torch.int64), t, right=True)
    return seq, seq_lens.to(torch.int64)[seq] - cu_seqlens.to(torch.int64)[seq + 1] + t


def write_residual(k: torch.Tensor, v: torch.Tensor, ring: ResidualRing, index: int, rotation: torch.Tensor,
                   slots: torch.Tensor, cu_seqlens: torch.Tensor, seq_lens: torch.Tensor,
                   valid_lens: torch.Tensor | None = None) -> None:
    """Write a step's k, v ``[T, H_kv, D]`` (rotated by ``rotation`` ``[D, D]`` float32) into layer ``index``'s
    ring at the rows of ``slots`` ``[B]`` (the sequences' state slots): each sequence's positions
    ``valid_lens[i] - R .. valid_lens[i] - 1`` (``valid_lens`` ``[B]``: its real context length, which leaves out
    the padding rows of a padded prefill, :func:`anna_core.layers.padding.valid_lens`; None: ``seq_lens``). Its
    tokens before them and its padding rows go to the scratch slot, so padding never enters a ring nor pushes a
    real position out of it. Positions as :func:`token_positions`. No host sync."""
    r = ring.length
    seq, pos = token_positions(cu_seqlens, seq_lens, k.shape[0])
    end = (seq_lens if valid_lens is None else valid_lens).to(torch.int64)[seq]  # one past the last real position
    keep = (pos >= end - r) & (pos < end)
    scratch = ring.pos.shape[0] - 1
    row = torch.where(keep, slots.to(torch.int64)[seq] * r + pos % r, scratch * r)
    flat = lambda t: t.view(-1, *t.shape[2:])  # noqa: E731
    dt = ring.k[index].dtype
    flat(ring.k[index]).index_copy_(0, row, (k.to(torch.float32) @ rotation.T).to(dt))
    flat(ring.v[index]).index_copy_(0, row, (v.to(torch.float32) @ rotation.T).to(dt))
    ring.pos.view(-1).index_copy_(0, row, torch.where(keep, pos, -1).to(torch.int32))


def reset_slots(ring: ResidualRing, slots: torch.Tensor) -> None:
    """Mark ``slots`` ``[n]`` int64 empty (a sequence took them)."""
    ring.pos.index_fill_(0, slots, -1)
