"""The talker as a model of Anna's engine (:class:`anna_core.model.CausalLM`): paged KV, batched steps, the code
predictor filling each frame inside the step.

Math as the plain :class:`~anna_audio.qwen3_tts.talker.Talker` and :func:`~anna_audio.qwen3_tts.generate.generate`
(after the reference, QwenLM/Qwen3-TTS ``modeling_qwen3_tts.py``); the weights are the loaded plain talker's and code
predictor's, shared, not copied. How a request maps onto the engine:

* The prompt is one ``"audio"`` medium covering every prompt position. Its ``data`` is ``{"prefill": [T, H],
  "trailing": [N, H]}`` (:class:`~anna_audio.qwen3_tts.prompt.TalkerPrompt`): the prefill embeddings are its
  "encoder output", spliced over placeholder ids (the codec ``pad`` id, which the talker never samples); the
  trailing text embeddings are copied, before the step that runs the prompt's first chunk (:meth:`start_prompts`,
  the runner's call for a model that declares ``prompt_state``), into a per-slot device table that decode steps read
  by position.
* The prompt's prefill is padding-safe (``padded_prefill``): a fresh prompt replays a captured prefill graph of its
  length bucket (:mod:`anna_core.engine.prefill_graphs`), its embeddings staged into the graphs' device buffer; the
  hidden state the first frame's code predictor reads is the last valid row's, and that first frame runs in the
  next decode step (a captured decode graph, like every frame).
* A sampled token is a frame's codebook 0. When it comes back as the next step's input (generated token ``k``), the
  code predictor reads the talker's hidden state that chose it (kept per sequence, by state slot) and the token's
  codec embedding, fills codebooks ``1 .. G-1``, and the step's input is the frame's summed embedding plus
  ``trailing[k]`` (``tts_pad`` past the end). The codes it filled are that sequence's side output
  (:meth:`gather_side_outputs`), which the engine hands back with the step's token: output ``k >= 1`` of a request
  carries codebooks ``1 .. G-1`` of token ``k - 1``. The last token (EOS, or the one that hit ``max_tokens``) never
  becomes a frame, as in the reference. The side outputs travel with the sampled ids, so the engine launches each
  decode step before reading the previous one back (asynchronous scheduling), as for a text model.
* The talker's logits block the control ids ``[vocab - 1024, vocab)`` except the codec EOS; the model also applies
  the request's repetition penalty and ``min_tokens`` (the prompt medium's ``"repetition_penalty"`` and
  ``"min_tokens"``, :mod:`~anna_audio.qwen3_tts.engine_requests`) from per-slot device state, the math of the
  engine's sampler (:meth:`compute_logits`), so the engine's sampler, left with temperature / top-k / top-p only,
  runs inside captured decode graphs.

Decode steps read and write only device tensors (per-slot tables, the batch's static inputs), so the engine may
capture them as graphs, the code predictor's passes for the frame included (its sampling is
:func:`~anna_audio.qwen3_tts.sampling.choose_gumbel`: no host sync).

Preemption by recompute (the talker declares ``recompute_holds_last``): the engine keeps each request's side
outputs, so a recomputed generated token ``k`` takes its frame from the codes the engine handed out beside output
``k + 1`` (:meth:`CodePredictor.embed_frame` of them plus ``trailing[k]``, the input its first pass had) instead of
running the code predictor again (whose sampled codes would differ, and whose input, the hidden state of token
``k - 1``, is computed in the same pass). The last generated token has no codes yet: the engine recomputes up to
the token before it (leaving that token's hidden state in the slot) and decodes it next, as if never preempted.
"""

from __future__ import annotations

from typing import Any

import torch
from anna_core.cache_spec import CacheSpec, FullAttentionSpec
from anna_core.engine.forward_batch import ForwardBatch, PromptStart
from anna_core.errors import AnnaError
from anna_core.layers.attention import PagedAttention
from anna_core.layers.media import splice_media
from anna_core.layers.rotary import inverse_frequencies
from anna_core.model import ModelCaches, ModelCapabilities
from anna_core.multimodal import MediaItem
from torch import nn

