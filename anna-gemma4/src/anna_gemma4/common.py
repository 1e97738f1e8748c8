"""Pieces the Gemma 3 and Gemma 4 text models share: the cache groups of sliding-window and global
layers, the scaled token embedding and the (optionally soft-capped) logits. Attention is shared in
:mod:`anna_gemma4.attention`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import attrs
import torch
from anna_core.distributed.layers import gather_vocab
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.topk_head import head_topk
from anna_core.model import CacheSpec, FullAttentionSpec, ModelCaches, SlidingWindowSpec
from torch import nn

from anna_gemma4.config import LAYER_TYPES, SLIDING


def cache_spec(cfg: Any) -> CacheSpec:
    """The sliding-window group (if the model has sliding layers), then the full-attention group.

    Args:
        cfg: a config with ``layers`` (:class:`~anna_gemma4.config.LayerSpec` per layer), ``layers_of(kind)``
            and ``sliding_window`` (a Gemma 3 or Gemma 4 config). KV-shared layers (``kv_owner``) are
            ``shared`` readers of their source layer in its group.
    """
    groups = []
    for kind in LAYER_TYPES:
        ids = cfg.layers_of(kind)
        if not ids:
            continue
        geometry = dict(num_kv_heads=cfg.layers[ids[0]].num_kv_heads, head_dim=cfg.layers[ids[0]].head_dim,
                        layers=[i for i in ids if cfg.layers[i].kv_owner is None],
                        shared=[(i, cfg.layers[i].kv_owner) for i in ids if cfg.layers[i].kv_owner is not None])
        if kind == SLIDING:
            groups.append(SlidingWindowSpec(window=cfg.sliding_window, **geometry))
        else:
            groups.append(FullAttentionSpec(**geometry))
    return CacheSpec(groups)


def next_norms(layers: Any, final_norm: nn.Module) -> list[nn.Module]:
    """The norm each decoder layer applies to its output (its tail fuses it, ``post_norm_residual``): the
    next layer's ``input_layernorm``, and ``final_norm`` after the last layer."""
    return [layer.input_layernorm for layer in layers[1:]] + [final_norm]


