"""Device storage behind the state snapshots and the prompt cache, and the copies in and out.

The bookkeeping (which key lives at which index) is pure Python in
:mod:`anna_core.engine.state_snapshots`; this module owns the tensors. All copies are batched
``index_select`` / ``index_copy_`` on the caches' device, queued on the same stream as the forward
pass (no host sync).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from anna_core.engine.sampler import host_tensor
from anna_core.model import CacheSpec, ModelCaches


class StateStore:
    """``capacity`` copies of one sequence's recurrent state (every recurrent layer), plus logits.

    Per recurrent layer: ``conv`` ``[capacity, C, W-1]`` in ``dtype`` and ``recurrent``
    ``[capacity, H_v, K, V]`` float32, like the slot pools of :class:`~anna_core.model.ModelCaches`.
    ``logits[i]`` (``[V]`` float32) is kept for prompt-cache entries.

    Args:
        spec: the model's cache spec (no tensors without recurrent layers).
        capacity: entries.
        device / dtype: where and in which dtype the conv states live.
    """

    def __init__(self, spec: CacheSpec, capacity: int, device: torch.device, dtype: torch.dtype):
        self.capacity = capacity
        self.device = device
        self.conv: list[torch.Tensor] = []
        self.recurrent: list[torch.Tensor] = []
        rec = spec.recurrent
        if rec is not None and capacity > 0:
            self.conv = [torch.zeros((capacity, *rec.conv_shape), dtype=dtype, device=device)
                         for _ in range(rec.num_layers)]
            self.recurrent = [torch.zeros((capacity, *rec.state_shape), dtype=torch.float32, device=device)
                              for _ in range(rec.num_layers)]
        self.logits: dict[int, torch.Tensor] = {}

    def save(self, caches: ModelCaches, slots: Sequence[int], indices: Sequence[int]) -> None:
        """Copy the states of ``slots`` (the caches' slot pools) into entries ``indices``."""
        if not self.conv or not slots:
            return
        src = host_tensor(list(slots), torch.int64, self.device)
        dst = host_tensor(list(indices), torch.int64, self.device)
        for store, pool in zip(self.conv + self.recurrent, caches.conv_states + caches.recurrent_states):
            store.index_copy_(0, dst, pool.index_select(0, src))

    def load(self, caches: ModelCaches, indices: Sequence[int], slots: Sequence[int]) -> None:
        """Copy entries ``indices`` into the caches' state slots ``slots``."""
        if not self.conv or not slots:
            return
        src = host_tensor(list(indices), torch.int64, self.device)
        dst = host_tensor(list(slots), torch.int64, self.device)
        for store, pool in zip(self.conv + self.recurrent, caches.conv_states + caches.recurrent_states):
            pool.index_copy_(0, dst, store.index_select(0, src))


def copy_blocks(caches: ModelCaches, src: Sequence[int], dst: Sequence[int]) -> None:
    """Copy KV blocks ``src[i]`` to ``dst[i]`` in every attention layer (K and V)."""
    if not caches.kv or not src:
        return
    device = caches.kv[0][0].device
    s = host_tensor(list(src), torch.int64, device)
    d = host_tensor(list(dst), torch.int64, device)
    for k, v in caches.kv:
        k.index_copy_(0, d, k.index_select(0, s))
        v.index_copy_(0, d, v.index_select(0, s))


class LogitsTap:
    """Wraps the model runner's sampler and keeps the logits rows of chosen requests.

    The engine sets :attr:`wanted` to the ids of requests whose prompt completes this step (the
    prompt cache stores their last-row logits); everything else passes straight through.

    Args:
        sampler: the wrapped callable ``(logits [N, V], requests) -> ids [N]``.
    """

    def __init__(self, sampler: Any):
        self.inner = sampler
        self.wanted: frozenset[str] = frozenset()
        self.captured: dict[str, torch.Tensor] = {}

    def __call__(self, logits: torch.Tensor, requests: list[Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.wanted:
            for i, request in enumerate(requests):
                if request.request_id in self.wanted:
                    self.captured[request.request_id] = logits[i].detach().to(torch.float32).clone()
        return self.inner(logits, requests, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
