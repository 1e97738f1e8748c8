"""Depthwise causal conv1d over state slots in Triton: one-step decode update and varlen prefill.

Math as in :mod:`anna_core.kernels.reference.conv1d`: for channel ``c`` and width ``W``,
``y_t[c] = act(bias[c] + sum_{w<W} weight[c, w] * x_{t-W+1+w}[c])`` in float32, where inputs before
a sequence's first token come from its slot's conv state (the last ``W - 1`` inputs, oldest
first). Every slot in ``slots`` is rewritten in place with the sequence's last ``W - 1`` inputs.

* ``causal_conv1d_update``: one program per (sequence, channel tile) loads the ``[C_tile, W]``
  window (state columns plus the new input), writes ``y`` and the window shifted by one.
* ``causal_conv1d_prefill``: one program per (token tile of the flattened batch, channel tile);
  each token finds its sequence (``seq_id``, computed on device) and reads taps before the
  sequence start from the slot's old state. A second, tiny launch then writes the new states, so no
  program can overwrite a state another program is still reading. No host synchronisation.
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import check_conv1d, check_slots, num_sequences, require, require_dims

from anna_xpu_kernels._checks import as_rows, require_float, require_same_device
from anna_xpu_kernels._triton import autotune, next_pow2, tl, triton

_UPDATE_CONFIGS = [triton.Config({"BLOCK_C": bc}, num_warps=w) for bc in (128, 256, 512, 1024) for w in (2, 4, 8)]
_PREFILL_CONFIGS = [
    triton.Config({"BLOCK_T": bt, "BLOCK_C": bc}, num_warps=w)
    for bt in (16, 32, 64) for bc in (64, 128, 256) for w in (4, 8)
]


@autotune(_UPDATE_CONFIGS, fixed=triton.Config({"BLOCK_C": 32}, num_warps=4), key=["channels", "WIDTH"],
          restore_value=["state_ptr"])
@triton.jit
def _conv_update_kernel(
    x_ptr, w_ptr, b_ptr, state_ptr, slot_ptr, y_ptr,
    channels, stride_xb, stride_wc, stride_ww, stride_ss, stride_sc, stride_sw, stride_yb,
    WIDTH: tl.constexpr, BLOCK_W: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    j = tl.arange(0, BLOCK_W)
    c_ok = c < channels
    slot = tl.load(slot_ptr + b).to(tl.int64)
    x = tl.load(x_ptr + b.to(tl.int64) * stride_xb + c, mask=c_ok, other=0.0).to(tl.float32)
    s_ptrs = state_ptr + slot * stride_ss + c[:, None].to(tl.int64) * stride_sc + j[None, :] * stride_sw
    in_state = c_ok[:, None] & (j[None, :] < WIDTH - 1)
    old = tl.load(s_ptrs, mask=in_state, other=0.0).to(tl.float32)
    window = tl.where(j[None, :] == WIDTH - 1, x[:, None], old)  # [BLOCK_C, BLOCK_W], oldest first
    w = tl.load(w_ptr + c[:, None] * stride_wc + j[None, :] * stride_ww,
                mask=c_ok[:, None] & (j[None, :] < WIDTH), other=0.0).to(tl.float32)
    y = tl.sum(window * w, axis=1)
    if HAS_BIAS:
        y += tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
    if SILU:
        y = y * tl.sigmoid(y)
    tl.store(y_ptr + b.to(tl.int64) * stride_yb + c, y.to(y_ptr.dtype.element_ty), mask=c_ok)
    tl.debug_barrier()  # every thread has read the old state before any column is overwritten
    shift_ok = c_ok[:, None] & (j[None, :] >= 1) & (j[None, :] < WIDTH)
    tl.store(s_ptrs - stride_sw, window.to(state_ptr.dtype.element_ty), mask=shift_ok)


@autotune(_PREFILL_CONFIGS, fixed=triton.Config({"BLOCK_T": 8, "BLOCK_C": 32}, num_warps=4),
          key=["channels", "WIDTH"])
@triton.jit(do_not_specialize=['n_tokens'])
def _conv_prefill_kernel(
    x_ptr, w_ptr, b_ptr, state_ptr, slot_ptr, cu_ptr, seq_ptr, y_ptr,
    n_tokens, channels, stride_xt, stride_wc, stride_ww, stride_ss, stride_sc, stride_sw, stride_yt,
    WIDTH: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr,
):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    t_ok = t < n_tokens
    c_ok = c < channels
    seq = tl.load(seq_ptr + t, mask=t_ok, other=0)
    pos = t - tl.load(cu_ptr + seq, mask=t_ok, other=0)  # position inside the sequence
    slot = tl.load(slot_ptr + seq, mask=t_ok, other=0).to(tl.int64)
    ok = t_ok[:, None] & c_ok[None, :]
    acc = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    for tap in tl.static_range(WIDTH):
        src = pos - (WIDTH - 1) + tap  # source position in the sequence; < 0 reads the old state
        from_x = (src >= 0)[:, None]
        xv = tl.load(x_ptr + (t - (WIDTH - 1) + tap).to(tl.int64)[:, None] * stride_xt + c[None, :],
                     mask=ok & from_x, other=0.0)
        sv = tl.load(state_ptr + slot[:, None] * stride_ss + c[None, :].to(tl.int64) * stride_sc
                     + (WIDTH - 1 + src)[:, None] * stride_sw, mask=ok & ~from_x, other=0.0)
        w = tl.load(w_ptr + c * stride_wc + tap * stride_ww, mask=c_ok, other=0.0).to(tl.float32)
        acc += (xv.to(tl.float32) + sv.to(tl.float32)) * w[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
    if SILU:
        acc = acc * tl.sigmoid(acc)
    tl.store(y_ptr + t.to(tl.int64)[:, None] * stride_yt + c[None, :], acc.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _conv_prefill_state_kernel(
    x_ptr, state_ptr, slot_ptr, cu_ptr,
    channels, stride_xt, stride_ss, stride_sc, stride_sw,
    WIDTH: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    j = tl.arange(0, BLOCK_W)
    c_ok = c < channels
    start = tl.load(cu_ptr + b)
    length = tl.load(cu_ptr + b + 1) - start
    slot = tl.load(slot_ptr + b).to(tl.int64)
    src = length - (WIDTH - 1) + j  # sequence position of new state column j; < 0 keeps old column j + length
    col_ok = c_ok[:, None] & (j[None, :] < WIDTH - 1)
    from_x = (src >= 0)[None, :]
    s_base = state_ptr + slot * stride_ss + c[:, None].to(tl.int64) * stride_sc
    xv = tl.load(x_ptr + (start + src).to(tl.int64)[None, :] * stride_xt + c[:, None], mask=col_ok & from_x, other=0.0)
    sv = tl.load(s_base + (j + length)[None, :] * stride_sw, mask=col_ok & ~from_x, other=0.0)
    new = tl.where(from_x, xv.to(state_ptr.dtype.element_ty), sv)
    tl.debug_barrier()  # all old columns read before any is overwritten
    tl.store(s_base + j[None, :] * stride_sw, new, mask=col_ok)


def _check(op, x, weight, bias, conv_states, slots, activation, batch) -> int:
    require_dims(op, x=(x, 2))
    width = check_conv1d(op, x, weight, bias, conv_states, activation)
    check_slots(op, slots, batch, conv_states.shape[0], host_check=False)
    require_float(op, x=x)
    require_same_device(op, x=x, weight=weight, bias=bias, conv_states=conv_states, slots=slots)
    return width


def causal_conv1d_update(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    slots: torch.Tensor,
    activation: str | None,
) -> torch.Tensor:
    """One decode step per sequence (signature of the reference ``causal_conv1d_update``).

    Args:
        x: ``[B, C]`` one new input per sequence (rows may be strided); weight: ``[C, W]``; bias: ``[C]`` or None.
        conv_states: ``[S, C, W-1]`` pool (any float dtype), read at ``slots`` and shifted in place.
        slots: ``[B]`` int64 distinct slot indices (not checked on the host: no device sync).
        activation: ``"silu"`` or None.

    Returns:
        ``[B, C]`` in x's dtype.

    Raises:
        ValueError: inconsistent shapes, unknown activation, unsupported dtype.
    """
    op = "causal_conv1d_update"
    require_dims(op, x=(x, 2))
    width = _check(op, x, weight, bias, conv_states, slots, activation, x.shape[0])
    batch, channels = x.shape
    x = as_rows(x)
    y = torch.empty((batch, channels), dtype=x.dtype, device=x.device)
    if batch == 0 or channels == 0:
        return y

    def grid(meta):
        return (batch, triton.cdiv(channels, meta["BLOCK_C"]))

    _conv_update_kernel[grid](
        x, weight, bias if bias is not None else x, conv_states, slots, y,
        channels, x.stride(0), weight.stride(0), weight.stride(1),
        conv_states.stride(0), conv_states.stride(1), conv_states.stride(2), y.stride(0),
        WIDTH=width, BLOCK_W=next_pow2(width), HAS_BIAS=bias is not None, SILU=activation == "silu",
    )
    return y


def causal_conv1d_prefill(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens: torch.Tensor,
    conv_states: torch.Tensor,
    slots: torch.Tensor,
    activation: str | None,
) -> torch.Tensor:
    """Causal depthwise conv over a varlen batch from and into slot states (reference signature).

    Args:
        x: ``[T, C]`` flattened inputs (rows may be strided); sequence ``i`` owns rows
            ``cu_seqlens[i]:cu_seqlens[i+1]``.
        weight: ``[C, W]``; bias: ``[C]`` or None.
        cu_seqlens: ``[B+1]`` int32 / int64 row offsets on x's device (trusted: not synced to the host).
        conv_states: ``[S, C, W-1]`` pool; ``conv_states[slots[i]]`` read, then overwritten with the
            sequence's last ``W-1`` inputs (older state entries kept when it is shorter than ``W-1``).
        slots: ``[B]`` int64 distinct slot indices; activation: ``"silu"`` or None.

    Returns:
        ``[T, C]`` in x's dtype.

    Raises:
        ValueError: inconsistent shapes, unknown activation, unsupported dtype.
    """
    op = "causal_conv1d_prefill"
    batch = num_sequences(op, cu_seqlens)
    width = _check(op, x, weight, bias, conv_states, slots, activation, batch)
    require(cu_seqlens.device == x.device, op, f"cu_seqlens must be on {x.device}, got {cu_seqlens.device}")
    total, channels = x.shape
    x = as_rows(x)
    y = torch.empty((total, channels), dtype=x.dtype, device=x.device)
    if batch == 0 or channels == 0:
        return y
    cu = cu_seqlens.to(torch.int32)
    bias_arg = bias if bias is not None else x
    if total:
        seq_id = torch.searchsorted(cu[1:], torch.arange(total, device=x.device, dtype=torch.int32), right=True)

        def grid(meta):
            return (triton.cdiv(total, meta["BLOCK_T"]), triton.cdiv(channels, meta["BLOCK_C"]))

        _conv_prefill_kernel[grid](
            x, weight, bias_arg, conv_states, slots, cu, seq_id, y,
            total, channels, x.stride(0), weight.stride(0), weight.stride(1),
            conv_states.stride(0), conv_states.stride(1), conv_states.stride(2), y.stride(0),
            WIDTH=width, HAS_BIAS=bias is not None, SILU=activation == "silu",
        )
    if width > 1:
        block_c = 32 if conv_states.device.type == "cpu" else 256
        _conv_prefill_state_kernel[(batch, triton.cdiv(channels, block_c))](
            x, conv_states, slots, cu, channels, x.stride(0),
            conv_states.stride(0), conv_states.stride(1), conv_states.stride(2),
            WIDTH=width, BLOCK_W=next_pow2(width - 1), BLOCK_C=block_c,
        )
    return y
