"""Gated delta rule (Gated DeltaNet) in pure torch: chunked varlen prefill and one-step decode.

Math: S. Yang, J. Kautz, A. Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule"
(2024), the recurrence per head and token (``S``: ``[K, V]`` float32 state)::

    S = exp(g_t) * S
    u_t = beta_t * (v_t - S^T k_t)
    S = S + k_t u_t^T
    o_t = S^T (scale * q_t)

Prefill uses the chunk-parallel (WY / UT-transform) form of the same recurrence. Inside a chunk
starting from state ``S0``, with ``G_t = sum_{s<=t} g_s`` (cumulative log decay in the chunk)::

    u_t + beta_t * sum_{j<t} exp(G_t - G_j) (k_t . k_j) u_j = beta_t v_t - beta_t exp(G_t) S0^T k_t

which is a unit lower-triangular system ``(I + L) U = V_beta - K_beta,G S0``. Solving it once for
both right-hand sides gives ``U = W_v - W_k S0``; then ::

    O     = (Q * exp(G)) S0 + ((Q K^T) o D) U            D_tj = exp(G_t - G_j) for j <= t, else 0
    S_end = exp(G_last) S0 + (K * exp(G_last - G))^T U

Everything except the state carry is computed for all chunks at once; the scan over chunks runs
for every sequence of the batch together (sequences sorted by chunk count, so the sequences still
running at chunk step ``c`` are a prefix of the batch and their chunks a contiguous block).
Numerically this agrees with HF transformers' ``torch_chunk_gated_delta_rule`` (Qwen3.5), whose
caller L2-normalises q and k beforehand as Anna's caller does.
"""

from __future__ import annotations

import torch

from anna_core.kernels.checks import check_gated_delta_rule, check_slots, require_dims, sequence_lengths

CHUNK_SIZE = 64
"""Tokens per chunk of the prefill scan."""

_CHUNK_HEADS_PER_PASS = 512
"""Chunk x value-head pairs whose chunk-local terms are materialised at once (about 120 MB at
K = V = 128), so prefill memory stays bounded however long the prompt."""


def _chunk_layout(lens: list[int], device: torch.device) -> tuple[torch.Tensor, list[int], list[int], list[int]]:
    """Where each token goes in the padded, step-major chunk buffer.

    Returns ``(dest, order, active, step_start)``: ``dest[t]`` is token ``t``'s row in the buffer of
    ``sum(active) * CHUNK_SIZE`` rows; ``order`` lists sequences by decreasing chunk count;
    at step ``c`` the first ``active[c]`` sequences of ``order`` own chunks
    ``step_start[c] : step_start[c] + active[c]``.
    """
    n_chunks = [(n + CHUNK_SIZE - 1) // CHUNK_SIZE for n in lens]
    order = sorted(range(len(lens)), key=lambda i: -n_chunks[i])
    rank = [0] * len(lens)
    for r, i in enumerate(order):
        rank[i] = r
    max_steps = n_chunks[order[0]] if order else 0
    active = [0] * max_steps
    for n in n_chunks:
        for c in range(n):
            active[c] += 1
    step_start = [0] * max_steps
    for c in range(1, max_steps):
        step_start[c] = step_start[c - 1] + active[c - 1]

    lens_t = torch.tensor(lens, dtype=torch.long, device=device)
    starts = torch.cumsum(lens_t, 0) - lens_t
    seq_id = torch.repeat_interleave(torch.arange(len(lens), device=device), lens_t, output_size=sum(lens))  # no sync
    pos = torch.arange(seq_id.numel(), device=device) - starts[seq_id]
    chunk = pos // CHUNK_SIZE
    step_start_t = torch.tensor(step_start, dtype=torch.long, device=device)
    rank_t = torch.tensor(rank, dtype=torch.long, device=device)
    dest = (step_start_t[chunk] + rank_t[seq_id]) * CHUNK_SIZE + pos % CHUNK_SIZE
    return dest, order, active, step_start


def _step_groups(active: list[int], max_chunks: int) -> list[list[int]]:
    """Consecutive scan steps grouped so each group holds about ``max_chunks`` chunks (at least one step)."""
    groups: list[list[int]] = []
    size = 0
    for c, a in enumerate(active):
        if groups and size + a <= max_chunks:
            groups[-1].append(c)
            size += a
        else:
            groups.append([c])
            size = a
    return groups


def _intra_chunk(qc, kc, vc, gc, bc):
    """Chunk-local terms of the module docstring's chunk form, for a block of chunks.

    Inputs: q (already scaled) and k ``[n, H_k, 1, C, K]``, v ``[n, H_k, R, C, V]``, cumulative log
    decay ``G`` and beta ``[n, H_k, R, C]``. Returns ``(W_v, W_k, (Q K^T) o D, Q * exp(G), K * exp(G_last - G),
    exp(G_last))``, all float32.
    """
    causal = torch.ones(CHUNK_SIZE, CHUNK_SIZE, dtype=torch.bool, device=qc.device).tril()
    decay = (gc.unsqueeze(-1) - gc.unsqueeze(-2)).masked_fill(~causal, float("-inf")).exp()  # [n,Hk,R,C,C]
    # The strictly lower part of `system` is L; solve_triangular(unitriangular=True) ignores the rest.
    system = (kc @ kc.transpose(-1, -2)) * bc.unsqueeze(-1) * decay
    rhs = torch.cat([vc * bc.unsqueeze(-1), kc * (bc * gc.exp()).unsqueeze(-1)], dim=-1)
    w_v, w_k = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True).split(
        [vc.shape[-1], kc.shape[-1]], dim=-1
    )
    del system, rhs
    intra = (qc @ kc.transpose(-1, -2)) * decay
    q_read = qc * gc.exp().unsqueeze(-1)  # reads the chunk's initial state
    k_write = kc * (gc[..., -1:] - gc).exp().unsqueeze(-1)  # writes into the chunk's final state
    chunk_decay = gc[..., -1].exp()[..., None, None]
    return w_v, w_k, intra, q_read, k_write, chunk_decay


