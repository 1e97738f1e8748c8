"""One fused gated-DeltaNet decode step from the raw projection: the causal conv1d update + SiLU, the
L2 norms, decay / write strength, the recurrent update of the slot state in place, and the SiLU-gated
RMSNorm of the output, in one Triton launch.

Math (Yang, Kautz & Hatamizadeh, "Gated Delta Networks", 2024; Qwen3.5's gated DeltaNet layer), per
sequence ``b`` and value head ``h`` (key head ``hk = h // (H_v / H_k)``), exactly the composition of
the torch references the unfused layer calls, each intermediate rounded to the activation dtype
where the unfused layer rounds it::

    c = silu(sum_w conv_w[:, w] * [conv_state, x][:, w])   # per channel; state := [conv_state[1:], x]
    q = l2norm(c_q[hk]),  k = l2norm(c_k[hk]),  v = c_v[h]   # l2norm: x * rsqrt(sum(x^2) + 1e-6)
    g = neg_a[h] * softplus(a[h] + dt_bias[h]),  beta = sigmoid(b[h])      (float32)
    S = exp(g) * S;  u = beta * (v - S^T k);  S = S + k u^T;  o = S^T (scale * q)
    y = o * rsqrt(mean(o^2) + eps) * w * silu(z[h])

Work split. The grid has ``B * H_v * NV`` programs: program ``(b, h, j)`` owns the value columns
``j*BLOCK_V .. (j+1)*BLOCK_V`` of head ``h`` (``NV`` chunks; the recurrent update and ``o = S^T q``
are independent per value column). It is the only program that reads or writes that ``[K, BLOCK_V]``
float32 state slice, and the only one that touches the conv channels of its value columns. ``NV`` is
chosen from the batch so that small batches still fill the GPU. A program holds its slice in registers
whole, or, in large grids of whole heads (:func:`choose_sub_v`), walks it in ``[K, SUB_V]`` sub-chunks
with the next one's load in flight during each update; it then stores the head's un-normalised ``o``
and normalises it after a CTA barrier, as the last arriver does below.

Two things couple programs, and both are resolved by one *last-arriver* handshake per group
``(b, hk)`` of the ``G = (H_v / H_k) * NV`` programs that share key head ``hk``:

* The q / k conv channels of key head ``hk`` are read by all ``G`` programs (each recomputes the
  q / k conv output from the OLD conv state plus x). Their new conv state may only be written after
  every reader has read the old one.
* With ``NV > 1`` the gated RMSNorm needs the whole head's ``o``.

Each program (1) reads everything it needs from the conv state, (2) writes its un-normalised ``o``
chunk into the output ``y`` (only when ``NV > 1`` or in sub-chunks), (3) waits at a CTA barrier (all its threads'
memory accesses are performed), then (4) one thread does ``atomic_add(counter[b, hk], 1)`` with
acquire-release semantics at GPU scope. The program that sees ``G - 1`` arrives last: by the
release / acquire pairing every other program of the group has finished all its reads of the q / k
conv state and all its ``o`` stores, so only then does it (5) write the group's new q / k conv state
(no program reads it after this in this launch), (6) normalise the ``H_v / H_k`` heads of the group
in ``y`` (loads bypass L1), and (7) reset the counter to 0 so the next launch (e.g. a CUDA-graph
replay) starts from zero. Every conv-state channel is therefore written by exactly one program,
after all of its reads. With ``G == 1`` (``H_v == H_k`` and ``NV == 1``) no counter is used: the
one program reads then writes its own channels, with a CTA barrier between. Under
``TRITON_INTERPRET=1`` programs run one after another, so the CPU tests cannot exercise the race;
the argument above is what makes it race-free.

The counters are ``int32`` words on the device (``B * H_k`` of them), zero between launches; they are
allocated once per device by :class:`CounterPool` (grown on an eager call when a larger batch
arrives: the engine warms every batch bucket up eagerly before it captures a graph). No host sync.
Heads with ``K > 256`` or ``V > 256`` are not fused: :func:`fusable` is False and the op's probe
(:func:`anna_xpu_kernels.probes.fused_gdn_decode_probe`, on the ``head_k_dim`` / ``head_v_dim`` shape
facts) declines, so the layer composes the unfused ops (``OpTable.accelerated`` returns None).
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import check_conv1d, check_slots, require

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._triton import next_pow2, tl, triton
from anna_xpu_kernels.counters import CounterPool

L2_EPS = tl.constexpr(1e-6)
MAX_HEAD_DIM = 256
MAX_TILE = 16384
"""Largest ``[K, BLOCK_V]`` float32 state tile one program holds in registers."""
TARGET_PROGRAMS = 256
"""Split V until the grid has at least this many programs (about twice an H100/H200's 132 SMs): the
split that the H200 sweep found fastest at each ``B * H_v`` (BENCHMARKS.md, seventh session); past that
more, thinner programs only add redundant q / k conv work."""
MIN_BLOCK_V = 16
SUB_V = 64
"""Value columns a program of a whole-head (``NV = 1``) grid updates at a time: a whole ``[128, 128]``
tile spills registers, and a loop over 64-column sub-chunks, the next one loading during each update,
was the fastest sub-chunk width in the H200 sweep (BENCHMARKS.md, seventh session)."""
NUM_WARPS = 4
"""Warps per program, at every grid; not autotuned. The autotuner timed the launch alone, on the warm-up
step (batch 1: a launch of a few microseconds whatever the count; batch 32: every row on one scratch
state slot, in L2), and its per-process pick made whole served steps slower: in the served 2B batch-1
step one warp was about twice as slow as four, and at 9B batch 32 eight warps were slower than four
(BENCHMARKS.md, eighth session)."""


def fusable(d_k: int, d_v: int) -> bool:
    """Whether the fused step supports ``[d_k, d_v]`` heads (both at most 256)."""
    return 0 < d_k <= MAX_HEAD_DIM and 0 < d_v <= MAX_HEAD_DIM


def choose_splits(rows: int, d_k: int, d_v: int) -> int:
    """Number ``NV`` of value chunks per head for ``rows = B * H_v`` (sequence, head) pairs.

    The smallest power of two with ``rows * NV >= TARGET_PROGRAMS``, keeping chunks at least 16 wide
    (``NV = 1`` for large batches), raised until a ``[K, BLOCK_V]`` tile fits in :data:`MAX_TILE`.
    """
    block_k, block_v = next_pow2(d_k), next_pow2(d_v)
    splits = 1
    while block_k * (block_v // splits) > MAX_TILE:
        splits *= 2
    while rows * splits < TARGET_PROGRAMS and block_v // (2 * splits) >= MIN_BLOCK_V:
        splits *= 2
    return splits


def choose_sub_v(rows: int, block_v: int, splits: int) -> int:
    """Sub-chunk width for a program owning ``block_v`` value columns: :data:`SUB_V` when the grid has
    whole heads (``splits == 1``) and at least :data:`TARGET_PROGRAMS` of them, else the whole chunk."""
    if splits == 1 and rows >= TARGET_PROGRAMS and block_v > SUB_V:
        return SUB_V
    return block_v


@triton.jit
def _conv_silu(x_row, cw_ptr, cs_base, ch, ok, stride_cwc, stride_cww, stride_cc, stride_cw,
               WIDTH: tl.constexpr, BLOCK_W: tl.constexpr):
    """Conv + SiLU of channels ``ch`` (float32 ``[N]``) and their ``[N, BLOCK_W]`` window (oldest first)."""
    j = tl.arange(0, BLOCK_W)
    x = tl.load(x_row + ch, mask=ok, other=0.0).to(tl.float32)
    old = tl.load(cs_base + ch[:, None].to(tl.int64) * stride_cc + j[None, :] * stride_cw,
                  mask=ok[:, None] & (j[None, :] < WIDTH - 1), other=0.0).to(tl.float32)
    window = tl.where(j[None, :] == WIDTH - 1, x[:, None], old)
    w = tl.load(cw_ptr + ch[:, None].to(tl.int64) * stride_cwc + j[None, :] * stride_cww,
                mask=ok[:, None] & (j[None, :] < WIDTH), other=0.0).to(tl.float32)
    y = tl.sum(window * w, axis=1)
    return y * tl.sigmoid(y), window


@triton.jit
def _conv_shift(cs_base, ch, ok, window, stride_cc, stride_cw, WIDTH: tl.constexpr, BLOCK_W: tl.constexpr):
    """Write the new conv state of channels ``ch``: window columns ``1..W-1`` to state columns ``0..W-2``."""
    j = tl.arange(0, BLOCK_W)
    ptrs = cs_base + ch[:, None].to(tl.int64) * stride_cc + (j[None, :] - 1) * stride_cw
    tl.store(ptrs, window.to(cs_base.dtype.element_ty), mask=ok[:, None] & (j[None, :] >= 1) & (j[None, :] < WIDTH))


@triton.jit
def _l2norm(x, act_ty):
    x = x.to(act_ty).to(tl.float32)  # the conv output, rounded as the unfused conv op returns it
    return (x * tl.rsqrt(tl.sum(x * x, axis=0) + L2_EPS)).to(act_ty).to(tl.float32)


@triton.jit
def _gated_norm(o, z, w, eps, d_v):
    rstd = tl.rsqrt(tl.sum(o * o, axis=0) / d_v + eps)
    return o * rstd * w * (z * tl.sigmoid(z))


@triton.jit
def _state_columns(s_base, cols, k_ok, end, stride_sv):
    """The ``[BLOCK_K, n]`` float32 state tile of value columns ``cols`` below ``end`` (zeros beyond;
    ``s_base``: rows ``kk`` of the head)."""
    return tl.load(s_base + cols[None, :] * stride_sv, mask=k_ok[:, None] & (cols < end)[None, :], other=0.0)


@triton.jit
def _delta_rule_columns(state, s_ptrs, s_ok, q, k, v, decay, beta, scale):
    """The recurrent update of the value columns of ``state`` (``[BLOCK_K, n]`` float32, stored back
    at ``s_ptrs``); returns their un-rounded ``o = S^T (scale * q)`` (float32 ``[n]``)."""
    state = state * decay
    u = beta * (v - tl.sum(k[:, None] * state, axis=0))
    state = state + k[:, None] * u[None, :]
    tl.store(s_ptrs, state, mask=s_ok)
    return tl.sum((q * scale)[:, None] * state, axis=0)


@triton.jit
def _normalise_heads(y_row, z_row, w_ptr, first, count, d_v, eps, BLOCK_VH: tl.constexpr):
    """Gated RMSNorm in place of the ``count`` heads from ``first`` of output row ``y_row`` (whose
    un-normalised ``o`` this launch stored; the loads bypass L1)."""
    vf = tl.arange(0, BLOCK_VH)
    vf_ok = vf < d_v
    w = tl.load(w_ptr + vf, mask=vf_ok, other=0.0).to(tl.float32)
    for j in range(count):
        col = (first + j) * d_v + vf
        oh = tl.load(y_row + col, mask=vf_ok, other=0.0, cache_modifier=".cg").to(tl.float32)
        z = tl.load(z_row + col, mask=vf_ok, other=0.0).to(tl.float32)
        tl.store(y_row + col, _gated_norm(oh, z, w, eps, d_v).to(y_row.dtype.element_ty), mask=vf_ok)


@triton.jit
def _fused_gdn_decode_kernel(
    x_ptr, conv_w_ptr, conv_state_ptr, z_ptr, a_ptr, b_ptr, neg_a_ptr, dt_bias_ptr, w_ptr,
    state_ptr, slot_ptr, count_ptr, y_ptr,
    h_k, h_v, rep, d_k, d_v, key_dim, scale, eps,
    stride_x, stride_cwc, stride_cww, stride_cs, stride_cc, stride_cw, stride_z, stride_a, stride_b,
    stride_ss, stride_sh, stride_sk, stride_sv, stride_y,
    WIDTH: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    SUB_V: tl.constexpr, BLOCK_VH: tl.constexpr, NUM_SPLITS: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    pid = tl.program_id(0)
    chunk = pid % NUM_SPLITS
    bh = pid // NUM_SPLITS
    h = bh % h_v
    bi = (bh // h_v).to(tl.int64)
    hk = h // rep
    kk = tl.arange(0, BLOCK_K)
    k_ok = kk < d_k
    act = x_ptr.dtype.element_ty
    NUM_SUB: tl.constexpr = BLOCK_V // SUB_V

    slot = tl.load(slot_ptr + bi).to(tl.int64)
    s_base = state_ptr + slot * stride_ss + h * stride_sh + kk[:, None] * stride_sk
    v0 = chunk * BLOCK_V + tl.arange(0, SUB_V)
    state = _state_columns(s_base, v0, k_ok, d_v, stride_sv)  # [BLOCK_K, SUB_V] float32, read first: the longest load
    # Everything above reads what no kernel of the forward pass writes before this one: the slots (copied
    # in by the host) and this layer's state (written only here). The rest depends on the projection.
    pdl.wait(USE_PDL)

    # conv1d + SiLU from the OLD conv state (q, k of key head hk; v of this chunk)
    x_row = x_ptr + bi * stride_x
    cs_base = conv_state_ptr + slot * stride_cs
    q_ch = hk * d_k + kk
    k_ch = key_dim + hk * d_k + kk
    vv = chunk * BLOCK_V + tl.arange(0, BLOCK_V)
    v_ok = vv < d_v
    v_ch = 2 * key_dim + h * d_v + vv
    q, q_win = _conv_silu(x_row, conv_w_ptr, cs_base, q_ch, k_ok, stride_cwc, stride_cww, stride_cc, stride_cw,
                          WIDTH, BLOCK_W)
    k, k_win = _conv_silu(x_row, conv_w_ptr, cs_base, k_ch, k_ok, stride_cwc, stride_cww, stride_cc, stride_cw,
                          WIDTH, BLOCK_W)
    q = _l2norm(q, act)
    k = _l2norm(k, act)

    # decay and write strength (float32; softplus with torch's threshold of 20)
    xa = tl.load(a_ptr + bi * stride_a + h).to(tl.float32) + tl.load(dt_bias_ptr + h).to(tl.float32)
    softplus = tl.where(xa > 20.0, xa, tl.log(1.0 + tl.exp(tl.minimum(xa, 20.0))))
    decay = tl.exp(tl.load(neg_a_ptr + h).to(tl.float32) * softplus)
    beta = tl.sigmoid(tl.load(b_ptr + bi * stride_b + h).to(tl.float32))

    y_row = y_ptr + bi * stride_y
    if NUM_SUB == 1:
        v, v_win = _conv_silu(x_row, conv_w_ptr, cs_base, v_ch, v_ok, stride_cwc, stride_cww, stride_cc, stride_cw,
                              WIDTH, BLOCK_W)
        o = _delta_rule_columns(state, s_base + vv[None, :] * stride_sv, k_ok[:, None] & v_ok[None, :],
                                q, k, v.to(act).to(tl.float32), decay, beta, scale)
        o = o.to(y_ptr.dtype.element_ty).to(tl.float32)  # rounded, as the unfused decode op returns it
        if NUM_SPLITS == 1:
            w = tl.load(w_ptr + vv, mask=v_ok, other=0.0).to(tl.float32)
            z = tl.load(z_ptr + bi * stride_z + h * d_v + vv, mask=v_ok, other=0.0).to(tl.float32)
            tl.store(y_row + h * d_v + vv, _gated_norm(o, z, w, eps, d_v).to(y_ptr.dtype.element_ty), mask=v_ok)
        else:
            tl.store(y_row + h * d_v + vv, o.to(y_ptr.dtype.element_ty), mask=v_ok)  # un-normalised, for the last
    else:
        # the value columns in NUM_SUB sub-chunks, the next one's state loaded while this one is updated
        _, v_win = _conv_silu(x_row, conv_w_ptr, cs_base, v_ch, v_ok, stride_cwc, stride_cww, stride_cc, stride_cw,
                              WIDTH, BLOCK_W)  # the whole chunk's window, for the conv-state shift below
        v_end = tl.minimum(d_v, (chunk + 1) * BLOCK_V)
        for s in range(NUM_SUB):  # a loop, not unrolled: unrolled, every sub-chunk's load is hoisted to the start
            vs = chunk * BLOCK_V + s * SUB_V + tl.arange(0, SUB_V)
            vs_ok = vs < d_v
            ahead = _state_columns(s_base, vs + SUB_V, k_ok, v_end, stride_sv)  # none after the last sub-chunk
            v, _sub_win = _conv_silu(x_row, conv_w_ptr, cs_base, 2 * key_dim + h * d_v + vs, vs_ok, stride_cwc,
                                      stride_cww, stride_cc, stride_cw, WIDTH, BLOCK_W)
            o = _delta_rule_columns(state, s_base + vs[None, :] * stride_sv, k_ok[:, None] & vs_ok[None, :],
                                    q, k, v.to(act).to(tl.float32), decay, beta, scale)
            tl.store(y_row + h * d_v + vs, o.to(y_ptr.dtype.element_ty), mask=vs_ok)  # un-normalised
            state = ahead
    tl.debug_barrier()  # all conv-state reads and o stores of this program are performed
    _conv_shift(cs_base, v_ch, v_ok, v_win, stride_cc, stride_cw, WIDTH, BLOCK_W)  # own channels only
    if NUM_SPLITS == 1 and NUM_SUB > 1:  # the whole head's o is in y: normalise it
        _normalise_heads(y_row, z_ptr + bi * stride_z, w_ptr, h, 1, d_v, eps, BLOCK_VH)

    group = rep * NUM_SPLITS
    arrived = group - 1
    if group > 1:
        arrived = tl.atomic_add(count_ptr + bi * h_k + hk, 1, sem="acq_rel", scope="gpu")
    if arrived == group - 1:  # every program of the group has read the old q/k conv state
        _conv_shift(cs_base, q_ch, k_ok, q_win, stride_cc, stride_cw, WIDTH, BLOCK_W)
        _conv_shift(cs_base, k_ch, k_ok, k_win, stride_cc, stride_cw, WIDTH, BLOCK_W)
        if NUM_SPLITS > 1:
            _normalise_heads(y_row, z_ptr + bi * stride_z, w_ptr, hk * rep, rep, d_v, eps, BLOCK_VH)
        if group > 1:
            tl.store(count_ptr + bi * h_k + hk, 0)  # zero for the next launch (graph replays)


def fused_gdn_decode(
    qkv: torch.Tensor,
    conv_weight: torch.Tensor,
    conv_states: torch.Tensor,
    z: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    neg_a: torch.Tensor,
    dt_bias: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_eps: float,
    states: torch.Tensor,
    slots: torch.Tensor,
    scale: float,
    num_k_heads: int,
    num_v_splits: int | None = None,
    sub_v: int | None = None,
) -> torch.Tensor:
    """Decode step of a gated DeltaNet layer from its input projection to the gated-norm output.

    Args:
        qkv: ``[B, C]`` raw projection BEFORE the conv (``C = 2*H_k*K + H_v*V``, q, k, v concatenated;
            rows may be strided).
        conv_weight: ``[C, W]`` depthwise conv kernel (no bias); conv_states: ``[S, C, W-1]`` pool
            (any float dtype), read at ``slots`` and shifted in place.
        z: ``[B, H_v*V]`` output gate; a, b: ``[B, H_v]`` raw decay / write-strength projections
            (rows may be strided views of one merged projection; unit stride along the last dim).
        neg_a: ``[H_v]`` float32 ``-exp(A_log)``; dt_bias: ``[H_v]``; norm_weight: ``[V]``; norm_eps: RMSNorm eps.
        states: ``[S, H_v, K, V]`` float32 pool, updated in place at ``slots``.
        slots: ``[B]`` int64 distinct slot indices (not checked on the host: no device sync).
        scale: query scale; num_k_heads: ``H_k`` (divides ``H_v``).
        num_v_splits: value chunks per head (a power of two, ``NV`` in the module docs); None chooses
            it from the batch (:func:`choose_splits`).
        sub_v: columns a program updates at a time (a power of two dividing its chunk's width, at least
            16; the next sub-chunk's state loads while one is updated); None chooses it
            (:func:`choose_sub_v`).

    Returns:
        ``[B, H_v*V]`` in qkv's dtype: the gated-normalised output, ready for ``out_proj``.

    Raises:
        ValueError: inconsistent shapes, non-float32 states, a head too large to fuse (see
            :func:`fusable`), a bad ``num_v_splits`` or ``sub_v``.
    """
    op = "fused_gdn_decode"
    require(qkv.dim() == 2 and states.dim() == 4, op,
            f"qkv must be [B, C] and states [S, H_v, K, V], got {tuple(qkv.shape)}, {tuple(states.shape)}")
    batch = qkv.shape[0]
    _, h_v, d_k, d_v = states.shape
    require(num_k_heads > 0 and h_v % num_k_heads == 0, op, f"H_v={h_v} must be a multiple of H_k={num_k_heads}")
    key_dim = num_k_heads * d_k
    require(qkv.shape[1] == 2 * key_dim + h_v * d_v, op,
            f"qkv must have {2 * key_dim + h_v * d_v} columns, got {qkv.shape[1]}")
    width = check_conv1d(op, qkv, conv_weight, None, conv_states, "silu")
    require(tuple(z.shape) == (batch, h_v * d_v), op, f"z must be [{batch}, {h_v * d_v}], got {tuple(z.shape)}")
    require(tuple(a.shape) == (batch, h_v) and tuple(b.shape) == (batch, h_v), op,
            f"a and b must be [{batch}, {h_v}], got {tuple(a.shape)} and {tuple(b.shape)}")
    require(tuple(neg_a.shape) == (h_v,) and tuple(dt_bias.shape) == (h_v,) and tuple(norm_weight.shape) == (d_v,),
            op, "neg_a, dt_bias must be [H_v] and norm_weight [V]")
    require(states.dtype == torch.float32, op, f"states must be float32, got {states.dtype}")
    check_slots(op, slots, batch, states.shape[0], host_check=False)
    require(conv_states.shape[0] == states.shape[0], op,
            f"conv_states and states must have the same slot count, got {conv_states.shape[0]} and {states.shape[0]}")
    require(fusable(d_k, d_v), op, f"head dims K={d_k}, V={d_v} are too large to fuse (max {MAX_HEAD_DIM})")
    require_float(op, qkv=qkv)
    require_same_device(op, qkv=qkv, conv_weight=conv_weight, conv_states=conv_states, z=z, a=a, b=b, neg_a=neg_a,
                        states=states, slots=slots)
    for name, t in (("qkv", qkv), ("z", z), ("a", a), ("b", b)):
        require(t.stride(-1) == 1, op, f"{name} needs unit stride along its last dim")
    block_v_head = next_pow2(d_v)
    splits = choose_splits(batch * h_v, d_k, d_v) if num_v_splits is None else int(num_v_splits)
    require(0 < splits <= block_v_head and splits & (splits - 1) == 0, op,
            f"num_v_splits must be a power of two <= {block_v_head}, got {num_v_splits}")
    block_v = block_v_head // splits
    sub = choose_sub_v(batch * h_v, block_v, splits) if sub_v is None else int(sub_v)
    require(sub == block_v or (MIN_BLOCK_V <= sub < block_v and sub & (sub - 1) == 0), op,
            f"sub_v must be the chunk width {block_v} or a power of two from {MIN_BLOCK_V} below it, got {sub_v}")
    y = torch.empty((batch, h_v * d_v), dtype=qkv.dtype, device=qkv.device)
    if batch == 0:
        return y
    counters = fused_gdn_decode.counters.get(qkv.device, batch * num_k_heads)
    _fused_gdn_decode_kernel[(batch * h_v * splits,)](
        qkv, conv_weight, conv_states, z, a, b, neg_a, dt_bias, norm_weight, states, slots, counters, y,
        num_k_heads, h_v, h_v // num_k_heads, d_k, d_v, key_dim, float(scale), float(norm_eps),
        qkv.stride(0), conv_weight.stride(0), conv_weight.stride(1),
        conv_states.stride(0), conv_states.stride(1), conv_states.stride(2),
        z.stride(0), a.stride(0), b.stride(0),
        states.stride(0), states.stride(1), states.stride(2), states.stride(3), y.stride(0),
        WIDTH=width, BLOCK_W=next_pow2(width), BLOCK_K=next_pow2(d_k), BLOCK_V=block_v, SUB_V=sub,
        BLOCK_VH=block_v_head, NUM_SPLITS=splits, num_warps=NUM_WARPS, **pdl.launch_options(y),
    )
    return y


fused_gdn_decode.counters = CounterPool()
