"""Log-probabilities of sampled tokens and their top alternatives, computed on the device.

Values are taken from the model's own distribution, ``log_softmax`` of the raw logits, before
``logit_bias``, grammar masks, penalties or temperature (vLLM's default ``raw_logprobs``), so a
token's logprob states how likely the *model* found it. The ids, the chosen logprobs and the top-k
table are packed into one float64 tensor so that the step still has a single host sync (float64
holds token ids exactly).
"""

from __future__ import annotations

import torch

from anna_core.engine.outputs import TokenLogprob


def raw_logprobs(logits: torch.Tensor) -> torch.Tensor:
    """``[N, V]`` float32 log-probabilities of ``[N, V]`` logits (a new tensor)."""
    return torch.log_softmax(logits.to(torch.float32), dim=-1)


def pack(ids: torch.Tensor, logprobs: torch.Tensor | None, rows: torch.Tensor | None, k: int) -> torch.Tensor:
    """One float64 tensor holding the sampled ids and, for ``rows``, their logprobs and top-``k``.

    Args:
        ids: ``[N]`` int64 sampled ids.
        logprobs: ``[R, V]`` float32 from :func:`raw_logprobs` for the rows that asked (or None).
        rows: ``[R]`` int64: which of the ``N`` rows ``logprobs`` belongs to.
        k: top alternatives per row (the largest any row asked for; 0 allowed).

    Returns:
        ``[N + R * (1 + 2k)]`` float64: ids, then per row the chosen logprob, ``k`` top ids and
        ``k`` top logprobs; equal logprobs list the lower id first.
    """
    parts = [ids.to(torch.float64)]
    if logprobs is not None and rows is not None and logprobs.shape[0]:
        chosen = logprobs.gather(1, ids[rows][:, None])  # [R, 1]
        if k:
            # a stable sort, not topk (whose order among equal values is unspecified): ties list the lower id
            # first, as the fused top-k head's candidates do, so a row's top-k never depends on which head ran
            top_lp, top_ids = logprobs.sort(dim=-1, descending=True, stable=True)  # [R, V]
            top_lp, top_ids = top_lp[:, :k], top_ids[:, :k]  # [R, k]
            table = torch.cat([chosen.to(torch.float64), top_ids.to(torch.float64), top_lp.to(torch.float64)], dim=1)
        else:
            table = chosen.to(torch.float64)
        parts.append(table.reshape(-1))
    return torch.cat(parts)


def unpack(values: list[float], n: int, rows: list[int], wanted: list[int],
           k: int) -> tuple[list[int], list[TokenLogprob]]:
    """Inverse of :func:`pack` after ``.tolist()``.

    Args:
        values: the packed list.
        n: number of sampled rows.
        rows: the rows that asked for logprobs (as passed to :func:`pack`).
        wanted: the top count each logprob row asked for (``len(wanted) == R``; ``<= k``).
        k: the ``k`` used to pack.

    Returns:
        ``(ids, entries)``: the ``n`` ids and one :class:`TokenLogprob` per logprob row, in order.
    """
    ids = [int(v) for v in values[:n]]
    entries = []
    width = 1 + 2 * k
    table = values[n:]
    for r, (i, want) in enumerate(zip(rows, wanted)):
        row = table[r * width:(r + 1) * width]
        top = [(int(row[1 + j]), float(row[1 + k + j])) for j in range(min(want, k))]
        entries.append(TokenLogprob(token_id=ids[i], logprob=float(row[0]), top=top))
    return ids, entries


def pack_candidates(ids: torch.Tensor, picks: torch.Tensor, values: torch.Tensor, indices: torch.Tensor,
                    logsumexp: torch.Tensor, rows: torch.Tensor | None, k: int) -> torch.Tensor:
    """:func:`pack` from the fused top-k head's candidates (``lm_head_topk``): the same layout, so
    :func:`unpack` reads it. A logprob is ``logit - logsumexp`` (exact: the op's logsumexp covers the whole
    vocabulary); each sampled id is a candidate (greedy, or ``top_k`` within the candidates).

    Args:
        ids: ``[N]`` int64 sampled ids; picks: ``[N]`` int64 their positions among the candidates.
        values: ``[N, C]`` float32 candidate logits (descending); indices: ``[N, C]`` int64 their ids;
            logsumexp: ``[N]`` float32.
        rows: ``[R]`` int64 rows that asked for logprobs (or None); k: top alternatives per row (``<= C``).

    Returns:
        ``[N + R * (1 + 2k)]`` float64, as :func:`pack`.
    """
    parts = [ids.to(torch.float64)]
    if rows is not None and rows.shape[0]:
        logprobs = values[rows] - logsumexp[rows][:, None]  # [R, C]
        chosen = logprobs.gather(1, picks[rows][:, None])
        table = [chosen.to(torch.float64)]
        if k:
            table += [indices[rows][:, :k].to(torch.float64), logprobs[:, :k].to(torch.float64)]
        parts.append(torch.cat(table, dim=1).reshape(-1))
    return torch.cat(parts)
