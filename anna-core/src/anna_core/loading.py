"""``load_model``: from a path to a :class:`~anna_core.model.LoadedModel` through the plugins.

inspect the folder -> pick the family among the installed plugins -> resolve its lazy loader ->
call it with the device, dtype and the kernel registry built from the same plugins.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from anna_core.device import resolve_device, resolve_dtype
from anna_core.engine.offload import OffloadConfig
from anna_core.errors import AnnaError, ModelLoadError, UnsupportedModelError
from anna_core.kernels.registry import KernelRegistry
from anna_core.layers.wq_experts import EXPERT_QUANT_MODES
from anna_core.model import LoadedModel
from anna_core.model_dir import ModelSource, inspect_model_dir, select_family
from anna_core.plugins import model_families
from anna_core.registry import resolve

log = logging.getLogger("anna.loading")

LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")
WEIGHT_QUANT_MODES = ("auto", "none", "int4", "int8", "fp8")
"""``--weight-quant``: ``auto`` keeps a GGUF's own quantization on the CPU (where the family supports it;
dequantized elsewhere) and, on an accelerator, lets the family promote a model whose dense weights would not
fit the device to int4 (Qwen3.5); ``none`` dequantizes, ``int4`` (group 128, asymmetric) / ``int8`` (per
channel) / ``fp8`` (e4m3, 128x128 block scales) quantize a safetensors checkpoint's projections at load
(anna-llama on the CPU: int4 / int8; Qwen3.5 on any device: :mod:`anna_core.weights.gpu_quant`)."""


def _checkpoint_dtype(source: ModelSource) -> str | None:
    config = source.config
    for cfg in (config, config.get("text_config") or {}):
        for key in ("dtype", "torch_dtype"):
            if isinstance(cfg.get(key), str):
                return cfg[key]
    return None


def load_model(model: str | Path, *, device: str = "auto", dtype: Any = "auto", load_format: str = "auto",
               gguf_file: str | None = None, chat_template: str | None = None, pm: Any = None,
               disable_kernels: Sequence[str] = (), offload: OffloadConfig | None = None,
               max_device_memory_gib: float | None = None, weight_quant: str = "auto",
               offload_vision: bool = False, family_options: Mapping[str, Any] | None = None,
               parallel: Any = None, expert_quant: str = "none") -> LoadedModel:
    """Load the model at ``model`` (a folder or a ``.gguf`` file).

    Args:
        model: model folder or GGUF file.
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"xpu"`` (or ``"cuda:1"``...).
        dtype: ``"auto"``, ``"bf16"``, ``"fp16"``, ``"fp32"`` or a ``torch.dtype``.
        load_format: ``"auto"``, ``"safetensors"``, ``"gguf"`` or ``"dummy"`` (random weights).
        gguf_file: which GGUF file of the folder to load.
        chat_template: a Jinja template overriding the checkpoint's.
        pm: plugin manager (default: the process-wide one).
        disable_kernels: kernel implementations not to use, ``"op:name"`` or ``"name"`` (see
            :class:`~anna_core.kernels.KernelRegistry`), e.g. to work around a faulty kernel.
        offload: where a MoE model's routed experts go (:mod:`anna_core.engine.offload`; None: nowhere but the
            device). Families that declare ``ModelFamilySpec.expert_offload`` get it; ``auto`` leaves other
            families' models resident, ``experts`` is refused for them.
        max_device_memory_gib: what the server may use on the device (``EngineConfig.max_device_memory_gib``):
            ``auto`` offloads when the weights do not fit it.
        weight_quant: ``"auto"`` (the family's default: a GGUF keeps its quantized matrices on the CPU
            where the family supports it), ``"none"`` (dequantize), ``"int4"`` / ``"int8"``
            (:data:`WEIGHT_QUANT_MODES`); passed to the family's loader as
            ``weight_quant`` unless ``"auto"``.
        offload_vision: keep the model's vision tower on the CPU (``--offload-vision``; families that declare
            ``ModelFamilySpec.vision_offload``, passed to the loader as ``offload_vision=True``).
        family_options: keyword options for the family's loader, each one the family declares in
            ``ModelFamilySpec.load_options`` (e.g. ``{"asr_max_inference_batch_size": 8}`` for Qwen3-ASR).
        parallel: load this rank's shard for a tensor-parallel group (an :class:`anna_core.distributed.ParallelState`
            of several ranks; families that declare ``ModelFamilySpec.tensor_parallel``); the result's ``parallel``
            is set. None: the whole model.
        expert_quant: ``"none"`` (a MoE model's routed experts stay in ``dtype``) or ``"int4"`` / ``"int8"`` /
            ``"fp8"`` (``--expert-quant``: quantized at load, :mod:`anna_core.layers.wq_experts`); passed to the
            loader as the load option ``expert_quant`` unless ``"none"``, so a family must declare it.

    Raises:
        ModelLoadError: missing / broken checkpoint, or the family's package cannot be imported.
        UnsupportedModelError: no installed family serves the checkpoint, ``--offload-mode experts`` for a
            family that does not declare expert offload, ``offload_vision`` for one that does not declare
            vision offload, a ``family_options`` key the family does not declare (``expert_quant`` too), or
            ``parallel`` for a family that does not declare tensor parallelism.
        AnnaError: bad device, dtype, load format, ``expert_quant`` or ``disable_kernels`` entry, or an offload
            setting the model contradicts (e.g. a resident layer index out of range).
    """
    if load_format not in LOAD_FORMATS:
        raise AnnaError(f"unknown load format {load_format!r}; use one of {', '.join(LOAD_FORMATS)}")
    if weight_quant not in WEIGHT_QUANT_MODES:
        raise AnnaError(f"unknown weight quantization {weight_quant!r}; use one of {', '.join(WEIGHT_QUANT_MODES)}")
    if expert_quant not in EXPERT_QUANT_MODES:
        raise AnnaError(f"unknown expert quantization {expert_quant!r}; use one of {', '.join(EXPERT_QUANT_MODES)}")
    if expert_quant != "none":
        family_options = {**(family_options or {}), "expert_quant": expert_quant}
    source = inspect_model_dir(model, gguf_file=gguf_file)
    family = select_family(source, model_families(pm))
    try:
        loader = resolve(family.loader)
    except (ImportError, AttributeError) as exc:
        raise ModelLoadError(f"cannot import the {family.name!r} loader {family.loader!r} "
                             f"(from {family.distribution or 'a plugin'}): {exc}") from exc
    try:
        kernels = KernelRegistry.from_plugins(pm, disabled=disable_kernels)
    except ValueError as exc:
        raise AnnaError(str(exc)) from exc
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev, _checkpoint_dtype(source))
    log.info("loading %s as family %s on %s in %s", source.root, family.name, dev, dt)
    extra: dict[str, Any] = {} if weight_quant == "auto" else {"weight_quant": weight_quant}
    if offload is not None and offload.mode != "none":
        if family.expert_offload:
            if max_device_memory_gib is not None and not 0 < max_device_memory_gib < float("inf"):
                raise AnnaError(f"max_device_memory_gib must be a positive finite number, got {max_device_memory_gib}")
            max_bytes = None if max_device_memory_gib is None else int(max_device_memory_gib * (1 << 30))
            extra.update(offload=offload, max_device_bytes=max_bytes)
        elif offload.mode == "experts":
            raise UnsupportedModelError(f"--offload-mode experts: the {family.name!r} family "
                                        f"({family.distribution or 'a plugin'}) does not declare expert offload")
    elif family.expert_offload and max_device_memory_gib is not None and 0 < max_device_memory_gib < float("inf"):
        extra["max_device_bytes"] = int(max_device_memory_gib * (1 << 30))  # what --weight-quant auto may weigh
    if offload_vision:
        if not family.vision_offload:
            raise UnsupportedModelError(f"--offload-vision: the {family.name!r} family "
                                        f"({family.distribution or 'a plugin'}) does not declare vision offload")
        extra["offload_vision"] = True
    undeclared = sorted(set(family_options or {}) - set(family.load_options))
    if undeclared:
        raise UnsupportedModelError(f"the {family.name!r} family ({family.distribution or 'a plugin'}) takes no load "
                                    f"option {undeclared}; its options: {list(family.load_options) or 'none'}")
    extra.update(family_options or {})
    sharded = parallel is not None and parallel.is_parallel
    if sharded:
        if not family.tensor_parallel:
            raise UnsupportedModelError(f"--tensor-parallel-size {parallel.world_size}: the {family.name!r} family "
                                        f"({family.distribution or 'a plugin'}) does not declare tensor parallelism")
        extra["parallel"] = parallel
    loaded = loader(source, device=dev, dtype=dt, load_format=load_format,
                    kernels=kernels, chat_template=chat_template, **extra)
    if sharded:
        loaded.parallel = parallel
    return loaded
