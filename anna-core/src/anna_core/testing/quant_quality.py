"""How far a quantized model strays from its unquantized twin: the measures that families' ``--weight-quant`` /
``--expert-quant`` tests bound on tiny random checkpoints (float32 references on the CPU)::

    dense = DenseRun.of(load(path).model, prompt[:12], 64)    # the unquantized model's greedy run
    quantize_linears(model.model.layers, "int8", model.ops)
    QualityBounds(min_greedy_equal=8, min_top1=0.85, max_mean_kl=1e-2, max_kl=0.15).check(Agreement.of(model, dense))

The quantized model is compared token by token with the dense model's greedy continuation, and position by
position along it (teacher-forced): its logits at each generated position against the dense model's, by top-1
agreement and by the KL divergence ``KL(p_dense || p_quantized)`` in nats.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from anna_core.testing.runner import prefill_logits, simple_greedy


@attrs.frozen
class DenseRun:
    """The unquantized model's greedy run.

    Attributes:
        prompt: the prompt's token ids.
        tokens: the greedy continuation's token ids.
        logits: float32 ``[len(tokens), vocab]``: the logits that chose each of ``tokens``.
    """

    prompt: list[int]
    tokens: list[int]
    logits: torch.Tensor

    @classmethod
    def of(cls, model: Any, prompt: list[int], max_tokens: int) -> DenseRun:
        """``max_tokens`` greedy tokens of ``model`` after ``prompt``, and its logits along them."""
        tokens = simple_greedy(model, prompt, max_tokens)
        return cls(prompt, tokens, prefill_logits(model, prompt + tokens)[len(prompt) - 1:-1])


@attrs.frozen
class Agreement:
    """A quantized model measured against a :class:`DenseRun`.

    Attributes:
        greedy_equal: positions where its own greedy continuation has the dense model's token.
        top1: fraction of positions (teacher-forced along the dense continuation) whose argmax is the dense one's.
        mean_kl / max_kl: ``KL(p_dense || p_quantized)`` per position (nats), mean and largest.
    """

    greedy_equal: int
    top1: float
    mean_kl: float
    max_kl: float

    @classmethod
    def of(cls, model: Any, dense: DenseRun) -> Agreement:
        """Run ``model`` over ``dense``'s prompt (greedy, as many tokens) and along its continuation."""
        tokens = simple_greedy(model, dense.prompt, len(dense.tokens))
        logits = prefill_logits(model, dense.prompt + dense.tokens)[len(dense.prompt) - 1:-1]
        lp, lq = dense.logits.log_softmax(-1), logits.log_softmax(-1)
        kl = (lp.exp() * (lp - lq)).sum(-1)
        top1 = (logits.argmax(-1) == dense.logits.argmax(-1)).float().mean().item()
        return cls(sum(a == b for a, b in zip(tokens, dense.tokens)), top1, kl.mean().item(), kl.max().item())


@attrs.frozen
class QualityBounds:
    """The least agreement and the most divergence a test allows (see :class:`Agreement` for the measures)."""

    min_greedy_equal: int
    min_top1: float
    max_mean_kl: float
    max_kl: float

    def check(self, got: Agreement) -> None:
        """Raises AssertionError (naming the measures) when ``got`` is outside these bounds."""
        assert got.greedy_equal >= self.min_greedy_equal and got.top1 >= self.min_top1, got
        assert got.mean_kl <= self.max_mean_kl and got.max_kl <= self.max_kl, got
