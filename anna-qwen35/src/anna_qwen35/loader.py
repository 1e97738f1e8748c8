"""The Qwen3.5 family loader: ``config.json`` + safetensors, a llama.cpp GGUF (``qwen35`` / ``qwen35moe``),
or dummy weights -> :class:`LoadedModel`."""

from __future__ import annotations

import logging
from typing import Any

import torch
from anna_core.distributed.layers import parallelize
from anna_core.distributed.sharding import ShardReader
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.engine.offload import OffloadConfig, OffloadConfigError
from anna_core.errors import ModelLoadError
from anna_core.generation_config import read_generation_defaults
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.layers.expert_offload import apply_offload, plan_offload
from anna_core.layers.linear import use_linear_op
from anna_core.layers.moe import DUMMY_ROUTER_LOGIT_STD
from anna_core.layers.wq_experts import expert_scheme, plans_offload, quantize_experts, quantized_experts_bytes
from anna_core.layers.wq_linear import WQLinear, quantize_linears
from anna_core.model import GenerationDefaults, LoadedModel
from anna_core.model_dir import ModelSource
from anna_core.tokenizer import Tokenizer
from anna_core.weights.gpu_quant import SCHEMES, quantize
from anna_core.weights.prequant_loader import checkpoint_prequant, load_checkpoint
from anna_core.weights.safetensors_loader import (
    cast_meta_params,
    checkpoint_files,
    materialize_dummy,
)

from anna_qwen35 import tensor_parallel
from anna_qwen35.config import Qwen35Config
from anna_qwen35.model import Qwen35ForCausalLM, keep_float32
from anna_qwen35.moe import stack_prequantized_experts
from anna_qwen35.processor import PREPROCESSOR_CONFIG, Qwen35VLProcessor
from anna_qwen35.vision import VisionConfig
from anna_qwen35.weights import expert_layout, name_map

log = logging.getLogger("anna.qwen35")

LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
"""Tokens a GGUF's Qwen3.5 ends a turn or a text with: stop tokens beside ``tokenizer.ggml.eos_token_id``
(a GGUF has no ``generation_config.json``; these are the released one's ``eos_token_id``, and llama.cpp
treats both as end of generation)."""


def build_model(cfg: Qwen35Config, ops: Any, dtype: torch.dtype, per_expert: bool = False,
                vision: VisionConfig | None = None, parallel: ParallelState = SINGLE) -> Qwen35ForCausalLM:
    """The model on the meta device (no memory), parameters already in their serving dtypes
    (``per_expert``: the MoE per-expert weight layout, see :class:`~anna_qwen35.moe.RoutedExperts`; ``vision``:
    with the vision tower; ``parallel`` of several ranks: that rank's shard, :mod:`anna_qwen35.tensor_parallel`)."""
    if parallel.is_parallel:
        cfg = tensor_parallel.local_config(cfg, parallel)
    with torch.device("meta"):
        model = Qwen35ForCausalLM(cfg, ops, per_expert, vision, parallel)
    parallelize(model, parallel, row=tensor_parallel.ROW, vocab=tensor_parallel.VOCAB)
    cast_meta_params(model, dtype, keep_float32)
    return model


def _dummy_init(name: str, value: torch.Tensor, gen: torch.Generator | None) -> bool:
    if name.endswith("A_log"):  # A in [1, 16): decays in a realistic range (seeded: loads agree)
        value.uniform_(1.0, 16.0, generator=gen).log_()
    elif name.endswith(("dt_bias", "linear_attn.norm.weight")):
        value.fill_(1.0)
    elif name.startswith("visual.") and name.endswith(("norm1.weight", "norm2.weight", "merger.norm.weight")):
        value.fill_(1.0)  # LayerNorm scales (zeros would blank the tower's output)
    elif name.endswith("mlp.gate.weight"):  # the router [E, H] over unit-RMS rows: decisive routing
        value.normal_(0.0, DUMMY_ROUTER_LOGIT_STD / value.shape[1] ** 0.5, generator=gen)
    else:
        return False
    return True


