"""Top-k selection and the log-sum-exp over the vocabulary in Triton, for the fused top-k LM head
(:mod:`anna_xpu_kernels.lm_head_topk`): no torch sort, softmax or ``topk`` over ``V`` values, no host sync, graph
capture safe (every buffer comes from PyTorch's allocator, every size is known at launch).

Candidates are int64 keys (:func:`keys`): the logit's float32 bits mapped to an order-preserving int32 in the high
word, ``2**32 - 1 - id`` in the low word, so a larger key is a larger logit and, among equal logits, the lower id
(``argmax``'s tie order). Keys are unique, so every selection below is exact and deterministic.

* :func:`logits_partials` (one launch, ``[chunks, rows]`` programs): each program reads a chunk of
  :data:`CHUNK` logits of one row (any float dtype; the soft-cap ``cap * tanh(l / cap)`` applied in float32), and
  writes the chunk's :data:`TOPK` largest keys (``tl.topk``: a bitonic partial sort) and its partial ``(max, sum
  exp(l - max))`` (the online log-sum-exp, Milakov & Gimelshein 2018, "Online normalizer calculation for
  softmax").
* :func:`select` (one to three small launches): while a row has more than :data:`FINAL_KEYS` candidates, each chunk
  of :data:`CHUNK` of them is reduced to its top :data:`TOPK` (:func:`_keys_chunk_kernel`); then one program per row
  takes the top ``k`` of the rest, decodes them to float32 values and int64 ids, and merges the partial ``(max, sum)``
  pairs into the exact ``logsumexp`` (:func:`_final_kernel`).
"""

from __future__ import annotations

import torch

from anna_xpu_kernels._triton import INTERPRETING, next_pow2, tl, triton

TOPK = 64
"""Candidates kept per chunk (the op's largest ``k``: :data:`anna_core.kernels.reference.lm_head_topk.MAX_TOP_K`)."""

CHUNK = 256 if INTERPRETING else 2048
"""Values (logits or keys) one program of a chunk pass reduces to :data:`TOPK` keys (smaller under Triton's
interpreter, whose sorts cost seconds per thousand values: the same code, more chunk passes)."""

FINAL_KEYS = 512 if INTERPRETING else 4096
"""Most candidates per row the final program takes in one ``tl.topk``; more are reduced by chunk passes first."""

PARTIALS_BLOCK = 1024
"""Partial ``(max, sum)`` pairs the final program merges per step."""

LOWEST = -(1 << 63)
"""A key below every real key (padding of short chunks)."""


@triton.jit
def softcap(y, cap):
    """``cap * tanh(y / cap)`` with ``tanh(|u|) = (1 - e) / (1 + e)``, ``e = exp(-2|u|)`` (no overflow)."""
    u = y / cap
    e = tl.exp(-2.0 * tl.abs(u))
    t = (1.0 - e) / (1.0 + e)
    return cap * tl.where(u < 0, -t, t)


@triton.jit
def keys(logits, ids):
    """Unique int64 keys ordered as (logit, -id) of float32 ``logits`` and their ``ids`` (broadcastable)."""
    b = (logits + 0.0).to(tl.int32, bitcast=True)  # + 0.0: -0.0 becomes +0.0 (equal logits, equal high words)
    ordered = b ^ ((b >> 31) & 0x7FFFFFFF)
    return ((ordered.to(tl.int64) + 1) << 32) - 1 - ids.to(tl.int64)


@triton.jit
def _lowest(N: tl.constexpr):
    """``[N]`` keys of :data:`LOWEST`."""
    return tl.full((N,), -2147483648, tl.int64) << 32


