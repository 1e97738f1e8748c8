"""Loading a pre-quantized safetensors checkpoint (:mod:`anna_core.weights.prequant`) into a meta-built model.

A family calls :func:`load_prequantized` before :func:`~anna_core.weights.safetensors_loader.load_safetensors`:
it repacks every quantized linear of the checkpoint into the ``wq_linear`` layouts (or reads them from the
layout cache, :mod:`anna_core.weights.layout_cache`), swaps the model's ``nn.Linear`` for a
:class:`~anna_core.layers.wq_linear.WQLinear` holding them, and returns the family's name map without the
quantized tensors, so ``load_safetensors`` assigns the rest (biases, norms, embeddings, dense layers) and still
reports every missing or unexpected tensor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import torch
from safetensors import SafetensorError
from torch import nn

from anna_core.errors import ModelLoadError
from anna_core.weights.assign import NameMap
from anna_core.weights.gpu_quant import QuantizedWeight
from anna_core.weights.layout_cache import LayoutCache, key_material
from anna_core.weights.prequant import (
    SUFFIXES,
    PrequantConfig,
    quantized_prefixes,
    repack,
    repacked_layout,
    source_tensor,
)
from anna_core.weights.safetensors_loader import checkpoint_files, iter_checkpoint_tensors

log = logging.getLogger("anna.weights")

CACHE_STATES = ("hit", "built", "unwritable", "off")
"""How :func:`read_prequantized` got the weights: from the cache, repacked and stored, repacked but the cache
could not be written (or read its key), repacked with the cache off."""


@attrs.frozen
class PrequantLoad:
    """What :func:`load_prequantized` did.

    Attributes:
        config: the checkpoint's format.
        layers: how many linear layers were loaded quantized (or dequantized, with ``dense``).
        cache: one of :data:`CACHE_STATES`.
        name_map: the family's name map, returning None for the quantized layers' tensors.
    """

    config: PrequantConfig
    layers: int
    cache: str
    name_map: NameMap


def _targets(files: Mapping[str, Path], cfg: PrequantConfig, name_map: NameMap) -> dict[str, str]:
    """``{checkpoint prefix: module name}`` of the quantized linears the family maps (others are ignored)."""
    out = {}
    for prefix in quantized_prefixes(list(files), cfg):
        target = name_map(f"{prefix}.weight")
        if target is not None:
            if not target.endswith(".weight"):
                raise ModelLoadError(f"{prefix}: quantized tensors for {target!r}, which is not a linear weight")
            out[prefix] = target[: -len(".weight")]
    return out


def _expected_layouts(files: Mapping[str, Path], prefixes: list[str], cfg: PrequantConfig,
                      dtype: torch.dtype) -> dict[str, dict[str, tuple[tuple[int, ...], torch.dtype]]] | None:
    """``{prefix: repacked layout}`` (:func:`~anna_core.weights.prequant.repacked_layout`) from the checkpoint's
    headers, or None when a linear's source tensor is missing or not 2-D (the repack then reports it)."""
    from safetensors import safe_open

    suffix = source_tensor(cfg)
    names = {f"{p}.{suffix}": p for p in prefixes}
    if not set(names) <= set(files):
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(files[name], []).append(name)
    for path, file_names in by_file.items():
        with safe_open(str(path), framework="pt", device="cpu") as f:
            shapes.update({names[n]: tuple(f.get_slice(n).get_shape()) for n in file_names})
    try:
        return {p: repacked_layout(shapes[p], cfg, dtype) for p in prefixes}
    except ModelLoadError:
        return None