from anna_audio.qwen3_tts.code_predictor import CodePredictor
from anna_audio.qwen3_tts.config import CONTROL_ROWS, Qwen3TTSConfig
from anna_audio.qwen3_tts.decoder_layer import Qwen3Layer
from anna_audio.qwen3_tts.frame_predictor import FramePredictor
from anna_audio.qwen3_tts.layers import merge_weights
from anna_audio.qwen3_tts.sampling import CodeSampling
from anna_audio.qwen3_tts.talker import Talker


class PagedTalkerLayer(nn.Module):
    """One plain :class:`~anna_audio.qwen3_tts.decoder_layer.Qwen3Layer` run over the paged cache (layer ``index``
    of cache group 0) through the op table's fused kernels, six calls: the residual add and input norm fused into one
    matmul over the merged ``[q; k; v]`` weight (``add_rms_norm_linear``; the plain projections' weights become views
    of it), ``qk_norm_rope_cache`` for the per-head q / k norms, the rotary and the cache write, the attention,
    ``o_proj``, the residual add and post-attention norm fused into the merged ``[gate; up]`` weight's matmul and
    its gated product (``add_rms_norm_linear_act_mul``), ``down_proj`` (the device's kernels fuse a norm into its
    matmul where that pays, :mod:`anna_xpu_kernels.fused_linear`; the CPU's references compose the same math).

    Five calls where the op table offers a kernel (not only the torch reference: ``ops.accelerated``, looked up once
    here) for ``qk_norm_rope_cache_attention``: the norms, rotary, cache write and attention as one op, for every
    step (the same math; anna-xpu-kernels' runs a decode batch, one query per sequence, as one attention launch and
    any other batch, a prefill or a chunk of several queries, as its own two kernels; opt-in there,
    ``ANNA_QK_NORM_ROPE_ATTENTION=1``). Its 1-D positions are the talker's: the checkpoints' interleaved M-RoPE
    sections all turn by the same text position (:class:`TalkerLM` rotates with the default rotary), and the talker
    has no sliding window.

    The talker does not declare ``quantized_kv``, so its cache is never quantized and the fused cache write always
    applies. Numerics: the fused norms multiply by their weight in float32 and round once, where the plain layer
    rounds and then multiplies in the model's dtype (equal to rounding in float32, where the golden codes are
    checked)."""

    def __init__(self, layer: Qwen3Layer, index: int, ops: Any) -> None:
        super().__init__()
        self.layer = layer
        self.ops = ops
        a = layer.self_attn
        self.attn = PagedAttention(a.heads, a.kv_heads, a.head_dim, a.head_dim ** -0.5, 0, index, ops)
        self.norm_rope_cache = ops.get("qk_norm_rope_cache", head_dim=a.head_dim)
        # the pre-processing and the attention in one op where a kernel (not the reference's composition) serves it
        self.norm_rope_cache_attend = ops.accelerated("qk_norm_rope_cache_attention", head_dim=a.head_dim)
        self.register_buffer("qkv_weight", merge_weights([a.q_proj, a.k_proj, a.v_proj]), persistent=False)
        self.register_buffer("gate_up_weight", merge_weights([layer.mlp.gate_proj, layer.mlp.up_proj]),
                             persistent=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, positions: torch.Tensor,
                inv_freq: torch.Tensor, batch: ForwardBatch, caches: ModelCaches) -> tuple[torch.Tensor, torch.Tensor]:
        """x: ``[T, H]`` the previous layer's output (or the input embeddings), residual ``[T, H]`` its residual stream
        (None before the first layer), positions ``[T]`` int64, inv_freq ``[Dh/2]`` float32 -> (this layer's output,
        its residual stream), ``[T, H]`` each. Six op-table calls, five with ``qk_norm_rope_cache_attention`` (class
        docstring)."""
        ops, lay, a, t = self.ops, self.layer, self.layer.self_attn, x.shape[0]
        eps = lay.input_layernorm.eps
        qkv, residual = ops.add_rms_norm_linear(x, residual, lay.input_layernorm.weight, eps, False, self.qkv_weight)
        nq, nkv = a.heads * a.head_dim, a.kv_heads * a.head_dim
        q, k, v = (qkv[:, :nq].view(t, a.heads, a.head_dim), qkv[:, nq:nq + nkv].view(t, a.kv_heads, a.head_dim),
                   qkv[:, nq + nkv:].view(t, a.kv_heads, a.head_dim))
        k_cache, v_cache, slots = self.attn.kv_cache(batch, caches)
        pre = (q, k, v, a.q_norm.weight, a.k_norm.weight, a.q_norm.eps, False, positions, inv_freq, k_cache, v_cache,
               slots)
        if self.norm_rope_cache_attend is not None:
            _, _, *attention = self.attn.attention_args(batch, caches)  # cu_seqlens_q, seq_lens, blocks, scale, window
            o = self.norm_rope_cache_attend(*pre, *attention)  # [T, H_q, Dh]
        else:
            o = self.attn.attend(self.norm_rope_cache(*pre), batch, caches)
        o = ops.linear(o.reshape(t, -1), a.o_proj.weight, None)
        gated, residual = ops.add_rms_norm_linear_act_mul(o, residual, lay.post_attention_layernorm.weight, eps, False,
                                                          self.gate_up_weight, "silu")
        return ops.linear(gated, lay.mlp.down_proj.weight, None), residual


