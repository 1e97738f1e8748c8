"""A tiny random model that takes media, for engine tests of multimodal inputs (yours and Anna's).

:class:`MultiModalLM` is :class:`~anna_core.testing.cache_groups_model.CacheGroupsLM` (full, sliding-window,
shared-KV and recurrent cache groups) with

* an encoder: a medium's ``data`` is a ``[length, FEATURES]`` float32 tensor, encoded to ``[length, 16]``
  rows that depend on the whole medium (each row mixes in the medium's mean), so a chunk that reads a
  medium's later rows must use the output computed over all of it;
* the encoder rows spliced in at the placeholder tokens (:func:`anna_core.layers.media.splice_media`);
* three position rows (M-RoPE-like: ``position_rows = 3``), each with its own sinusoid weight, so a row
  given the wrong value changes the output;
* padded prefills (``padded_prefill``), so its prompts replay prefill graphs.

:meth:`MultiModalLM.reference_logits` computes the same function over a whole sequence with no cache,
the media spliced in densely. :func:`image` builds a random medium and :func:`grid_positions` Qwen-VL-style
positions (a medium's tokens on a 2-D grid at one temporal position, text after it continuing from its
largest position).

Example::

    model = MultiModalLM()
    prompt = [5] * 3 + [PLACEHOLDER] * 6 + [7, 8]
    item = image(seed=1, offset=3, length=6)
    mm = grid_positions(len(prompt), [item])
    engine.add_request("r", prompt, params, multimodal=mm)
"""

from __future__ import annotations

import torch
from torch import nn

from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.media import splice_media
from anna_core.model import ModelCapabilities
from anna_core.multimodal import MediaItem, MultiModalInputs, media_hash
from anna_core.testing.cache_groups_model import HIDDEN, CacheGroupsLM, _sinusoid

FEATURES = 6
PLACEHOLDER = 3
"""The placeholder token id tests use (any id works: the encoder rows replace its embedding)."""
ROW_WEIGHTS = (1.0, 0.6, 0.3)


def image(seed: int, offset: int, length: int, modality: str = "image") -> MediaItem:
    """A random medium of ``length`` placeholder tokens at ``offset`` (equal seeds: equal content and hash)."""
    g = torch.Generator().manual_seed(seed)
    data = torch.randn(length, FEATURES, generator=g)
    return MediaItem(modality, offset, length, media_hash(data), data)


def grid_positions(num_prompt_tokens: int, items: list[MediaItem], width: int = 2) -> MultiModalInputs:
    """The media with three position rows: text tokens count up in every row; a medium's tokens share
    one temporal position and lie on a grid ``width`` wide (height, width rows); text after a medium
    continues from its largest position plus one."""
    rows: list[list[int]] = [[], [], []]
    nxt, i, by_offset = 0, 0, {m.offset: m for m in items}
    while i < num_prompt_tokens:
        m = by_offset.get(i)
        if m is None:
            for r in rows:
                r.append(nxt)
            nxt, i = nxt + 1, i + 1
            continue
        for k in range(m.length):
            rows[0].append(nxt)
            rows[1].append(nxt + k // width)
            rows[2].append(nxt + k % width)
        nxt = max(rows[1][-1], rows[2][-1], nxt) + 1
        i += m.length
    return MultiModalInputs(items, rows, nxt - num_prompt_tokens)


class MultiModalLM(CacheGroupsLM):
    """:class:`CacheGroupsLM` with an image / audio encoder and three position rows (see the module doc).

    Args:
        window, vocab_size, seed: as for :class:`CacheGroupsLM`.
    """

    def __init__(self, window: int = 8, vocab_size: int = 64, seed: int = 0):
        super().__init__(window=window, vocab_size=vocab_size, seed=seed)
        gen = torch.Generator().manual_seed(seed + 1)
        self.hidden_size = HIDDEN
        self.capabilities = ModelCapabilities(padded_prefill=True, modalities=("image", "audio"), position_rows=3)
        self.enc = nn.Parameter(torch.randn(FEATURES, HIDDEN, generator=gen))
        self.enc_mix = nn.Parameter(torch.randn(FEATURES, HIDDEN, generator=gen))
        self.head = nn.Parameter(torch.randn(HIDDEN, vocab_size, generator=gen) * 1.5)
        self.num_encoded = 0  # media encoded so far (tests count re-encodes)

    def encode(self, items: list[MediaItem]) -> list[torch.Tensor]:
        """``[item.length, 16]`` float32 per medium."""
        self.num_encoded += len(items)
        return [self._encoder(m.data) for m in items]

    def _encoder(self, data: torch.Tensor) -> torch.Tensor:
        return torch.tanh(data @ self.enc + data.mean(0, keepdim=True) @ self.enc_mix) * 2.0

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[N, 16]`` -> ``[N, vocab]`` float32 (an untied head: :class:`CacheGroupsLM`'s tied one
        mostly repeats the last token, whatever the media)."""
        return hidden @ self.head

    def _positions(self, positions: torch.Tensor) -> torch.Tensor:
        """``[3, T]`` positions -> ``[T, 16]`` features."""
        return sum(w * _sinusoid(positions[r], HIDDEN) for r, w in enumerate(ROW_WEIGHTS))

    def embed_inputs(self, batch: ForwardBatch) -> torch.Tensor:
        if batch.positions.dim() != 2 or batch.positions.shape[0] != 3:
            raise ValueError(f"MultiModalLM takes [3, T] positions, got {tuple(batch.positions.shape)}")
        return splice_media(self.embed(batch.input_ids), batch) + self._positions(batch.positions)

    @torch.inference_mode()
    def reference_logits(self, token_ids: list[int], multimodal: MultiModalInputs | None = None,
                         num_prompt_tokens: int | None = None) -> torch.Tensor:
        """``[T, vocab]`` float32 logits of one whole sequence without any cache: ``token_ids`` is the
        prompt (its first ``num_prompt_tokens``, default all) and any generated tokens."""
        p = len(token_ids) if num_prompt_tokens is None else num_prompt_tokens
        mm = multimodal or MultiModalInputs()
        h = self.embed(torch.tensor(token_ids, dtype=torch.int64))
        for m in mm.items:
            h[m.offset:m.end] = self._encoder(m.data)
        pos = torch.tensor(mm.position_rows(0, len(token_ids), p, 3), dtype=torch.int64)
        return self.dense_logits(h + self._positions(pos))

    def reference_greedy(self, prompt: list[int], n: int, multimodal: MultiModalInputs | None = None) -> list[int]:
        """``n`` greedy tokens after ``prompt`` from :meth:`reference_logits`."""
        tokens = list(prompt)
        for _ in range(n):
            tokens.append(int(self.reference_logits(tokens, multimodal, len(prompt))[-1].argmax()))
        return tokens[len(prompt):]
