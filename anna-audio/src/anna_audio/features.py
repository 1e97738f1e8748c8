"""Log-mel features of a 16 kHz waveform, as Qwen3-ASR's audio encoder takes them.

The features are transformers' own ``Qwen3ASRFeatureExtractor`` (128 Slaney mel bins over a 400-sample Hann STFT
every 160 samples, ``log10`` clamped to 8 below the clip's maximum and scaled as ``(x + 4) / 4``; a clip shorter
than 0.5 s is zero-padded to it; the frame axis is right-padded to a multiple of ``2 * n_window``), called with the
settings ``Qwen3ASRProcessor`` passes it, one clip at a time. :func:`encoder_rows` counts the rows the encoder's
three stride-2 convolutions leave, per window of ``2 * n_window`` frames: the audio placeholders a prompt needs.

:meth:`LogMelFeatures.batch` computes the same features for several clips at once with torch on any device (the
model's, so a batch of clips is one STFT on the GPU): each clip reflect-padded by ``n_fft // 2`` at both ends as
``torch.stft(center=True)`` pads it alone, the clips right-padded with zeros to the longest, one STFT without
centering, and each clip's ``log10`` clamp taken over its own frames only. It equals the per-clip path up to the
floating-point order of the STFT and the mel matrix product (on the CPU within :data:`BATCH_TOLERANCE`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

from anna_audio.audio_io.resample import TARGET_RATE

PREPROCESSOR_CONFIG = "preprocessor_config.json"
CONV_STRIDES = 3
"""Stride-2 convolutions (kernel 3, padding 1) in the encoder's front end."""
BATCH_TOLERANCE = 1e-4
"""The largest absolute difference (in the scaled log-mel units, values in about ``[-1, 3]``) allowed between
:meth:`LogMelFeatures.batch` and the per-clip path on the same device; tests hold the CPU to it."""


@attrs.frozen
class AudioFeatures:
    """One clip's encoder input.

    Attributes:
        features: ``[n_mels, F]`` float32 log-mel frames, ``F`` a multiple of ``2 * n_window`` (zeros past
            ``num_frames``).
        num_frames: mel frames of the clip (the feature extractor's mask), ``<= F``.
        num_rows: rows of the encoder's output for it (:func:`encoder_rows`): the audio placeholders it fills.
    """

    features: torch.Tensor
    num_frames: int
    num_rows: int


def _conv_out(length: int) -> int:
    return (length + 1) // 2 if length > 0 else 0  # kernel 3, stride 2, padding 1


def encoder_rows(num_frames: int, n_window: int = 50) -> int:
    """Rows the encoder makes of ``num_frames`` mel frames: it cuts them into windows of ``2 * n_window`` frames
    (the last one shorter) and halves each window's length :data:`CONV_STRIDES` times, rounding up.

    Raises:
        ValueError: ``num_frames`` negative or ``n_window`` not positive.
    """
    if num_frames < 0 or n_window <= 0:
        raise ValueError(f"encoder_rows needs num_frames >= 0 and n_window > 0, got {num_frames}, {n_window}")

    def rows(length: int) -> int:
        for _ in range(CONV_STRIDES):
            length = _conv_out(length)
        return length

    full, rest = divmod(num_frames, 2 * n_window)
    return full * rows(2 * n_window) + rows(rest)


