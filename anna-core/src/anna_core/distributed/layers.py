"""Tensor-parallel layers and the swap of a meta-built model's layers for them.

Column-parallel projections need no layer of their own: a family builds them with its rank's share of heads
or intermediate units (a local config) and :class:`~anna_core.distributed.sharding.ShardReader` loads their
rows. A row-parallel projection (``o_proj``, ``down_proj``, ``out_proj``) multiplies its input columns and
sums the partial products over the ranks (one all-reduce); the vocabulary-parallel embedding looks up the
ids its rank holds and sums the rows. Logits are computed per vocabulary shard and gathered
(:func:`gather_vocab`).
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import nn

from anna_core.distributed.state import ParallelState
from anna_core.layers.linear import Linear


class RowParallelLinear(Linear):
    """``y = all_reduce(x @ weight^T) + bias`` with ``weight`` ``[N, K / world_size]``: this rank's input columns.

    Args:
        in_features: the rank's ``K / world_size``; out_features: ``N``; bias: a ``[N]`` bias, added once
            after the sum (replicated on every rank).
        parallel: the rank's state (its ``group`` sums the partial products).
        ops: the model's op table (the product through ``ops.linear``), or None.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, parallel: ParallelState, ops=None):
        super().__init__(in_features, out_features, bias=bias, ops=ops)
        self.parallel = parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., K / world_size]`` -> ``[..., N]`` (equal on every rank)."""
        y = F.linear(x, self.weight) if self.ops is None else self._op()(x, self.weight, None)
        y = self.parallel.all_reduce(y)
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Embedding):
    """An embedding whose rows are split across the ranks: rank ``r`` holds ids ``[r * n, (r + 1) * n)``,
    ``n = ceil(vocab / world_size)`` (the last rank's rows past the vocabulary are zeros).

    Args:
        num_embeddings: the whole vocabulary ``V``; embedding_dim: ``H``; parallel: the rank's state.

    ``weight``: ``[n, H]``. Out-of-shard ids give zero rows here and the all-reduce brings the owner's row, so
    the result is exactly the replicated lookup.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, parallel: ParallelState):
        rows = math.ceil(num_embeddings / parallel.world_size)
        super().__init__(rows, embedding_dim)
        self.vocab_size = num_embeddings
        self.start = parallel.rank * rows
        self.parallel = parallel

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: ``[T]`` int -> ``[T, H]`` in the weight's dtype."""
        rows = self.weight.shape[0]
        local = ids - self.start
        inside = (local >= 0) & (local < rows)
        out = F.embedding(local.clamp(0, rows - 1), self.weight) * inside.unsqueeze(-1).to(self.weight.dtype)
        return self.parallel.all_reduce(out)


def gather_vocab(logits: torch.Tensor, vocab_size: int, parallel: ParallelState) -> torch.Tensor:
    """Per-shard logits ``[N, ceil(V / world_size)]`` (rank ``r``'s vocabulary rows) -> ``[N, V]`` on every rank
    (the padding columns dropped); the identity at size 1."""
    if not parallel.is_parallel:
        return logits
    return parallel.all_gather_last(logits)[..., :vocab_size]


def parallelize(model: nn.Module, parallel: ParallelState, *, row: str, vocab: str) -> None:
    """Swap, in a meta-built model, the row-parallel projections and vocabulary-sharded tables for their
    parallel forms (same parameter names, this rank's shapes, still on the meta device).

    Args:
        row: regex (``re.search``) over module names: each ``nn.Linear`` it matches (built with the rank's
            input width) becomes a :class:`RowParallelLinear`.
        vocab: regex over module names: each ``nn.Embedding`` it matches becomes a
            :class:`VocabParallelEmbedding`, each ``nn.Linear`` (an untied LM head ``[V, H]``) keeps
            ``ceil(V / world_size)`` output rows; the family's ``compute_logits`` then calls :func:`gather_vocab`.

    Raises:
        ValueError: a matched module has another type.
    """
    if not parallel.is_parallel:
        return
    row_re, vocab_re = re.compile(row), re.compile(vocab)
    for name, module in list(model.named_modules()):
        if not name:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        new: nn.Module | None = None
        with torch.device("meta"):
            if row_re.search(name):
                if not isinstance(module, nn.Linear):
                    raise ValueError(f"{name}: row-parallel needs an nn.Linear, got {type(module).__name__}")
                new = RowParallelLinear(module.in_features, module.out_features, module.bias is not None, parallel,
                                        module.ops if isinstance(module, Linear) else None)
            elif vocab_re.search(name):
                if isinstance(module, nn.Embedding):
                    new = VocabParallelEmbedding(module.num_embeddings, module.embedding_dim, parallel)
                elif isinstance(module, nn.Linear):
                    rows = math.ceil(module.out_features / parallel.world_size)
                    new = nn.Linear(module.in_features, rows, bias=module.bias is not None)
                else:
                    raise ValueError(f"{name}: vocabulary-parallel needs an nn.Embedding or nn.Linear")
        if new is not None:
            new.to(module.weight.dtype)
            setattr(parent, child, new)
