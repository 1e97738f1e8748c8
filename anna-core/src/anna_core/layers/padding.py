"""Padding rows that change no state: what recurrent layers do in a padded single-sequence prefill.

A prefill captured as a device graph for a fixed length ``T`` (:mod:`anna_core.engine.prefill_graphs`)
runs a fresh prompt of ``L <= T`` tokens followed by ``T - L`` padding rows
(``ForwardBatch.num_valid = [L]``). Attention needs nothing: the padding's K/V go to their own
positions of the block table (padded with the scratch block), and causal masking keeps every padding
row after the real ones. A layer with recurrent
state must keep the padding from changing it:

* gated delta rule (Yang, Kautz & Hatamizadeh, "Gated Delta Networks", 2024): with the decay input
  ``a = -inf`` a row's ``g = -exp(A_log) * softplus(a + dt_bias) = 0`` (decay ``exp(g) = 1``) and with
  the write-strength input ``b = -inf`` its ``beta = sigmoid(b) = 0`` (the delta update
  ``beta * (v - S^T k) k^T`` is zero): :func:`mask_rows` on ``a`` and ``b``, and on the conv's output
  (q / k / v of padding rows 0, so not even a non-finite padding value reaches the state as 0 * inf);
* causal conv1d: its state after the prompt holds the last ``W - 1`` inputs before row ``L``, not
  before row ``T``: :func:`write_conv_state` rewrites it after the conv.

Everything here runs on the device without reading ``num_valid`` on the host (graph capture).
"""

from __future__ import annotations

import torch


def row_mask(num_rows: int, num_valid: torch.Tensor) -> torch.Tensor:
    """``[num_rows]`` bool: True for the real rows ``0..num_valid-1``.

    Args:
        num_rows: ``T``; num_valid: ``[1]`` int64 on the rows' device.
    """
    return torch.arange(num_rows, device=num_valid.device) < num_valid


def valid_lens(seq_lens: torch.Tensor, num_tokens: int, num_valid: torch.Tensor | None) -> torch.Tensor:
    """``[B]`` int32: each sequence's real context length, ``seq_lens`` less the padding rows of a padded
    one-sequence prefill (``seq_lens - (T - num_valid)``, a cached prefix included), e.g. where a TurboQuant
    residual ring's newest positions end (:mod:`anna_core.kv_quant.residual`).

    Args:
        seq_lens: ``[B]`` int32 (``ForwardBatch.seq_lens``); num_tokens: ``T``; num_valid: ``[1]`` int64 or None
            (no padding: ``seq_lens`` itself is returned).
    """
    if num_valid is None:
        return seq_lens
    return (seq_lens - (num_tokens - num_valid)).to(torch.int32)


def mask_rows(x: torch.Tensor, num_valid: torch.Tensor, value: float) -> torch.Tensor:
    """``x`` ``[T, ...]`` with every padding row (``>= num_valid``) set to ``value`` (a new tensor)."""
    keep = row_mask(x.shape[0], num_valid).view(-1, *([1] * (x.dim() - 1)))
    return x.masked_fill(~keep, value)


def write_conv_state(conv_states: torch.Tensor, slots: torch.Tensor, x: torch.Tensor, num_valid: torch.Tensor) -> None:
    """Set the conv state of a fresh prompt's slot to its last ``W - 1`` real inputs, oldest first.

    Args:
        conv_states: ``[S, C, W-1]`` pool (the conv op's layout), updated in place at ``slots``.
        slots: ``[1]`` int64 slot of the one sequence.
        x: ``[T, C]`` the conv's inputs (before the conv), real rows first.
        num_valid: ``[1]`` int64 ``L``. Positions before the prompt (``L < W - 1``) get zeros: the
            state of a fresh prompt starts at zero.
    """
    width = conv_states.shape[-1]
    pos = num_valid + torch.arange(-width, 0, device=x.device)  # [W-1] rows L-W+1 .. L-1
    rows = x.index_select(0, pos.clamp(min=0))  # [W-1, C]
    rows = rows.masked_fill((pos < 0)[:, None], 0)
    conv_states.index_copy_(0, slots, rows.t().unsqueeze(0).to(conv_states.dtype))
