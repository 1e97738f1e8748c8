"""llama.cpp's Qwen3.5 GGUF layout (``qwen35`` / ``qwen35moe``) -> Anna's parameters.

llama.cpp's converter (``convert_hf_to_gguf.py``: ``Qwen3_5TextModel`` / ``Qwen3_5MoeTextModel``) renames
every tensor (``blk.{i}.*``) and changes these layouts, each undone here (in float32, after dequantization):

* zero-centred RMSNorm weights (``attn_norm``, ``post_attention_norm``, ``attn_q_norm``, ``attn_k_norm``,
  ``output_norm``) are stored as ``w + 1`` (llama.cpp's norm multiplies by the stored weight); the gated
  DeltaNet's ``ssm_norm`` is stored as it is;
* ``A_log`` is stored as ``ssm_a = -exp(A_log)``, ``dt_bias`` as ``ssm_dt.bias``;
* the depthwise ``conv1d`` weight ``[C, 1, W]`` is squeezed to ``[C, W]``;
* where the DeltaNet has more value heads than key heads (``r = H_v / H_k > 1``), the value heads are
  reordered from grouped by key head (transformers' and Anna's ``v = k * r + j``) to tiled (``j * H_k + k``,
  what ggml's broadcast wants) in every tensor with a value-head axis: the value rows of ``attn_qkv`` and
  the value channels of ``ssm_conv1d``, ``attn_gate`` (``in_proj_z``), ``ssm_beta`` / ``ssm_alpha``,
  ``ssm_a``, ``ssm_dt.bias``, and the input columns of ``ssm_out``;
* MoE routed experts are stacked per layer: ``ffn_gate_exps`` / ``ffn_up_exps`` ``[E, I, H]`` (joined into
  ``gate_up_proj [E, 2I, H]``, or already joined as ``ffn_gate_up_exps`` by ``--fuse-gate-up-exps``) and
  ``ffn_down_exps [E, H, I]``; the shared expert's gate ``ffn_gate_inp_shexp`` may be stored as ``[H]``.

The attention layers keep transformers' layout (``attn_q`` holds each head's query then its gate, no rotary
row permutation; ``--fuse-qkv`` files join ``attn_q|k|v`` into one ``attn_qkv``). A multi-token-prediction
block (``blk.{num_hidden_layers}.*``, counted in ``nextn_predict_layers``) is not served and is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch
from anna_core.weights.gguf_loader import GGUFDerived

from anna_qwen35.config import FULL, Qwen35Config


def _minus_one(t: torch.Tensor) -> torch.Tensor:
    return t - 1.0


def grouped_value_heads(t: torch.Tensor, dim: int, num_k_heads: int, per_k: int, head_dim: int) -> torch.Tensor:
    """Undo the converter's value-head reorder along ``dim`` (of ``per_k * num_k_heads * head_dim`` entries):
    tiled ``[per_k, num_k_heads, head_dim]`` -> grouped ``[num_k_heads, per_k, head_dim]``."""
    shape = list(t.shape)
    t = t.reshape(*shape[:dim], per_k, num_k_heads, head_dim, *shape[dim + 1:])
    return t.transpose(dim, dim + 1).reshape(shape)


def _deltanet(cfg: Qwen35Config, i: int) -> list[GGUFDerived]:
    hidden, hk, r = cfg.hidden_size, cfg.linear_num_key_heads, cfg.linear_num_value_heads // cfg.linear_num_key_heads
    hv, vd = cfg.linear_num_value_heads, cfg.linear_value_head_dim
    qk = 2 * hk * cfg.linear_key_head_dim
    conv_dim, value_dim = qk + hv * vd, hv * vd

    def heads(dim: int, head_dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda t: grouped_value_heads(t, dim, hk, r, head_dim)

    def after_qk(t: torch.Tensor) -> torch.Tensor:  # only the value rows / channels were reordered
        return torch.cat([t[:qk], grouped_value_heads(t[qk:], 0, hk, r, vd)])

    blk, mod = f"blk.{i}.", f"model.layers.{i}.linear_attn."
    return [
        GGUFDerived(mod + "in_proj_qkv.weight", (blk + "attn_qkv.weight",), ((conv_dim, hidden),), after_qk),
        GGUFDerived(mod + "in_proj_z.weight", (blk + "attn_gate.weight",), ((value_dim, hidden),), heads(0, vd)),
        GGUFDerived(mod + "in_proj_b.weight", (blk + "ssm_beta.weight",), ((hv, hidden),), heads(0, 1)),
        GGUFDerived(mod + "in_proj_a.weight", (blk + "ssm_alpha.weight",), ((hv, hidden),), heads(0, 1)),
        GGUFDerived(mod + "conv1d.weight", (blk + "ssm_conv1d.weight",), ((conv_dim, cfg.linear_conv_kernel_dim),),
                    lambda t: after_qk(t).unsqueeze(1)),
        GGUFDerived(mod + "dt_bias", (blk + "ssm_dt.bias",), ((hv,),), heads(0, 1)),
        GGUFDerived(mod + "A_log", (blk + "ssm_a",), ((hv,),), lambda t: grouped_value_heads(torch.log(-t), 0, hk, r, 1)),
        GGUFDerived(mod + "norm.weight", (blk + "ssm_norm.weight",), ((vd,),)),
        GGUFDerived(mod + "out_proj.weight", (blk + "ssm_out.weight",), ((hidden, value_dim),), heads(1, vd)),
    ]


def _attention(cfg: Qwen35Config, i: int, names: Collection[str]) -> list[GGUFDerived]:
    hidden, d = cfg.hidden_size, cfg.head_dim
    q, kv = 2 * cfg.num_attention_heads * d, cfg.num_key_value_heads * d  # q: each head's query, then its gate
    blk, mod = f"blk.{i}.", f"model.layers.{i}.self_attn."
    out = [
        GGUFDerived(mod + "o_proj.weight", (blk + "attn_output.weight",), ((hidden, cfg.num_attention_heads * d),)),
        GGUFDerived(mod + "q_norm.weight", (blk + "attn_q_norm.weight",), ((d,),), _minus_one),
        GGUFDerived(mod + "k_norm.weight", (blk + "attn_k_norm.weight",), ((d,),), _minus_one),
    ]
    fused = blk + "attn_qkv.weight"
    if fused in names:  # --fuse-qkv
        for part, start, size in (("q", 0, q), ("k", q, kv), ("v", q + kv, kv)):
            out.append(GGUFDerived(f"{mod}{part}_proj.weight", (fused,), ((q + 2 * kv, hidden),),
                                   lambda t, start=start, size=size: t[start:start + size]))
    else:
        out += [GGUFDerived(f"{mod}{p}_proj.weight", (f"{blk}attn_{p}.weight",), ((size, hidden),))
                for p, size in (("q", q), ("k", kv), ("v", kv))]
    return out


def _mlp(cfg: Qwen35Config, i: int, names: Collection[str]) -> list[GGUFDerived]:
    hidden, blk, mod = cfg.hidden_size, f"blk.{i}.", f"model.layers.{i}.mlp."
    if not cfg.is_moe:
        inter = cfg.intermediate_size
        return [GGUFDerived(mod + "gate_proj.weight", (blk + "ffn_gate.weight",), ((inter, hidden),)),
                GGUFDerived(mod + "up_proj.weight", (blk + "ffn_up.weight",), ((inter, hidden),)),
                GGUFDerived(mod + "down_proj.weight", (blk + "ffn_down.weight",), ((hidden, inter),))]
    e, inter, shared = cfg.num_experts, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size
    if blk + "ffn_gate_up_exps.weight" in names:  # --fuse-gate-up-exps: already [E, 2I, H]
        gate_up = GGUFDerived(mod + "experts.gate_up_proj", (blk + "ffn_gate_up_exps.weight",), ((e, 2 * inter, hidden),))
    else:
        gate_up = GGUFDerived(mod + "experts.gate_up_proj", (blk + "ffn_gate_exps.weight", blk + "ffn_up_exps.weight"),
                              ((e, inter, hidden), (e, inter, hidden)), lambda g, u: torch.cat([g, u], dim=1))
    return [
        GGUFDerived(mod + "gate.weight", (blk + "ffn_gate_inp.weight",), ((e, hidden),)),
        gate_up,
        GGUFDerived(mod + "experts.down_proj", (blk + "ffn_down_exps.weight",), ((e, hidden, inter),)),
        GGUFDerived(mod + "shared_expert_gate.weight", (blk + "ffn_gate_inp_shexp.weight",), ((1, hidden),),
                    lambda t: t.reshape(1, hidden)),
        GGUFDerived(mod + "shared_expert.gate_proj.weight", (blk + "ffn_gate_shexp.weight",), ((shared, hidden),)),
        GGUFDerived(mod + "shared_expert.up_proj.weight", (blk + "ffn_up_shexp.weight",), ((shared, hidden),)),
        GGUFDerived(mod + "shared_expert.down_proj.weight", (blk + "ffn_down_shexp.weight",), ((hidden, shared),)),
    ]


def gguf_derivations(cfg: Qwen35Config, names: Collection[str]) -> list[GGUFDerived]:
    """One :class:`GGUFDerived` per parameter of the (unmerged, fused-experts) model for ``cfg``.

    Args:
        names: the file's tensor names (they say whether ``--fuse-qkv`` / ``--fuse-gate-up-exps`` were used).
    """
    hidden = cfg.hidden_size
    out = [GGUFDerived("model.embed_tokens.weight", ("token_embd.weight",), ((cfg.vocab_size, hidden),)),
           GGUFDerived("model.norm.weight", ("output_norm.weight",), ((hidden,),), _minus_one)]
    if not cfg.tie_word_embeddings:
        out.append(GGUFDerived("lm_head.weight", ("output.weight",), ((cfg.vocab_size, hidden),)))
    for i, kind in enumerate(cfg.layer_types):
        blk, mod = f"blk.{i}.", f"model.layers.{i}."
        out += [GGUFDerived(mod + "input_layernorm.weight", (blk + "attn_norm.weight",), ((hidden,),), _minus_one),
                GGUFDerived(mod + "post_attention_layernorm.weight", (blk + "post_attention_norm.weight",),
                            ((hidden,),), _minus_one)]
        out += _attention(cfg, i, names) if kind == FULL else _deltanet(cfg, i)
        out += _mlp(cfg, i, names)
    return out


def mtp_block(cfg: Qwen35Config, blocks: int) -> Callable[[str], bool]:
    """Whether a GGUF tensor name belongs to a block past the decoder stack but within the file's
    ``block_count`` (the multi-token-prediction block(s), not served)."""
    skipped = tuple(f"blk.{i}." for i in range(cfg.num_hidden_layers, blocks))
    return lambda name: name.startswith(skipped)