class TalkerLM(nn.Module):
    """The engine's talker (see the module docstring).

    Args:
        config: the checkpoint's configuration.
        talker: the loaded plain talker (its parameters are used in place).
        predictor: the loaded code predictor.
        ops: kernel ops bound to the serving device and dtype (the paged attention's).
        predictor_sampling: how the code predictor picks codebooks ``1 .. G-1`` (the checkpoint's ``subtalker_*``
            defaults; greedy when not ``do_sample``).

    Before an engine runs it, :meth:`reserve_slots` sizes its per-sequence state to the engine's ``max_num_seqs``
    (and the longest trailing text a prompt may carry).
    """

    def __init__(self, config: Qwen3TTSConfig, talker: Talker, predictor: CodePredictor, ops: Any, *,
                 predictor_sampling: CodeSampling) -> None:
        super().__init__()
        self.config = config
        self.talker = talker
        self.predictor = predictor
        self.frame_predictor = FramePredictor(predictor, ops, predictor_sampling)
        s = config.talker.shape
        self.ops = ops
        self.layers = nn.ModuleList(PagedTalkerLayer(layer, i, ops) for i, layer in enumerate(talker.model.layers))
        self.vocab_size = config.talker.vocab_size
        self.hidden_size = s.hidden_size
        self.cache_spec = CacheSpec((FullAttentionSpec(layers=range(s.num_layers), num_kv_heads=s.num_kv_heads,
                                                       head_dim=s.head_dim),))
        self.capabilities = ModelCapabilities(modalities=("audio",), side_outputs=True, recompute_holds_last=True,
                                              padded_prefill=True, prompt_state=True)
        weight = talker.codec_head.weight
        dev, dt = weight.device, weight.dtype
        inv_freq = inverse_frequencies(s.head_dim, {"rope_type": "default", "rope_theta": s.rope_theta})
        self.register_buffer("inv_freq", inv_freq.to(dev), persistent=False)
        self.max_trailing = 0
        groups = config.talker.num_code_groups
        self.register_buffer("last_hidden", torch.zeros(0, s.hidden_size, dtype=dt, device=dev), persistent=False)
        self.register_buffer("frame_codes", torch.zeros(0, groups - 1, dtype=torch.int64, device=dev),
                             persistent=False)
        self.register_buffer("trailing", torch.zeros(0, 0, s.hidden_size, dtype=dt, device=dev), persistent=False)
        self.register_buffer("trailing_len", torch.zeros(0, dtype=torch.int64, device=dev), persistent=False)
        self.register_buffer("prompt_len", torch.zeros(0, dtype=torch.int64, device=dev), persistent=False)
        self.register_buffer("seen", torch.zeros(0, self.vocab_size, dtype=torch.bool, device=dev), persistent=False)
        self.register_buffer("penalty", torch.ones(0, dtype=torch.float32, device=dev), persistent=False)
        self.register_buffer("min_tokens", torch.zeros(0, dtype=torch.int64, device=dev), persistent=False)
        self._logit_rows: tuple[torch.Tensor, torch.Tensor] | None = None
        with torch.no_grad():
            pad = talker.text(torch.tensor([config.text_ids["tts_pad"]], device=dev))[0]
        self.register_buffer("pad_embed", pad, persistent=False)
        blocked = torch.ones(self.vocab_size, dtype=torch.bool, device=dev)
        blocked[: self.vocab_size - CONTROL_ROWS] = False
        blocked[config.talker.ids.eos] = False
        self.register_buffer("blocked", blocked, persistent=False)
        self.register_buffer("eos_mask", torch.arange(self.vocab_size, device=dev) == config.talker.ids.eos,
                             persistent=False)

    def reserve_slots(self, max_num_seqs: int, max_trailing: int = 512) -> None:
        """Size the per-sequence state for an engine of ``max_num_seqs`` state slots plus its scratch slot: the
        hidden state that chose each sequence's last token, the codes its last step filled, its trailing text (at
        most ``max_trailing`` embeddings: a prompt whose text is streamed holds about one per text token), and its
        sampling controls (the codes it has seen, its repetition penalty and ``min_tokens``). Call it before the
        engine is built (captured graphs keep these tensors' addresses).

        Raises:
            ValueError: ``max_num_seqs`` or ``max_trailing`` below 1.
        """
        if max_num_seqs < 1 or max_trailing < 1:
            raise ValueError(f"max_num_seqs and max_trailing must be positive, got {max_num_seqs}, {max_trailing}")
        slots = max_num_seqs + 1
        self.max_trailing = max_trailing
        self.last_hidden = self.last_hidden.new_zeros(slots, self.hidden_size)
        self.frame_codes = self.frame_codes.new_zeros(slots, self.frame_codes.shape[1])
        self.trailing = self.trailing.new_zeros(slots, max_trailing, self.hidden_size)
        self.trailing_len = self.trailing_len.new_zeros(slots)
        self.prompt_len = self.prompt_len.new_zeros(slots)
        self.seen = self.seen.new_zeros(slots, self.vocab_size)
        self.penalty = self.penalty.new_ones(slots)
        self.min_tokens = self.min_tokens.new_zeros(slots)
        self.frame_predictor.reserve(slots)

    @property
    def predictor_sampling(self) -> CodeSampling:
        """How the code predictor picks codebooks ``1 .. G-1`` (its frame loop's; set it before the engine captures
        decode graphs, which hold the choice)."""
        return self.frame_predictor.choose

    @predictor_sampling.setter
    def predictor_sampling(self, sampling: CodeSampling) -> None:
        self.frame_predictor.choose = sampling

    @property
    def placeholder_id(self) -> int:
        """The prompt's placeholder token id (the codec ``pad``: a control id, never sampled)."""
        return self.config.talker.ids.pad

    @property
    def eos_token_id(self) -> int:
        return self.config.talker.ids.eos

    def encode(self, items: list[MediaItem]) -> list[torch.Tensor]:
        """Each prompt medium's prefill embeddings ``[length, H]`` (``data["prefill"]``), on the model's device.

        Raises:
            AnnaError: a medium that is not a talker prompt of its length.
        """
        return [self._prompt_part(item, "prefill", item.length) for item in items]

    def _prompt_part(self, item: MediaItem, key: str, rows: int | None) -> torch.Tensor:
        data = item.data
        value = data.get(key) if isinstance(data, dict) else None
        if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[1] != self.hidden_size \
                or (rows is not None and value.shape[0] != rows):
            raise AnnaError(f"a talker prompt medium must hold {key!r} embeddings [{rows or 'N'}, {self.hidden_size}]")
        weight = self.talker.codec_head.weight
        return value.to(device=weight.device, dtype=weight.dtype)

    def start_prompts(self, prompts: list[PromptStart]) -> None:
        """Bind each starting prompt's trailing text and sampling controls to its state slot's tables, and clear the
        codes its slot has seen (``ModelCapabilities.prompt_state``: the runner calls it before the forward pass of
        a step that computes prompts' first chunks, so a prefill graph's replay finds them bound). Device writes by
        the host-known slot, queued ahead of the step: one copy of the trailing rows (already on the device where the
        planner built the prompt there) and a fill per control, no host read. A prompt without media (e.g. a
        warm-up's) binds nothing.

        Raises:
            AnnaError: no slots reserved; a medium that is not a talker prompt; a trailing text longer than
                :meth:`reserve_slots` made room for; sampling controls out of range (a penalty not positive, a
                negative ``min_tokens``). Checked for every prompt before any is bound.
        """
        if self.last_hidden.shape[0] == 0:
            raise AnnaError("TalkerLM.reserve_slots was not called before the engine ran it")
        binds = []
        for prompt in prompts:
            media = prompt.media
            if media is None or not media.items:
                continue
            item = media.items[0]
            trailing = self._prompt_part(item, "trailing", None)
            n = trailing.shape[0]
            if n > self.max_trailing:
                raise AnnaError(f"the prompt's text runs {n} embeddings past the prompt; this server holds "
                                f"{self.max_trailing}")
            penalty, min_tokens = float(item.data.get("repetition_penalty", 1.0)), int(item.data.get("min_tokens", 0))
            if not penalty > 0 or min_tokens < 0:
                raise AnnaError(f"a talker prompt's repetition_penalty must be positive and its min_tokens "
                                f"non-negative, got {penalty}, {min_tokens}")
            binds.append((prompt.state_slot, trailing, item.end, penalty, min_tokens))
        for slot, trailing, prompt_len, penalty, min_tokens in binds:
            n = trailing.shape[0]
            self.trailing[slot, :n].copy_(trailing)  # rows past n are never read (_texts: k < trailing_len)
            self.trailing_len[slot].fill_(n)  # fill_ of a Python number: one kernel, no host-to-device copy
            self.prompt_len[slot].fill_(prompt_len)
            self.penalty[slot].fill_(penalty)
            self.min_tokens[slot].fill_(min_tokens)
            self.seen[slot].fill_(False)

    @staticmethod
    def _generated_rows(batch: ForwardBatch) -> tuple[list[int], list[int], list[torch.Tensor]]:
        """The rows of an eager step that hold generated tokens (past their prompt), on the host: ``(predicted,
        replayed, codes)``: the rows whose frame the code predictor fills (a token the step consumes for the first
        time: its sequence's first row this step), the rows a recompute replays, and their codebooks ``1 .. G-1``
        ``[G-1]`` each (generated token ``k`` takes the side output handed out with output ``k + 1``). A sequence
        without media, e.g. a warm-up's, has every row predicted.

        Raises:
            AnnaError: a generated token without its codes behind another row of its chunk (its code predictor
                would need the hidden state this very pass computes; the engine's recompute stops before it).
        """
        predicted, replayed, codes, start = [], [], [], 0
        for i, q in enumerate(batch.query_lens):
            media = batch.media[i] if i < len(batch.media) else None
            first_pos = batch.context_lens[i] - q
            if media is None or not media.items:
                predicted += range(start, start + q)
                start += q
                continue
            prompt_len = media.items[0].end
            side = batch.side_outputs[i] if i < len(batch.side_outputs) else ()
            for pos in range(max(prompt_len, first_pos), first_pos + q):
                row, k = start + pos - first_pos, pos - prompt_len
                if k + 1 < len(side):
                    replayed.append(row)
                    codes.append(side[k + 1])
                elif row == start:
                    predicted.append(row)
                else:
                    raise AnnaError(f"the talker cannot compute generated token {k} in the pass of the token before "
                                    "it (its codes are not known yet)")
            start += q
        return predicted, replayed, codes

    def _texts(self, slots: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``[T, H]``: the text embedding a generated token at ``positions`` adds: ``trailing[k]`` of its slot's
        table for the token's index ``k = position - prompt length``, ``tts_pad`` past the end (device ops only)."""
        k = positions - self.prompt_len[slots]
        valid = (k >= 0) & (k < self.trailing_len[slots])
        rows = self.trailing[slots, k.clamp(0, self.max_trailing - 1)]  # [T, H]
        return torch.where(valid[:, None], rows, self.pad_embed)

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Final hidden states ``[T, H]`` of the step's rows (see the module docstring for the rows' inputs).

        A padded one-sequence prefill (``batch.num_valid`` set: a prefill graph, :mod:`anna_core.engine.prefill_graphs`)
        holds prompt rows only (the runner replays prefill graphs of a ``recompute_holds_last`` model for prompt
        tokens alone), bound by :meth:`start_prompts` before it: its inputs are the spliced prompt embeddings, its
        placeholders are not marked seen (blocked ids: their logits stay ``-inf`` either way), and the hidden state
        kept for the first frame's code predictor is the last valid row's. Padding rows write only their own K/V
        positions (the scratch block's) and no per-slot table; the pass reads nothing on the host.

        Raises:
            AnnaError: no slots reserved.
        """
        if self.last_hidden.shape[0] == 0:
            raise AnnaError("TalkerLM.reserve_slots was not called before the engine ran it")
        rows = torch.arange(batch.num_tokens, device=batch.input_ids.device)
        seq_of_row = torch.bucketize(rows, batch.cu_seqlens[1:].to(torch.int64), right=True)  # [T]
        slots = batch.state_slots[seq_of_row]  # [T]
        first = self.talker.codec(batch.input_ids)  # [T, H]
        padded = batch.num_valid is not None
        if padded:  # a prefill graph's prompt: every valid row a placeholder
            x = splice_media(first, batch)
        else:
            x = self._inputs(batch, first, slots)
            self.seen.index_put_((slots, batch.input_ids), torch.ones_like(batch.input_ids, dtype=torch.bool))
        logit_rows = batch.logits_indices
        self._logit_rows = (slots.index_select(0, logit_rows), batch.positions.index_select(0, logit_rows))
        residual = None
        for layer in self.layers:
            x, residual = layer(x, residual, batch.positions, self.inv_freq, batch, caches)
        norm = self.talker.model.norm
        hidden = self.ops.add_rms_norm(x, residual, norm.weight, norm.eps, False)[0]
        last = (batch.num_valid if padded else batch.cu_seqlens[1:].to(torch.int64)) - 1  # each sequence's last row
        self.last_hidden.index_copy_(0, batch.state_slots, hidden.index_select(0, last))
        return hidden

    def _inputs(self, batch: ForwardBatch, first: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """The input embeddings ``[T, H]`` of a step's rows (not a padded prefill's), given their codec embeddings
        ``first`` ``[T, H]`` and state slots ``[T]``: a decode step's (device ops only) the code predictor's frames
        plus their texts, filling :attr:`frame_codes`; any other step's :meth:`_eager_inputs`."""
        decode = batch.is_decode and batch.embeds is None
        plan = self._generated_rows(batch) if not decode or any(batch.side_outputs) else None
        if plan is not None and decode and not plan[1]:
            plan = None  # a decode step without recomputed rows
        if plan is not None:  # prompt rows, recomputed rows: the code predictor runs on the new generated rows only
            return self._eager_inputs(batch, first, slots, plan)
        # every row a generated token consumed for the first time
        rest, frame = self.frame_predictor(self.last_hidden[slots], first)  # [T, G-1], [T, H]
        self.frame_codes.index_copy_(0, slots, rest)
        return frame + self._texts(slots, batch.positions)

    def _eager_inputs(self, batch: ForwardBatch, first: torch.Tensor, slots: torch.Tensor,
                      plan: tuple[list[int], list[int], list[torch.Tensor]]) -> torch.Tensor:
        """The input embeddings ``[T, H]`` of an eager step's rows, given their :meth:`_generated_rows` ``plan``:
        prompt rows the prompt's embeddings, new generated rows the code predictor's frame, recomputed ones the
        frame of their kept codes, each generated row plus its text."""
        predicted, replayed, codes = plan
        dev, x = first.device, first
        if predicted:
            rows = torch.tensor(predicted, dtype=torch.int64, device=dev)
            p_slots = slots[rows]
            rest, frame = self.frame_predictor(self.last_hidden[p_slots], first[rows])
            x = x.index_copy(0, rows, frame + self._texts(p_slots, batch.positions[rows]))
            self.frame_codes.index_copy_(0, p_slots, rest)
        if replayed:
            rows = torch.tensor(replayed, dtype=torch.int64, device=dev)
            frame = self.predictor.embed_frame(first[rows], torch.stack(codes).to(dev))
            x = x.index_copy(0, rows, frame + self._texts(slots[rows], batch.positions[rows]))
        return splice_media(x, batch)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden ``[N, H]`` (the logits rows, ``ForwardBatch.logits_indices``, of the step :meth:`forward` just ran)
        -> codec logits ``[N, vocab]`` float32: control ids but EOS at ``-inf``; then, per row, the request's
        repetition penalty on the codes its sequence has seen (divided by it where positive, multiplied where not:
        Keskar et al., CTRL, 2019, as the engine's sampler applies it; the prompt's placeholders are blocked ids,
        which stay ``-inf``), and EOS at ``-inf`` while fewer than its ``min_tokens`` codes were generated. Device
        ops only (captured in decode graphs). Without a forward pass before it (hidden states from elsewhere), the
        blocked ids only."""
        logits = self.talker.codec_head(hidden).float().masked_fill(self.blocked, float("-inf"))
        if self._logit_rows is None or self._logit_rows[0].shape[0] != logits.shape[0]:
            return logits
        slots, positions = self._logit_rows
        rep = self.penalty[slots][:, None]  # [N, 1]
        penalized = torch.where(logits > 0, logits / rep, logits * rep)
        logits = torch.where(self.seen[slots], penalized, logits)
        generated = positions - self.prompt_len[slots] + 1  # codes generated before this row's
        held = (generated < self.min_tokens[slots])[:, None] & self.eos_mask[None, :]  # [N, vocab]
        return logits.masked_fill(held, float("-inf"))

    def gather_side_outputs(self, state_slots: torch.Tensor) -> torch.Tensor:
        """state_slots ``[n]`` int64 -> ``[n, G-1]`` int64 on the model's device: per slot, codebooks ``1 .. G-1``
        that the last step filled for the token its sequence sampled the step before (meaningless after a prefill
        step). One gather, no host read: the engine's runner runs it at the end of each step (inside captured decode
        graphs) and copies the rows to the host with the sampled ids, so a step launched ahead (asynchronous
        scheduling) never waits for it and the next step's overwrite of :attr:`frame_codes` cannot reach it."""
        return self.frame_codes.index_select(0, state_slots)