def load(source: ModelSource, *, device: torch.device, dtype: torch.dtype, load_format: str = "auto",
         kernels: KernelRegistry, chat_template: str | None = None, offload: OffloadConfig | None = None,
         max_device_bytes: int | None = None, weight_quant: str = "auto", offload_vision: bool = False,
         lm_head_quant: str = "none", layout_cache: bool = True, expert_quant: str = "none",
         parallel: ParallelState = SINGLE) -> LoadedModel:
    """Load a Qwen3.5 checkpoint (dense or MoE) for text generation.

    Args:
        source: from :func:`anna_core.model_dir.inspect_model_dir` (safetensors folder or GGUF).
        device, dtype: where and in which activation dtype to serve (recurrent states are float32; GGUF
            tensors are dequantized to the parameters' dtypes).
        load_format: ``"auto"`` (the source's format), ``"safetensors"``, ``"gguf"`` or ``"dummy"`` (random
            weights, from a folder that may hold only ``config.json`` or from a GGUF's metadata).
        kernels: the kernel registry the model's ops are bound from.
        chat_template: overrides the checkpoint's chat template.
        offload, max_device_bytes: expert offload of a MoE model (:func:`anna_core.layers.expert_offload.plan_offload`,
            decided on the meta-built model): the offloaded layers' experts load into pinned host memory, never
            onto the device.
        weight_quant: ``"auto"`` / ``"none"`` keep the weights dense, except that ``"auto"`` on an accelerator
            quantizes to int4 when the dense weights would not fit ``max_device_bytes`` (else the device's free
            memory), with a warning; ``"int4"`` / ``"int8"`` / ``"fp8"`` quantize the decoder layers' dense
            projections of a safetensors (or dummy) checkpoint at load (:func:`weight_scheme`); the embedding, the
            LM head, MoE routers and routed experts and the vision tower stay dense. A pre-quantized checkpoint
            (``quantization_config``: GPTQ / AWQ int4, FP8 block, AutoRound, :mod:`anna_core.weights.prequant`)
            keeps its own quantization under ``"auto"`` (its linears repacked into the ``wq_linear`` layouts,
            never dequantized; int4 routed experts stacked into the ``--expert-quant int4`` layout,
            :func:`~anna_qwen35.moe.stack_prequantized_experts`) and is dequantized to ``dtype`` under ``"none"``.
        lm_head_quant: ``"none"`` (the LM head stays in ``dtype``) or a scheme (``"int4"`` / ``"int8"`` / ``"fp8"``)
            for the LM head (a tied head gets a quantized copy of the embedding; the embedding stays dense); a load
            option (``load_model(family_options={"lm_head_quant": "fp8"})``, ``--lm-head-quant`` of ``anna serve`` /
            ``generate`` / ``bench``).
        offload_vision: keep the vision tower (``visual.*``) in host memory and run it on the CPU with CPU-bound ops
            (:meth:`Qwen35ForCausalLM.encode` copies its rows to ``device``); ignored, with a log line, for a model
            without a tower.
        layout_cache: keep a pre-quantized checkpoint's repacked weights in the layout cache
            (:mod:`anna_core.weights.layout_cache`, under ``$ANNA_CACHE_DIR``); a load option.
        parallel: load one rank's shard for a tensor-parallel group (:mod:`anna_qwen35.tensor_parallel`): dense
            safetensors (or dummy) weights, no offload or quantization; a vision-language checkpoint is served as
            text (its tower is not loaded).
        expert_quant: ``"none"`` (a MoE model's routed experts stay in ``dtype``) or a scheme (``"int4"`` /
            ``"int8"`` / ``"fp8"``): the routed experts quantized at load, layer by layer on the device
            (:func:`anna_core.layers.wq_experts.quantize_experts`; with the layers staged in host memory on an
            accelerator, as ``weight_quant`` stages them); a load option (``load_model(expert_quant=...)``,
            ``--expert-quant``).

    Raises:
        OffloadConfigError: an offload setting the model contradicts; offload of a GGUF.
        UnsupportedModelError: a MoE option transformers' Qwen3_5Moe lacks (see :meth:`Qwen35Config.from_hf`),
            GGUF metadata Anna does not implement (see :meth:`Qwen35Config.from_gguf`).
        ModelLoadError: ``--weight-quant`` int4 / int8 / fp8 of a GGUF or of a pre-quantized checkpoint, fp8 on a
            device without FP8 units, an unknown mode; a ``quantization_config`` Anna does not serve (naming the
            method: :class:`~anna_core.weights.prequant.UnsupportedQuantizationError`); ``expert_quant`` unknown, for
            a dense model, a GGUF, with expert offload or fp8 without FP8 units; bad config or metadata, missing / unexpected / mis-shaped tensors (MoE: expert tensors
            mixing the fused and per-expert layouts), unsupported GGML types, a load format that does not fit
            the source, no tokenizer.
    """
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"load format {load_format!r} is not supported by anna-qwen35; use one of {LOAD_FORMATS}")
    # before the device checks: --weight-quant int4 / int8 / fp8 of a pre-quantized checkpoint is refused as such
    prequant = checkpoint_prequant(source.config, weight_quant, load_format) if source.format != "gguf" else None
    check_weight_quant(weight_quant, source.format, device)
    if lm_head_quant != "none":
        if lm_head_quant not in SCHEMES:
            raise ModelLoadError(f"unknown lm_head_quant {lm_head_quant!r}; use none or one of {', '.join(SCHEMES)}")
        check_weight_quant(lm_head_quant, source.format, device)
    if expert_quant in SCHEMES:
        check_weight_quant(expert_quant, source.format, device)  # not of a GGUF
    if load_format in ("safetensors", "gguf") and load_format != source.format:
        raise ModelLoadError(f"--load-format {load_format} does not fit {str(source.root)!r}, which holds "
                             f"{source.format} weights")
    if parallel.is_parallel:
        _check_parallel(source.format, weight_quant, lm_head_quant, offload, expert_quant)
    ops = bind_ops(kernels, device, dtype)
    if source.format == "gguf":
        if offload is not None and offload.mode == "experts":
            raise OffloadConfigError("expert offload of a GGUF is not supported yet (GGUF tensors are dequantized "
                                     "on the device); load the safetensors checkpoint")
        return _load_gguf(source, device=device, dtype=dtype, ops=ops, chat_template=chat_template,
                          dummy=load_format == "dummy")
    cfg = Qwen35Config.from_hf(source.config)
    tokenizer = Tokenizer.from_folder(source.root, chat_template, required=load_format != "dummy")
    vision, processor = _vision(source, cfg, tokenizer) if not parallel.is_parallel else (None, None)
    per_expert = cfg.is_moe and load_format != "dummy" and expert_layout(checkpoint_files(source.root))
    model = build_model(cfg, ops, dtype, per_expert, vision, parallel)
    # pre-quantized routed experts count as quantized ones: `auto` weighs dense experts, and offload refuses them
    prequant_experts = prequant is not None and cfg.is_moe and weight_quant != "none" and load_format != "dummy"
    plan = (plan_offload(model, offload, device=device, max_device_bytes=max_device_bytes)
            if plans_offload(offload, prequant.method if prequant_experts else expert_quant) else None)
    host = plan.host_prefixes if plan is not None else ()
    experts_scheme = expert_scheme(expert_quant, is_moe=cfg.is_moe, offloaded=plan is not None, device=device)
    # weighed on the meta-built model; a tensor-parallel shard stays dense (its row-parallel layers reduce)
    scheme = None if parallel.is_parallel else weight_scheme(weight_quant, model, device, dtype, max_device_bytes,
                                                             experts_scheme)
    staged = stage_on_host(scheme or experts_scheme, plan is not None, device)
    if staged:  # the decoder layers wait in host memory and are quantized one at a time on the device
        host = (*host, "model.layers.")
    tower_on_cpu = offload_vision and vision is not None
    if offload_vision and vision is None:
        log.info("--offload-vision: %s has no vision tower to offload", source.root)
    if tower_on_cpu:
        host = (*host, "visual.")
    shards = ShardReader(tensor_parallel.rules(cfg), parallel) if parallel.is_parallel else None
    if load_format == "dummy":  # a tensor-parallel rank draws the whole model's weights and keeps its slices
        full = None if shards is None else {n: p.shape for n, p in build_model(cfg, ops, dtype).named_parameters()}
        materialize_dummy(model, device=device, init=_dummy_init, host=host, shards=shards, full_shapes=full)
    else:  # per-expert tensors are stacked on the host after loading, then pinned (apply_offload)
        load_checkpoint(model, source.root, name_map(cfg, vision is not None), prequant, ops, device=device,
                        dtype=dtype, weight_quant=weight_quant, layout_cache=layout_cache, host=host,
                        pin=not per_expert, shards=shards)
        if prequant_experts:
            stacked = stack_prequantized_experts(model, ops, offloaded=plan is not None)
            log.info("%s checkpoint: %d MoE layers' routed experts stacked as %s", prequant.method, stacked,
                     prequant.kind)
    model.raw_config = source.config
    generation = read_generation_defaults(source.root, config_eos=cfg.eos_token_id, tokenizer=tokenizer)
    if staged:
        for layer in model.model.layers:
            layer.to(device)
            layer.merge_projections()
            if scheme is not None:
                _quantize(layer, scheme, ops)
            if experts_scheme is not None:
                quantize_experts(layer, experts_scheme, ops)
    model = _prepare(model, ops)
    if scheme is not None and not staged:
        _quantize(model.model.layers, scheme, ops)
    if experts_scheme is not None and not staged:
        log.info("--expert-quant %s: %d MoE layers' routed experts quantized", experts_scheme,
                 quantize_experts(model.model.layers, experts_scheme, ops))
    if lm_head_quant != "none":
        head = model.model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight
        model.lm_head = WQLinear(quantize(head.detach(), lm_head_quant, head.dtype), None, ops)
        log.info("LM head quantized to %s", lm_head_quant)
    if tower_on_cpu:  # the tower's linear layers on the CPU's kernels
        use_linear_op(model.visual, bind_ops(kernels, torch.device("cpu"), dtype))
    loaded = _loaded(model, cfg, tokenizer, generation, device, dtype)
    loaded.processor = processor
    if plan is not None:
        loaded.expert_store = apply_offload(model, plan, device)
    return loaded


