"""Expert offload settings and the decisions made from them (pure Python, no torch).

A MoE model's routed experts are most of its weights (32 of the 35 billion parameters of Qwen3.5-35B-A3B)
but a decode step reads only ``K`` of each layer's ``E`` experts. Offloading keeps the experts of some MoE
layers in pinned host memory and copies the experts a step chooses to the device
(:mod:`anna_core.layers.expert_offload`), so a model larger than the device memory runs.

* ``mode``: ``"none"`` never offloads; ``"experts"`` always offloads the experts of every MoE layer not in
  ``resident_layers``; ``"auto"`` offloads when the weights plus :data:`MIN_CACHE_BYTES` of KV cache do not
  fit the memory the server may use (``--max-device-memory-gib``, else the device's free memory), keeping
  as many leading MoE layers resident as fit (:func:`plan_resident_layers`) unless ``resident_layers`` says
  which.
* ``resident_layers``: MoE-layer indices (the position among the model's MoE blocks, in forward order; the
  decoder-layer index when every layer is MoE, as in Qwen3.5 MoE) whose experts stay on the device. The
  ``--resident-expert-layers N`` flag (the first ``N``) and ``--resident-expert-layer-indices LIST`` both
  set it (:meth:`OffloadConfig.from_flags`).
* ``cached_experts_per_layer``: ``C``, the device LRU of each offloaded layer (0: every chosen expert is
  copied each step).
* ``prefetch``: while a layer computes, copy the next offloaded layer's likely experts into its LRU.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from anna_core.errors import AnnaError


class OffloadConfigError(AnnaError, ValueError):
    """An offload setting out of range or contradicting the model (a ``ValueError`` and a user-facing
    :class:`~anna_core.errors.AnnaError`: the CLI prints its message)."""


OFFLOAD_MODES = ("auto", "none", "experts")
MIN_CACHE_BYTES = 1 << 30
"""What ``auto`` leaves for the KV cache and recurrent state when it decides whether the weights fit (1 GiB)."""


def parse_layer_indices(text: str) -> tuple[int, ...]:
    """``"0,1,4-6"`` -> ``(0, 1, 4, 5, 6)`` (sorted, distinct).

    Raises:
        ValueError: an entry that is not an integer or an ``a-b`` range with ``a <= b``.
    """
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise OffloadConfigError(f"resident expert layer indices: {part!r} is not an index or an a-b range") from None
        if a < 0 or b < a:
            raise OffloadConfigError(f"resident expert layer indices: {part!r} is not an index or an a-b range")
        out.update(range(a, b + 1))
    return tuple(sorted(out))


@attrs.frozen
class OffloadConfig:
    """How a MoE model's experts are placed (see the module doc).

    Attributes:
        mode: ``"auto"``, ``"none"`` or ``"experts"``.
        resident_layers: MoE-layer indices whose experts stay on the device; None: not given (``auto``
            chooses, ``experts`` keeps none).
        cached_experts_per_layer: ``C >= 0``, device LRU slots per offloaded layer.
        prefetch: prefetch the next offloaded layer's likely experts (needs ``C > 0``).

    Raises:
        ValueError: unknown mode, negative cache size, negative or repeated indices.
    """

    mode: str = "auto"
    resident_layers: tuple[int, ...] | None = attrs.field(
        default=None, converter=lambda v: None if v is None else tuple(v))
    cached_experts_per_layer: int = 0
    prefetch: bool = True

    def __attrs_post_init__(self) -> None:
        if self.mode not in OFFLOAD_MODES:
            raise OffloadConfigError(f"offload mode {self.mode!r} is not one of {', '.join(OFFLOAD_MODES)}")
        if self.cached_experts_per_layer < 0:
            raise OffloadConfigError(f"cached experts per layer must not be negative, got {self.cached_experts_per_layer}")
        layers = self.resident_layers
        if layers is not None and (any(i < 0 for i in layers) or len(set(layers)) != len(layers)):
            raise OffloadConfigError(f"resident expert layer indices must be distinct and non-negative, got {list(layers)}")

    @classmethod
    def from_flags(cls, offload_mode: str | None = None, resident_expert_layers: int | None = None,
                   resident_expert_layer_indices: str | Sequence[int] | None = None,
                   cached_experts_per_layer: int | None = None, expert_prefetch: bool | None = None) -> OffloadConfig:
        """The config of the ``--offload-mode``, ``--resident-expert-layers N``, ``--resident-expert-layer-indices
        LIST`` (``"0,1,4-6"`` or a sequence), ``--cached-experts-per-layer`` and ``--(no-)expert-prefetch`` flags
        (None: not given). ``N`` and ``LIST`` set one setting, the resident layers: ``N`` means ``0 .. N-1``.

        Raises:
            ValueError: both ``N`` and ``LIST`` given, a negative ``N``, or a bad value (see the class).
        """
        if resident_expert_layers is not None and resident_expert_layer_indices is not None:
            raise OffloadConfigError("--resident-expert-layers and --resident-expert-layer-indices set the same thing "
                             "(the MoE layers whose experts stay on the device): give one of them")
        resident: tuple[int, ...] | None = None
        if resident_expert_layers is not None:
            if resident_expert_layers < 0:
                raise OffloadConfigError(f"--resident-expert-layers must not be negative, got {resident_expert_layers}")
            resident = tuple(range(resident_expert_layers))
        elif isinstance(resident_expert_layer_indices, str):
            resident = parse_layer_indices(resident_expert_layer_indices)
        elif resident_expert_layer_indices is not None:
            resident = tuple(sorted(int(i) for i in resident_expert_layer_indices))
        return cls(mode=offload_mode or "auto", resident_layers=resident,
                   cached_experts_per_layer=cached_experts_per_layer or 0,
                   prefetch=True if expert_prefetch is None else expert_prefetch)

    def check(self, num_moe_layers: int, num_experts: int) -> None:
        """Check the config against a model of ``num_moe_layers`` MoE layers of ``num_experts`` experts each.

        Raises:
            ValueError: a resident layer index out of range, or more cached experts than the layer has.
        """
        bad = [i for i in self.resident_layers or () if i >= num_moe_layers]
        if bad:
            shown = str(bad) if len(bad) <= 6 else f"[{bad[0]}, ..., {bad[-1]}]"
            raise OffloadConfigError(f"resident expert layer indices {shown} are out of range: the model has "
                             f"{num_moe_layers} MoE layers (indices 0..{num_moe_layers - 1})")
        if self.cached_experts_per_layer > num_experts:
            raise OffloadConfigError(f"--cached-experts-per-layer {self.cached_experts_per_layer} is more than the "
                             f"{num_experts} experts of a layer")


@attrs.frozen
class ModelSizes:
    """Device bytes of a MoE model's parts, for the offload decision.

    Attributes:
        total: every weight; expert_layer: one MoE layer's routed experts; expert: one expert of one layer;
        num_moe_layers, num_experts: the geometry.
    """

    total: int
    expert_layer: int
    expert: int
    num_moe_layers: int
    num_experts: int


def offload_device_bytes(sizes: ModelSizes, resident: int, cached: int, scratch_experts: int) -> int:
    """Device bytes of the weights with ``resident`` MoE layers resident and the others offloaded, each with
    ``cached`` LRU slots, plus the shared scratch of ``scratch_experts`` experts."""
    offloaded = sizes.num_moe_layers - resident
    return (sizes.total - offloaded * sizes.expert_layer + offloaded * cached * sizes.expert
            + (scratch_experts * sizes.expert if offloaded else 0))


def should_offload(config: OffloadConfig, sizes: ModelSizes, budget_bytes: int | None) -> bool:
    """Whether to offload: ``experts`` always, ``none`` never, ``auto`` when ``budget_bytes`` (what the server
    may use; None: unknown, then no) cannot hold the weights and :data:`MIN_CACHE_BYTES`."""
    if config.mode != "auto":
        return config.mode == "experts"
    return budget_bytes is not None and sizes.total + MIN_CACHE_BYTES > budget_bytes


def plan_resident_layers(config: OffloadConfig, sizes: ModelSizes, budget_bytes: int | None,
                         scratch_experts: int) -> tuple[int, ...]:
    """The resident MoE layers of an offloaded model: ``config.resident_layers`` when given; in ``auto`` the
    most leading layers that leave :data:`MIN_CACHE_BYTES` of ``budget_bytes`` free beside the offloaded
    layers' caches and the scratch (none when even that does not fit); in ``experts`` none."""
    if config.resident_layers is not None:
        return config.resident_layers
    if config.mode != "auto" or budget_bytes is None:
        return ()
    n = 0
    while (n < sizes.num_moe_layers and offload_device_bytes(sizes, n + 1, config.cached_experts_per_layer,
                                                             scratch_experts) + MIN_CACHE_BYTES <= budget_bytes):
        n += 1
    return tuple(range(min(n, sizes.num_moe_layers - 1)))
