"""Prompt logprobs (vLLM's ``prompt_logprobs``; the completions API's ``echo`` with ``logprobs``): the
log-probability of each prompt token given the tokens before it, with its rank and the top alternatives.

A request that asks (``SamplingParams.prompt_logprobs = k``) keeps ``Request.prompt_logprobs``: ``None`` for the
first prompt token (nothing predicts it), then one :class:`~anna_core.engine.outputs.TokenLogprob` per later prompt
token, in order. The hidden state of the token at position ``p`` predicts the token at ``p + 1``, so a prefill chunk
``[start, start + n)`` gives the entries of the tokens ``start + 1 .. start + n`` that are prompt tokens (the last
prompt row predicts the first generated token: that is the sampled token's own logprob, not a prompt entry). Rows
already recorded are skipped, so a step that is recomputed (a failed step, a preemption) adds nothing twice.

Such a request computes its whole prompt: it takes no prefix-cache or prompt-cache hit until its entries are
complete (``Request.recording_prompt_logprobs``), and its prompt chunks run eagerly (a captured prefill graph returns the last row's logits only). Values
come from the model's own distribution (``log_softmax`` of the raw logits, as :mod:`anna_core.engine.logprobs`).
"""

from __future__ import annotations

from typing import Any

import torch

from anna_core.engine import logprobs as lp

ROWS_PER_HEAD_CALL = 256
"""Prompt rows sent through the LM head at once (``[256, vocab]`` float32 logits at a time, not a whole chunk's)."""


def rows_wanted(seq: Any) -> range:
    """The positions of ``seq``'s step (a :class:`~anna_core.engine.sched_output.ScheduledSequence`) whose hidden
    states give prompt entries not recorded yet (empty for a request that did not ask)."""
    req = seq.request
    if req.params.prompt_logprobs is None:
        return range(0)
    first = max(seq.start, len(req.prompt_logprobs) - 1)
    if first > len(req.prompt_logprobs) - 1:  # rows before this step were never computed (cannot happen: such a
        return range(0)                          # request takes no cache hit); never record out of place
    last = min(seq.start + seq.num_new_tokens, req.num_prompt_tokens - 1)  # exclusive: the last prompt row predicts
    return range(first, max(first, last))                                 # a generated token


def record(compute_logits: Any, hidden: torch.Tensor, seqs: list[Any]) -> None:
    """Append the prompt entries of this step to each asking request's ``prompt_logprobs``.

    Args:
        compute_logits: the model's LM head, ``[R, hidden] -> [R, vocab]``.
        hidden: ``[T, hidden]`` the step's hidden states, ``seqs``' tokens in order.
        seqs: the step's sequences, in the order of ``hidden``'s rows.
    """
    offset = 0
    for seq in seqs:
        positions = rows_wanted(seq)
        if positions:
            req = seq.request
            prompt = req.prompt_token_ids
            k = req.params.prompt_logprobs
            for lo in range(positions.start, positions.stop, ROWS_PER_HEAD_CALL):
                hi = min(lo + ROWS_PER_HEAD_CALL, positions.stop)
                rows = torch.arange(offset + lo - seq.start, offset + hi - seq.start, device=hidden.device)
                logprobs = lp.raw_logprobs(compute_logits(hidden.index_select(0, rows)))  # [R, V]
                targets = torch.tensor(prompt[lo + 1:hi + 1], dtype=torch.int64, device=hidden.device)
                chosen = logprobs.gather(1, targets[:, None])
                ranks = (logprobs > chosen).sum(dim=1) + 1  # [R]: 1 = the most likely token
                every = torch.arange(hi - lo, device=hidden.device)
                packed = torch.cat([lp.pack(targets, logprobs, every, k), ranks.to(torch.float64)])
                values = packed.tolist()
                _, entries = lp.unpack(values[:-len(every)], len(every), list(range(len(every))), [k] * len(every), k)
                for entry, rank in zip(entries, values[-len(every):]):
                    entry.rank = int(rank)
                req.prompt_logprobs += entries
        offset += seq.num_new_tokens
