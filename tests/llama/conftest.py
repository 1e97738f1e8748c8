"""Shared helpers of the anna-llama tests: GGUF conversion and loading through the plugin (the tiny random
checkpoints are the package's own, :mod:`anna_llama.tiny`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch


def llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The row order llama.cpp's converter writes for ``attn_q`` / ``attn_k`` (rotary pairs interleaved)."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def hf_to_gguf_tensors(model: Any) -> dict[str, np.ndarray]:
    """HF parameters under llama.cpp names and layouts (float32)."""
    cfg = model.config
    out: dict[str, np.ndarray] = {}
    for name, p in model.state_dict().items():
        w = p.detach().float().numpy().copy()
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = w
        elif name == "model.norm.weight":
            out["output_norm.weight"] = w
        elif name == "lm_head.weight":
            if not cfg.tie_word_embeddings:
                out["output.weight"] = w
        else:
            _, _, layer, rest = name.split(".", 3)
            module, kind = rest.rsplit(".", 1)
            gguf_name = GGUF_NAMES[module]
            if gguf_name == "attn_q":
                w = llama_cpp_permute(w, cfg.num_attention_heads)
            elif gguf_name == "attn_k":
                w = llama_cpp_permute(w, cfg.num_key_value_heads)
            out[f"blk.{layer}.{gguf_name}.{kind}"] = w
    return out


def load_anna(path: Path, *, dtype: torch.dtype = torch.float32, load_format: str = "auto", gguf_file=None,
              weight_quant: str = "none"):
    """Load ``path`` through model-dir inspection, family selection from the installed plugins, and the loader
    (``weight_quant="none"``, dequantized, by default: HF's GGUF loader, the oracle, dequantizes too)."""
    from anna_core.kernels.registry import KernelRegistry
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import make_plugin_manager, model_families
    from anna_core.registry import resolve

    pm = make_plugin_manager()
    source = inspect_model_dir(path, gguf_file)
    family = select_family(source, model_families(pm))
    return resolve(family.loader)(source, device=torch.device("cpu"), dtype=dtype, load_format=load_format,
                                  kernels=KernelRegistry.from_plugins(pm), weight_quant=weight_quant)


def rel_err(mine: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|mine - ref| / max|ref|``."""
    return ((mine - ref).abs().max() / ref.abs().max()).item()