def read_prequantized(files: Mapping[str, Path], cfg: PrequantConfig, *, device_kind: str, dtype: torch.dtype,
                      cache: LayoutCache | None) -> tuple[dict[str, QuantizedWeight], str]:
    """Every quantized linear of the checkpoint whose tensors are ``files`` (``{name: file}``), repacked
    (``{checkpoint prefix: weight}`` on the CPU, in file order), and how they were got (:data:`CACHE_STATES`).
    ``device_kind`` (``"cuda"``, ``"xpu"``, ``"cpu"``) and ``dtype`` (the serving dtype) key the cache entry.

    Raises:
        ModelLoadError: unreadable or mis-shaped tensors (see :func:`~anna_core.weights.prequant.repack`).
    """
    prefixes = quantized_prefixes(list(files), cfg)
    material = None
    expected = None
    if cache is not None:
        try:
            material = key_material(set(files.values()), cfg, device_kind, dtype)
            expected = _expected_layouts(files, prefixes, cfg, dtype)
        except (OSError, ValueError, SafetensorError) as exc:
            log.warning("layout cache: cannot key the checkpoint (%s); repacking in memory", exc)
            material = None
        if material is not None and expected is not None:
            hit = cache.load(material, expected)
            if hit is not None:
                log.info("layout cache: %d %s layers read from %s", len(hit), cfg.kind, cache.entry_dir(material))
                return hit, "hit"
    weights: dict[str, QuantizedWeight] = {}
    for prefix in prefixes:
        names = [f"{prefix}.{s}" for s in SUFFIXES[cfg.layout] if f"{prefix}.{s}" in files]
        tensors = {name[len(prefix) + 1:]: t for name, t in iter_checkpoint_tensors(dict(files), names)}
        weights[prefix] = repack(prefix, tensors, cfg, dtype)
    if material is None:
        return weights, "unwritable" if cache is not None else "off"
    return weights, "built" if cache.store(material, weights, cfg.kind) is not None else "unwritable"


def install(model: nn.Module, weights: Mapping[str, QuantizedWeight], modules: Mapping[str, str], ops: Any, *,
            device: torch.device, kind: str | None = None,
            unsupported: Callable[[str], str | None] = lambda name: None) -> None:
    """Replace the ``nn.Linear`` named ``modules[prefix]`` by a WQLinear of ``weights[prefix]`` on ``device``
    (``kind``: its :attr:`~anna_core.layers.wq_linear.WQLinear.kind`). A layer's bias stays the (meta) parameter
    the family built, for the checkpoint loader to assign.

    ``unsupported(name)`` is the family's word on a module it cannot serve quantized (None: it can; else why
    not, e.g. ``"MoE routed experts"``).

    Raises:
        ModelLoadError: a module that is missing, not an ``nn.Linear`` or ``unsupported``, or whose shape differs
            from the quantized weight's.
    """
    from anna_core.layers.wq_linear import WQLinear

    for prefix, name in modules.items():
        why = unsupported(name)
        if why is not None:
            raise ModelLoadError(f"{prefix}: pre-quantized {why} are not supported yet (quantized tensors for {name!r})")
        parent_name, _, attr = name.rpartition(".")
        try:
            parent = model.get_submodule(parent_name) if parent_name else model
            child = getattr(parent, attr)
        except AttributeError:
            child = None
        if not isinstance(child, nn.Linear):
            raise ModelLoadError(f"{prefix}: quantized tensors for {name!r}, which is not a linear layer of the "
                                 f"model ({type(child).__name__}; pre-quantized MoE experts are not supported)")
        w = weights[prefix]
        if w.shape != (child.out_features, child.in_features):
            raise ModelLoadError(f"{prefix}: quantized weight of shape {list(w.shape)}, the model's {name} is "
                                 f"[{child.out_features}, {child.in_features}]")
        layer = WQLinear(w.to(device), child.bias, ops, kind=kind)
        setattr(parent, attr, layer)


def _zero_biases(model: nn.Module, files: Mapping[str, Path], modules: Mapping[str, str]) -> set[str]:
    """The ``<prefix>.bias`` tensors of quantized layers the model builds without a bias, when they are all zeros
    (GPTQ exporters write a zero bias for every layer): tensors to ignore.

    Raises:
        ModelLoadError: such a bias that is not zero (the model has no place for it).
    """
    found = {f"{p}.bias": name for p, name in modules.items()
             if f"{p}.bias" in files and model.get_submodule(name).bias is None}
    for tensor_name, tensor in iter_checkpoint_tensors(dict(files), list(found)):
        if torch.count_nonzero(tensor):
            raise ModelLoadError(f"{tensor_name}: a non-zero bias for {found[tensor_name]!r}, which has no bias")
    return set(found)


