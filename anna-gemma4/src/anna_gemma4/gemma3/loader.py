"""The Gemma 3 family loader: ``config.json`` + safetensors (either layout), a GGUF file, or dummy
weights -> :class:`LoadedModel`."""

from __future__ import annotations

import logging
from typing import Any

import torch
from anna_core.errors import ModelLoadError
from anna_core.generation_config import read_generation_defaults
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.layers.linear import use_linear_op
from anna_core.model import GenerationDefaults, LoadedModel
from anna_core.model_dir import ModelSource
from anna_core.tokenizer import Tokenizer
from anna_core.weights.safetensors_loader import cast_meta_params, load_safetensors, materialize_dummy

from anna_gemma4.config import FULL, SLIDING
from anna_gemma4.gemma3.config import Gemma3Config
from anna_gemma4.gemma3.model import Gemma3ForCausalLM
from anna_gemma4.gemma3.weights import gguf_name_map, gguf_transform, name_map

log = logging.getLogger("anna.gemma3")

LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")
END_OF_TURN = "<end_of_turn>"
"""The token the instruction-tuned Gemma 3 models end their turns with (a stop token beside ``<eos>``)."""


def build_model(cfg: Gemma3Config, ops: Any, dtype: torch.dtype) -> Gemma3ForCausalLM:
    """The model on the meta device (no memory), parameters in ``dtype``."""
    with torch.device("meta"):
        model = Gemma3ForCausalLM(cfg, ops)
    cast_meta_params(model, dtype)
    return model


def load(source: ModelSource, *, device: torch.device, dtype: torch.dtype, load_format: str = "auto",
         kernels: KernelRegistry, chat_template: str | None = None, weight_quant: str = "auto") -> LoadedModel:
    """Load a Gemma 3 checkpoint for text generation.

    Args:
        source: from :func:`anna_core.model_dir.inspect_model_dir` (safetensors folder or GGUF).
        device, dtype: where and in which dtype to serve (GGUF tensors are dequantized to it).
        load_format: ``"auto"`` (the source's format), ``"safetensors"``, ``"gguf"`` or ``"dummy"`` (random
            weights; from a folder that may hold only ``config.json``, or a GGUF's metadata).
        kernels: the kernel registry the model's ops are bound from.
        chat_template: overrides the checkpoint's chat template.

    Raises:
        ModelLoadError: bad config or metadata, missing / unexpected / mis-shaped tensors, unsupported GGML
            types, a load format that does not fit the source, no tokenizer.
    """
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"load format {load_format!r} is not supported for Gemma 3; use one of {LOAD_FORMATS}")
    if weight_quant not in ("auto", "none"):
        raise ModelLoadError(f"--weight-quant {weight_quant} is not implemented for Gemma 3 yet; use auto or none "
                             "(both dequantize its weights today)")
    if load_format in ("safetensors", "gguf") and load_format != source.format:
        raise ModelLoadError(f"--load-format {load_format} does not fit {str(source.root)!r}, which holds "
                             f"{source.format} weights")
    ops = bind_ops(kernels, device, dtype)
    if source.format == "gguf":
        return _load_gguf(source, device=device, dtype=dtype, ops=ops, chat_template=chat_template,
                          dummy=load_format == "dummy")
    cfg = Gemma3Config.from_hf(source.config)
    model = build_model(cfg, ops, dtype)
    if load_format == "dummy":
        materialize_dummy(model, device=device)
    else:
        load_safetensors(model, source.root, name_map(cfg), device=device)
    model.raw_config = source.config  # for hf_export (anna bench --compare-hf); a GGUF source has none
    tokenizer = Tokenizer.from_folder(source.root, chat_template, required=load_format != "dummy")
    generation = read_generation_defaults(source.root, config_eos=list(cfg.eos_token_id), tokenizer=tokenizer)
    return _loaded(_prepare(model, ops), cfg, tokenizer, generation, device, dtype)


def _prepare(model: Gemma3ForCausalLM, ops: Any) -> Gemma3ForCausalLM:
    model.merge_projections()
    use_linear_op(model, ops)  # projections through the `linear` op (skinny decode GEMVs on GPUs)
    return model.eval()


def _load_gguf(source: ModelSource, *, device: torch.device, dtype: torch.dtype, ops: Any,
               chat_template: str | None, dummy: bool) -> LoadedModel:
    from anna_core.weights.gguf_loader import load_gguf
    from anna_core.weights.gguf_reader import GGUFModelFile
    from anna_core.weights.gguf_tokenizer import load_gguf_tokenizer

    gguf = GGUFModelFile(source.gguf_files)
    vocab_size, tied = gguf.vocabulary_shape()
    cfg = Gemma3Config.from_gguf(gguf, vocab_size=vocab_size, tied=tied)
    model = build_model(cfg, ops, dtype)
    if dummy:
        materialize_dummy(model, device=device)
    else:
        load_gguf(model, gguf, gguf_name_map, device=device, transform=gguf_transform)
    tokenizer = load_gguf_tokenizer(source.gguf_files[0], tokenizer_model=gguf.get("tokenizer.ggml.model", None),
                                    pre_type=gguf.get("tokenizer.ggml.pre", None), chat_template=chat_template)
    eos = list(cfg.eos_token_id) or ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
    turn = tokenizer.hf.convert_tokens_to_ids(END_OF_TURN)
    if isinstance(turn, int) and turn != tokenizer.hf.unk_token_id and turn not in eos:
        eos.append(turn)
    return _loaded(_prepare(model, ops), cfg, tokenizer, GenerationDefaults(eos_token_ids=eos), device, dtype)


def _loaded(model: Gemma3ForCausalLM, cfg: Gemma3Config, tokenizer: Any, generation: GenerationDefaults,
            device: torch.device, dtype: torch.dtype) -> LoadedModel:
    log.info("loaded Gemma 3 (%s; %d layers: %d sliding-window of %d tokens, %d global) on %s/%s", cfg.layout,
             cfg.num_hidden_layers, len(cfg.layers_of(SLIDING)), cfg.sliding_window, len(cfg.layers_of(FULL)),
             device, dtype)
    return LoadedModel(model=model, tokenizer=tokenizer, generation=generation,
                       max_model_len=cfg.max_position_embeddings, family="gemma3", dtype=dtype,
                       device=torch.device(device))
