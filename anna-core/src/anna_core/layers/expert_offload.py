"""Expert offload: routed experts in pinned host memory, copied to the device when a step chooses them.

An offloaded MoE layer's :class:`OffloadedExperts` replaces its routed-experts module (any
:class:`~anna_core.layers.moe.RoutedExpertsModule`: same call, same ``moe_experts`` op). Per call:

1. read the chosen expert ids on the host (the one sync a step cannot avoid here: the copies depend on them)
   and take the distinct ones in ascending order ``U`` (``n = len(U)``);
2. per expert of ``U``: a *hit* is in the layer's device LRU (``C`` slots, ``--cached-experts-per-layer``);
   a *miss* is copied from pinned host memory on the side stream (``non_blocking``) into an LRU slot (evicting
   the least recently used expert that this call does not use) or, when none is free, straight into the
   scratch;
3. the compute stream waits for the copies (an event, not the host), then gathers the LRU slots of ``U``
   into the first ``n`` rows of ONE device scratch of ``E`` experts shared by all offloaded layers (they run
   one after another), in ``U``'s order, and calls the same ``moe_experts`` op on the whole scratch with every
   id replaced by its rank in ``U``. Ranks keep the experts' order, so the op adds each token's terms in the
   order the resident layer adds them, and it sees the same ``E``: the numerics equal the resident path's
   exactly.

The scratch holds ``E`` experts (a prefill can touch all of them). Prefetch (``--expert-prefetch``, with
``C > 0``): each offloaded layer counts, over decode-sized calls (at most :data:`PREFETCH_MAX_TOKENS`
tokens), how often the next offloaded layer chose expert ``j`` after it chose ``i``; after a layer's op is
launched, the next layer's experts whose estimated probability given this call's experts (those seen at least
:data:`PREFETCH_MIN_SEEN` times) is at least :data:`PREFETCH_MIN_PROB` (at most ``K``) are copied into the next layer's LRU on the side stream, as its
least recently used entries, overlapping this layer's compute. Under uniform routing (random weights)
nothing passes the threshold, so no bandwidth is wasted.

Host tensors of an offloaded layer are plain attributes, not parameters: ``model.to(device)`` or a
state dict never brings them to the device. Counters: :class:`ExpertCacheStats`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import attrs
import torch
from torch import nn

from anna_core.device import Accelerator, accelerator, memory_stats
from anna_core.engine.offload import (
    ModelSizes,
    OffloadConfig,
    OffloadConfigError,
    plan_resident_layers,
    should_offload,
)
from anna_core.layers.moe import RoutedExpertsModule

log = logging.getLogger("anna.offload")

PREFETCH_MAX_TOKENS = 8
"""Calls of at most this many tokens (decode steps) feed and use the prefetch statistics."""
PREFETCH_MIN_PROB = 0.25
"""The estimated probability an expert of the next layer must reach to be prefetched."""
PREFETCH_MIN_SEEN = 4
"""A layer's expert enters the estimate once it was seen this many times (with the next layer's choice)."""


@attrs.define
class ExpertCacheStats:
    """Counters of a model's offloaded experts (all offloaded layers together).

    Attributes:
        hits / misses: chosen (layer, expert) pairs per call found in / missing from the layer's LRU;
        prefetched: experts copied ahead by prefetch; prefetch_hits: hits on prefetched experts (their first
        use); bytes_copied: host -> device bytes (misses and prefetches); calls: offloaded-layer calls.
    """

    hits: int = 0
    misses: int = 0
    prefetched: int = 0
    prefetch_hits: int = 0
    bytes_copied: int = 0
    calls: int = 0

    @property
    def hit_rate(self) -> float | None:
        looked = self.hits + self.misses
        return self.hits / looked if looked else None


class ExpertStore:
    """What a model's offloaded layers share: the device scratch, the copy stream, the counters and the
    prefetch statistics. Built by :func:`apply_offload`.

    Args:
        device, dtype: where and in which dtype the experts run.
        num_experts: ``E``; gate_up_shape: ``(2I, H)``; down_shape: ``(H, I)``.
        cached_per_layer: ``C``; prefetch: see the module doc; accel: the device's services.
        resident_layers: the MoE-layer indices left resident (for reports).
    """

    def __init__(self, *, device: torch.device, dtype: torch.dtype, num_experts: int, top_k: int,
                 gate_up_shape: tuple[int, int], down_shape: tuple[int, int], cached_per_layer: int,
                 prefetch: bool, accel: Accelerator, resident_layers: tuple[int, ...] = ()):
        self.device = device
        self.num_experts = num_experts
        self.top_k = top_k
        self.cached_per_layer = cached_per_layer
        self.prefetch = prefetch and cached_per_layer > 0
        self.accel = accel
        self.resident_layers = tuple(resident_layers)
        self.scratch_gate_up = torch.empty((num_experts, *gate_up_shape), dtype=dtype, device=device)  # [E, 2I, H]
        self.scratch_down = torch.empty((num_experts, *down_shape), dtype=dtype, device=device)  # [E, H, I]
        self.copies = accel.copy_stream()
        self.layers: list[OffloadedExperts] = []  # in forward order
        self.stats = ExpertCacheStats()
        # prefetch statistics per layer position p (p -> p + 1): pair counts [E, E] and counts of p's experts [E]
        self._pairs: dict[int, torch.Tensor] = {}
        self._seen: dict[int, torch.Tensor] = {}
        self._last: tuple[int, torch.Tensor] | None = None  # (position, distinct ids) of the last small call

    @property
    def expert_bytes(self) -> int:
        """Bytes of one expert (its gate/up and down rows)."""
        return (self.scratch_gate_up[0].numel() + self.scratch_down[0].numel()) * self.scratch_down.element_size()

    def device_bytes(self) -> int:
        """Device bytes of the scratch and every layer's LRU slots."""
        return self.expert_bytes * (self.num_experts + self.cached_per_layer * len(self.layers))

    def report(self) -> dict[str, Any]:
        """The ``/healthz`` ``engine.expert_cache`` fields (see :class:`ExpertCacheStats`)."""
        s = self.stats
        return {"hit_rate": s.hit_rate, "hits": s.hits, "misses": s.misses, "prefetched": s.prefetched,
                "prefetch_hits": s.prefetch_hits, "bytes_copied": s.bytes_copied,
                "cached_experts_per_layer": self.cached_per_layer, "prefetch": self.prefetch,
                "offloaded_layers": [layer.moe_index for layer in self.layers],
                "resident_layers": list(self.resident_layers), "device_bytes": self.device_bytes()}

    # -- one call of an offloaded layer -------------------------------------------------------------

    def stage(self, layer: OffloadedExperts, unique: list[int]) -> None:
        """Put the experts ``unique`` (ascending) of ``layer`` into the scratch's first ``len(unique)`` rows."""
        used = set(unique)
        to_host: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []  # dst gu, dst d, src...
        gathers: list[tuple[int, int]] = []  # (scratch row, LRU slot)
        stats = self.stats
        for j, e in enumerate(unique):
            slot = layer.lru.get(e)
            if slot is not None:
                stats.hits += 1
                layer.lru.move_to_end(e)
                if e in layer.prefetched:
                    stats.prefetch_hits += 1
                    layer.prefetched.discard(e)
                gathers.append((j, slot))
                continue
            stats.misses += 1
            slot = layer.claim(used)
            if slot is None:  # no LRU slot left: straight into the scratch
                to_host.append((self.scratch_gate_up[j], self.scratch_down[j], layer.host_gate_up[e], layer.host_down[e]))
            else:
                layer.lru[e] = slot
                to_host.append((layer.cache_gate_up[slot], layer.cache_down[slot], layer.host_gate_up[e],
                                layer.host_down[e]))
                gathers.append((j, slot))
        if to_host:
            self._copy(to_host)
            self.copies.join()  # the compute stream waits for the copies (so far, prefetches too)
        elif gathers:
            self.copies.join()  # hits on prefetched slots
        for j, slot in gathers:
            self.scratch_gate_up[j].copy_(layer.cache_gate_up[slot])
            self.scratch_down[j].copy_(layer.cache_down[slot])

    def _copy(self, pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]) -> None:
        # the ids' host read synchronised the compute stream: nothing still reads the destinations
        with self.copies:
            for dst_gu, dst_d, src_gu, src_d in pairs:
                dst_gu.copy_(src_gu, non_blocking=True)
                dst_d.copy_(src_d, non_blocking=True)
        self.stats.bytes_copied += len(pairs) * self.expert_bytes

    def after(self, layer: OffloadedExperts, unique: torch.Tensor, tokens: int) -> None:
        """After ``layer``'s op is launched: learn from the last call's pairing, prefetch for the next layer."""
        if not self.prefetch:
            return
        p = layer.position
        if tokens > PREFETCH_MAX_TOKENS:
            self._last = None
            return
        last = self._last
        if last is not None and last[0] == p - 1:
            pairs, seen = self._tables(p - 1)
            pairs.index_put_((last[1][:, None], unique[None, :]), torch.ones((), dtype=pairs.dtype), accumulate=True)
            seen.index_add_(0, last[1], torch.ones(len(last[1]), dtype=seen.dtype))
        self._last = (p, unique)
        if p + 1 >= len(self.layers):
            return
        nxt = self.layers[p + 1]
        pairs, seen = self._tables(p)
        known = unique[seen[unique] >= PREFETCH_MIN_SEEN]
        if not len(known):
            return
        prob = (pairs[known].float() / seen[known, None].float()).mean(0)  # [E]
        order = torch.argsort(prob, descending=True, stable=True)[:self.top_k].tolist()
        picks = [j for j in order if prob[j] >= PREFETCH_MIN_PROB and j not in nxt.lru][:self.cached_per_layer]
        if not picks:
            return
        slots = nxt.claim_for_prefetch(len(picks))
        for e, slot in zip(picks, slots):
            nxt.lru[e] = slot
            nxt.lru.move_to_end(e, last=False)  # least recently used: first out if the guess is wrong
            nxt.prefetched.add(e)
        self._copy([(nxt.cache_gate_up[s], nxt.cache_down[s], nxt.host_gate_up[e], nxt.host_down[e])
                    for e, s in zip(picks, slots)])
        self.stats.prefetched += len(picks)

    def _tables(self, p: int) -> tuple[torch.Tensor, torch.Tensor]:
        if p not in self._pairs:
            self._pairs[p] = torch.zeros((self.num_experts, self.num_experts), dtype=torch.int32)
            self._seen[p] = torch.zeros(self.num_experts, dtype=torch.int32)
        return self._pairs[p], self._seen[p]


