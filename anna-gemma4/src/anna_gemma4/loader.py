"""The Gemma 4 family loader: ``config.json`` + safetensors (or dummy weights) -> :class:`LoadedModel`."""

from __future__ import annotations

import logging
from typing import Any

import torch
from anna_core.distributed.layers import parallelize
from anna_core.distributed.sharding import ShardReader
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.engine.offload import OffloadConfig
from anna_core.errors import ModelLoadError
from anna_core.generation_config import read_generation_defaults
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.layers.expert_offload import apply_offload, plan_offload
from anna_core.layers.linear import use_linear_op
from anna_core.layers.moe import DUMMY_ROUTER_LOGIT_STD
from anna_core.layers.wq_experts import expert_scheme, plans_offload, quantize_experts
from anna_core.model import LoadedModel
from anna_core.model_dir import ModelSource
from anna_core.tokenizer import Tokenizer
from anna_core.weights.safetensors_loader import cast_meta_params, load_safetensors, materialize_dummy

from anna_gemma4 import tensor_parallel
from anna_gemma4.config import FULL, SLIDING, Gemma4Config
from anna_gemma4.model import Gemma4ForCausalLM
from anna_gemma4.weights import name_map

log = logging.getLogger("anna.gemma4")

LOAD_FORMATS = ("auto", "safetensors", "dummy")
_ONES = ("layer_scalar", "router.scale", "router.per_expert_scale")
"""Dummy-weight parameters whose identity value is one (the default would zero them)."""


def build_model(cfg: Gemma4Config, ops: Any, dtype: torch.dtype, parallel: ParallelState = SINGLE) -> Gemma4ForCausalLM:
    """The model on the meta device (no memory), parameters in ``dtype``; with a ``parallel`` group of several ranks,
    that rank's shard (:mod:`anna_gemma4.tensor_parallel`)."""
    if parallel.is_parallel:
        cfg = tensor_parallel.local_config(cfg, parallel)
    with torch.device("meta"):
        model = Gemma4ForCausalLM(cfg, ops, parallel)
    parallelize(model, parallel, row=tensor_parallel.ROW, vocab=tensor_parallel.VOCAB)
    cast_meta_params(model, dtype)
    return model


def _dummy_init(name: str, value: torch.Tensor, gen: torch.Generator | None) -> bool:
    if name.endswith(_ONES):
        value.fill_(1.0)
        return True
    if name.endswith("router.proj.weight"):  # its input rows have RMS hidden ** -0.5: logits' std is the weights'
        value.normal_(0.0, DUMMY_ROUTER_LOGIT_STD, generator=gen)
        return True
    return False