def _check_no_unscaled_fp8(files: Mapping[str, Path], quantized: set[str]) -> None:
    """Raises ModelLoadError for a float8 tensor outside the quantized layers (a ``.weight`` without its
    ``weight_scale_inv`` would otherwise be cast to the serving dtype without its scale)."""
    from safetensors import safe_open

    by_file: dict[Path, list[str]] = {}
    for name, path in files.items():
        if name.rpartition(".")[0] not in quantized:
            by_file.setdefault(path, []).append(name)
    bad = []
    for path, names in by_file.items():
        with safe_open(str(path), framework="pt", device="cpu") as f:
            bad += [n for n in names if f.get_slice(n).get_dtype().startswith("F8")]
    if bad:
        raise ModelLoadError(f"fp8 checkpoint: float8 tensors without a weight_scale_inv: {sorted(bad)[:8]}")


def load_prequantized(model: nn.Module, root: str | Path, name_map: NameMap, cfg: PrequantConfig, ops: Any, *,
                      device: torch.device, dtype: torch.dtype, cache: LayoutCache | None = None,
                      unsupported: Callable[[str], str | None] = lambda name: None) -> PrequantLoad:
    """Load the quantized linears of the checkpoint in ``root`` into ``model`` (meta-built) without dequantizing
    (:func:`~anna_core.layers.wq_linear.dequantize_linears` afterwards dequantizes them, for ``--weight-quant none``).

    Args:
        model, name_map: the family's model and checkpoint name -> parameter name map.
        cfg: the checkpoint's format (:func:`~anna_core.weights.prequant.read_quantization_config`).
        ops: the model's op table (WQLinear's ``wq_linear`` ops).
        device, dtype: where and in which serving dtype (int4 scales and zeros) to serve.
        cache: the layout cache, or None to repack in memory every load.
        unsupported: see :func:`install`.

    Raises:
        ModelLoadError: a quantized layer the model does not hold as a linear or the family refuses, mis-shaped or unreadable tensors, a
            non-zero bias for a layer without one (a zero one, as GPTQ exporters write, is ignored), an fp8 tensor
            without its scales.
    """
    files = checkpoint_files(root)
    modules = _targets(files, cfg, name_map)
    weights, state = read_prequantized(files, cfg, device_kind=torch.device(device).type, dtype=dtype, cache=cache)
    install(model, weights, modules, ops, device=torch.device(device), kind=cfg.kind, unsupported=unsupported)
    skipped = {f"{p}.{s}" for p in modules for s in SUFFIXES[cfg.layout]}
    skipped |= _zero_biases(model, files, modules)
    if cfg.layout == "fp8":
        _check_no_unscaled_fp8(files, set(modules))
    log.info("%s checkpoint: %d linear layers as %s (layout cache: %s)", cfg.method, len(modules), cfg.kind, state)

    def without_quantized(name: str) -> str | None:
        return None if name in skipped else name_map(name)

    return PrequantLoad(config=cfg, layers=len(modules), cache=state, name_map=without_quantized)


def build_cache_entry(root: str | Path, cfg: PrequantConfig, *, device_kind: str, dtype: torch.dtype,
                      cache: LayoutCache) -> tuple[Path, str, int]:
    """Make sure the layout cache holds the entry of the checkpoint in ``root`` for ``device_kind`` and ``dtype``
    (``anna quant-cache build``): ``(entry folder, state, layers)``, state as :data:`CACHE_STATES`.

    Raises:
        ModelLoadError: unreadable or mis-shaped checkpoint tensors.
    """
    files = checkpoint_files(root)
    weights, state = read_prequantized(files, cfg, device_kind=device_kind, dtype=dtype, cache=cache)
    return cache.entry_dir(key_material(set(files.values()), cfg, device_kind, dtype)), state, len(weights)


