"""Multimodal inputs of a request: media (images, video frames, audio) and the placeholder tokens they fill.

A family's processor turns a medium into its encoder inputs and expands it in the prompt to ``length``
placeholder tokens. The engine runs the model's encoder on the medium (:meth:`CausalLM.encode
<anna_core.model.CausalLM>`), caches the ``[length, hidden]`` output for the request while its prefill
needs it (a chunked prefill encodes each medium once), and splices the rows into the token embeddings
at the placeholder positions (:func:`anna_core.layers.media.splice_media`).

The medium's ``content_hash`` is part of the prefix-cache key of every KV block its placeholders fall
in (:mod:`anna_core.engine.prefix_cache`) and of the prompt-cache key, so two different images behind
the same placeholder tokens never share blocks, and the same image does.

Positions: a model whose capabilities declare ``position_rows = R > 1`` (M-RoPE: 3 rows, temporal /
height / width) receives ``[R, T]`` positions. :attr:`MultiModalInputs.positions` gives every prompt
token's ``R`` positions; a token after the prompt (generated) at index ``i`` has position
``i + position_delta`` in every row. Without ``positions``, token ``i`` has position ``i`` in every row.

Pure Python (torch only inside :func:`media_hash`): the scheduler imports this module.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from anna_core.errors import InvalidRequestError

MODALITIES = ("image", "video", "audio")
"""The modalities a model may declare (``ModelCapabilities.modalities``)."""


@attrs.frozen
class MediaItem:
    """One medium of a request.

    Attributes:
        modality: one of :data:`MODALITIES`.
        offset: prompt index of its first placeholder token.
        length: its placeholder tokens, i.e. the rows of its encoder output.
        content_hash: bytes naming its content: :func:`media_hash` of its encoder inputs (or of the
            medium's bytes together with every processor setting that changes them). Equal hashes of equal
            length must mean equal encoder outputs: they share one output and prefix-cache blocks.
        data: the encoder inputs as the family's processor made them (e.g. a dict of tensors: pixel
            values and the patch grid); passed to the model's ``encode`` unchanged.
    """

    modality: str
    offset: int
    length: int
    content_hash: bytes
    data: Any = attrs.field(default=None, eq=False, repr=False)

    @property
    def end(self) -> int:
        """One past its last placeholder token."""
        return self.offset + self.length

    @property
    def key(self) -> bytes:
        """The encoder-cache key: the content hash and the length (equal keys: one encoder output)."""
        return self.content_hash + self.length.to_bytes(8, "little")


@attrs.frozen
class MultiModalInputs:
    """The media of one request and, for models with multi-row positions, every prompt token's positions.

    Attributes:
        items: the media, ascending by ``offset``, placeholder ranges disjoint.
        positions: ``R`` rows of ``P`` positions (``P`` prompt tokens; M-RoPE: ``R = 3``), or None
            (token ``i`` has position ``i`` in every row).
        position_delta: the position of a generated token at index ``i >= P`` is ``i + position_delta``
            in every row (M-RoPE: ``max(positions) + 1 - P``).
    """

    items: tuple[MediaItem, ...] = attrs.field(default=(), converter=tuple)
    positions: tuple[tuple[int, ...], ...] | None = attrs.field(
        default=None, converter=lambda rows: None if rows is None else tuple(tuple(r) for r in rows))
    position_delta: int = 0

    def items_in(self, start: int, end: int) -> list[MediaItem]:
        """The media whose placeholders overlap tokens ``start .. end-1``."""
        return [m for m in self.items if m.offset < end and m.end > start]

    def block_extra(self, start: int, end: int, num_prompt_tokens: int) -> bytes:
        """The prefix-cache key material of tokens ``start .. end-1`` beyond their ids: the media overlapping
        them (offset, content hash, length) and, when the positions are not the token indices, the
        positions of those tokens (b"" for a text block at its own indices)."""
        out = [m.offset.to_bytes(8, "little") + m.key for m in self.items_in(start, end)]
        if self.positions is not None and start < num_prompt_tokens:
            out.append(b"pos" + array("q", [p for r in self.positions for p in r[start:min(end, num_prompt_tokens)]])
                       .tobytes())
        if self.position_delta and end > num_prompt_tokens:
            out.append(b"delta" + self.position_delta.to_bytes(8, "little", signed=True))
        return b"".join(out)

    @property
    def is_plain(self) -> bool:
        """No media, and every token at its own index (a text prompt)."""
        return not self.items and self.positions is None and not self.position_delta

    @property
    def key(self) -> tuple:
        """The prompt-cache key's media part: every medium's ``(offset, key)``, the positions and the delta."""
        return (tuple((m.offset, m.key) for m in self.items), self.positions, self.position_delta)

    def position_rows(self, start: int, end: int, num_prompt_tokens: int, rows: int) -> list[list[int]]:
        """``rows`` lists of the positions of tokens ``start .. end-1`` (prompt positions, then
        ``index + position_delta`` after the prompt)."""
        p = num_prompt_tokens
        if self.positions is None:
            tail = range(max(start, p) + self.position_delta, end + self.position_delta)
            head = range(start, min(end, p))
            return [[*head, *tail] for _ in range(rows)]
        tail = list(range(max(start, p) + self.position_delta, end + self.position_delta))
        return [list(r[start:min(end, p)]) + tail for r in self.positions]


class MediaProcessor(Protocol):
    """A family's request preparation for media (``LoadedModel.processor``): the checkpoint's own preprocessing,
    placeholder expansion and positions.

    Attributes:
        modalities: the media it prepares (a subset of the model's declared modalities).
        video_sampling: ``(fps, max_frames, max_frame_pixels)``: the rate an encoded video is sampled at, the
            most frames kept (the checkpoint's defaults: a request's ``mm_processor_kwargs`` ``fps`` overrides the
            first and ``max_frames`` may lower the second, never raise it) and the largest frame (width * height)
            the processor could use, to which frames are downscaled as they are decoded; None for a processor
            that takes no video.
    """

    modalities: tuple[str, ...]
    video_sampling: tuple[float, int, int] | None

    def process(self, prompt_token_ids: Sequence[int], media: Mapping[str, Sequence[Any]],
                options: Mapping[str, Any] | None = None) -> tuple[list[int], MultiModalInputs]:
        """The prompt with each medium's placeholder expanded to its encoder rows, and its inputs.

        Args:
            prompt_token_ids: the prompt, one placeholder token per medium (as the chat template writes it).
            media: decoded media by modality (``{"image": [PIL images], "video": [DecodedVideo or frame lists]}``),
                in the order of their placeholders.
            options: per-request preprocessing settings (``mm_processor_kwargs``, e.g. pixel bounds), or None.

        Raises:
            InvalidRequestError: media it does not take, placeholders that do not match the media, a medium
                it cannot preprocess, an unknown or invalid option.
        """


def media_hash(*parts: Any) -> bytes:
    """A 16-byte BLAKE2b digest of a medium's content.

    Args:
        parts: ``bytes`` / ``str`` / ``int`` / ``float``, or tensors and arrays (their dtype, shape and
            values are hashed), in a fixed order (e.g. the pixel values and the patch grid).

    Raises:
        TypeError: a part of another type.
    """
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        if isinstance(part, (bytes, bytearray, memoryview)):
            h.update(b"b")
            h.update(bytes(part))
        elif isinstance(part, str):
            h.update(b"s")
            h.update(part.encode())
        elif isinstance(part, (int, float)):
            h.update(b"n")
            h.update(repr(part).encode())
        else:
            h.update(b"t")
            h.update(_array_bytes(part))
    return h.digest()


def _array_bytes(value: Any) -> bytes:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous()
        head = f"{t.dtype}{tuple(t.shape)}".encode()
        return head + t.reshape(-1).view(torch.uint8).numpy().tobytes()
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{value.shape}".encode() + np.ascontiguousarray(value).tobytes()
    raise TypeError(f"media_hash cannot hash a {type(value).__name__}")


def check_multimodal(mm: MultiModalInputs, num_prompt_tokens: int, *, modalities: Sequence[str],
                     position_rows: int, max_item_tokens: int) -> None:
    """Check a request's multimodal inputs against its prompt and the model.

    Args:
        mm: the inputs.
        num_prompt_tokens: ``P``.
        modalities: what the model declares it encodes (empty: text only).
        position_rows: the model's position rows ``R``.
        max_item_tokens: the most placeholder tokens one medium may have (the engine's per-step encoder
            budget and encoder-cache size: a larger one could never be encoded).

    Raises:
        InvalidRequestError: media for a model that takes none or not of that modality, placeholder
            ranges outside the prompt, overlapping or unsorted, a medium over ``max_item_tokens``, or
            positions of the wrong shape.
    """
    if mm.items and not modalities:
        raise InvalidRequestError("this model takes text only; the request carries media", param="messages")
    prev_end = 0
    for m in mm.items:
        if m.modality not in modalities:
            raise InvalidRequestError(f"this model does not take {m.modality} inputs (it takes "
                                      f"{', '.join(modalities)})", param="messages")
        if not isinstance(m.content_hash, bytes) or not m.content_hash:
            raise InvalidRequestError("a medium needs a non-empty content_hash", param="messages")
        if m.length < 1 or m.offset < prev_end or m.end > num_prompt_tokens:
            raise InvalidRequestError(f"{m.modality} placeholder range {m.offset}..{m.end} is empty, overlaps "
                                      f"another or lies outside the {num_prompt_tokens}-token prompt", param="messages")
        if m.length > max_item_tokens:
            raise InvalidRequestError(f"an {m.modality} of {m.length} tokens exceeds the {max_item_tokens} encoder "
                                      "tokens one step may take (max_encoder_tokens)", param="messages")
        prev_end = m.end
    if mm.positions is not None:
        if len(mm.positions) != position_rows or any(len(r) != num_prompt_tokens for r in mm.positions):
            raise InvalidRequestError(f"positions must be {position_rows} rows of {num_prompt_tokens} prompt "
                                      "positions", param="messages")
