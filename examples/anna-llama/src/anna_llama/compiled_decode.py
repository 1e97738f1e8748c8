"""The batch-1 decode step of a Llama model compiled whole, for the CPU.

Eagerly, one decode step of the default model (30 layers) dispatches about 1,700 small ops, a few
microseconds each, which on a 2-core CPU cost about as much as its int4 matrix products. Compiled as one
function (TorchInductor, C++ wrapper), the norms, rotary, cache writes, attention and residual adds fuse into
a few loops per layer around the projections, and the step is one call.

:class:`CompiledDecode` runs the same math as :class:`~anna_llama.model.LlamaForCausalLM`'s eager forward for
one sequence and one new token: the same modules (projections, kept-quantized or not, the rotary tables),
the K/V written to the same cache slot, and attention over the sequence's blocks in float32 as the
reference ``paged_attention``'s decode path computes it (``softmax(scale q K^T) V`` per KV head; the key
positions past the context, in the last block or in the padding block, are masked out, and their values
zeroed, so whatever those cache rows hold never reaches the output).

The number of blocks a step reads is dynamic (at least 2: a one-block context reads its block twice, the
copy masked), so one compiled graph serves every context length; so is the caches' number of blocks (the
engine sizes them from the free memory), so inductor's on-disk cache serves the next process's load.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.model import ModelCaches

log = logging.getLogger("anna.llama")


class CompiledDecode:
    """One sequence's one-token decode step through a compiled function.

    Args:
        model: the :class:`~anna_llama.model.LlamaForCausalLM` (weights loaded, projections merged).
        caches: its allocated caches (an unquantized attention group 0).
        compile_fn: wraps the step function, e.g. ``lambda fn: torch.compile(fn, options=...)``.

    Raises:
        ValueError: the caches' attention group is quantized (TurboQuant: its write and read are other ops), or
            the model or its caches are not float32 (the eager path's roundings of other dtypes are not mirrored).
    """

    def __init__(self, model: Any, caches: ModelCaches, compile_fn: Any):
        group = caches.attention(0)
        if group.quant is not None:
            raise ValueError("the compiled decode step reads unquantized K/V caches only")
        if model.model.norm.weight.dtype != torch.float32 or group.k[0].dtype != torch.float32:
            raise ValueError("the compiled decode step computes a float32 model (the CPU's serving dtype) only")
        self.model = model
        self.block_size = caches.block_size
        kv = [group.layer(layer.self_attn.attn.kv_index) for layer in model.model.layers]
        self.k_caches = [k for k, _ in kv]  # [num_blocks, block_size, H_kv, D] each
        self.v_caches = [v for _, v in kv]
        for cache in self.k_caches + self.v_caches:  # the engine sizes the caches from free memory: a graph for
            torch._dynamo.maybe_mark_dynamic(cache, 0)  # any block count, so inductor's cache serves the next load
        self._fn = compile_fn(self._step)
        self.failed: str | None = None

    def fits(self, batch: ForwardBatch) -> bool:
        """Whether ``batch`` is one sequence decoding one token without media (what :meth:`__call__` computes)."""
        return (self.failed is None and batch.is_decode and len(batch.query_lens) == 1 and batch.embeds is None
                and batch.checkpoints is None)

    def __call__(self, batch: ForwardBatch) -> torch.Tensor | None:
        """Hidden states ``[1, hidden]`` after the final norm for ``batch`` (:meth:`fits` must hold), or None
        when the first call's compilation failed (logged; the caller runs the eager forward, and every later
        call returns None at once)."""
        n_ctx = batch.context_lens[0]
        n_blocks = -(-n_ctx // self.block_size)
        blocks = batch.tables[0].block_tables[0, :n_blocks]
        if n_blocks < 2:  # the graph's dynamic block count starts at 2: read the block twice, the copy masked
            blocks = blocks.repeat(2)
        blocks = blocks if blocks.dtype == torch.long else blocks.long()
        torch._dynamo.maybe_mark_dynamic(blocks, 0)
        if self._fn is None:
            return None
        model = self.model.model
        x = model.embed_tokens(batch.input_ids)  # [1, H]: a table lookup (GGUF rows dequantized), eager
        wide = model.rotary.widen(model.rotary.cos_sin(batch.positions))
        args = (x, wide[0], wide[1], batch.tables[0].slot_mapping, blocks, torch.tensor(n_ctx, dtype=torch.long),
                self.k_caches, self.v_caches)
        try:
            return self._fn(*args)
        except Exception as exc:  # noqa: BLE001 - e.g. no C++ compiler for inductor: the eager forward serves
            if self.failed is not None:
                raise
            self.failed = f"{type(exc).__name__}: {str(exc)[:300]}"
            self._fn = None
            log.warning("compiling the decode step failed, decoding eagerly: %s", self.failed)
            return None

    def _step(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slot: torch.Tensor, blocks: torch.Tensor,
              n_ctx: torch.Tensor, k_caches: list[torch.Tensor], v_caches: list[torch.Tensor]) -> torch.Tensor:
        """x ``[1, H]`` float32 (the token's embedding); cos, sin ``[1, 1, rotary_dim]`` (the rotary module's
        ``widen``); slot ``[1]`` int64; blocks ``[B]`` int64 (``B >= 2``); n_ctx ``[]`` int64 -> ``[1, H]``."""
        model = self.model.model
        wide = (cos, sin)
        keys = blocks.shape[0] * self.block_size
        valid = torch.arange(keys, device=x.device) < n_ctx  # [B * block_size]
        for layer, k_cache, v_cache in zip(model.layers, k_caches, v_caches):
            attn = layer.self_attn
            h, h_kv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
            normed = F.rms_norm(x, (x.shape[-1],), layer.input_layernorm.weight, layer.input_layernorm.eps)
            qkv = attn.qkv_proj(normed).view(1, h + 2 * h_kv, d)
            qk = attn.rotary.rotate_wide(qkv[:, : h + h_kv], wide)
            q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + h_kv :]
            k_cache.view(-1, h_kv, d).index_copy_(0, slot, k)
            v_cache.view(-1, h_kv, d).index_copy_(0, slot, v)
            keys_ = k_cache.index_select(0, blocks).view(keys, h_kv, d)
            values = v_cache.index_select(0, blocks).view(keys, h_kv, d)
            values = torch.where(valid[:, None, None], values, 0.0)  # rows past the context never reach o
            q_g = q.reshape(h_kv, h // h_kv, d) * attn.attn.scale  # [H_kv, G, D]
            scores = torch.bmm(q_g, keys_.permute(1, 2, 0))  # [H_kv, G, keys]
            probs = torch.softmax(torch.where(valid, scores, float("-inf")), dim=-1)
            o = torch.bmm(probs, values.transpose(0, 1)).reshape(1, h * d)
            x = x + attn.o_proj(o)
            post = layer.post_attention_layernorm
            x = x + layer.mlp(F.rms_norm(x, (x.shape[-1],), post.weight, post.eps))
        return F.rms_norm(x, (x.shape[-1],), model.norm.weight, model.norm.eps)
