"""The 12 Hz codec's decoder: codes (``Q`` codebooks per 12.5 Hz frame) -> 24 kHz waveform, whole or streamed.

Math after the reference decoder (QwenLM/Qwen3-TTS ``tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py``,
``Qwen3TTSTokenizerV2Decoder.forward``): dequantize, a kernel-3 causal convolution to ``latent_dim``, the
sliding-window transformer, two (transposed conv x2 + ConvNeXt) upsamplers, a kernel-7 convolution to
``decoder_dim``, one :class:`UpsampleBlock` per ``upsample_rates`` entry, SnakeBeta, a kernel-7 convolution to one
channel, clamped to ``[-1, 1]``. Every stage is causal, so each frame's ``samples_per_frame`` samples depend on that
frame and the frames before it only: rows of a padded batch equal their decodes alone, and a stream decoded chunk by
chunk (:class:`StreamingDecoder`) equals the whole decode.

One difference from the reference, by design: its ``chunked_decode`` splits sequences longer than 300 frames into
300-frame pieces decoded afresh with 25 frames of left context, an approximation of the whole decode; this module
always decodes exactly (the state carries all the context every layer reads), so the two agree up to 300 frames.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from anna_audio.qwen3_tts.codec_layers import (
    CausalConv1d,
    CausalTransposedConv1d,
    ConvNeXtBlock,
    SnakeBeta,
    UpsampleBlock,
    time_major_,
)
from anna_audio.qwen3_tts.codec_quantizer import SplitQuantizer
from anna_audio.qwen3_tts.codec_transformer import CodecTransformer
from anna_audio.qwen3_tts.config import CodecDecoderConfig
from anna_audio.qwen3_tts.stream_state import ChunkContext, StateLayout, StreamBatch, StreamState

TIME_MAJOR_ENV = "ANNA_CODEC_TIME_MAJOR"
PHASED_MIN_CHANNELS_ENV = "ANNA_CODEC_PHASED_MIN_CHANNELS"
"""Opt-in (until a GPU measures it: ``tools/gpu_experiments/call_s32_3.sh``): residual units at least this many
channels wide run their dilated convolutions as undilated ones over the input's phases
(:func:`~anna_audio.qwen3_tts.codec_layers.phased_conv1d`) on CUDA. On an H100 cuDNN gave the 1.7B codec's
768-channel dilated convolutions its generic ``implicit_convolve_sgemm`` kernel (1.2 ms each for 16 streams' 8-frame
chunk) while the 192- and 96-channel ones ran at the speed of the undilated ones (BENCHMARKS.md, 2026-12-08)."""


def time_major_for(device: torch.device | str) -> bool:
    """Whether the loaders build a time-major decoder (:class:`CodecDecoder`'s ``time_major``) for ``device``: on CUDA
    when ``ANNA_CODEC_TIME_MAJOR=1`` asks for it (opt-in: on an H100 a chunk of 16 streams decoded 7 times slower
    time-major, cuDNN running the wide dilated convolutions channels-last with a direct kernel, BENCHMARKS.md
    2026-12-08); never on other devices (on the CPU a chunk decodes slower time-major)."""
    flag = os.environ.get(TIME_MAJOR_ENV, "").strip().lower() in ("1", "true", "on", "yes")
    return flag and torch.device(device).type == "cuda"


def phased_min_channels_for(device: torch.device | str) -> int | None:
    """The narrowest residual unit whose dilated convolutions run phased (:class:`CodecDecoder`'s
    ``phased_min_channels``) on ``device``: on CUDA the value of ``ANNA_CODEC_PHASED_MIN_CHANNELS`` when set (0: every
    one; opt-in, :data:`PHASED_MIN_CHANNELS_ENV`); None otherwise and on other devices (the CPU's oneDNN dilated
    convolutions are faster than the phases' copies and undilated convolutions; XPU unmeasured).

    Raises:
        ValueError: the variable is set to something other than a non-negative integer.
    """
    raw = os.environ.get(PHASED_MIN_CHANNELS_ENV, "").strip()
    if torch.device(device).type != "cuda" or not raw:
        return None
    if not raw.isdigit():
        raise ValueError(f"{PHASED_MIN_CHANNELS_ENV} must be a non-negative integer, got {raw!r}")
    return int(raw)


class CodecDecoder(nn.Module):
    """The decoder network; parameter names are the checkpoint's after ``decoder.`` (``quantizer.*``,
    ``pre_conv.conv.*``, ``pre_transformer.*``, ``upsample.<i>.<0|1>.*``, ``decoder.<i>.*``).

    Args:
        config: the decoder's configuration.
        ops: a kernel op table bound to the decoder's device and dtype; where it serves an accelerated ``snake_beta``
            (anna-xpu-kernels' with ``ANNA_FUSED_SNAKE=1``) every SnakeBeta is that one launch. None, or no such
            kernel: the torch expression.
        time_major: hold the convolution stack's activations time-major (channels-last) and compute its
            convolutions in that layout (:mod:`~anna_audio.qwen3_tts.codec_layers`: cuDNN's 16-bit convolutions
            compute channels-last; the loaders ask :func:`time_major_for`); False: ``[B, C, T]``-contiguous, torch's
            ``conv1d`` (faster on the CPU). The same values either way.
        phased_min_channels: residual units at least this wide compute their dilated convolutions over the input's
            phases (:func:`~anna_audio.qwen3_tts.codec_layers.phased_conv1d`; the loaders pass
            :func:`phased_min_channels_for` the device); None: none. The same values either way.
    """

    def __init__(self, config: CodecDecoderConfig, ops: Any = None, *, time_major: bool = False,
                 phased_min_channels: int | None = None) -> None:
        super().__init__()
        self.config = config
        self.time_major = time_major
        snake = ops.accelerated("snake_beta") if ops is not None else None
        tm = time_major
        self.quantizer = SplitQuantizer(config.num_quantizers, config.codebook_size, config.codebook_dim)
        self.pre_conv = CausalConv1d(config.codebook_dim, config.latent_dim, 3, time_major=tm)
        self.pre_transformer = CodecTransformer(config)
        self.upsample = nn.ModuleList([
            nn.ModuleList([CausalTransposedConv1d(config.latent_dim, config.latent_dim, r, r, tm),
                           ConvNeXtBlock(config.latent_dim, tm)]) for r in config.upsampling_ratios])
        dims = [config.decoder_dim // 2 ** i for i in range(len(config.upsample_rates) + 1)]
        self.decoder = nn.ModuleList([
            CausalConv1d(config.latent_dim, config.decoder_dim, 7, time_major=tm),
            *(UpsampleBlock(dims[i], dims[i + 1], rate, snake, tm,
                            phased_min_channels is not None and dims[i + 1] >= phased_min_channels)
              for i, rate in enumerate(config.upsample_rates)),
            SnakeBeta(dims[-1], snake),
            CausalConv1d(dims[-1], 1, 7, time_major=tm),
        ])
        self._layout: StateLayout | None = None

    def layout_weights(self) -> CodecDecoder:
        """Store the weights in the layout the decoder computes in when it is time-major: time-major
        (channels-last) for every stride-1 convolution with a kernel wider than 1, so no call converts them, and the
        transposed convolutions' rearranged weights built (:meth:`CausalTransposedConv1d.rearranged`); values
        unchanged; nothing to do otherwise. Call after the weights are in place (loading assigns fresh tensors);
        ``.to()`` keeps the layout. Returns self."""
        if self.time_major:
            for module in self.modules():
                if isinstance(module, nn.Conv1d) and module.kernel_size[0] > 1:
                    time_major_(module)
                elif isinstance(module, CausalTransposedConv1d) and module.conv.kernel_size[0] in (
                        module.stride, 2 * module.stride):
                    module.drop_rearranged()
                    module.rearranged()
        return self

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: ``[B, T, Q]`` int64 in ``[0, codebook_size)`` -> waveform ``[B, T * samples_per_frame]`` in the
        parameters' dtype, values in ``[-1, 1]`` (whole sequences, from their first frame).

        Raises:
            ValueError: bad codes (:func:`check_codes`, which reads their range on the host).
        """
        check_codes(codes, self.config)
        return self.decode_chunk(codes)

    def decode_chunk(self, codes: torch.Tensor, context: ChunkContext | None = None) -> torch.Tensor:
        """:meth:`forward` on codes already checked, reading nothing on the host (capturable in a device graph):
        codes ``[B, T, Q]`` -> ``[B, T * samples_per_frame]``; with ``context``, each row continues from
        ``context.past`` at ``context.starts`` and its context after the chunk is written into ``context.new``."""
        h = self.quantizer(codes.transpose(1, 2))  # [B, codebook_dim, T]
        h = self.pre_conv(h, context).transpose(1, 2)  # [B, T, latent]
        h = self.pre_transformer(h, context).transpose(1, 2)  # [B, latent, T]
        for transposed, convnext in self.upsample:
            h = convnext(transposed(h, context), context)
        for layer in self.decoder:
            h = layer(h, context)
        return h.squeeze(1).clamp(-1.0, 1.0)

    def state_layout(self) -> StateLayout:
        """The layout of a stream's context for this decoder, on its parameters' device and dtype (built again
        after the decoder moves: streams begun before then cannot continue)."""
        weight = self.pre_conv.conv.weight
        if self._layout is None or (self._layout.device, self._layout.dtype) != (weight.device, weight.dtype):
            self._layout = StateLayout(list(self.modules()), weight.dtype, weight.device)
        return self._layout

    def decode_streams(self, streams: list[StreamState], codes: torch.Tensor) -> torch.Tensor:
        """One chunk of several streams at once (e.g. requests of a serving step, each at its own frame).

        Args:
            streams: one state per row, in row order (fresh for a stream's first chunk).
            codes: ``[B, T, Q]``, the next ``T`` frames of each stream: best on the host, where their check reads
                nothing from the device (they are copied to the decoder's device after it).

        Returns:
            ``[B, T * samples_per_frame]``: row ``b`` equals what stream ``b`` decoded alone would give.

        Raises:
            ValueError: a row count other than ``len(streams)``, or bad codes (:func:`check_codes`).
        """
        if codes.dim() != 3 or codes.shape[0] != len(streams):
            raise ValueError(f"codes must be [{len(streams)}, frames, Q] for {len(streams)} streams, got "
                             f"{tuple(codes.shape)}")
        check_codes(codes, self.config)
        layout = self.state_layout()
        with torch.inference_mode():
            batch = StreamBatch(streams, layout)
            wav = self.decode_chunk(codes.to(layout.device), batch.context)
            batch.advance(codes.shape[1])
        return wav

    def decode(self, codes: list[torch.Tensor]) -> list[torch.Tensor]:
        """Decode sequences of different lengths as one batch.

        Args:
            codes: ``[T_i, Q]`` int64 each (``T_i`` may be 0).

        Returns:
            ``[T_i * samples_per_frame]`` waveforms, in order.

        Raises:
            ValueError: see :func:`check_codes`; an empty list.
        """
        if not codes:
            raise ValueError("no code sequences to decode")
        longest = max(c.shape[0] for c in codes)
        spf = self.config.samples_per_frame
        if longest == 0:
            return [codes[0].new_zeros(0, dtype=self.pre_conv.conv.weight.dtype) for _ in codes]
        batch = codes[0].new_zeros(len(codes), longest, self.config.num_quantizers)
        for row, c in enumerate(codes):
            if c.dim() != 2:
                raise ValueError(f"codes must be [frames, {self.config.num_quantizers}], got {tuple(c.shape)}")
            batch[row, : c.shape[0]] = c
        wav = self(batch)
        return [wav[row, : c.shape[0] * spf] for row, c in enumerate(codes)]


def check_codes(codes: torch.Tensor, config: CodecDecoderConfig) -> None:
    """Raises ``ValueError`` unless ``codes`` is an integer ``[B, T, num_quantizers]`` tensor with every entry in
    ``[0, codebook_size)``."""
    if codes.dim() != 3 or codes.shape[-1] != config.num_quantizers:
        raise ValueError(f"codes must be [batch, frames, {config.num_quantizers}], got {tuple(codes.shape)}")
    if codes.is_floating_point() or codes.dtype == torch.bool:
        raise ValueError(f"codes must be integers, got {codes.dtype}")
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= config.codebook_size):
        raise ValueError(f"codes must lie in [0, {config.codebook_size}), got [{int(codes.min())}, "
                         f"{int(codes.max())}]")


class StreamingDecoder:
    """Decodes a fixed batch of streams chunk by chunk; each call returns exactly the samples of its frames.

    The rows advance together (each call gives every row the same number of frames). Each row's
    :class:`StreamState` holds every layer's left context, so the concatenated chunks equal
    :meth:`CodecDecoder.forward` on the whole sequence.
    """

    def __init__(self, decoder: CodecDecoder) -> None:
        self.decoder = decoder
        self.states: list[StreamState] = []

    @property
    def frames(self) -> int:
        """Frames decoded so far."""
        return self.states[0].frames if self.states else 0

    def push(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: ``[B, T, Q]`` (the next ``T`` frames of each row) -> ``[B, T * samples_per_frame]``.

        Raises:
            ValueError: see :func:`check_codes`.
        """
        if not self.states:
            self.states = [StreamState() for _ in range(codes.shape[0])]
        return self.decoder.decode_streams(self.states, codes)
