"""Depthwise causal 1-D convolution with per-sequence state slots (the short conv of Gated DeltaNet).

For channel ``c`` and kernel width ``W``, output ``y_t[c] = act(bias[c] + sum_{w<W} weight[c, w] *
x_{t-W+1+w}[c])``, where inputs before a sequence's first token come from its conv state (the last
``W - 1`` inputs seen, oldest first; zeros for a fresh sequence). This is ``torch.nn.functional.conv1d``
with ``groups=C`` over ``[state, x]``, as in HF transformers' ``causal_conv1d_fn`` /
``causal_conv1d_update`` (Qwen3.5). Math runs in float32; outputs are in x's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anna_core.kernels.checks import check_conv1d, check_slots, require, require_dims


def _finish(y: torch.Tensor, bias: torch.Tensor | None, activation: str | None, dtype: torch.dtype) -> torch.Tensor:
    if bias is not None:
        y = y + bias.to(torch.float32)
    if activation == "silu":
        y = F.silu(y)
    return y.to(dtype)


def causal_conv1d_prefill(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens: torch.Tensor,
    conv_states: torch.Tensor,
    slots: torch.Tensor,
    activation: str | None,
) -> torch.Tensor:
    """Causal depthwise conv over a variable-length batch, starting from and updating slot states.

    Args:
        x: ``[T, C]`` inputs of ``B`` sequences flattened; sequence ``i`` owns rows
            ``cu_seqlens[i]:cu_seqlens[i+1]``.
        weight: ``[C, W]`` depthwise kernel; bias: ``[C]`` or None.
        cu_seqlens: ``[B+1]`` int32 row offsets.
        conv_states: ``[S, C, W-1]`` pool (oldest input first); ``conv_states[slots[i]]`` is read as the
            inputs preceding sequence ``i`` and overwritten with its last ``W-1`` inputs (including
            older state entries when the sequence is shorter than ``W-1``).
        slots: ``[B]`` int64 distinct slot indices.
        activation: ``"silu"`` or None.

    Returns:
        ``[T, C]`` in x's dtype.

    Raises:
        ValueError: inconsistent shapes, unknown activation, bad ``cu_seqlens`` or ``slots``.
    """
    op = "causal_conv1d_prefill"
    require_dims(op, x=(x, 2), cu_seqlens=(cu_seqlens, 1))
    width = check_conv1d(op, x, weight, bias, conv_states, activation)
    total, channels = x.shape
    batch = cu_seqlens.shape[0] - 1
    require(batch >= 0, op, "cu_seqlens must have B+1 >= 1 entries")
    check_slots(op, slots, batch, conv_states.shape[0], host_check=False)
    if batch == 0:
        return x.new_empty(x.shape)
    hist = width - 1
    device = x.device
    cu = cu_seqlens.to(device=device, dtype=torch.long)
    # Extended buffer: for each sequence, its W-1 state columns followed by its tokens.
    seq_id = torch.searchsorted(cu[1:], torch.arange(total, device=device), right=True)
    token_rows = torch.arange(total, device=device) + (seq_id + 1) * hist
    offsets = torch.arange(hist, device=device)
    seq_index = torch.arange(batch, device=device).unsqueeze(1)
    state_rows = cu[:-1].unsqueeze(1) + seq_index * hist + offsets  # [B, W-1]
    tail_rows = cu[1:].unsqueeze(1) + seq_index * hist + offsets  # last W-1 rows of each sequence
    ext = torch.empty(total + batch * hist, channels, dtype=torch.float32, device=device)
    ext.index_copy_(0, token_rows, x.to(torch.float32))
    if hist:
        old = conv_states.index_select(0, slots).to(torch.float32).transpose(1, 2)  # [B, W-1, C]
        ext.index_copy_(0, state_rows.reshape(-1), old.reshape(-1, channels))

    w = weight.to(torch.float32)
    y = torch.zeros(total, channels, dtype=torch.float32, device=device)
    for tap in range(width):
        y.addcmul_(ext.index_select(0, token_rows - hist + tap), w[:, tap])
    if hist:
        new = ext.index_select(0, tail_rows.reshape(-1)).view(batch, hist, channels).transpose(1, 2)
        conv_states.index_copy_(0, slots, new.to(conv_states.dtype))
    return _finish(y, bias, activation, x.dtype)


def causal_conv1d_update(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    slots: torch.Tensor,
    activation: str | None,
) -> torch.Tensor:
    """One decode step of the causal depthwise conv for each of ``B`` sequences.

    Args:
        x: ``[B, C]`` one new input per sequence; weight ``[C, W]``; bias ``[C]`` or None.
        conv_states: ``[S, C, W-1]`` pool, read at ``slots`` and updated in place (shifted by one).
        slots: ``[B]`` int64 distinct slot indices; activation: ``"silu"`` or None.

    Returns:
        ``[B, C]`` in x's dtype.

    Raises:
        ValueError: inconsistent shapes or unknown activation.
    """
    op = "causal_conv1d_update"
    require_dims(op, x=(x, 2))
    width = check_conv1d(op, x, weight, bias, conv_states, activation)
    batch = x.shape[0]
    check_slots(op, slots, batch, conv_states.shape[0], host_check=False)
    window = torch.cat(
        [conv_states.index_select(0, slots).to(torch.float32), x.to(torch.float32).unsqueeze(-1)], dim=-1
    )  # [B, C, W]
    y = (window * weight.to(torch.float32)).sum(-1)
    if width > 1:
        conv_states.index_copy_(0, slots, window[:, :, 1:].to(conv_states.dtype))
    return _finish(y, bias, activation, x.dtype)