class LogMelFeatures:
    """Computes :class:`AudioFeatures` of 16 kHz mono clips.

    Args:
        extractor: a transformers ``Qwen3ASRFeatureExtractor`` (default: one with its default settings, which are
            the released checkpoints').
        n_window: half the encoder's window in mel frames (the checkpoint's ``audio_config.n_window``).

    Raises:
        ValueError: ``n_window`` not positive, or an extractor whose sample rate is not 16 kHz.
    """

    def __init__(self, extractor: Any = None, n_window: int = 50):
        if extractor is None:
            from transformers import Qwen3ASRFeatureExtractor

            extractor = Qwen3ASRFeatureExtractor()
        if n_window <= 0:
            raise ValueError(f"n_window must be positive, got {n_window}")
        if extractor.sampling_rate != TARGET_RATE:
            raise ValueError(f"the feature extractor expects {extractor.sampling_rate} Hz audio; Anna decodes to "
                             f"{TARGET_RATE} Hz")
        self.extractor = extractor
        self.n_window = n_window

    @classmethod
    def from_checkpoint(cls, root: str | Path, n_window: int = 50) -> LogMelFeatures:
        """The feature extractor of the checkpoint folder ``root`` (its ``preprocessor_config.json``, read locally).

        Raises:
            FileNotFoundError: the folder has no ``preprocessor_config.json``.
        """
        from transformers import Qwen3ASRFeatureExtractor

        root = Path(root)
        if not (root / PREPROCESSOR_CONFIG).is_file():
            raise FileNotFoundError(f"{root} has no {PREPROCESSOR_CONFIG}")
        return cls(Qwen3ASRFeatureExtractor.from_pretrained(str(root), local_files_only=True), n_window)

    @property
    def num_mel_bins(self) -> int:
        return int(self.extractor.feature_size)

    def num_frames(self, num_samples: int) -> int:
        """Mel frames of a clip of ``num_samples`` samples (after the extractor's zero-padding to ``min_length``):
        the frame count :meth:`__call__` and :meth:`batch` give it."""
        return max(int(num_samples), int(self.extractor.min_length)) // int(self.extractor.hop_length)

    def padded_frames(self, num_frames: int) -> int:
        """``num_frames`` rounded up to a multiple of ``2 * n_window``: the width of the clip's features."""
        window = 2 * self.n_window
        return -(-num_frames // window) * window

    def batch(self, clips: list[torch.Tensor | np.ndarray], device: torch.device | str | None = None
              ) -> list[AudioFeatures]:
        """The features of several clips, computed together with torch on ``device`` (see the module docstring).

        Args:
            clips: each ``[N_i]`` float32 mono samples at 16 kHz, ``N_i >= 1``.
            device: where to compute (default: the first clip's device); the features stay there.

        Returns:
            One :class:`AudioFeatures` per clip, as :meth:`__call__` gives it (``features`` ``[n_mels, F_i]``
            float32 on ``device``), equal to it within :data:`BATCH_TOLERANCE`.

        Raises:
            ValueError: no clips, a clip that is not a non-empty 1-D array, or an extractor with dither (random
                noise: no two paths agree).
        """
        ext = self.extractor
        if not clips:
            raise ValueError("batch needs at least one clip")
        if float(getattr(ext, "dither", 0.0)) != 0.0:
            raise ValueError("the batched features need an extractor without dither")
        waves = [torch.as_tensor(c) for c in clips]
        bad = [tuple(w.shape) for w in waves if w.dim() != 1 or w.shape[0] == 0]
        if bad:
            raise ValueError(f"each clip must be a non-empty [N] array, got shapes {bad}")
        device = torch.device(device) if device is not None else waves[0].device
        n_fft, hop, half = int(ext.n_fft), int(ext.hop_length), int(ext.n_fft) // 2
        lengths = [max(w.shape[0], int(ext.min_length)) for w in waves]
        frames = [n // hop for n in lengths]
        padded = torch.zeros(len(waves), max(lengths) + 2 * half, dtype=torch.float32, device=device)
        for i, (w, n) in enumerate(zip(waves, lengths)):
            x = torch.nn.functional.pad(w.to(device=device, dtype=torch.float32), (0, n - w.shape[0]))
            padded[i, :n + 2 * half] = torch.nn.functional.pad(x[None, None], (half, half), mode="reflect")[0, 0]
        window = torch.hann_window(n_fft, device=device)
        stft = torch.stft(padded, n_fft, hop, window=window, center=False, return_complex=True)  # [B, bins, T + 1]
        power = stft[..., :max(frames)].abs() ** 2  # [B, bins, T]
        mel = torch.from_numpy(np.asarray(ext.mel_filters)).to(device, torch.float32).T @ power  # [B, n_mels, T]
        log_spec = torch.clamp(mel, min=1e-10).log10()
        valid = torch.arange(max(frames), device=device)[None, :] < torch.tensor(frames, device=device)[:, None]
        peak = log_spec.masked_fill(~valid[:, None, :], float("-inf")).amax(dim=(1, 2), keepdim=True)  # [B, 1, 1]
        log_spec = (torch.maximum(log_spec, peak - 8.0) + 4.0) / 4.0
        log_spec = log_spec.masked_fill(~valid[:, None, :], 0.0)
        width = self.padded_frames(max(frames))
        log_spec = torch.nn.functional.pad(log_spec, (0, width - max(frames)))
        return [AudioFeatures(features=log_spec[i, :, :self.padded_frames(f)], num_frames=f,
                              num_rows=encoder_rows(f, self.n_window)) for i, f in enumerate(frames)]

    def __call__(self, samples: np.ndarray) -> AudioFeatures:
        """The features of one clip.

        Args:
            samples: ``[N]`` float32 mono samples at 16 kHz (:class:`~anna_audio.audio_io.DecodedAudio` ``.samples``),
                ``N >= 1``.

        Raises:
            ValueError: ``samples`` not a non-empty 1-D array.
        """
        samples = np.asarray(samples, dtype=np.float32)
        if samples.ndim != 1 or samples.shape[0] == 0:
            raise ValueError(f"samples must be a non-empty [N] array, got shape {samples.shape}")
        out = self.extractor(samples, sampling_rate=TARGET_RATE, padding=True, truncation=False,
                             return_attention_mask=True, n_window=self.n_window, return_tensors="pt")
        num_frames = int(out["attention_mask"][0].sum())
        return AudioFeatures(features=out["input_features"][0].float(), num_frames=num_frames,
                             num_rows=encoder_rows(num_frames, self.n_window))