def _check_parallel(source_format: str, weight_quant: str, lm_head_quant: str, offload: OffloadConfig | None,
                    expert_quant: str = "none") -> None:
    """Refuse what a tensor-parallel load does not take.

    Raises:
        ModelLoadError: a GGUF, ``weight_quant`` int4 / int8 / fp8, a quantized LM head, quantized experts, or expert
            offload.
    """
    if source_format == "gguf" or weight_quant in SCHEMES or lm_head_quant != "none" or expert_quant != "none":
        raise ModelLoadError("tensor parallelism loads dense safetensors (or dummy) weights: not a GGUF, "
                             "--weight-quant int4 / int8 / fp8, --lm-head-quant or --expert-quant")
    if offload is not None and offload.mode == "experts":
        raise ModelLoadError("tensor parallelism splits the experts over the devices; --offload-mode experts "
                             "does not combine with it")


def _vision(source: ModelSource, cfg: Qwen35Config, tokenizer: Any
            ) -> tuple[VisionConfig | None, Qwen35VLProcessor | None]:
    """The vision tower's config and the media processor of a vision-language checkpoint (videos need
    ``tokenizer``), or ``(None, None)``:
    for a text-only checkpoint, and for one without ``preprocessor_config.json`` (served as text only, its
    ``model.visual.*`` tensors ignored, as a shape-only config folder for dummy weights is).

    Raises:
        UnsupportedModelError, ModelLoadError: see :meth:`VisionConfig.from_hf` and
            :meth:`Qwen35VLProcessor.from_checkpoint`.
    """
    raw = source.config.get("vision_config")
    if not isinstance(raw, dict):
        return None, None
    vision = VisionConfig.from_hf(raw, cfg.hidden_size)
    processor = Qwen35VLProcessor.from_checkpoint(source.root, source.config, vision, tokenizer)
    if processor is None:
        log.info("%s has no %s: serving Qwen3.5 as a text model (the vision tower is not loaded)",
                 source.root, PREPROCESSOR_CONFIG)
        return None, None
    return vision, processor


