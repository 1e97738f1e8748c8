"""Batched sampling on the device: penalties, temperature, top-k / top-p / min-p, seeded noise.

Everything runs on the logits' device without a host sync; the caller's ``.tolist()`` of the
returned ids is the step's only sync. Per row, in order:

1. repetition penalty (Keskar et al., CTRL, 2019): logits of tokens seen in the prompt or output
   are divided by ``r`` when positive, multiplied by ``r`` when negative;
2. frequency / presence penalties (OpenAI): ``logit -= frequency * count + presence * (count > 0)``
   over the generated tokens;
3. ``min_tokens``: while fewer tokens than that were generated, EOS and stop ids get ``-inf``;
4. greedy rows (``temperature == 0``) take the argmax here;
5. others: divide by the temperature, keep the ``top_k`` largest (equal logits: the lower id first, a stable
   sort), then the smallest set whose
   probability reaches ``top_p``, then drop tokens below ``min_p`` times the top probability,
   and sample with the Gumbel-max trick (``argmax(logits / T + G)`` with ``G = -log(-log(U))``
   samples ``softmax(logits / T)``; Gumbel 1954, Maddison et al. 2014).

Randomness is counter-based: ``U`` for vocabulary entry ``j`` of a request is a hash of the
request's seed, the index of the token being generated and ``j``. A seeded request therefore
draws the same numbers alone, in any batch and after preemption, on any device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from anna_core.engine.request import Request

_M32 = 0xFFFFFFFF
_NEG_INF = float("-inf")
_U_MAX = 1.0 - 2.0**-24
"""The largest float32 below 1: the top of :func:`uniform_noise`'s range."""


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xorshift-multiply rounds) on int64 tensors holding values < 2**32.

    Multipliers stay below 2**31 so products fit in int64 without overflow.
    """
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & _M32
    x = x ^ (x >> 16)
    return x


def uniform_noise(seeds: torch.Tensor, steps: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Counter-based uniforms in ``(0, 1)``.

    Args:
        seeds: ``[N]`` int64 seeds (any int64: the hash reads both 32-bit halves).
        steps: ``[N]`` int64 index of the token being generated (0 for the first output token).
        vocab_size: ``V``.

    Returns:
        ``[N, V]`` float32; entry ``(i, j)`` depends only on ``(seeds[i], steps[i], j)``.
    """
    j = torch.arange(vocab_size, device=seeds.device, dtype=torch.int64)
    return uniform_noise_at(seeds, steps, j[None, :])