class OffloadedExperts(RoutedExpertsModule):
    """An offloaded layer's routed experts: host copies of ``gate_up_proj [E, 2I, H]`` / ``down_proj
    [E, H, I]`` (pinned on CUDA), ``C`` device LRU slots, and the model's shared :class:`ExpertStore`.

    Args:
        experts: the layer's resident module (fused layout); its tensors are taken (pinned if they are not).
        store: the model's store; moe_index: the layer's MoE-layer index.
    """

    def __init__(self, experts: RoutedExpertsModule, store: ExpertStore, moe_index: int):
        super().__init__(experts.num_experts, experts.top_k)
        self.activation = experts.activation
        self.ops = experts.ops
        self.moe_index = moe_index
        self.store = store
        accel = store.accel
        gate_up, down = experts.gate_up_proj.detach(), experts.down_proj.detach()
        self.host_gate_up = _host(gate_up, accel)  # [E, 2I, H]
        self.host_down = _host(down, accel)  # [E, H, I]
        c = store.cached_per_layer
        self.cache_gate_up = torch.empty((c, *gate_up.shape[1:]), dtype=gate_up.dtype, device=store.device)
        self.cache_down = torch.empty((c, *down.shape[1:]), dtype=down.dtype, device=store.device)
        self.lru: OrderedDict[int, int] = OrderedDict()  # expert -> slot, least recently used first
        self.free = list(range(c - 1, -1, -1))
        self.prefetched: set[int] = set()  # prefetched, not used yet
        self.position = len(store.layers)
        store.layers.append(self)

    def claim(self, used: set[int]) -> int | None:
        """A slot for a miss: a free one, else the least recently used expert's outside ``used``; None if none."""
        if self.free:
            return self.free.pop()
        for e in self.lru:
            if e not in used:
                self.prefetched.discard(e)
                return self.lru.pop(e)
        return None

    def claim_for_prefetch(self, n: int) -> list[int]:
        """``n`` slots (``n <= C``): free ones, then the least recently used experts'."""
        slots = [self.free.pop() for _ in range(min(n, len(self.free)))]
        while len(slots) < n:
            e, slot = self.lru.popitem(last=False)
            self.prefetched.discard(e)
            slots.append(slot)
        return slots

    def forward(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """x ``[T, H]``, weights / experts ``[T, K]`` -> ``[T, H]``: the resident module's result (see the module
        doc)."""
        store = self.store
        store.stats.calls += 1
        flat = experts.reshape(-1).cpu()  # host sync: the copies depend on the ids
        unique_t = torch.unique(flat)  # ascending
        unique = unique_t.tolist()
        store.stage(self, unique)
        rank = torch.zeros(self.num_experts, dtype=torch.int64)
        rank[unique_t] = torch.arange(len(unique), dtype=torch.int64)
        local = rank[flat].view(experts.shape).to(x.device)
        # the whole [E, ...] scratch (rows past len(unique) are never read): the op sees the resident layer's E, so
        # an implementation that tiles by T * K / E (anna-xpu-kernels' BLOCK_M) tiles, and rounds, the same way
        out = self.ops.get("moe_experts")(x, store.scratch_gate_up, store.scratch_down, weights, local,
                                          self.activation)
        store.after(self, unique_t, experts.shape[0])
        return out


def _host(t: torch.Tensor, accel: Accelerator) -> torch.Tensor:
    if t.device.type == "cpu" and (t.is_pinned() or accel.device.type == "cpu"):
        return t
    host = accel.host_empty(tuple(t.shape), t.dtype)
    host.copy_(t)
    return host


# -- planning and applying --------------------------------------------------------------------------


def moe_layers(model: nn.Module) -> list[tuple[str, RoutedExpertsModule]]:
    """``(module name, module)`` of every routed-experts module of ``model``, in forward (module) order: the
    MoE-layer index is the position in this list."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, RoutedExpertsModule)]


def _nbytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def model_sizes(model: nn.Module) -> ModelSizes | None:
    """The sizes :mod:`anna_core.engine.offload` decides by (works on a meta-built model); None without MoE
    layers."""
    layers = moe_layers(model)
    if not layers:
        return None
    experts = layers[0][1]
    layer_bytes = _nbytes(experts)
    return ModelSizes(total=_nbytes(model), expert_layer=layer_bytes, expert=layer_bytes // experts.num_experts,
                      num_moe_layers=len(layers), num_experts=experts.num_experts)


@attrs.frozen
class OffloadPlan:
    """Which MoE layers to offload (decided on the meta-built model, before any weight loads).

    Attributes:
        config: the flags; offloaded: ``(module name, MoE-layer index)`` of the offloaded layers;
        resident: the resident MoE-layer indices; device_bytes: the weights' device bytes once offloaded.
    """

    config: OffloadConfig
    offloaded: tuple[tuple[str, int], ...]
    resident: tuple[int, ...]
    device_bytes: int

    @property
    def host_prefixes(self) -> tuple[str, ...]:
        """Parameter-name prefixes whose tensors load into host memory (``load_safetensors``'s ``host``)."""
        return tuple(f"{name}." for name, _ in self.offloaded)


def plan_offload(model: nn.Module, config: OffloadConfig, *, device: torch.device,
                 max_device_bytes: int | None = None) -> OffloadPlan | None:
    """Decide the offload of a meta-built model (None: keep every expert on the device).

    ``max_device_bytes`` is what the server may use (``--max-device-memory-gib``); without it ``auto`` compares
    with the device's free memory (on an accelerator; on the CPU, whose memory is the host's, it keeps the
    experts in place).

    Raises:
        OffloadConfigError: ``experts`` on a model without MoE layers, or a config the model contradicts
            (:meth:`OffloadConfig.check`).
    """
    if config.mode == "none":
        return None
    sizes = model_sizes(model)
    if sizes is None:
        if config.mode == "experts":
            raise OffloadConfigError("--offload-mode experts: the model has no routed-experts (MoE) layers")
        return None
    config.check(sizes.num_moe_layers, sizes.num_experts)
    budget = max_device_bytes
    if budget is None and accelerator(device).separate_host_memory:  # on the CPU, host memory is the device's
        budget = memory_stats(device).get("free_bytes")
    if not should_offload(config, sizes, budget):
        return None
    from anna_core.engine.offload import offload_device_bytes

    resident = plan_resident_layers(config, sizes, budget, sizes.num_experts)
    layers = moe_layers(model)
    offloaded = tuple((name, i) for i, (name, _) in enumerate(layers) if i not in set(resident))
    if not offloaded:
        log.info("expert offload: every MoE layer is resident, nothing to offload")
        return None
    dev_bytes = offload_device_bytes(sizes, len(layers) - len(offloaded), config.cached_experts_per_layer,
                                     sizes.num_experts)
    log.info("expert offload (%s): %d of %d MoE layers offloaded to host memory (%.1f GiB there), %d cached experts "
             "per layer; weights on the device %.1f GiB (of %.1f GiB)", config.mode, len(offloaded),
             len(layers), len(offloaded) * sizes.expert_layer / 2**30, config.cached_experts_per_layer,
             dev_bytes / 2**30, sizes.total / 2**30)
    return OffloadPlan(config=config, offloaded=offloaded, resident=tuple(resident), device_bytes=dev_bytes)


def apply_offload(model: nn.Module, plan: OffloadPlan, device: torch.device) -> ExpertStore:
    """Swap each planned layer's experts module (weights loaded, fused, in host memory) for an
    :class:`OffloadedExperts`, and mark the model not graph-capturable (its offloaded layers read ids on the
    host). Returns the shared store."""
    device = torch.device(device)
    accel = accelerator(device)
    by_name = dict(moe_layers(model))
    first = by_name[plan.offloaded[0][0]]
    store = ExpertStore(device=device, dtype=first.gate_up_proj.dtype, num_experts=first.num_experts,
                        top_k=first.top_k, gate_up_shape=tuple(first.gate_up_proj.shape[1:]),
                        down_shape=tuple(first.down_proj.shape[1:]),
                        cached_per_layer=plan.config.cached_experts_per_layer, prefetch=plan.config.prefetch,
                        accel=accel, resident_layers=plan.resident)
    for name, index in plan.offloaded:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, OffloadedExperts(by_name[name], store, index))
    model.capabilities = attrs.evolve(model.capabilities, graph_capture=False)
    return store