class RotaryTables:
    """Each layer kind's rotary table ``rotary.cos_sin(positions)`` for one forward pass, computed the first time a
    layer asks for it: layers whose fused kernels compute their angles themselves (``qkv_norm_rope_cache``,
    ``q_norm_rope_attention``, ...) never ask, so a decode step served by them launches none of its kernels.

    Args:
        rotary: ``{kind: RotaryEmbedding}`` (an ``nn.ModuleDict``); positions: the batch's positions.
    """

    def __init__(self, rotary: Any, positions: torch.Tensor):
        self._rotary, self._positions = rotary, positions
        self._tables: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def of(self, kind: str) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
        """A zero-argument callable giving ``kind``'s ``(cos, sin)`` (computed once, on the first call)."""
        return functools.partial(self._get, kind)

    def _get(self, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
        table = self._tables.get(kind)
        if table is None:
            table = self._tables[kind] = self._rotary[kind].cos_sin(self._positions)
        return table


def scaled_embedding(embedding: nn.Embedding, ids: torch.Tensor, scale: float) -> torch.Tensor:
    """``embedding(ids) * scale`` ``[T, D]`` with the scale rounded to the weights' dtype first, as
    transformers does (``sqrt(3072)`` becomes 55.5 in bfloat16); a Python number, not a host tensor, so a
    captured graph has nothing to copy from the host."""
    return embedding(ids) * embedding_scale(scale, embedding.weight.dtype)


def embedding_scale(scale: float, dtype: torch.dtype) -> float:
    """``scale`` rounded to ``dtype``, as :func:`scaled_embedding` multiplies by it (a Python float)."""
    return _rounded(scale, dtype)


@functools.cache
def _rounded(scale: float, dtype: torch.dtype) -> float:
    """``scale`` rounded to ``dtype``, computed once per pair (on the first, eager step): the steps after it, graph
    captures included, read no tensor on the host for it."""
    return float(torch.tensor(scale, dtype=dtype))


def gemma_logits(ops: Any, hidden: torch.Tensor, weight: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """hidden ``[N, hidden]`` @ weight ``[vocab, hidden]``.T -> logits ``[N, vocab]`` float32, soft-capped
    (``cap * tanh(logits / cap)``) when ``softcap`` is set: one ``linear_soft_cap`` op where kernels serve both it and
    ``linear`` (on GPUs the GEMV and one elementwise launch; its kernel runs the GEMV itself, so with ``linear``'s
    kernel disabled, ``--disable-kernel linear:triton``, the head keeps to the unfused path), else the projection and
    torch's four elementwise launches."""
    if (softcap is not None and ops.accelerated("linear") is not None
            and (fused := ops.accelerated("linear_soft_cap")) is not None):
        return fused(hidden, weight, softcap)
    logits = ops.linear(hidden, weight, None).float()
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


def gemma_greedy(ops: Any, hidden: torch.Tensor, weight: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """hidden ``[N, hidden]``, weight ``[vocab, hidden]`` -> ``[N]`` int64: the argmax of each row of
    :func:`gemma_logits` (the first of equal largest values): one ``linear_soft_cap_argmax`` op (on GPUs the GEMV
    and two small launches, the float32 logits never written) where kernels serve both it and ``linear`` and
    ``softcap`` is set, else ``argmax`` of :func:`gemma_logits`."""
    if (softcap is not None and ops.accelerated("linear") is not None
            and (fused := ops.accelerated("linear_soft_cap_argmax")) is not None):
        return fused(hidden, weight, softcap)
    return torch.argmax(gemma_logits(ops, hidden, weight, softcap), dim=-1)


class GemmaCausalLM(nn.Module):
    """What the Gemma 3 and Gemma 4 causal models share (:class:`anna_core.model.CausalLM`): the text model,
    an LM head (none with tied embeddings: logits use ``embed_tokens.weight``), soft-capped float32 logits.

    Args:
        cfg: the family's parsed config (``vocab_size``, ``hidden_size``, ``tie_word_embeddings``,
            ``final_logit_softcapping``).
        ops: :class:`anna_core.kernels.OpTable` bound to the serving device and dtype.
        text_model: ``(cfg, cache_spec, ops) -> nn.Module`` with ``embed_tokens`` and ``layers`` (each with
            ``merge_projections()``).
        parallel: a tensor-parallel rank's state: its logits are gathered over the vocabulary shards.

    Attributes:
        raw_config: the checkpoint's ``config.json`` dict, set by the loader (None until then, and for a
            GGUF source); ``hf_export`` builds transformers' config from it.
    """

    def __init__(self, cfg: Any, ops: Any, text_model: Any, parallel: ParallelState = SINGLE):
        super().__init__()
        self.config = cfg
        self.ops = ops
        self.parallel = parallel
        self.raw_config: dict[str, Any] | None = None
        self.cache_spec = cache_spec(cfg)
        self.model = text_model(cfg, self.cache_spec, ops)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if parallel.is_parallel:  # a rank's head is a vocabulary shard: no top-k or greedy ids from it alone
            self.capabilities = attrs.evolve(self.capabilities, topk_head=False, greedy_head=False)

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def merge_projections(self) -> None:
        """Merge each dense MLP's gate/up projections; the loader calls it once the weights are in place."""
        for layer in self.model.layers:
            layer.merge_projections()

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` (after the final norm) for every token of ``batch``."""
        return self.model(batch, caches)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: ``[N, hidden]`` -> logits ``[N, vocab]`` float32 (soft-capped when configured)."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = gemma_logits(self.ops, hidden, weight, self.config.final_logit_softcapping)
        return gather_vocab(logits, self.vocab_size, self.parallel)  # a tensor-parallel rank's vocabulary shard

    def compute_greedy(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: ``[N, hidden]`` -> ``[N]`` int64, the argmax of each row of :meth:`compute_logits` (the first of
        equal largest values; :func:`gemma_greedy`: without the logits where a kernel serves the soft-capped head's
        argmax). One rank only: capability ``greedy_head``."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return gemma_greedy(self.ops, hidden, weight, self.config.final_logit_softcapping)

    def compute_topk(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """hidden ``[N, hidden]`` -> the ``lm_head_topk`` op's ``(values [N, k] float32, indices [N, k] int64,
        logsumexp [N] float32)`` of :meth:`compute_logits`' soft-capped logits (one rank only: capability
        ``topk_head``)."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return head_topk(self.ops, hidden, weight, k, self.config.final_logit_softcapping)