def load(source: ModelSource, *, device: torch.device, dtype: torch.dtype, load_format: str = "auto",
         kernels: KernelRegistry, chat_template: str | None = None, offload: OffloadConfig | None = None,
         max_device_bytes: int | None = None, weight_quant: str = "auto", expert_quant: str = "none",
         parallel: ParallelState = SINGLE) -> LoadedModel:
    """Load a Gemma 4 checkpoint (either layout) for text generation.

    Args:
        source: from :func:`anna_core.model_dir.inspect_model_dir` (safetensors folder).
        device, dtype: where and in which dtype to serve.
        load_format: ``"auto"``/``"safetensors"`` read the weights; ``"dummy"`` fills random ones from
            a folder that may hold only ``config.json``.
        kernels: the kernel registry the model's ops are bound from.
        chat_template: overrides the checkpoint's chat template.
        offload, max_device_bytes: expert offload of a MoE model (:func:`anna_core.layers.expert_offload.plan_offload`):
            the offloaded layers' experts load into pinned host memory, never onto the device.
        expert_quant: ``"none"`` (the MoE block's routed experts stay in ``dtype``) or ``"int4"`` / ``"int8"`` /
            ``"fp8"``: quantized at load, layer by layer on the device after the dense weights are in place
            (:func:`anna_core.layers.wq_experts.quantize_experts`); a load option (``--expert-quant``).
        parallel: load one rank's shard for a tensor-parallel group (:mod:`anna_gemma4.tensor_parallel`; no expert
            offload or expert quantization then).

    Raises:
        ModelLoadError: bad config, missing / unexpected / mis-shaped tensors, GGUF input, no tokenizer, expert
            offload or quantization with tensor parallelism, a group size that does not divide the heads or widths;
            ``expert_quant`` unknown, for a model without a MoE block, with expert offload or fp8 without FP8 units.
        OffloadConfigError: an offload setting the model contradicts.
    """
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"load format {load_format!r} is not supported by anna-gemma4; use one of {LOAD_FORMATS}")
    if weight_quant not in ("auto", "none"):
        raise ModelLoadError(f"--weight-quant {weight_quant} is not implemented for anna-gemma4 yet; use auto or none "
                             "(both dequantize its weights today)")
    if source.format != "safetensors":
        raise ModelLoadError("anna-gemma4 cannot load GGUF Gemma 4 checkpoints yet; use the safetensors folder")
    if parallel.is_parallel and offload is not None and offload.mode == "experts":
        raise ModelLoadError("tensor parallelism splits the experts over the devices; --offload-mode experts "
                             "does not combine with it")
    if parallel.is_parallel and expert_quant != "none":
        raise ModelLoadError("tensor parallelism loads dense experts; --expert-quant does not combine with it yet")
    cfg = Gemma4Config.from_hf(source.config)
    ops = bind_ops(kernels, device, dtype)
    model = build_model(cfg, ops, dtype, parallel)
    plan = (plan_offload(model, offload, device=device, max_device_bytes=max_device_bytes)
            if not parallel.is_parallel and plans_offload(offload, expert_quant) else None)
    host = plan.host_prefixes if plan is not None else ()
    experts_scheme = expert_scheme(expert_quant, is_moe=cfg.enable_moe_block, offloaded=plan is not None,
                                   device=device)
    shards = ShardReader(tensor_parallel.rules(cfg), parallel) if parallel.is_parallel else None
    if load_format == "dummy":  # a tensor-parallel rank draws the whole model's weights and keeps its slices
        full = None if shards is None else {n: p.shape for n, p in build_model(cfg, ops, dtype).named_parameters()}
        materialize_dummy(model, device=device, init=_dummy_init, host=host, shards=shards, full_shapes=full)
    else:
        load_safetensors(model, source.root, name_map(cfg), device=device, host=host, shards=shards)
    model.merge_projections()
    use_linear_op(model, ops)  # projections through the `linear` op (skinny decode GEMVs on GPUs)
    if experts_scheme is not None:
        log.info("--expert-quant %s: %d MoE layers' routed experts quantized", experts_scheme,
                 quantize_experts(model, experts_scheme, ops))
    model.raw_config = source.config  # for hf_export (anna bench --compare-hf)
    model.eval()
    tokenizer = Tokenizer.from_folder(source.root, chat_template, required=load_format != "dummy")
    generation = read_generation_defaults(source.root, config_eos=cfg.eos_token_id, tokenizer=tokenizer)
    log.info("loaded Gemma 4 (%d layers: %d sliding-window, %d global; %d KV-shared%s%s) on %s/%s",
             cfg.num_hidden_layers, len(cfg.layers_of(SLIDING)), len(cfg.layers_of(FULL)),
             sum(spec.kv_owner is not None for spec in cfg.layers),
             ", per-layer embeddings" if cfg.hidden_size_per_layer_input else "",
             f", MoE {cfg.top_k_experts} of {cfg.num_experts}" if cfg.enable_moe_block else "", device, dtype)
    return LoadedModel(model=model, tokenizer=tokenizer, generation=generation,
                       max_model_len=cfg.max_position_embeddings, family="gemma4", dtype=dtype,
                       device=torch.device(device),
                       expert_store=apply_offload(model, plan, device) if plan is not None else None)