def check_weight_quant(weight_quant: str, source_format: str, device: torch.device) -> None:
    """Refuse a ``--weight-quant`` mode the source or device cannot take.

    Raises:
        ModelLoadError: an unknown mode; int4 / int8 / fp8 of a GGUF (it keeps its own quantization, dequantized
            here); fp8 on a device without FP8 units (:attr:`anna_core.device.Accelerator.fp8_units`).
    """
    from anna_core.device import accelerator
    from anna_core.loading import WEIGHT_QUANT_MODES

    if weight_quant not in WEIGHT_QUANT_MODES:
        raise ModelLoadError(f"unknown --weight-quant {weight_quant!r}; use one of {', '.join(WEIGHT_QUANT_MODES)}")
    if weight_quant in SCHEMES and source_format == "gguf":
        raise ModelLoadError(f"--weight-quant {weight_quant} quantizes a safetensors checkpoint; a GGUF is "
                             "dequantized at load (--weight-quant auto or none)")
    if weight_quant == "fp8" and not accelerator(torch.device(device)).fp8_units:
        raise ModelLoadError(f"--weight-quant fp8 needs a device with FP8 units (CUDA compute capability 8.9 or "
                             f"newer); {torch.device(device)} has none: use --weight-quant int8 or int4")


def weight_scheme(weight_quant: str, model: torch.nn.Module, device: torch.device, dtype: torch.dtype,
                  max_device_bytes: int | None, experts_scheme: str | None = None) -> str | None:
    """The :mod:`anna_core.weights.gpu_quant` scheme the decoder's projections take, or None (dense):
    ``weight_quant`` itself for int4 / int8 / fp8; for ``"auto"`` on an accelerator, int4 when the model's
    dense weights (all parameters and buffers, in ``dtype``) exceed ``max_device_bytes`` (the memory the
    server may use), else the device's free memory now (logged as a warning); None otherwise. With
    ``experts_scheme`` (``--expert-quant``) the routed experts weigh what they will quantized."""
    from anna_core.device import memory_stats

    if weight_quant in SCHEMES:
        return weight_quant
    if weight_quant != "auto" or torch.device(device).type == "cpu":
        return None
    budget = max_device_bytes if max_device_bytes is not None else memory_stats(torch.device(device)).get("free_bytes")
    dense = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    if experts_scheme is not None:
        experts_dense, experts_quantized = quantized_experts_bytes(model, experts_scheme)
        dense += experts_quantized - experts_dense
    if budget is None or dense <= budget:
        return None
    log.warning("--weight-quant auto: the dense weights (%.1f GiB in %s) do not fit the %.1f GiB the server may use "
                "on %s: quantizing the projections to int4 (groups of 128; the LM head stays dense; "
                "--weight-quant none keeps them dense)", dense / 2**30, str(dtype).replace("torch.", ""),
                budget / 2**30, device)
    return "int4"


