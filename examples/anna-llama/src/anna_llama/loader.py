"""The anna-llama family loader: a safetensors folder or a GGUF file -> :class:`LoadedModel`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from anna_core.distributed.layers import parallelize
from anna_core.distributed.sharding import ShardReader
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.errors import ModelLoadError
from anna_core.generation_config import read_generation_defaults
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.model import GenerationDefaults, LoadedModel
from anna_core.model_dir import ModelSource
from anna_core.tokenizer import Tokenizer
from anna_core.weights.prequant_loader import checkpoint_prequant, load_checkpoint
from anna_core.weights.safetensors_loader import cast_meta_params, materialize_dummy

from anna_llama import tensor_parallel
from anna_llama.config import LlamaConfig
from anna_llama.model import LlamaForCausalLM
from anna_llama.weights import gguf_name_map, gguf_transform, safetensors_name_map

log = logging.getLogger("anna.llama")

LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")


def _packed_weight(name: str) -> bool:
    """Which GGUF matrices stay quantized: every weight but an untied LM head's (its logits are float32: the
    packed kernel rounds its output to bfloat16, which would decide near-tied greedy choices)."""
    return name.endswith(".weight") and not name.startswith("lm_head.")


def build_model(cfg: LlamaConfig, ops: Any, dtype: torch.dtype, parallel: ParallelState = SINGLE) -> LlamaForCausalLM:
    """The model on the meta device (no memory), parameters in ``dtype``; with a ``parallel`` group of several
    ranks, that rank's shard (:mod:`anna_llama.tensor_parallel`)."""
    if parallel.is_parallel:
        cfg = tensor_parallel.local_config(cfg, parallel)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg, ops, parallel)
    parallelize(model, parallel, row=tensor_parallel.ROW, vocab=tensor_parallel.VOCAB)
    cast_meta_params(model, dtype)
    return model


def load(source: ModelSource, *, device: torch.device, dtype: torch.dtype, load_format: str = "auto",
         kernels: KernelRegistry, chat_template: str | None = None, weight_quant: str = "auto",
         layout_cache: bool = True, parallel: ParallelState = SINGLE) -> LoadedModel:
    """Load a Llama-architecture checkpoint.

    Args:
        source: from :func:`anna_core.model_dir.inspect_model_dir` (safetensors folder or GGUF).
        device, dtype: where and in which dtype to serve (GGUF tensors are dequantized to it).
        load_format: ``"auto"`` (the source's format), ``"safetensors"``, ``"gguf"`` or ``"dummy"``
            (random weights from a folder that may hold only ``config.json``).
        kernels: the registry the model's kernel ops are bound from.
        chat_template: overrides the checkpoint's chat template.
        weight_quant: ``"auto"`` keeps a GGUF's quantized matrices quantized on the CPU
            (:mod:`anna_core.layers.quant_linear`) and dequantizes them elsewhere; ``"none"`` dequantizes;
            ``"int4"`` (groups of 128, asymmetric) / ``"int8"`` (per channel) quantize a safetensors
            checkpoint's projections at load (:mod:`anna_core.weights.quantize`; CPU only, the embedding and
            a tied LM head stay dense). A pre-quantized safetensors checkpoint (``quantization_config``: GPTQ /
            AWQ int4, FP8 block, AutoRound; :mod:`anna_core.weights.prequant`) keeps its quantization under
            ``"auto"`` (the ``wq_linear`` ops) and is dequantized under ``"none"``.
        layout_cache: keep a pre-quantized checkpoint's repacked weights in the layout cache
            (:mod:`anna_core.weights.layout_cache`); a load option.
        parallel: load one rank's shard for a tensor-parallel group (safetensors or dummy weights, dense):
            :mod:`anna_llama.tensor_parallel`.

    Raises:
        ModelLoadError: unknown load format or one that does not fit the source; a bad config; an unsupported
            ``quantization_config`` (naming the method), ``--weight-quant int4|int8`` of a pre-quantized one;
            tensor parallelism of a GGUF, of a pre-quantized checkpoint or with ``weight_quant`` int4 / int8, or a
            group size that does not divide the heads or intermediate units;
            missing / unexpected / mis-shaped tensors; an unreadable GGUF or tokenizer.
    """
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"load format {load_format!r} is not supported by anna-llama; use one of {LOAD_FORMATS}")
    if load_format in ("safetensors", "gguf") and load_format != source.format:
        raise ModelLoadError(f"--load-format {load_format} does not fit {str(source.root)!r}, which holds "
                             f"{source.format} weights")
    # before _packed_weights: --weight-quant int4 / int8 / fp8 of a pre-quantized checkpoint is refused as such
    prequant = checkpoint_prequant(source.config, weight_quant, load_format) if source.format != "gguf" else None
    packed = _packed_weights(weight_quant, source.format, device)
    if parallel.is_parallel and (source.format == "gguf" or packed is not None):
        raise ModelLoadError("tensor parallelism loads dense safetensors (or dummy) weights: " + (
            "not a GGUF file" if source.format == "gguf" else f"--weight-quant {weight_quant} does not combine with it"))
    ops = bind_ops(kernels, device, dtype)
    if source.format == "gguf":
        return _load_gguf(source, device=device, dtype=dtype, ops=ops, chat_template=chat_template,
                          dummy=load_format == "dummy", packed=packed == "gguf")
    cfg = LlamaConfig.from_hf(source.config)
    model = build_model(cfg, ops, dtype, parallel)
    shards = ShardReader(tensor_parallel.RULES, parallel) if parallel.is_parallel else None
    if load_format == "dummy":  # a rank draws the whole model's weights and keeps its slices
        full = None if shards is None else {n: p.shape for n, p in build_model(cfg, ops, dtype).named_parameters()}
        materialize_dummy(model, device=device, shards=shards, full_shapes=full)
    else:  # a pre-quantized checkpoint's linears repacked for the wq_linear ops (anna_core.weights.prequant)
        load_checkpoint(model, source.root, safetensors_name_map(cfg), prequant, ops, device=device, dtype=dtype,
                        weight_quant=weight_quant, layout_cache=layout_cache, shards=shards)
    tokenizer = _folder_tokenizer(source.root, chat_template, required=load_format != "dummy")
    _prepare(model, device, quantize=packed if packed in ("int4", "int8") else None)
    generation = read_generation_defaults(source.root, config_eos=source.config.get("eos_token_id"),
                                          tokenizer=tokenizer)
    return _loaded(model.eval(), cfg, tokenizer, generation, device, dtype)