def uniform_noise_at(seeds: torch.Tensor, steps: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """:func:`uniform_noise` at some vocabulary entries only: entry ``(i, c)`` is ``uniform_noise(seeds, steps,
    V)[i, ids[i, c]]`` (the fused top-k head's candidates draw exactly the numbers the full vocabulary would).

    Args:
        seeds, steps: ``[N]`` int64 (see :func:`uniform_noise`).
        ids: ``[N, C]`` (or ``[1, C]``, shared by every row) int64 vocabulary ids.

    Returns:
        ``[N, C]`` float32 in ``(0, 1)``: ``(k + 0.5) / 2**24`` for the top 24 bits ``k`` of the hash, except that
        ``k = 2**24 - 1``, whose ``k + 0.5`` rounds to ``2**24`` in float32, gives :data:`_U_MAX` instead of 1.0
        (at ``u == 1`` the Gumbel term ``-log(-log(u))`` is ``+inf``: a masked ``-inf`` logit plus it is NaN, which
        ``argmax`` picks, so a masked id, e.g. a speech talker's control id, was drawn about once per 2**24 entries).
    """
    lo = seeds & _M32
    hi = (seeds >> 32) & _M32
    key = _mix32(lo ^ _mix32(hi ^ _mix32(steps & _M32)))  # [N]
    bits = _mix32(_mix32(key[:, None] ^ ids) ^ key[:, None])  # [N, C]
    return (((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))).clamp_(max=_U_MAX)


def host_tensor(values: Sequence, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor built on the host and copied to ``device`` without blocking."""
    t = torch.tensor(values, dtype=dtype)
    if device.type == "cpu":
        return t
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def _padded(rows: list[list[int]], pad: int) -> list[list[int]]:
    width = max(1, max(len(r) for r in rows))
    return [r + [pad] * (width - len(r)) for r in rows]


class Sampler:
    """Samples the next token of each row from ``[N, V]`` logits (see the module doc for the math)."""

    def __call__(self, logits: torch.Tensor, requests: list[Request]) -> torch.Tensor:
        """Next token ids.

        Args:
            logits: ``[N, V]`` float32, row ``i`` for ``requests[i]``.
            requests: the sampling requests (params, prompt and generated ids, seed).

        Returns:
            ``[N]`` int64 token ids on the logits' device.
        """
        dev = logits.device
        n, vocab = logits.shape
        params = [r.params for r in requests]
        logits = logits.to(torch.float32).clone()

        if any(p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty for p in params):
            logits = self._penalize(logits, requests)

        min_rows, min_ids = [], []
        for i, r in enumerate(requests):
            if len(r.output_token_ids) < r.params.min_tokens:
                ids = [t for t in r.stop_token_ids if 0 <= t < vocab]
                min_rows += [i] * len(ids)
                min_ids += ids
        if min_rows:
            logits[host_tensor(min_rows, torch.int64, dev), host_tensor(min_ids, torch.int64, dev)] = _NEG_INF

        greedy_flags = [p.temperature == 0.0 for p in params]
        greedy_ids = logits.argmax(dim=-1)
        if all(greedy_flags):
            return greedy_ids

        temps = host_tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], torch.float32, dev)
        logits.div_(temps[:, None])
        logits = self._filter(logits, params)
        seeds = host_tensor([r.seed for r in requests], torch.int64, dev)
        steps = host_tensor([len(r.output_token_ids) for r in requests], torch.int64, dev)
        u = uniform_noise(seeds, steps, vocab)
        sampled = (logits - torch.log(-torch.log(u))).argmax(dim=-1)
        if not any(greedy_flags):
            return sampled
        return torch.where(host_tensor(greedy_flags, torch.bool, dev), greedy_ids, sampled)

    @staticmethod
    def _penalize(logits: torch.Tensor, requests: list[Request]) -> torch.Tensor:
        dev = logits.device
        n, vocab = logits.shape
        params = [r.params for r in requests]
        out_ids = host_tensor(_padded([r.output_token_ids for r in requests], vocab), torch.int64, dev)
        counts = torch.zeros(n, vocab + 1, dtype=torch.float32, device=dev)
        counts.scatter_add_(1, out_ids, torch.ones_like(out_ids, dtype=torch.float32))
        counts = counts[:, :vocab]  # [N, V] occurrences in the output
        if any(p.repetition_penalty != 1.0 for p in params):
            prompt_ids = host_tensor(_padded([r.prompt_token_ids for r in requests], vocab), torch.int64, dev)
            seen = torch.zeros(n, vocab + 1, dtype=torch.bool, device=dev)
            seen.scatter_(1, prompt_ids, True)
            seen = seen[:, :vocab] | (counts > 0)
            rep = host_tensor([p.repetition_penalty for p in params], torch.float32, dev)[:, None]
            penalized = torch.where(logits > 0, logits / rep, logits * rep)
            logits = torch.where(seen, penalized, logits)
        freq = host_tensor([p.frequency_penalty for p in params], torch.float32, dev)[:, None]
        pres = host_tensor([p.presence_penalty for p in params], torch.float32, dev)[:, None]
        return logits - freq * counts - pres * (counts > 0).to(torch.float32)

    @staticmethod
    def _filter(logits: torch.Tensor, params: list) -> torch.Tensor:
        """Apply top-k, top-p and min-p to tempered logits ``[N, V]`` (filtered entries -> -inf)."""
        dev = logits.device
        vocab = logits.shape[1]
        need_k = any(0 < p.top_k < vocab for p in params)
        need_p = any(p.top_p < 1.0 for p in params)
        if need_k or need_p:
            sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)
            if need_k:
                k = host_tensor([p.top_k if 0 < p.top_k < vocab else vocab for p in params], torch.int64, dev)
                sorted_logits = mask_top_k(sorted_logits, k)
            if need_p:
                top_p = host_tensor([p.top_p if p.top_p < 1.0 else 2.0 for p in params], torch.float32, dev)
                sorted_logits = mask_top_p(sorted_logits, top_p)
            logits = torch.empty_like(logits).scatter_(1, order, sorted_logits)
        if any(p.min_p > 0.0 for p in params):
            min_p = host_tensor([p.min_p for p in params], torch.float32, dev)[:, None]
            probs = logits.softmax(dim=-1)
            logits = logits.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, _NEG_INF)
        return logits


def mask_top_k(sorted_logits: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Keep the ``top_k[i]`` best entries of row ``i`` of descending-sorted logits ``[N, V]``
    (``top_k``: ``[N]`` int64; ``V`` keeps all); the rest become -inf."""
    ranks = torch.arange(sorted_logits.shape[1], device=sorted_logits.device)
    return sorted_logits.masked_fill(ranks[None, :] >= top_k[:, None], _NEG_INF)


def mask_top_p(sorted_logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Nucleus filter (Holtzman et al., 2019) on descending-sorted logits ``[N, V]``: drop entries whose
    preceding probability mass already reaches ``top_p[i]`` (``[N]`` float32; ``>= 1`` keeps all); the
    best entry always stays."""
    probs = sorted_logits.softmax(dim=-1)
    drop = (probs.cumsum(dim=-1) - probs) >= top_p[:, None]
    drop[:, 0].fill_(False)  # a fill, not a copy from a host scalar tensor
    return sorted_logits.masked_fill(drop, _NEG_INF)


def needs_logits_processors(r: Request) -> bool:
    """Whether ``r``'s logits pass through the eager logits processors: penalties (they need the token history),
    ``min_tokens`` still masking stop ids, a logit bias, allowed token ids, bad words or a grammar."""
    p = r.params
    return (p.repetition_penalty != 1.0 or bool(p.presence_penalty) or bool(p.frequency_penalty)
            or (len(r.output_token_ids) < p.min_tokens and bool(r.stop_token_ids))
            or bool(p.logit_bias) or p.structured is not None or p.allowed_token_ids is not None
            or bool(p.bad_words))


def graph_safe(requests: list[Request]) -> bool:
    """Whether :func:`sample_no_sync` samples these rows exactly as :class:`Sampler` would: none needs the logits
    processors (:func:`needs_logits_processors`) or wants logprobs."""
    for r in requests:
        if needs_logits_processors(r) or r.params.logprobs is not None:
            return False
    return True


def param_rows(requests: list[Request], vocab_size: int) -> tuple[list[list[float]], list[list[int]]]:
    """Per-row sampling parameters in the neutral-value form :func:`sample_no_sync` reads.

    Returns:
        ``floats``: per row ``[temperature, top_p, min_p]`` (``top_p`` 2.0 when disabled);
        ``ints``: per row ``[top_k, seed, step]`` (``top_k`` = vocab size when disabled).
    """
    floats, ints = [], []
    for r in requests:
        p = r.params
        floats.append([p.temperature, p.top_p if p.top_p < 1.0 else 2.0, p.min_p])
        ints.append([p.top_k if 0 < p.top_k < vocab_size else vocab_size, r.seed, len(r.output_token_ids)])
    return floats, ints


def unfiltered(requests: list[Request], vocab_size: int) -> bool:
    """Whether no row of ``requests`` filters its distribution (top-k, top-p, min-p off): then
    :func:`sample_plain_no_sync` samples them as :func:`sample_no_sync` would, without sorting the vocabulary."""
    return all(not 0 < r.params.top_k < vocab_size and r.params.top_p >= 1.0 and r.params.min_p <= 0.0
               for r in requests)


def sample_plain_no_sync(logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                         steps: torch.Tensor) -> torch.Tensor:
    """:func:`sample_no_sync` for rows that filter nothing (top-k / top-p / min-p off): the tempered logits
    plus Gumbel noise, argmax; no sort of the vocabulary. Same ids as :func:`sample_no_sync` on such rows.

    Args:
        logits: ``[N, V]`` float32; temperature: ``[N]`` float32 (``0``: greedy row); seeds, steps: ``[N]``
            int64 (see :func:`uniform_noise`).

    Returns:
        ``[N]`` int64 token ids.
    """
    greedy_ids = logits.argmax(dim=-1)
    temps = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    u = uniform_noise(seeds, steps, logits.shape[1])
    sampled = (logits / temps[:, None] - torch.log(-torch.log(u))).argmax(dim=-1)
    return torch.where(temperature == 0, greedy_ids, sampled)


def sample_no_sync(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """The :class:`Sampler` math (steps 4-5 of the module doc) with no data-dependent branch and no
    host sync, so it can be captured in a device graph; every filter is applied to every row with
    neutral values where a row disables it (``top_k == V``, ``top_p >= 1`` never drops, ``min_p == 0``).

    Args:
        logits: ``[N, V]`` float32.
        temperature, top_p, min_p: ``[N]`` float32 (``temperature == 0``: greedy row).
        top_k: ``[N]`` int64 in ``[1, V]``; seeds, steps: ``[N]`` int64 (see :func:`uniform_noise`).

    Returns:
        ``[N]`` int64 token ids.
    """
    vocab = logits.shape[1]
    greedy_ids = logits.argmax(dim=-1)
    temps = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    x = logits / temps[:, None]
    sorted_logits, order = x.sort(dim=-1, descending=True, stable=True)
    sorted_logits = mask_top_p(mask_top_k(sorted_logits, top_k), top_p)
    x = torch.empty_like(x).scatter_(1, order, sorted_logits)
    probs = x.softmax(dim=-1)
    x = x.masked_fill(probs < min_p[:, None] * probs.max(dim=-1, keepdim=True).values, _NEG_INF)
    u = uniform_noise(seeds, steps, vocab)
    sampled = (x - torch.log(-torch.log(u))).argmax(dim=-1)
    return torch.where(temperature == 0, greedy_ids, sampled)


def sample_topk_no_sync(values: torch.Tensor, indices: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                        top_p: torch.Tensor, min_p: torch.Tensor, seeds: torch.Tensor,
                        steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sample_no_sync` from the fused top-k head's candidates (``lm_head_topk``) instead of the full
    logits, for rows that are greedy or keep at most ``C`` tokens (``top_k <= C``): the same ids.

    Greedy rows take ``indices[:, 0]`` (the largest logit, the lowest id among equal ones: ``argmax``). Other rows
    apply temperature, top-k, top-p and min-p to the ``C`` candidates, which are the first ``C`` entries of the
    full path's stably sorted row (so top-p after top-k, which only ever looks inside the top k, sums the same
    probabilities; min-p compares with the same top probability), and draw the Gumbel noise of exactly those ids
    (:func:`uniform_noise_at`); the full path's other entries are ``-inf`` after top-k and never win.

    Args:
        values: ``[N, C]`` float32 logits in descending order; indices: ``[N, C]`` int64 their ids.
        temperature, top_p, min_p: ``[N]`` float32; top_k: ``[N]`` int64 (``<= C`` on sampling rows);
            seeds, steps: ``[N]`` int64 (see :func:`uniform_noise`).

    Returns:
        ``(ids, picks)``: ``[N]`` int64 token ids and ``[N]`` int64 their positions among the candidates.
    """
    temps = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    x = mask_top_p(mask_top_k(values / temps[:, None], top_k), top_p)
    probs = x.softmax(dim=-1)
    x = x.masked_fill(probs < min_p[:, None] * probs.max(dim=-1, keepdim=True).values, _NEG_INF)
    u = uniform_noise_at(seeds, steps, indices)
    picks = torch.where(temperature == 0, torch.zeros_like(steps), (x - torch.log(-torch.log(u))).argmax(dim=-1))
    return indices.gather(1, picks[:, None])[:, 0], picks