def stage_on_host(scheme: str | None, offloaded: bool, device: torch.device) -> bool:
    """Whether the decoder layers load into host memory first and are quantized one at a time on ``device`` (so
    the dense model never has to fit it): for a quantized load on an accelerator without expert offload (whose
    host-resident experts must stay where the plan put them)."""
    return scheme is not None and not offloaded and torch.device(device).type != "cpu"


def _quantize(layers: torch.nn.Module, scheme: str, ops: Any) -> None:
    """Quantize the dense projections of ``layers`` (merged first; not the MoE routers: their logits pick
    experts)."""
    count = quantize_linears(layers, scheme, ops, skip=lambda name: name.endswith(("mlp.gate", "shared_expert_gate")))
    log.debug("--weight-quant %s: %d projections quantized", scheme, count)


def _prepare(model: Qwen35ForCausalLM, ops: Any) -> Qwen35ForCausalLM:
    model.merge_projections()
    use_linear_op(model, ops)  # projections through the `linear` op (skinny decode GEMVs on GPUs)
    return model.eval()


def _load_gguf(source: ModelSource, *, device: torch.device, dtype: torch.dtype, ops: Any,
               chat_template: str | None, dummy: bool) -> LoadedModel:
    """A GGUF in llama.cpp's layout (:mod:`anna_qwen35.gguf_weights`), dequantized at load."""
    from anna_core.weights.gguf_loader import load_gguf_derived
    from anna_core.weights.gguf_reader import GGUFModelFile
    from anna_core.weights.gguf_tokenizer import load_gguf_tokenizer

    from anna_qwen35.gguf_weights import gguf_derivations, mtp_block

    gguf = GGUFModelFile(source.gguf_files)
    vocab_size, tied = gguf.vocabulary_shape()
    cfg = Qwen35Config.from_gguf(gguf, vocab_size=vocab_size, tied=tied)
    model = build_model(cfg, ops, dtype)  # experts in the fused [E, 2I, H] / [E, H, I] layout
    if dummy:
        materialize_dummy(model, device=device, init=_dummy_init)
    else:
        load_gguf_derived(model, gguf, gguf_derivations(cfg, gguf.tensors), device=device,
                          ignore=mtp_block(cfg, int(gguf.arch_get("block_count"))))
    tokenizer = load_gguf_tokenizer(source.gguf_files[0], tokenizer_model=gguf.get("tokenizer.ggml.model", None),
                                    pre_type=gguf.get("tokenizer.ggml.pre", None), chat_template=chat_template)
    eos = list(cfg.eos_token_id) or ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
    for text in STOP_TOKENS:
        token = tokenizer.hf.convert_tokens_to_ids(text)
        if isinstance(token, int) and token != tokenizer.hf.unk_token_id and token not in eos:
            eos.append(token)
    return _loaded(_prepare(model, ops), cfg, tokenizer, GenerationDefaults(eos_token_ids=eos), device, dtype)


def _loaded(model: Qwen35ForCausalLM, cfg: Qwen35Config, tokenizer: Any, generation: GenerationDefaults,
            device: torch.device, dtype: torch.dtype) -> LoadedModel:
    log.info("loaded Qwen3.5%s (%d layers: %d gated DeltaNet, %d attention%s) on %s/%s",
             f" MoE ({cfg.num_experts} experts, top-{cfg.num_experts_per_tok})" if cfg.is_moe else "",
             cfg.num_hidden_layers, cfg.num_linear_layers, cfg.num_full_layers,
             ", from GGUF" if cfg.layout == "gguf" else "", device, dtype)
    return LoadedModel(model=model, tokenizer=tokenizer, generation=generation,
                       max_model_len=cfg.max_position_embeddings, family="qwen35", dtype=dtype,
                       device=torch.device(device))

