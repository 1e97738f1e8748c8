"""When a step may take the fused top-k LM head, and sampling from its candidates.

The ``lm_head_topk`` op (:mod:`anna_core.kernels.reference.lm_head_topk`) gives each row's :data:`FUSED_K` largest
logits, their ids and the exact log-normaliser without the ``[N, V]`` logits. A step takes it when every
sampling request needs no more than those (:func:`fits_topk_head`): greedy rows, rows sampling with ``0 < top_k
<= 64`` (temperature, top-p and min-p then act within the top k, as the full path's filters do), logprobs and
top logprobs (at most 20, exact through the logsumexp). Penalties (they move logits outside the top k),
``logit_bias``, grammars and ``min_tokens`` still banning stop ids need the full logits, as does a row whose
logits are kept (the prompt cache): a step with any of them takes the full head for all its rows.
"""

from __future__ import annotations

from typing import Any

import torch

from anna_core.engine import logprobs as lp
from anna_core.engine.sampler import host_tensor, needs_logits_processors, param_rows, sample_topk_no_sync
from anna_core.errors import AnnaError
from anna_core.kernels.reference.lm_head_topk import MAX_TOP_K

FUSED_K = MAX_TOP_K
"""Candidates the fused head keeps per row (fixed, so a captured graph has one shape; requests slice it)."""

TOPK_HEAD_MODES = ("auto", "on", "off")
"""``RunnerConfig.fused_topk_head``: ``"auto"`` on accelerators (where the op has a kernel), ``"on"`` on every
device (the CPU computes the op's reference: full logits and a sort, for tests), ``"off"`` never (the default,
``--no-fused-topk-head``: on an H100 the kernel measured slower than the full head, see BENCHMARKS.md)."""


def topk_head_mode(value: str) -> str:
    """``value`` checked against :data:`TOPK_HEAD_MODES`.

    Raises:
        AnnaError: another value.
    """
    if value not in TOPK_HEAD_MODES:
        raise AnnaError(f"fused_topk_head must be one of {TOPK_HEAD_MODES}, got {value!r}")
    return value


def fits_topk_head(requests: list[Any], k: int = FUSED_K) -> bool:
    """Whether every request of ``requests`` samples exactly from its ``k`` largest logits (module doc)."""
    for r in requests:
        p = r.params
        if needs_logits_processors(r):
            return False
        if p.logprobs is not None and p.logprobs > k:
            return False
        if p.temperature != 0.0 and not 0 < p.top_k <= k:
            return False
    return True


def sample_candidates(values: torch.Tensor, indices: torch.Tensor, logsumexp: torch.Tensor, requests: list[Any],
                      vocab_size: int) -> list[int]:
    """Sample each request's row from its candidates (:func:`~anna_core.engine.sampler.sample_topk_no_sync`) and
    append the logprobs the request asked for; the ``tolist`` is the step's one host sync.

    Args:
        values, indices: ``[N, C]`` float32 / int64 candidates of ``lm_head_topk``; logsumexp: ``[N]`` float32.
        requests: the ``N`` requests, each :func:`fits_topk_head` with ``k = C``.
        vocab_size: the logits width (neutral top-k of greedy rows).

    Returns:
        The ``N`` sampled ids.
    """
    dev = values.device
    floats, ints = param_rows(requests, vocab_size)
    f = host_tensor(floats, torch.float32, dev)
    i = host_tensor(ints, torch.int64, dev)
    ids, picks = sample_topk_no_sync(values, indices, f[:, 0], i[:, 0], f[:, 1], f[:, 2], i[:, 1], i[:, 2])
    rows = [n for n, r in enumerate(requests) if r.params.logprobs is not None]
    if not rows:
        return ids.tolist()
    wanted = [requests[n].params.logprobs for n in rows]
    k = max(wanted)
    packed = lp.pack_candidates(ids, picks, values, indices, logsumexp, host_tensor(rows, torch.int64, dev), k)
    ids_list, entries = lp.unpack(packed.tolist(), len(requests), rows, wanted, k)
    for n, entry in zip(rows, entries):
        requests[n].logprobs.append(entry)
    return ids_list
