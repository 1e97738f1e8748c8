"""The Base checkpoints' speaker encoder: 24 kHz audio -> log-mel frames -> an x-vector in the talker's width.

Math after the reference (QwenLM/Qwen3-TTS ``modeling_qwen3_tts.py``: ``mel_spectrogram`` as
``extract_speaker_embedding`` calls it, and ``Qwen3TTSSpeakerEncoder``, an ECAPA-TDNN: Desplanques et al. 2020).

* Mel input: the waveform reflect-padded by ``(n_fft - hop) / 2`` on both sides, a Hann-windowed STFT (n_fft
  1024, hop 256, no centring), magnitudes ``sqrt(re^2 + im^2 + 1e-9)``, 128 Slaney-normalised mel filters over
  0-12 kHz (librosa's default filters, via transformers' ``mel_filter_bank``), ``log(max(x, 1e-5))``.
* Encoder: a TDNN (conv + ReLU), SE-Res2Net blocks (1x1 TDNN, a Res2Net of ``scale`` channel groups each adding the
  previous group's output before its dilated TDNN, 1x1 TDNN, squeeze-excitation, residual), the concatenated block
  outputs through a TDNN (multi-layer aggregation), attentive statistics pooling (attention over time from the
  features and their global mean and std, then the attention-weighted mean and std), a 1x1 convolution to
  ``enc_dim``. Every convolution pads "same" by reflection. Parameter names follow ``speaker_encoder.*``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from anna_audio.qwen3_tts.config import SpeakerEncoderConfig

N_FFT, HOP, MELS, F_MAX = 1024, 256, 128, 12000


def speaker_mels(audio: torch.Tensor, sample_rate: int = 24000) -> torch.Tensor:
    """audio: ``[N]`` float32 at ``sample_rate`` (24 kHz) -> log-mel frames ``[F, 128]`` float32,
    ``F = (N + (n_fft - hop) - n_fft) // hop + 1``.

    Raises:
        ValueError: a rate other than 24 kHz (the reference refuses it too), or audio shorter than one window.
    """
    from transformers.audio_utils import mel_filter_bank

    if sample_rate != 24000:
        raise ValueError(f"the speaker encoder takes 24 kHz audio, got {sample_rate} Hz")
    pad = (N_FFT - HOP) // 2
    if audio.dim() != 1 or audio.shape[0] + 2 * pad < N_FFT or audio.shape[0] <= pad:
        raise ValueError(f"audio must be [N] with N > {pad} samples, got {tuple(audio.shape)}")
    filters = mel_filter_bank(num_frequency_bins=N_FFT // 2 + 1, num_mel_filters=MELS, min_frequency=0.0,
                              max_frequency=float(F_MAX), sampling_rate=sample_rate, norm="slaney",
                              mel_scale="slaney")  # [513, 128]
    x = torch.nn.functional.pad(audio.float()[None, None], (pad, pad), mode="reflect")[0]
    spec = torch.stft(x, N_FFT, hop_length=HOP, win_length=N_FFT, window=torch.hann_window(N_FFT, device=x.device),
                      center=False, return_complex=True)  # [1, 513, F]
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.from_numpy(np.ascontiguousarray(filters.T)).float().to(x.device) @ magnitude[0]  # [128, F]
    return torch.log(mel.clamp(min=1e-5)).T.contiguous()


def _conv(cin: int, cout: int, kernel: int, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TDNN(nn.Module):
    """``relu(conv(x))``; parameters conv.{weight, bias}."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv = _conv(cin, cout, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class Res2Net(nn.Module):
    """Channel groups: the first passes through, group ``i >= 1`` is ``tdnn(x_i + y_{i-1})`` (``x_1`` alone)."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.scale = scale
        width = channels // scale
        self.blocks = nn.ModuleList([TDNN(width, width, kernel, dilation) for _ in range(scale - 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.chunk(x, self.scale, dim=1)
        out = [parts[0]]
        prev = None
        for i, part in enumerate(parts[1:]):
            prev = self.blocks[i](part if prev is None else part + prev)
            out.append(prev)
        return torch.cat(out, dim=1)


class SqueezeExcitation(nn.Module):
    """``x * sigmoid(conv2(relu(conv1(mean_t(x)))))``."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.conv1 = _conv(channels, squeeze, 1)
        self.conv2 = _conv(squeeze, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(torch.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, scale: int, squeeze: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.tdnn1 = TDNN(cin, cout, 1, 1)
        self.res2net_block = Res2Net(cout, scale, kernel, dilation)
        self.tdnn2 = TDNN(cout, cout, 1, 1)
        self.se_block = SqueezeExcitation(cout, squeeze)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))


class AttentiveStatsPooling(nn.Module):
    """``[B, C, T]`` -> ``[B, 2C, 1]``: attention-weighted mean and std over time (weights from the features and
    their plain mean and std)."""

    def __init__(self, channels: int, attention: int) -> None:
        super().__init__()
        self.tdnn = TDNN(3 * channels, attention, 1, 1)
        self.conv = _conv(attention, channels, 1)

    @staticmethod
    def _stats(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = (weights * x).sum(dim=2)
        std = torch.sqrt((weights * (x - mean[..., None]).pow(2)).sum(dim=2).clamp(min=1e-12))
        return mean, std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = x.shape[2]
        mean, std = self._stats(x, torch.full_like(x[:, :1], 1.0 / steps))
        context = torch.cat([x, mean[..., None].expand(-1, -1, steps), std[..., None].expand(-1, -1, steps)], dim=1)
        weights = torch.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = self._stats(x, weights)
        return torch.cat([mean, std], dim=1)[..., None]


class SpeakerEncoder(nn.Module):
    """Log-mel frames ``[B, F, 128]`` -> x-vectors ``[B, enc_dim]``.

    Parameters (``speaker_encoder.*``): blocks.0 (TDNN), blocks.1 .. blocks.{n-2} (SE-Res2Net), mfa, asp, fc.
    """

    def __init__(self, config: SpeakerEncoderConfig) -> None:
        super().__init__()
        ch, ks, ds = config.channels, config.kernel_sizes, config.dilations
        self.blocks = nn.ModuleList([TDNN(config.mel_dim, ch[0], ks[0], ds[0])])
        for i in range(1, len(ch) - 1):
            self.blocks.append(SERes2NetBlock(ch[i - 1], ch[i], config.res2net_scale, config.se_channels, ks[i],
                                              ds[i]))
        self.mfa = TDNN(ch[-1], ch[-1], ks[-1], ds[-1])
        self.asp = AttentiveStatsPooling(ch[-1], config.attention_channels)
        self.fc = _conv(2 * ch[-1], config.enc_dim, 1)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        x = mels.transpose(1, 2)
        outputs = []
        for block in self.blocks:
            x = block(x)
            outputs.append(x)
        x = self.mfa(torch.cat(outputs[1:], dim=1))
        return self.fc(self.asp(x))[..., 0]
