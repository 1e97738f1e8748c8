"""The code predictor's frame loop for the engine's decode steps: the same math as
:class:`~anna_audio.qwen3_tts.code_predictor.CodePredictor` (the oracle-checked plain form), over static buffers and
the engine's fused ops, so a captured decode graph holds all of a frame's ``G - 1`` passes.

Per frame the predictor runs a causal sequence of ``G`` positions (the talker's hidden state and codebook-0
embedding, then one position per predicted codebook but the last; see the plain module). Here:

* keys and values go into a static cache laid out as the engine's paged one, one block of ``G`` positions per row
  (``[layers, 2, rows, G, H_kv, Dh]``; reset implicitly: each frame writes positions ``0 .. G-1`` in order before
  reading them): each pass is one ``qk_norm_rope_cache`` (the per-head q / k norms, the rotary and the cache write)
  and one ``paged_attention`` over the positions written so far, with static block tables, slots and lengths — or,
  where the op table offers a kernel for it (not only the torch reference: ``ops.accelerated``), one
  ``qk_norm_rope_cache_attention`` doing both (the same math; on a GPU one launch for a pass of one query per row,
  the kernel itself running the two ops for the first pass's two; anna-xpu-kernels' is opt-in,
  ``ANNA_QK_NORM_ROPE_ATTENTION=1``, until a GPU measures it faster);
* each residual add and the norm after it fuse into the projection that reads the norm: ``add_rms_norm_linear`` over
  the layer's merged ``[q; k; v]`` weight, ``add_rms_norm_linear_act_mul`` over its merged ``[gate; up]`` weight
  (the plain module's parameters become views of the merged tensors: shared, not copied), and the final norm into
  the codebook's head (``add_rms_norm_linear``); ``o_proj`` and ``down_proj`` are the op table's ``linear``. A
  layer is six op-table calls, five with the fused attention (one launch each where the device's kernels fuse the
  norm into the matrix product: :mod:`anna_xpu_kernels.fused_linear` decides per shape; the CPU's references
  compose the unfused ops, the same math);
* each codebook's code is drawn from the head's logits by the op table's ``top_k_gumbel_sample`` (sampling without
  top-p: temperature, top-k and the Gumbel-max draw in one launch where a kernel serves it, instead of seven) or
  their argmax (greedy);
* the next talker input's codec sum (:meth:`CodePredictor.embed_frame`) reuses the embeddings the passes looked up.

No pass allocates on the host nor reads a device value on the host, and every shape is fixed by the batch size, so
the engine may capture the whole loop inside the talker's decode step (one graph per batch bucket).
Numerics: the fused norms multiply by their weight in float32 and round once (the plain ``RMSNorm`` rounds the
normalised value, then multiplies in the model's dtype); in float32 the two agree to rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from anna_core.layers.rotary import inverse_frequencies
from torch import nn

from anna_audio.qwen3_tts.code_predictor import Choose, CodePredictor
from anna_audio.qwen3_tts.decoder_layer import Qwen3Layer
from anna_audio.qwen3_tts.layers import merge_weights
from anna_audio.qwen3_tts.sampling import CodeSampling, choose_gumbel, gumbel_noise


class FramePredictor(nn.Module):
    """A frame's codebooks ``1 .. G-1`` and the talker's next input, over static buffers (module docstring).

    Args:
        predictor: the loaded code predictor (its parameters are used in place; q/k/v and gate/up weights become
            views of merged tensors).
        ops: the kernel op table bound to the predictor's device and dtype (``linear``, ``add_rms_norm_linear``,
            ``add_rms_norm_linear_act_mul``, ``qk_norm_rope_cache``, ``paged_attention``, ``top_k_gumbel_sample``;
            and ``qk_norm_rope_cache_attention`` in place of ``qk_norm_rope_cache`` and ``paged_attention`` where
            ``ops.accelerated`` offers it).
        choose: how a code is picked from a head's logits without a host sync: a :class:`CodeSampling` (greedy, or
            a Gumbel-max draw -- ``top_k_gumbel_sample`` without top-p,
            :func:`~anna_audio.qwen3_tts.sampling.choose_gumbel` with it -- from the frame's Gumbel noise for all
            ``G - 1`` codebooks drawn in one go, :func:`~anna_audio.qwen3_tts.sampling.gumbel_noise`: five launches
            a frame instead of five a codebook), or any :data:`Choose` (called once per codebook with the float32
            logits).

    :meth:`reserve` sizes the key/value buffer before the engine captures graphs.
    """

    def __init__(self, predictor: CodePredictor, ops, choose: CodeSampling | Choose) -> None:
        super().__init__()
        self.predictor = predictor
        self.ops = ops
        self.choose = choose
        s = predictor.config.shape
        self.heads, self.kv_heads, self.head_dim, self.eps = s.num_heads, s.num_kv_heads, s.head_dim, s.rms_norm_eps
        self.groups = predictor.config.num_code_groups
        layers: list[Qwen3Layer] = list(predictor.model.layers)
        weight = predictor.lm_head[0].weight
        for i, lay in enumerate(layers):
            a = lay.self_attn
            self.register_buffer(f"qkv_{i}", merge_weights([a.q_proj, a.k_proj, a.v_proj]), persistent=False)
            self.register_buffer(f"gate_up_{i}", merge_weights([lay.mlp.gate_proj, lay.mlp.up_proj]), persistent=False)
        inv_freq = inverse_frequencies(s.head_dim, {"rope_type": "default", "rope_theta": s.rope_theta})
        self.register_buffer("inv_freq", inv_freq.to(weight.device), persistent=False)
        self.norm_rope_cache = ops.get("qk_norm_rope_cache", head_dim=s.head_dim)
        self.attend = ops.get("paged_attention", head_dim=s.head_dim)
        # the pre-processing and the attention in one op where a kernel (not the reference's composition) serves it
        self.norm_rope_cache_attend = ops.accelerated("qk_norm_rope_cache_attention", head_dim=s.head_dim)
        self.sample = ops.get("top_k_gumbel_sample")
        self.scale = s.head_dim ** -0.5
        self.register_buffer("kv", torch.zeros(0, dtype=weight.dtype, device=weight.device), persistent=False)
        self.rows = 0
        self.tables: dict[str, torch.Tensor] = {}

    def reserve(self, rows: int) -> None:
        """Size the static buffers for frames of up to ``rows`` rows (the engine's largest decode batch with its
        scratch row); a larger batch (an eager step) gets buffers of its own for that call.

        Raises:
            ValueError: ``rows < 1``.
        """
        if rows < 1:
            raise ValueError(f"rows must be positive, got {rows}")
        self.rows = rows
        self.kv = self._kv_buffer(rows)
        self.tables = self._tables(rows)

    def _kv_buffer(self, rows: int) -> torch.Tensor:
        n = len(self.predictor.model.layers)
        return self.kv.new_zeros(n, 2, rows, self.groups, self.kv_heads, self.head_dim)

    def _tables(self, rows: int) -> dict[str, torch.Tensor]:
        """The passes' static attention inputs for up to ``rows`` rows (row ``r``'s block is block ``r``):
        ``positions`` ``[G, 2 rows]`` int64 (row 0 the first pass's ``0, 1, 0, 1, ...``, row ``p >= 1`` all ``p``),
        ``slots`` ``[G, 2 rows]`` int64 (``r * G + position``), ``seq_lens`` ``[G, rows]`` int32 (``p + 1``, 2 for
        the first pass), ``cu_first`` / ``cu_next`` ``[rows + 1]`` int32 query offsets (2 rows a sequence, then 1),
        ``block_tables`` ``[rows, 1]`` int32."""
        dev, g = self.kv.device, self.groups
        positions = torch.arange(g, device=dev)[:, None].expand(g, 2 * rows).clone()
        positions[0] = torch.arange(2, device=dev).repeat(rows)
        block = torch.arange(rows, device=dev)
        owner = torch.cat([block.repeat_interleave(2)[None], block.repeat(g - 1, 2)])  # [G, 2 rows]: the row's block
        seq_lens = torch.arange(1, g + 1, device=dev, dtype=torch.int32)[:, None].expand(g, rows).clone()
        seq_lens[0] = 2
        cu = torch.arange(rows + 1, device=dev, dtype=torch.int32)
        return {"positions": positions, "slots": owner * g + positions, "seq_lens": seq_lens, "cu_first": 2 * cu,
                "cu_next": cu, "block_tables": block.to(torch.int32)[:, None]}

    def forward(self, talker_hidden: torch.Tensor, first_code_embed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One frame per row.

        Args:
            talker_hidden: ``[B, H_talker]``, the talker's final hidden state that chose codebook 0.
            first_code_embed: ``[B, H_talker]``, the talker's codec embedding of that code.

        Returns:
            ``(codes [B, G-1] int64, next_input [B, H_talker])``: codebooks ``1 .. G-1`` and the frame's summed codec
            embedding (:meth:`CodePredictor.embed_frame`).

        Raises:
            ValueError: inputs that are not ``[B, H_talker]`` of one batch size; :meth:`reserve` not called.
        """
        p = self.predictor
        if talker_hidden.dim() != 2 or talker_hidden.shape != first_code_embed.shape \
                or talker_hidden.shape[1] != p.talker_hidden:
            raise ValueError(f"talker_hidden and first_code_embed must both be [B, {p.talker_hidden}], got "
                             f"{tuple(talker_hidden.shape)} and {tuple(first_code_embed.shape)}")
        if self.rows == 0:
            raise ValueError("FramePredictor.reserve was not called")
        b = talker_hidden.shape[0]
        kv, tables = (self.kv, self.tables) if b <= self.rows else (self._kv_buffer(b), self._tables(b))
        x = torch.stack((talker_hidden, first_code_embed), dim=1).view(2 * b, -1)  # [2B, H_talker], row-major
        total = first_code_embed
        codes = []
        sampled = isinstance(self.choose, CodeSampling) and self.choose.do_sample
        noise = gumbel_noise((self.groups - 1, b, p.config.vocab_size), x.device) if sampled else None
        for g in range(self.groups - 1):
            t = 2 if g == 0 else 1
            start = 0 if g == 0 else g + 1
            logits = self._pass(x, b, t, start, kv, tables, p.lm_head[g].weight)  # [B, vocab]
            code = self._pick(logits, g, noise)
            codes.append(code)
            embed = F.embedding(code, p.model.codec_embedding[g].weight)  # [B, H_talker]
            total = total + embed
            x = embed
        return torch.stack(codes, dim=1), total

    def _pick(self, logits: torch.Tensor, g: int, noise: torch.Tensor | None) -> torch.Tensor:
        """Codebook ``g + 1``'s codes ``[B]`` from its head's logits ``[B, vocab]`` in the model's dtype (noise: the
        frame's ``[G-1, B, vocab]`` Gumbel noise when sampling through a :class:`CodeSampling`). A
        :class:`CodeSampling` without top-p is the op table's ``top_k_gumbel_sample`` (one launch where a kernel
        serves it; the same draw as :func:`choose_gumbel` of the float32 logits), greedy the argmax (the same id
        in any float dtype); otherwise the float32 logits go to :func:`choose_gumbel` or the ``choose`` callable."""
        c = self.choose
        if isinstance(c, CodeSampling):
            if not c.do_sample:
                return logits.argmax(dim=-1)
            if c.top_p == 1.0:
                return self.sample(logits, noise[g], c.temperature, c.top_k)
            return choose_gumbel(logits.float(), c, noise[g])
        return c(logits.float(), g + 1)

    def _pass(self, x: torch.Tensor, b: int, t: int, start: int, kv: torch.Tensor, tables: dict[str, torch.Tensor],
              head: torch.Tensor) -> torch.Tensor:
        """x ``[B*t, H_talker]`` (row-major ``[B, t]``) at positions ``start .. start+t``, head ``[vocab, D]`` -> the
        head's logits ``[B, vocab]`` (x's dtype, a strided view) at each row's last position; writes the positions' keys and values into
        ``kv``. Six op-table calls a layer, five with ``qk_norm_rope_cache_attention`` (module docstring); the final
        norm is fused into the head."""
        p, ops, eps = self.predictor, self.ops, self.eps
        proj = p.small_to_mtp_projection
        h = ops.linear(x, proj.weight, proj.bias) if isinstance(proj, nn.Linear) else x  # [B*t, D]
        nh, nkv, dh = self.heads, self.kv_heads, self.head_dim
        positions, slots = tables["positions"][start, : b * t], tables["slots"][start, : b * t]
        seq_lens, blocks = tables["seq_lens"][start, :b], tables["block_tables"][:b]
        cu = tables["cu_first"][: b + 1] if t > 1 else tables["cu_next"][: b + 1]
        residual, out = None, h
        for i, layer in enumerate(p.model.layers):
            a = layer.self_attn
            qkv, residual = ops.add_rms_norm_linear(out, residual, layer.input_layernorm.weight, eps, False,
                                                    self.get_buffer(f"qkv_{i}"))  # [B*t, (H + 2 H_kv) Dh]
            q = qkv[:, : nh * dh].view(b * t, nh, dh)
            k = qkv[:, nh * dh: (nh + nkv) * dh].view(b * t, nkv, dh)
            v = qkv[:, (nh + nkv) * dh:].view(b * t, nkv, dh)
            pre = (q, k, v, a.q_norm.weight, a.k_norm.weight, eps, False, positions, self.inv_freq, kv[i, 0], kv[i, 1],
                   slots)
            if self.norm_rope_cache_attend is not None:
                o = self.norm_rope_cache_attend(*pre, cu, seq_lens, blocks, self.scale, None)  # [B*t, H, Dh]
            else:
                o = self.attend(self.norm_rope_cache(*pre), kv[i, 0], kv[i, 1], cu, seq_lens, blocks, self.scale, None)
            o = ops.linear(o.reshape(b * t, nh * dh), a.o_proj.weight, None)
            gated, residual = ops.add_rms_norm_linear_act_mul(o, residual, layer.post_attention_layernorm.weight, eps,
                                                              False, self.get_buffer(f"gate_up_{i}"), "silu")
            out = ops.linear(gated, layer.mlp.down_proj.weight, None)
        # every row through the final norm and the head (the first pass's earlier position too: one launch instead
        # of gathering the last positions first), then the last position's logits of each row
        logits = ops.add_rms_norm_linear(out, residual, p.model.norm.weight, eps, False, head)[0]  # [B*t, vocab]
        return logits.view(b, t, -1)[:, -1]
