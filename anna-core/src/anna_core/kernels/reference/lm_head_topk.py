"""``lm_head_topk``: the LM head's ``k`` largest logits of each row, their ids and the row's log-normaliser,
for steps whose every request needs at most the top ``k`` logits (greedy, top-k sampling, top logprobs).

The reference computes the full ``[T, V]`` logits exactly as a model's ``compute_logits`` does (the dense
``linear`` or the quantized ``wq_linear`` reference, rounded to the hidden states' dtype, then float32 and the
optional soft-cap ``cap * tanh(logits / cap)``: Gemma 2's final logit soft-capping), a stable descending sort
(ties: the lowest id first, as ``argmax`` picks it) and ``logsumexp``. Kernels (anna-xpu-kernels' Triton
``lm_head_topk``) sort nothing over the vocabulary: each program keeps its vocabulary tile's top ``k`` and a partial
``(max, sum exp)`` (computing the tile's logits itself, or reading them from the full head's GEMV), and a second
stage merges them.
"""

from __future__ import annotations

import torch

from anna_core.kernels.checks import require
from anna_core.kernels.reference.linear import check_linear, linear
from anna_core.kernels.reference.wq_linear import check_wq_weight, wq_linear

MAX_TOP_K = 64
"""The largest ``k`` of ``lm_head_topk`` (the runner's fused path asks for exactly this many and slices)."""

DENSE = "none"
"""``scheme`` of a dense (unquantized) head weight."""


def check_lm_head_topk(hidden: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None,
                       zero: torch.Tensor | None, scheme: str, k: int, softcap: float | None) -> int:
    """Check :func:`lm_head_topk`'s arguments (shapes and dtypes only, no sync); returns the vocabulary size ``V``.

    Raises:
        ValueError: ``"lm_head_topk: ..."``: hidden not ``[T, H]`` of a float dtype; a dense weight not ``[V, H]``
            of hidden's dtype (scale and zero not None); a quantized weight not in its scheme's layout
            (:func:`~anna_core.kernels.reference.wq_linear.check_wq_weight`); ``k`` outside ``[1, min(64, V)]``;
            a soft-cap that is not positive.
    """
    op = "lm_head_topk"
    require(hidden.dim() == 2 and hidden.is_floating_point(), op,
            f"hidden must be a float [T, H], got {tuple(hidden.shape)} {hidden.dtype}")
    if scheme == DENSE:
        check_linear(op, hidden, weight, None)
        require(scale is None and zero is None, op, "a dense weight (scheme 'none') takes no scale nor zero")
        vocab = weight.shape[0]
    else:
        vocab, width = check_wq_weight(op, weight, scale, zero, scheme)
        require(hidden.shape[1] == width, op, f"hidden must be [T, H={width}], got {tuple(hidden.shape)}")
    require(isinstance(k, int) and 1 <= k <= min(MAX_TOP_K, vocab), op,
            f"k must be an int in [1, min({MAX_TOP_K}, V={vocab})], got {k!r}")
    require(softcap is None or softcap > 0, op, f"softcap must be positive or None, got {softcap!r}")
    return vocab


def head_logits(hidden: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, zero: torch.Tensor | None,
                scheme: str, softcap: float | None) -> torch.Tensor:
    """The full ``[T, V]`` float32 logits :func:`lm_head_topk` selects from (what ``compute_logits`` returns):
    the product rounded to hidden's dtype, then float32, then soft-capped when ``softcap`` is set."""
    if scheme == DENSE:
        logits = linear(hidden, weight, None).float()
    else:
        logits = wq_linear(hidden, weight, scale, zero, scheme, None).float()
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


def lm_head_topk(hidden: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, zero: torch.Tensor | None,
                 scheme: str, k: int, softcap: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The top ``k`` logits of each row of the LM head, without the caller keeping the full logits.

    Args:
        hidden: ``[T, H]`` final hidden states (the serving dtype).
        weight: the head: dense ``[V, H]`` of hidden's dtype (``scheme="none"``), or the quantized codes of
            ``scheme`` (``"int4"`` / ``"int8"`` / ``"fp8"``; layouts in :mod:`anna_core.weights.gpu_quant`).
        scale, zero: the quantized weight's scales and zeros (None for a dense weight; zero None but for int4).
        scheme: ``"none"`` or a quantization scheme.
        k: how many logits per row, ``1 <= k <= min(64, V)``.
        softcap: ``cap * tanh(logits / cap)`` on the logits (Gemma's ``final_logit_softcapping``), or None.

    Returns:
        ``(values, indices, logsumexp)``: ``[T, k]`` float32 logits in descending order (equal logits: the lower
        id first), ``[T, k]`` int64 their vocabulary ids, ``[T]`` float32 ``log(sum_v exp(logits[t, v]))`` over
        the whole vocabulary (so ``values - logsumexp[:, None]`` are exact log-probabilities).

    Raises:
        ValueError: see :func:`check_lm_head_topk`.
    """
    check_lm_head_topk(hidden, weight, scale, zero, scheme, k, softcap)
    logits = head_logits(hidden, weight, scale, zero, scheme, softcap)
    values, order = logits.sort(dim=-1, descending=True, stable=True)
    return values[:, :k].contiguous(), order[:, :k].contiguous(), torch.logsumexp(logits, dim=-1)
