"""Tiny Qwen3.5 GGUF files written the way llama.cpp's converter writes them, for the GGUF tests.

:func:`write_qwen35_gguf` turns a tiny HF checkpoint (text layout, dense or MoE, as
:func:`anna_core.testing.build_tiny_qwen35` or ``anna_qwen35.tiny.build_tiny_qwen35_moe`` save it)
into a GGUF with the ``gguf`` library, following ``convert_hf_to_gguf.py``'s Qwen3.5 classes
(``conversion/qwen.py`` in llama.cpp: ``Qwen3_5TextModel`` / ``Qwen3_5MoeTextModel`` over
``_LinearAttentionVReorderBase``, ``Qwen3NextModel`` and ``Qwen2MoeModel``):

* names from ``gguf.get_tensor_name_map`` (``blk.N.attn_qkv``, ``ssm_a``, ``ffn_gate_exps``, ...);
* the gated DeltaNet's value heads reordered from grouped by key head to tiled (``v0k0 v0k1 v1k0 ...``)
  in ``in_proj_qkv`` (its value rows), ``in_proj_z``, ``in_proj_a|b``, ``A_log``, ``dt_bias``, ``conv1d``
  (its value channels) and the columns of ``out_proj``;
* ``A_log`` stored as ``-exp(A_log)``, ``dt_bias`` as ``ssm_dt.bias``, ``conv1d`` squeezed to ``[C, W]``,
  every zero-centred RMSNorm weight stored as ``w + 1`` (not the DeltaNet's gated ``linear_attn.norm``);
* MoE experts stacked into ``ffn_{gate,up,down}_exps`` (``[E, I, H]`` / ``[E, H, I]`` in torch order);
  optionally ``--fuse-gate-up-exps`` (``ffn_gate_up_exps``) and ``--fuse-qkv`` (one ``attn_qkv`` in the
  attention layers);
* types as ``--outtype``: 1-D tensors, norms, ``ssm_conv1d``, the routers, ``ssm_a`` and ``ssm_dt.bias``
  in F32, the other matrices in the out type (Q8_0 falling back to F16 where a row is not a multiple of
  32 values);
* metadata as ``set_gguf_parameters`` writes it, and the vocabulary as ``_set_vocab_gpt2`` does (tokens
  padded to ``vocab_size`` with ``[PADi]``, merges and special ids through ``gguf.SpecialVocab``, the
  pre-tokenizer named ``qwen35``).

:func:`hf_from_gguf` is the oracle (transformers loading the file through its own GGUF mapping);
:func:`load_selected` loads a file the way ``anna serve`` does (family from ``general.architecture``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

_PER_EXPERT = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
_F32_TENSORS = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight", "ssm_conv1d.weight")


def _tiled(t: torch.Tensor, dim: int, num_k_heads: int, per_k: int, head_dim: int) -> torch.Tensor:
    """The converter's ``_reorder_v_heads``: value heads grouped by key head -> tiled, along ``dim``."""
    shape = list(t.shape)
    t = t.reshape(*shape[:dim], num_k_heads, per_k, head_dim, *shape[dim + 1:])
    return t.transpose(dim, dim + 1).reshape(shape)


def _reorder_value_heads(name: str, t: torch.Tensor, cfg: dict[str, Any]) -> torch.Tensor:
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    if nk == nv or "linear_attn." not in name:
        return t
    kd, vd, r = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], nv // nk
    qk = 2 * kd * nk
    if ".in_proj_qkv." in name:
        return torch.cat([t[:qk], _tiled(t[qk:], 0, nk, r, vd)])
    if ".in_proj_z." in name:
        return _tiled(t, 0, nk, r, vd)
    if ".in_proj_b." in name or ".in_proj_a." in name or name.endswith((".A_log", ".dt_bias")):
        return _tiled(t, 0, nk, r, 1)
    if ".conv1d." in name:
        t = t.squeeze()
        return torch.cat([t[:qk], _tiled(t[qk:], 0, nk, r, vd)])
    if ".out_proj." in name:
        return _tiled(t, 1, nk, r, vd)
    return t


