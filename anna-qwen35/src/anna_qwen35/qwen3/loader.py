"""The Qwen3 family loader: ``config.json`` + safetensors, or dummy weights -> :class:`LoadedModel`."""

from __future__ import annotations

import logging
from typing import Any

import torch
from anna_core.errors import ModelLoadError
from anna_core.generation_config import read_generation_defaults
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.layers.linear import use_linear_op
from anna_core.model import LoadedModel
from anna_core.model_dir import ModelSource
from anna_core.tokenizer import Tokenizer
from anna_core.weights.prequant_loader import checkpoint_prequant, load_checkpoint
from anna_core.weights.safetensors_loader import cast_meta_params, materialize_dummy

from anna_qwen35.qwen3.config import Qwen3Config
from anna_qwen35.qwen3.model import Qwen3ForCausalLM
from anna_qwen35.qwen3.weights import name_map

log = logging.getLogger("anna.qwen3")

LOAD_FORMATS = ("auto", "safetensors", "dummy")


def build_model(cfg: Qwen3Config, ops: Any, dtype: torch.dtype) -> Qwen3ForCausalLM:
    """The model on the meta device (no memory), parameters in ``dtype``."""
    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg, ops)
    cast_meta_params(model, dtype)
    return model


def prepare(model: Qwen3ForCausalLM, ops: Any) -> Qwen3ForCausalLM:
    """Merge the projections and route every projection through the ``linear`` op; returns the model in eval
    mode. Call once its weights are in place."""
    model.merge_projections()
    use_linear_op(model, ops)  # skinny decode GEMVs on GPUs
    return model.eval()


def load(source: ModelSource, *, device: torch.device, dtype: torch.dtype, load_format: str = "auto",
         kernels: KernelRegistry, chat_template: str | None = None, weight_quant: str = "auto",
         layout_cache: bool = True) -> LoadedModel:
    """Load a Qwen3 checkpoint (``Qwen3ForCausalLM``) for text generation.

    Args:
        source: from :func:`anna_core.model_dir.inspect_model_dir` (a safetensors folder).
        device, dtype: where and in which dtype to serve.
        load_format: ``"auto"`` / ``"safetensors"``, or ``"dummy"`` (random weights, from a folder that may hold
            only ``config.json``).
        kernels: the kernel registry the model's ops are bound from.
        chat_template: overrides the checkpoint's chat template.
        weight_quant: ``"auto"`` or ``"none"`` (both keep the weights dense). A pre-quantized checkpoint
            (``quantization_config``: GPTQ / AWQ int4, FP8 block, AutoRound; :mod:`anna_core.weights.prequant`) keeps
            its quantization under ``"auto"`` (repacked into the ``wq_linear`` layouts) and is dequantized under
            ``"none"``.
        layout_cache: keep a pre-quantized checkpoint's repacked weights in the layout cache
            (:mod:`anna_core.weights.layout_cache`); a load option.

    Raises:
        ModelLoadError: an unknown load format or one that does not fit the source (a GGUF), a weight
            quantization it does not implement, an unsupported ``quantization_config`` (naming the method), a bad
            config, missing / unexpected / mis-shaped tensors, no
            tokenizer.
        UnsupportedModelError: sliding-window layers or another activation (:meth:`Qwen3Config.from_hf`).
    """
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"load format {load_format!r} is not supported by the Qwen3 family; use one of "
                             f"{LOAD_FORMATS}")
    if source.format != "safetensors":
        raise ModelLoadError(f"the Qwen3 family loads safetensors checkpoints; {str(source.root)!r} holds "
                             f"{source.format} weights")
    if weight_quant not in ("auto", "none"):
        raise ModelLoadError(f"--weight-quant {weight_quant} is not implemented for Qwen3 yet; use auto or none")
    cfg = Qwen3Config.from_hf(source.config)
    prequant = checkpoint_prequant(source.config, weight_quant, load_format)
    ops = bind_ops(kernels, device, dtype)
    model = build_model(cfg, ops, dtype)
    if load_format == "dummy":
        materialize_dummy(model, device=device)
    else:
        load_checkpoint(model, source.root, name_map(cfg), prequant, ops, device=device, dtype=dtype,
                        weight_quant=weight_quant, layout_cache=layout_cache)
    model.raw_config = source.config
    tokenizer = Tokenizer.from_folder(source.root, chat_template, required=load_format != "dummy")
    generation = read_generation_defaults(source.root, config_eos=list(cfg.eos_token_id) or None, tokenizer=tokenizer)
    log.info("loaded Qwen3 (%d layers, %d/%d heads of dim %d, %s head) on %s/%s", cfg.num_hidden_layers,
             cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
             "tied" if cfg.tie_word_embeddings else "untied", device, dtype)
    return LoadedModel(model=prepare(model, ops), tokenizer=tokenizer, generation=generation,
                       max_model_len=cfg.max_position_embeddings, family="qwen3", dtype=dtype,
                       device=torch.device(device))

