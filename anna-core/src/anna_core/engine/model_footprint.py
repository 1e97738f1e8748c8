"""What the engine reads off a model's tensors: its bytes on the device, its parameter count and hidden width.

These size the KV cache (:mod:`anna_core.engine.cache_sizing`, under ``max_device_memory_gib``), weigh the
weights in memory admission (:mod:`anna_core.engine.memory_admission`) and pick the size tier of
``--kv-cache-quantization auto`` (:mod:`anna_core.kv_quant.settings`).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch


def model_device_bytes(model: Any, device: torch.device, expert_store: Any = None) -> int:
    """Bytes of ``model``'s tensors on ``device`` (parameters and buffers, each storage once) plus the device
    bytes of its offloaded experts' ``expert_store`` (expert cache and scratch; None: no offloaded experts);
    0 for tensors of a model that is no module."""
    seen: set[int] = set()
    total = 0
    if isinstance(model, torch.nn.Module):
        for t in itertools.chain(model.parameters(), model.buffers()):
            on_device = t.device.type == device.type and device.index in (None, t.device.index)
            if on_device and t.data_ptr() not in seen:  # "cuda" holds the tensors on "cuda:0"
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
    return total + (expert_store.device_bytes() if expert_store is not None else 0)


def hidden_size(model: Any) -> int:
    """The model's hidden width: its (or its config's) ``hidden_size``, else its token embedding's width, else 0."""
    for owner in (model, getattr(model, "config", None)):
        size = getattr(owner, "hidden_size", None)
        if isinstance(size, int) and not isinstance(size, bool):
            return size
    if isinstance(model, torch.nn.Module):
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding):
                return module.embedding_dim
    return 0


def num_params(model: Any) -> int:
    """Parameters of the model (``--kv-cache-quantization auto``'s size tier); 0 for a model that is no module."""
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(p.numel() for p in model.parameters())
