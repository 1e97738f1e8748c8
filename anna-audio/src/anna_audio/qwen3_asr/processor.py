"""Qwen3-ASR request preparation: 16 kHz waveforms -> placeholders and media items (the features are the model's).

A prompt marks each audio with one ``<|audio_pad|>`` (:func:`anna_audio.qwen3_asr.prompt.build_transcription_prompt`
writes ``<|audio_start|><|audio_pad|><|audio_end|>``). :meth:`Qwen3ASRProcessor.process` counts each clip's mel
frames (:meth:`anna_audio.features.LogMelFeatures.num_frames`), expands its placeholder to the rows the encoder makes
of them (:func:`anna_audio.features.encoder_rows`, the count ``Qwen3ASRProcessor._get_audio_token_length`` gives) and
makes the run one :class:`~anna_core.multimodal.MediaItem` holding the waveform; the model computes the log-mel
features of the clips it encodes together on its own device
(:meth:`anna_audio.qwen3_asr.model.Qwen3ASRModel.encode`, :meth:`~anna_audio.features.LogMelFeatures.batch`), so the
request thread does no signal processing. The item's ``content_hash`` is :func:`~anna_core.multimodal.media_hash` of
the waveform, so equal audio shares encoder output and prefix-cache blocks and different audio behind the same
number of placeholders never does. Positions are the token indices (1-D rotary): no ``positions`` rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from anna_core.errors import InvalidRequestError
from anna_core.multimodal import MediaItem, MultiModalInputs, media_hash

from anna_audio.features import LogMelFeatures, encoder_rows

AUDIO_TOKEN = "<|audio_pad|>"


class Qwen3ASRProcessor:
    """Implements :class:`anna_core.multimodal.MediaProcessor` for Qwen3-ASR (modality ``"audio"``).

    Args:
        features: the checkpoint's feature extractor (``n_window`` = the encoder's); it counts the frames here, the
            model computes them.
        audio_token_id: the ``<|audio_pad|>`` id (``config.json`` ``audio_token_id``).
    """

    modalities = ("audio",)
    video_sampling = None

    def __init__(self, features: LogMelFeatures, audio_token_id: int):
        self.features = features
        self.audio_token_id = audio_token_id

    def process(self, prompt_token_ids: Sequence[int], media: Mapping[str, Sequence[Any]],
                options: Mapping[str, Any] | None = None) -> tuple[list[int], MultiModalInputs]:
        """The prompt with each audio's placeholder expanded, and its :class:`MultiModalInputs`.

        Args:
            prompt_token_ids: ``P0`` ids with one ``<|audio_pad|>`` per audio, in the audios' order.
            media: ``{"audio": [waveforms]}``, each ``[N]`` float32 mono samples at 16 kHz, ``N >= 1``, finite
                (:func:`anna_audio.audio_io.decode_audio`'s ``samples``).
            options: must be empty (Qwen3-ASR takes no per-request preprocessing settings).

        Returns:
            ``(ids, inputs)``: each placeholder replaced by ``num_rows`` copies; one ``"audio"`` item per clip with
            ``data`` ``{"samples": [N] float32 CPU tensor, "num_frames": int}`` (the mel frames its features will
            have).

        Raises:
            InvalidRequestError: another modality, placeholders that do not match the audios in number, any
                option, a waveform that is not a non-empty finite 1-D float array.
        """
        unknown = sorted(set(media) - set(self.modalities))
        if unknown:
            raise InvalidRequestError(f"this model takes audio, not {', '.join(unknown)}", param="file")
        if options:
            raise InvalidRequestError(f"Qwen3-ASR takes no mm_processor_kwargs (got {sorted(options)})",
                                      param="mm_processor_kwargs")
        clips = list(media.get("audio", ()))
        ids = list(prompt_token_ids)
        slots = [i for i, t in enumerate(ids) if t == self.audio_token_id]
        if len(slots) != len(clips):
            raise InvalidRequestError(f"the prompt has {len(slots)} audio placeholders ({AUDIO_TOKEN}) for "
                                      f"{len(clips)} audios", param="file")
        if not clips:
            return ids, MultiModalInputs()
        out: list[int] = []
        items: list[MediaItem] = []
        prev = 0
        for slot, clip in zip(slots, clips):
            samples = torch.from_numpy(np.ascontiguousarray(_waveform(clip)))
            frames = self.features.num_frames(samples.shape[0])
            rows = encoder_rows(frames, self.features.n_window)
            out += ids[prev:slot]
            data = {"samples": samples, "num_frames": frames}
            items.append(MediaItem("audio", len(out), rows, media_hash(samples), data))
            out += [self.audio_token_id] * rows
            prev = slot + 1
        out += ids[prev:]
        return out, MultiModalInputs(items)


def _waveform(clip: Any) -> np.ndarray:
    """``clip`` as a float32 ``[N]`` array.

    Raises:
        InvalidRequestError: not a non-empty, finite, 1-D real array.
    """
    if not isinstance(clip, np.ndarray) or clip.ndim != 1 or clip.shape[0] == 0 or clip.dtype.kind != "f":
        shape = getattr(clip, "shape", None)
        raise InvalidRequestError(f"an audio must be a non-empty [N] float array of 16 kHz mono samples, got "
                                  f"{type(clip).__name__}{'' if shape is None else f' of shape {shape}'}",
                                  param="file")
    if not np.isfinite(clip).all():
        raise InvalidRequestError("an audio holds NaN or infinite samples", param="file")
    return clip.astype(np.float32, copy=False)
