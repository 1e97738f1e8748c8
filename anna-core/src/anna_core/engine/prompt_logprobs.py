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
from anna_core.engine.outputs import TokenLogprob

ROWS_PER_HEAD_CALL = 64
"""Prompt rows sent through the LM head at once: ``[64, vocab]`` float32 logits and their log-softmax at a time (about
130 MB at a 248k vocabulary), not a whole chunk's; memory admission counts them
(:meth:`~anna_core.engine.memory_admission.MemoryEstimator.estimate`)."""


def rows_wanted(seq: Any) -> range:
    """The positions of ``seq``'s step (a :class:`~anna_core.engine.sched_output.ScheduledSequence`) whose hidden
    states give prompt entries not recorded yet (empty for a request that did not ask)."""
    req = seq.request
    if req.params.prompt_logprobs is None:
        return range(0)
    first = len(req.prompt_logprobs) - 1  # the row predicting the first token not recorded yet
    if seq.start > first:  # rows before this step were never computed (cannot happen: such a request takes no cache
        return range(0)    # hit); never record out of place
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
                chosen = logprobs.gather(1, targets[:, None])  # [R, 1]
                ranks = (logprobs >= chosen).sum(dim=1, keepdim=True)  # [R, 1]: as vLLM counts (ties rank below)
                table = [chosen.to(torch.float64), ranks.to(torch.float64)]
                if k:  # topk, not a sort of the vocabulary: ties at the k-th place may list either id
                    top_lp, top_ids = logprobs.topk(k, dim=-1)  # [R, k], best first
                    table += [top_ids.to(torch.float64), top_lp.to(torch.float64)]
                values = torch.cat(table, dim=1).tolist()  # one host sync per call
                for row, target in zip(values, prompt[lo + 1:hi + 1]):
                    top = [(int(row[2 + j]), row[2 + k + j]) for j in range(k)]
                    req.prompt_logprobs.append(TokenLogprob(token_id=target, logprob=row[0], top=top, rank=int(row[1])))
        offset += seq.num_new_tokens