def _to_chunks(x: torch.Tensor, dest: torch.Tensor, n_chunks: int, groups: int) -> torch.Tensor:
    """``[T, H, *tail]`` -> float32 ``[N, groups, H // groups, CHUNK, *tail]``, zero-padded."""
    buf = x.new_zeros((n_chunks * CHUNK_SIZE,) + tuple(x.shape[1:]), dtype=torch.float32)
    buf.index_copy_(0, dest, x.to(torch.float32))
    buf = buf.view((n_chunks, CHUNK_SIZE, groups, x.shape[1] // groups) + tuple(x.shape[2:]))
    return buf.movedim(1, 3)


def gated_delta_rule_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    states: torch.Tensor,
    slots: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Chunked gated delta rule over a variable-length batch (see the module docstring for the math).

    Args:
        q, k: ``[T, H_k, K]`` L2-normalised queries and keys (serving dtype).
        v: ``[T, H_v, V]``; ``H_v`` a multiple of ``H_k`` (key head ``h // (H_v // H_k)`` serves value head ``h``).
        g: ``[T, H_v]`` float32 log decay (``<= 0``).
        beta: ``[T, H_v]`` write strength in ``[0, 1]``.
        cu_seqlens: ``[B+1]`` int32 row offsets of the sequences.
        states: ``[S, H_v, K, V]`` float32 pool; ``states[slots[i]]`` is sequence ``i``'s initial state and
            is overwritten in place with its state after its last token.
        slots: ``[B]`` int64 distinct slot indices.
        scale: query scale (``K ** -0.5`` for Qwen3.5).

    Returns:
        ``[T, H_v, V]`` in v's dtype.

    Raises:
        ValueError: inconsistent shapes, non-float32 states, bad ``cu_seqlens`` or ``slots``.
    """
    op = "gated_delta_rule_prefill"
    require_dims(op, q=(q, 3), k=(k, 3), v=(v, 3), g=(g, 2), beta=(beta, 2))
    groups, rep = check_gated_delta_rule(op, q, k, v, g, beta, states)
    total, _, d_k = q.shape
    h_v, d_v = v.shape[1], v.shape[2]
    lens = sequence_lengths(op, cu_seqlens, total)
    check_slots(op, slots, len(lens), states.shape[0], host_check=True)
    out = v.new_empty(v.shape)
    if total == 0:
        return out

    dest, order, active, step_start = _chunk_layout(lens, q.device)
    n = sum(active)
    # [N, H_k, 1, C, K] for q/k (shared by the rep value heads of a group), [N, H_k, rep, C, *] for the rest.
    qc = _to_chunks(q, dest, n, groups) * scale
    kc = _to_chunks(k, dest, n, groups)
    vc = _to_chunks(v, dest, n, groups)
    gc = _to_chunks(g, dest, n, groups).cumsum(-1)
    bc = _to_chunks(beta, dest, n, groups)

    slot_order = slots[torch.tensor(order, dtype=torch.long, device=slots.device)]
    state = states.index_select(0, slot_order).view(len(order), groups, rep, d_k, d_v)
    o_chunks = torch.empty(n, groups, rep, CHUNK_SIZE, d_v, dtype=torch.float32, device=q.device)
    for steps in _step_groups(active, max(1, _CHUNK_HEADS_PER_PASS // h_v)):
        lo = step_start[steps[0]]
        hi = step_start[steps[-1]] + active[steps[-1]]
        parts = _intra_chunk(qc[lo:hi], kc[lo:hi], vc[lo:hi], gc[lo:hi], bc[lo:hi])
        w_v, w_k, intra, q_read, k_write, chunk_decay = parts
        for c in steps:
            a, rows = active[c], slice(step_start[c] - lo, step_start[c] - lo + active[c])
            s_in = state[:a]
            u = w_v[rows] - w_k[rows] @ s_in
            o_chunks[step_start[c] : step_start[c] + a] = q_read[rows] @ s_in + intra[rows] @ u
            state[:a] = s_in * chunk_decay[rows] + k_write[rows].transpose(-1, -2) @ u
    states.index_copy_(0, slot_order, state.view(len(order), h_v, d_k, d_v))

    flat = o_chunks.movedim(3, 1).reshape(n * CHUNK_SIZE, h_v, d_v)
    out.copy_(flat.index_select(0, dest))
    return out


def gated_delta_rule_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    states: torch.Tensor,
    slots: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One recurrent step per sequence (see the module docstring), states updated in place.

    Args:
        q, k: ``[B, H_k, K]`` L2-normalised; v: ``[B, H_v, V]``; g (float32 log decay), beta: ``[B, H_v]``.
        states: ``[S, H_v, K, V]`` float32 pool; slots: ``[B]`` int64 distinct slot indices.
        scale: query scale.

    Returns:
        ``[B, H_v, V]`` in v's dtype.

    Raises:
        ValueError: inconsistent shapes or non-float32 states.
    """
    op = "gated_delta_rule_decode"
    require_dims(op, q=(q, 3), k=(k, 3), v=(v, 3), g=(g, 2), beta=(beta, 2))
    groups, rep = check_gated_delta_rule(op, q, k, v, g, beta, states)
    batch, _, d_k = q.shape
    h_v, d_v = v.shape[1], v.shape[2]
    check_slots(op, slots, batch, states.shape[0], host_check=False)
    if batch == 0:
        return v.new_empty(v.shape)
    f32 = torch.float32
    state = states.index_select(0, slots).view(batch, groups, rep, d_k, d_v)
    state = state * g.to(f32).exp().view(batch, groups, rep, 1, 1)
    k_row = k.to(f32).view(batch, groups, 1, 1, d_k)
    u = (v.to(f32).view(batch, groups, rep, 1, d_v) - k_row @ state) * beta.to(f32).view(batch, groups, rep, 1, 1)
    state = state + k_row.transpose(-1, -2) @ u
    o = (q.to(f32) * scale).view(batch, groups, 1, 1, d_k) @ state  # [B, Hk, R, 1, V]
    states.index_copy_(0, slots, state.view(batch, h_v, d_k, d_v))
    return o.view(batch, h_v, d_v).to(v.dtype)