def checkpoint_prequant(config: Mapping[str, Any], weight_quant: str, load_format: str) -> PrequantConfig | None:
    """A family loader's first step: the checkpoint's pre-quantized format, or None (no ``quantization_config``,
    or dummy weights, which ignore it).

    Raises:
        UnsupportedQuantizationError: an unsupported ``quantization_config`` (naming the method).
        ModelLoadError: ``--weight-quant`` int4 / int8 / fp8 of a pre-quantized checkpoint (it keeps its own;
            ``auto`` serves it as it is, ``none`` dequantizes it).
    """
    from anna_core.weights.gpu_quant import SCHEMES
    from anna_core.weights.prequant import read_quantization_config

    if load_format == "dummy":
        return None
    prequant = read_quantization_config(config)
    if prequant is not None and weight_quant in SCHEMES:
        raise ModelLoadError(f"--weight-quant {weight_quant}: this checkpoint is already quantized ({prequant.method}); "
                             "--weight-quant auto serves it as it is, none dequantizes it")
    return prequant


def check_prequant_device(prequant: PrequantConfig | None, weight_quant: str, device: torch.device) -> None:
    """Refuse a pre-quantized FP8 checkpoint served as FP8 on an accelerator without FP8 units (CUDA compute
    capability below 8.9, Intel XPUs: :attr:`~anna_core.device.Accelerator.fp8_units`), where the ``wq_linear``
    kernels cannot convert e4m3 (a Triton compile error at the first step, or a float32 dequantization of every
    weight at every call). The CPU serves it through the reference ops (dequantized per call); ``--weight-quant
    none`` dequantizes it once at load to the serving dtype on any device (twice the weight memory).

    Raises:
        ModelLoadError: an fp8 checkpoint under ``weight_quant`` other than ``"none"`` on such a device.
    """
    from anna_core.device import accelerator

    device = torch.device(device)
    if prequant is None or prequant.layout != "fp8" or weight_quant == "none" or device.type == "cpu":
        return
    if not accelerator(device).fp8_units:
        raise ModelLoadError(f"this checkpoint is FP8 ({prequant.method}, 128x128 block scales) and {device} has no "
                             "FP8 units (CUDA compute capability 8.9 or newer): serve it with --weight-quant none, "
                             "which dequantizes it at load (twice the weight memory), or load an int4 / bf16 checkpoint")


def load_checkpoint(model: nn.Module, root: str | Path, name_map: NameMap, prequant: PrequantConfig | None, ops: Any,
                    *, device: torch.device, dtype: torch.dtype, weight_quant: str = "auto", layout_cache: bool = True,
                    host: tuple[str, ...] = (), pin: bool = True,
                    unsupported: Callable[[str], str | None] = lambda name: None, shards: Any = None) -> None:
    """:func:`~anna_core.weights.safetensors_loader.load_safetensors`, preceded for a pre-quantized checkpoint
    (``prequant`` from :func:`checkpoint_prequant`) by :func:`load_prequantized` (through the layout cache under
    ``$ANNA_CACHE_DIR`` unless ``layout_cache`` is False) and followed, for ``weight_quant == "none"``, by the
    dequantization of its quantized layers to ``dtype`` (``unsupported``: see :func:`install`). ``shards`` (a
    tensor-parallel rank's :class:`~anna_core.distributed.sharding.ShardReader`) reads that rank's slices.

    Raises:
        ModelLoadError: see :func:`load_prequantized` and ``load_safetensors``; a pre-quantized checkpoint under
            tensor parallelism (not supported yet); an FP8 one on a device without FP8 units
            (:func:`check_prequant_device`).
    """
    from anna_core.layers.wq_linear import dequantize_linears
    from anna_core.weights.safetensors_loader import load_safetensors

    check_prequant_device(prequant, weight_quant, device)
    if prequant is not None and shards is not None:
        raise ModelLoadError(f"tensor parallelism of a pre-quantized checkpoint ({prequant.method}) is not supported "
                             "yet: serve it at --tensor-parallel-size 1")
    if prequant is not None:
        name_map = load_prequantized(model, root, name_map, prequant, ops, device=device, dtype=dtype,
                                     cache=LayoutCache() if layout_cache else None, unsupported=unsupported).name_map
    load_safetensors(model, root, name_map, device=device, host=host, pin=pin, shards=shards)
    if prequant is not None and weight_quant == "none":
        log.info("--weight-quant none: %d %s layers dequantized to %s", dequantize_linears(model, dtype),
                 prequant.kind, dtype)