def _qwen3next_values(name: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
    """``Qwen3NextModel.modify_tensors``' value transforms (after the value-head reorder)."""
    if name.endswith(".A_log"):
        return name, -torch.exp(t)
    if name.endswith(".dt_bias"):
        return name[: -len(".dt_bias")] + ".dt_proj.bias", t
    if "conv1d" in name:
        return name, t.squeeze()
    if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        return name, t + 1
    return name, t


def _stack_experts(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert (``mlp.experts.{e}.{w}.weight``) or fused (``gate_up_proj``) experts -> the stacked
    ``mlp.experts.{gate,up,down}_proj.weight`` the name map knows, as ``Qwen2MoeModel`` does."""
    out, per = {}, {}
    for name, t in state.items():
        m = _PER_EXPERT.match(name)
        if m:
            per.setdefault((m[1], m[3]), {})[int(m[2])] = t
        elif name.endswith("mlp.experts.gate_up_proj"):
            gate, up = t.chunk(2, dim=1)
            out[name[: -len("gate_up_proj")] + "gate_proj.weight"] = gate.contiguous()
            out[name[: -len("gate_up_proj")] + "up_proj.weight"] = up.contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            out[name + ".weight"] = t
        else:
            out[name] = t
    for (layer, w), experts in per.items():
        out[f"model.layers.{layer}.mlp.experts.{w}.weight"] = torch.stack([experts[e] for e in sorted(experts)])
    return out


def _gguf_name(name_map: Any, name: str) -> str:
    base, suffix = name, ""
    if name.endswith((".weight", ".bias")):
        base, suffix = name.rsplit(".", 1)
        suffix = "." + suffix
    mapped = name_map.get_name(base)
    if mapped is None:
        raise ValueError(f"no GGUF name for {name!r}")
    return mapped + suffix


def _stored(gguf: Any, name: str, array: np.ndarray, outtype: str) -> tuple[np.ndarray, Any]:
    """(data, GGML type) as the converter stores ``name``."""
    q = gguf.GGMLQuantizationType
    f32 = array.ndim <= 1 or name.endswith("_norm.weight") or name.endswith(_F32_TENSORS)
    if f32 or not name.endswith(".weight"):
        return array.astype(np.float32), q.F32
    qtype = {"f32": q.F32, "f16": q.F16, "q8_0": q.Q8_0}[outtype]
    try:
        return gguf.quants.quantize(array.astype(np.float32), qtype), qtype
    except gguf.QuantError:  # rows not a multiple of the block: the converter falls back to F16
        return gguf.quants.quantize(array.astype(np.float32), q.F16), q.F16


def _vocab(hf_dir: Path, vocab_size: int) -> tuple[list[str], list[int]]:
    """``get_vocab_base``: every id up to ``vocab_size``, ``[PADi]`` where the tokenizer has none."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    reverse = {i: t for t, i in tok.get_vocab().items()}
    added = tok.get_added_vocab()
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(5)  # UNUSED
            continue
        token = reverse[i]
        tokens.append(token)
        if token in added:
            types.append(3 if tok.added_tokens_decoder[i].special else 4)  # CONTROL / USER_DEFINED
        else:
            types.append(1)  # NORMAL
    return tokens, types


def write_qwen35_gguf(hf_dir: Path, out: Path, *, outtype: str = "f32", fuse_qkv: bool = False,
                      fuse_gate_up_exps: bool = False, mtp: bool = False,
                      drop: tuple[str, ...] = (), edit: dict[str, np.ndarray] | None = None,
                      metadata_edit: dict[str, Any] | None = None) -> Path:
    """Convert the text-layout checkpoint at ``hf_dir`` into the GGUF ``out`` (returned).

    Args:
        outtype: ``"f32"``, ``"f16"`` or ``"q8_0"`` (``convert_hf_to_gguf.py --outtype``).
        fuse_qkv, fuse_gate_up_exps: the converter's ``--fuse-qkv`` / ``--fuse-gate-up-exps``.
        mtp: append a multi-token-prediction block ``blk.{num_layers}.*`` (random, with
            ``nextn_predict_layers = 1``), as llama.cpp writes a checkpoint's ``mtp.*`` tensors.
        drop: GGUF tensor names to leave out; edit: GGUF tensor names to replace (float32 arrays,
            stored as F32) or add; metadata_edit: metadata keys (without the ``arch.`` prefix) to
            overwrite, or to leave out where the value is None.
    """
    import gguf
    from safetensors.torch import load_file

    cfg = json.loads((hf_dir / "config.json").read_text())
    moe = "num_experts" in cfg
    arch = gguf.MODEL_ARCH.QWEN35MOE if moe else gguf.MODEL_ARCH.QWEN35
    layers = cfg["num_hidden_layers"]
    blocks = layers + (1 if mtp else 0)
    name_map = gguf.get_tensor_name_map(arch, blocks)

    tensors: dict[str, np.ndarray] = {}
    state = _stack_experts(load_file(str(hf_dir / "model.safetensors")))
    for hf_name, t in state.items():
        t = _reorder_value_heads(hf_name, t.float(), cfg)
        hf_name, t = _qwen3next_values(hf_name, t)
        tensors[_gguf_name(name_map, hf_name)] = t.numpy()
    if mtp:
        gen = np.random.default_rng(7)
        hidden = cfg["hidden_size"]
        for leaf, shape in (("nextn.eh_proj.weight", (hidden, 2 * hidden)), ("nextn.enorm.weight", (hidden,)),
                            ("nextn.hnorm.weight", (hidden,)), ("attn_norm.weight", (hidden,))):
            tensors[f"blk.{layers}.{leaf}"] = gen.standard_normal(shape).astype(np.float32)
    if fuse_qkv:
        for i in range(layers):
            parts = [tensors.pop(f"blk.{i}.attn_{p}.weight", None) for p in "qkv"]
            if all(p is not None for p in parts):
                tensors[f"blk.{i}.attn_qkv.weight"] = np.concatenate(parts)
    if fuse_gate_up_exps:
        for i in range(layers):
            gate, up = tensors.pop(f"blk.{i}.ffn_gate_exps.weight"), tensors.pop(f"blk.{i}.ffn_up_exps.weight")
            tensors[f"blk.{i}.ffn_gate_up_exps.weight"] = np.concatenate([gate, up], axis=1)
    for name in drop:
        del tensors[name]

    out.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[arch])
    _write_metadata(w, gguf, cfg, blocks, mtp, outtype, metadata_edit or {})
    _write_vocab(w, gguf, hf_dir, cfg["vocab_size"])
    for name, array in tensors.items():
        data, qtype = _stored(gguf, name, array, outtype)
        w.add_tensor(name, data, raw_dtype=qtype)
    for name, array in (edit or {}).items():
        w.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32), raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _write_metadata(w: Any, gguf: Any, cfg: dict[str, Any], blocks: int, mtp: bool, outtype: str,
                    overrides: dict[str, Any]) -> None:
    rope = cfg["rope_parameters"]
    head_dim = cfg["head_dim"]
    values: dict[str, Any] = {
        "block_count": blocks,
        "context_length": cfg["max_position_embeddings"],
        "embedding_length": cfg["hidden_size"],
        "attention.head_count": cfg["num_attention_heads"],
        "attention.head_count_kv": cfg["num_key_value_heads"],
        "rope.freq_base": float(rope["rope_theta"]),
        "attention.layer_norm_rms_epsilon": float(cfg["rms_norm_eps"]),
        "attention.key_length": head_dim,
        "attention.value_length": head_dim,
        "rope.dimension_sections": (list(rope["mrope_section"]) + [0, 0, 0, 0])[:4],
        "ssm.conv_kernel": cfg["linear_conv_kernel_dim"],
        "ssm.state_size": cfg["linear_key_head_dim"],
        "ssm.group_count": cfg["linear_num_key_heads"],
        "ssm.time_step_rank": cfg["linear_num_value_heads"],
        "ssm.inner_size": cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"],
        # one flag per block (the MTP block is not recurrent), then the interval the converter writes
        "attention.recurrent_layers": [t == "linear_attention" for t in cfg["layer_types"]] + [False] * mtp,
        "full_attention_interval": cfg.get("full_attention_interval", 4),
        "rope.dimension_count": int(head_dim * rope.get("partial_rotary_factor", 0.25)),
    }
    if "intermediate_size" in cfg:
        values["feed_forward_length"] = cfg["intermediate_size"]
    if "num_experts" in cfg:
        values.update({"expert_count": cfg["num_experts"], "expert_used_count": cfg["num_experts_per_tok"],
                       "expert_feed_forward_length": cfg["moe_intermediate_size"],
                       "expert_shared_feed_forward_length": cfg["shared_expert_intermediate_size"]})
    if mtp:
        values["nextn_predict_layers"] = 1
    values.update(overrides)
    for key, value in values.items():
        if value is None:
            continue
        full = f"{w.arch}.{key}"
        if isinstance(value, list):
            w.add_array(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        else:
            w.add_uint32(full, int(value))
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[outtype]
    w.add_file_type(file_type)


def _write_vocab(w: Any, gguf: Any, hf_dir: Path, vocab_size: int) -> None:
    tokens, types = _vocab(hf_dir, vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(hf_dir, load_merges=True).add_to_gguf(w)


def hf_from_gguf(path: Path) -> Any:
    """transformers' own GGUF loading of ``path`` (``from_pretrained(folder, gguf_file=...)``), float32, eval:
    the oracle, which undoes llama.cpp's transforms by its own mapping."""
    from anna_core.testing.oracle import hide_fla

    hide_fla()
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()


def load_selected(path: Path, *, dtype: torch.dtype = torch.float32, load_format: str = "auto"):
    """Load ``path`` as ``anna serve`` would: inspect it, pick the family from the installed plugins
    (for a GGUF: from ``general.architecture``), run that family's loader on the CPU."""
    from anna_core.kernels.registry import KernelRegistry
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import make_plugin_manager, model_families
    from anna_core.registry import resolve

    pm = make_plugin_manager()
    source = inspect_model_dir(path)
    family = select_family(source, model_families(pm))
    assert family.name == "qwen35"
    return resolve(family.loader)(source, device=torch.device("cpu"), dtype=dtype, load_format=load_format,
                                  kernels=KernelRegistry.from_plugins(pm))