@triton.jit
def _logits_chunk_kernel(l_ptr, keys_ptr, pmax_ptr, psum_ptr, N, stride_lm, stride_km, stride_pm, cap,
                         HAS_CAP: tl.constexpr, CHUNK: tl.constexpr, TOPK: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    ok = cols < N
    x = tl.load(l_ptr + row * stride_lm + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_CAP:
        x = softcap(x, cap)
    masked = tl.where(ok, x, float("-inf"))
    peak = tl.max(masked, axis=0)  # finite: every chunk has a valid id
    total = tl.sum(tl.exp(masked - peak), axis=0)
    top = tl.topk(tl.where(ok, keys(x, cols), _lowest(CHUNK)), TOPK)
    tl.store(keys_ptr + row * stride_km + c * TOPK + tl.arange(0, TOPK), top)
    tl.store(pmax_ptr + row * stride_pm + c, peak)
    tl.store(psum_ptr + row * stride_pm + c, total)


@triton.jit
def _keys_chunk_kernel(in_ptr, out_ptr, L, stride_im, stride_om, CHUNK: tl.constexpr, TOPK: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    idx = c * CHUNK + tl.arange(0, CHUNK)
    k = tl.load(in_ptr + row * stride_im + idx, mask=idx < L, other=0)
    k = tl.where(idx < L, k, _lowest(CHUNK))
    tl.store(out_ptr + row * stride_om + c * TOPK + tl.arange(0, TOPK), tl.topk(k, TOPK))


@triton.jit
def _final_kernel(keys_ptr, pmax_ptr, psum_ptr, values_ptr, ids_ptr, lse_ptr, L, P, k, stride_km, stride_pm,
                  stride_vm, BLOCK_L: tl.constexpr, TOPK: tl.constexpr, BLOCK_P: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    idx = tl.arange(0, BLOCK_L)
    cand = tl.load(keys_ptr + row * stride_km + idx, mask=idx < L, other=0)
    top = tl.topk(tl.where(idx < L, cand, _lowest(BLOCK_L)), TOPK)
    ordered = top >> 32  # the inverse of keys()
    bits = (ordered ^ ((ordered >> 31) & 0x7FFFFFFF)).to(tl.int32)
    slots = tl.arange(0, TOPK)
    tl.store(values_ptr + row * stride_vm + slots, bits.to(tl.float32, bitcast=True), mask=slots < k)
    tl.store(ids_ptr + row * stride_vm + slots, 0xFFFFFFFF - (top & 0xFFFFFFFF), mask=slots < k)
    run_sum = tl.sum(tl.zeros((BLOCK_P,), dtype=tl.float32), axis=0)
    run_max = run_sum - float("inf")
    for p0 in range(0, P, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        pm = tl.load(pmax_ptr + row * stride_pm + p, mask=p < P, other=float("-inf"))
        ps = tl.load(psum_ptr + row * stride_pm + p, mask=p < P, other=0.0)
        new_max = tl.maximum(run_max, tl.max(pm, axis=0))  # finite: the first block has a real partial
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(ps * tl.exp(pm - new_max), axis=0)
        run_max = new_max
    tl.store(lse_ptr + row, run_max + tl.log(run_sum))


def logits_partials(logits: torch.Tensor, cap: float | None,
                    chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per chunk of ``chunk`` logits of each row: its top :data:`TOPK` keys and partial ``(max, sum exp)``.

    Args:
        logits: ``[M, V]`` float32 / float16 / bfloat16 (unit stride along V), as ``compute_logits`` gives them
            before the soft-cap; cap: the soft-cap, or None; chunk: a power of two, at least :data:`TOPK` (None:
            :data:`CHUNK`).

    Returns:
        ``(keys [M, chunks * TOPK] int64, pmax [M, chunks] float32, psum [M, chunks] float32)``; a chunk with
        fewer than :data:`TOPK` ids pads its keys with :data:`LOWEST`.
    """
    m, n = logits.shape
    chunk = chunk or CHUNK
    chunks = triton.cdiv(n, chunk)
    dev = logits.device
    out = torch.empty((m, chunks * TOPK), dtype=torch.int64, device=dev)
    pmax = torch.empty((m, chunks), dtype=torch.float32, device=dev)
    psum = torch.empty_like(pmax)
    _logits_chunk_kernel[(chunks, m)](logits, out, pmax, psum, n, logits.stride(0), out.stride(0), pmax.stride(0),
                                      float(cap or 1.0), HAS_CAP=cap is not None, CHUNK=chunk, TOPK=TOPK,
                                      num_warps=8)
    return out, pmax, psum


def select(cand: torch.Tensor, pmax: torch.Tensor, psum: torch.Tensor, k: int, chunk: int | None = None,
           final_keys: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The top ``k`` of each row's candidate keys, decoded, and the row's ``logsumexp`` from its partials.

    Args:
        cand: ``[M, L]`` int64 keys (:func:`keys`; :data:`LOWEST` for padding), unit stride along L; each row's
            ``k`` largest are real keys. pmax, psum: ``[M, P]`` float32 partial maxima and sums of ``exp(l - max)``
            (each row's first partial covers at least one logit), unit stride along P. k: ``1..TOPK``. chunk,
            final_keys: the chunk passes' width (above :data:`TOPK`: each pass shrinks the candidates) and the
            final program's most candidates (at least :data:`TOPK`), powers of two; None: :data:`CHUNK`,
            :data:`FINAL_KEYS`.

    Raises:
        ValueError: ``chunk`` not above :data:`TOPK` or ``final_keys`` below it.

    Returns:
        ``(values [M, k] float32 descending, ids [M, k] int64, logsumexp [M] float32)``.
    """
    m = cand.shape[0]
    chunk, final_keys = chunk or CHUNK, final_keys or FINAL_KEYS
    if chunk <= TOPK or final_keys < TOPK:
        raise ValueError(f"lm_head_topk: chunk must exceed {TOPK} and final_keys reach it, got {chunk}, {final_keys}")
    while cand.shape[1] > final_keys:
        chunks = triton.cdiv(cand.shape[1], chunk)
        out = torch.empty((m, chunks * TOPK), dtype=torch.int64, device=cand.device)
        _keys_chunk_kernel[(chunks, m)](cand, out, cand.shape[1], cand.stride(0), out.stride(0), CHUNK=chunk,
                                        TOPK=TOPK, num_warps=8)
        cand = out
    values = torch.empty((m, k), dtype=torch.float32, device=cand.device)
    ids = torch.empty((m, k), dtype=torch.int64, device=cand.device)
    lse = torch.empty((m,), dtype=torch.float32, device=cand.device)
    block_l = max(TOPK, next_pow2(cand.shape[1]))
    _final_kernel[(m,)](cand, pmax, psum, values, ids, lse, cand.shape[1], pmax.shape[1], k, cand.stride(0),
                        pmax.stride(0), values.stride(0), BLOCK_L=block_l, TOPK=TOPK,
                        BLOCK_P=min(PARTIALS_BLOCK, next_pow2(pmax.shape[1])), num_warps=8 if block_l > 1024 else 4)
    return values, ids, lse


def topk_of_logits(logits: torch.Tensor, k: int, cap: float | None, chunk: int | None = None,
                   final_keys: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``lm_head_topk``'s result from full logits ``[M, V]`` (any float dtype): the top ``k`` (``1..min(TOPK,
    V)``) of ``float32(logits)`` soft-capped by ``cap`` (or None), ties to the lower id, and the exact
    ``logsumexp``; :func:`logits_partials` then :func:`select`.

    Returns:
        ``(values [M, k] float32 descending, ids [M, k] int64, logsumexp [M] float32)``.
    """
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    return select(*logits_partials(logits, cap, chunk), k, chunk, final_keys)