def _packed_weights(weight_quant: str, source_format: str, device: torch.device) -> str | None:
    """What ``--weight-quant`` keeps packed: ``"gguf"`` (the file's own quantized matrices), ``"int4"`` /
    ``"int8"`` (a safetensors checkpoint quantized at load) or None (dense).

    Raises:
        ModelLoadError: an unknown mode, or one that does not fit the source or device.
    """
    from anna_core.loading import WEIGHT_QUANT_MODES

    if weight_quant not in WEIGHT_QUANT_MODES:
        raise ModelLoadError(f"unknown --weight-quant {weight_quant!r}; use one of {', '.join(WEIGHT_QUANT_MODES)}")
    cpu = torch.device(device).type == "cpu"
    if weight_quant == "fp8":
        raise ModelLoadError("--weight-quant fp8 is not implemented for anna-llama (int4 / int8 on the CPU); "
                             "Qwen3.5 takes it on GPUs with FP8 units")
    if weight_quant in ("int4", "int8"):
        if source_format == "gguf":
            raise ModelLoadError(f"--weight-quant {weight_quant} quantizes a safetensors checkpoint; a GGUF keeps "
                                 "its own quantization (--weight-quant auto) or dequantizes (none)")
        if not cpu:
            raise ModelLoadError(f"--weight-quant {weight_quant} runs on the CPU only (not implemented yet on "
                                 f"{torch.device(device).type})")
        return weight_quant
    return "gguf" if weight_quant == "auto" and cpu and source_format == "gguf" else None


def _prepare(model: LlamaForCausalLM, device: torch.device, quantize: str | None = None) -> None:
    """Merge the projections; with ``quantize`` (``"int4"`` / ``"int8"``) quantize them; on the CPU lay
    the dense weights out column-major (faster decode) and pack the quantized ones for their kernel."""
    from anna_core.layers.quant_linear import QuantizedLinear, pack_all

    model.merge_projections()
    if quantize is not None:
        from anna_core.weights.quantize import quantize_dense

        for layer in model.model.layers:
            for parent in (layer.self_attn, layer.mlp):
                for name, child in list(parent.named_children()):
                    if type(child) is torch.nn.Linear:
                        try:
                            blocks = quantize_dense(child.weight, quantize)
                        except ValueError as exc:  # rows the mode cannot group stay dense
                            log.warning("%s stays dense: %s", name, exc)
                            continue
                        setattr(parent, name, QuantizedLinear(blocks, child.bias))
    if torch.device(device).type == "cpu":
        model.use_column_major_weights()
    pack_all(model, model.ops)


def _load_gguf(source: ModelSource, *, device: torch.device, dtype: torch.dtype, ops: Any,
               chat_template: str | None, dummy: bool, packed: bool = False) -> LoadedModel:
    from anna_core.weights.gguf_loader import load_gguf
    from anna_core.weights.gguf_reader import GGUFModelFile
    from anna_core.weights.gguf_tokenizer import load_gguf_tokenizer

    gguf = GGUFModelFile(source.gguf_files)
    cfg = LlamaConfig.from_gguf(gguf)
    model = build_model(cfg, ops, dtype)
    if dummy:
        materialize_dummy(model, device=device)
    else:
        kept = load_gguf(model, gguf, gguf_name_map, device=device, transform=gguf_transform(cfg),
                         keep_packed=_packed_weight if packed else None)
        if packed:
            log.info("kept %d GGUF matrices quantized (int4_linear)", kept)
    _prepare(model, device)
    tokenizer = load_gguf_tokenizer(source.gguf_files[0], tokenizer_model=gguf.get("tokenizer.ggml.model", None),
                                    pre_type=gguf.get("tokenizer.ggml.pre", None), chat_template=chat_template)
    eos = gguf.get("tokenizer.ggml.eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    generation = GenerationDefaults(eos_token_ids=[int(eos)] if eos is not None else [])
    return _loaded(model.eval(), cfg, tokenizer, generation, device, dtype)


def _loaded(model: LlamaForCausalLM, cfg: LlamaConfig, tokenizer: Any, generation: GenerationDefaults,
            device: torch.device, dtype: torch.dtype) -> LoadedModel:
    log.info("loaded Llama (%d layers, %d/%d heads, %s head) on %s/%s", cfg.num_hidden_layers,
             cfg.num_attention_heads, cfg.num_key_value_heads, "tied" if cfg.tie_word_embeddings else "untied",
             device, dtype)
    return LoadedModel(model=model, tokenizer=tokenizer, generation=generation,
                       max_model_len=cfg.max_position_embeddings, family="llama", dtype=dtype,
                       device=torch.device(device))


def _folder_tokenizer(root: Path, chat_template: str | None, *, required: bool) -> Tokenizer | None:
    has_files = any((root / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))
    if not required and not has_files:
        return None
    return Tokenizer.from_pretrained(root, chat_template)
