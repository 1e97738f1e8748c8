"""The 12 Hz codec's encoder: 24 kHz waveforms -> codec codes ``[F, Q]`` (12.5 frames a second), as the Base model's
in-context voice cloning needs for its reference audio.

Math after the reference (QwenLM/Qwen3-TTS ``tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py``:
``Qwen3TTSTokenizerV2Model.encode``, whose encoder is transformers' ``MimiModel`` encoding path: ``MimiEncoder``,
``MimiTransformerModel``, the ``downsample`` convolution and ``MimiSplitResidualVectorQuantizer.encode``):

1. the SEANet stack (:class:`~anna_audio.qwen3_tts.codec_encoder_layers.ConvEncoder`) to 25 Hz features, the encoder
   transformer (:class:`~anna_audio.qwen3_tts.codec_encoder_transformer.EncoderTransformer`), and a causal
   convolution of stride 2 (kernel 4, edges replicated, no bias) to 12.5 Hz;
2. residual vector quantization in two groups: each group projects the features by its own pointwise convolution
   (``input_proj``) and, codebook after codebook, picks the entry nearest the residual in Euclidean distance
   (codebook vectors ``embed_sum / max(cluster_usage, 1e-5)``) and subtracts it. The semantic group gives codebook
   0, the acoustic group codebooks ``1 ..``; the first ``encoder_valid_num_quantizers`` are kept (the talker's
   codebooks), which residual quantization lets us compute alone.

A batch is right-padded with zeros to its longest waveform and each row's codes cut to ``ceil(N / 1920)`` frames,
as the reference does. Every layer is causal, so a shorter row's codes equal encoding it alone except possibly the
last frame when ``N`` is not a multiple of 1920: alone, each convolution completes its last stride with zeros;
in the batch, with the padding's activations (the convolutions' biases make them nonzero). The reference behaves
the same way; it encodes a single reference audio alone.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from anna_audio.qwen3_tts.codec_encoder_config import CodecEncoderConfig
from anna_audio.qwen3_tts.codec_encoder_layers import ConvEncoder, PaddedConv1d
from anna_audio.qwen3_tts.codec_encoder_transformer import EncoderTransformer

CODEBOOK_EPSILON = 1e-5
"""The floor on a codebook entry's usage count when its mean vector is formed (the reference's ``epsilon``)."""


class EncoderCodebook(nn.Module):
    """Parameters: cluster_usage ``[K]``, embed_sum ``[K, d]`` (the checkpoint's ``initialized`` flag is not
    loaded: it only marks a trained codebook)."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embed_sum = nn.Parameter(torch.zeros(size, dim))

    def vectors(self) -> torch.Tensor:
        """``[K, d]``: each entry's mean vector."""
        return self.embed_sum / self.cluster_usage.clamp(min=CODEBOOK_EPSILON)[:, None]


class _CodebookSlot(nn.Module):
    """Holds one :class:`EncoderCodebook` under the checkpoint's name (``layers.<i>.codebook``)."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.codebook = EncoderCodebook(size, dim)


class ResidualQuantizer(nn.Module):
    """One group of residual codebooks.

    Parameters:
        input_proj.weight ``[d, D, 1]`` and output_proj.weight ``[D, d, 1]`` (when ``d != D``; encoding reads the
        input projection only, the output one is held so the checkpoint loads whole); layers.<i>.codebook.*.
    """

    def __init__(self, count: int, size: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_CodebookSlot(size, dim) for _ in range(count)])
        self.input_proj = nn.Conv1d(hidden, dim, 1, bias=False) if dim != hidden else None
        self.output_proj = nn.Conv1d(dim, hidden, 1, bias=False) if dim != hidden else None

    def encode(self, features: torch.Tensor, count: int) -> torch.Tensor:
        """features ``[B, D, F]`` -> codes ``[B, count, F]`` int64 from the first ``count`` codebooks."""
        x = features if self.input_proj is None else self.input_proj(features)
        residual = x.transpose(1, 2)  # [B, F, d], in the weights' dtype as in the reference
        codes = []
        for slot in self.layers[:count]:
            vectors = slot.codebook.vectors()
            flat = residual.reshape(-1, residual.shape[-1]).float()  # distances in float32, as the reference
            index = torch.cdist(flat[None], vectors.float()[None], p=2)[0].argmin(dim=-1).view(residual.shape[:-1])
            residual = residual - vectors[index]
            codes.append(index)
        return torch.stack(codes, dim=1)


class SplitQuantizer(nn.Module):
    """``semantic_residual_vector_quantizer`` (the first ``num_semantic_quantizers`` codebooks) and
    ``acoustic_residual_vector_quantizer`` (the rest), each quantizing the same features."""

    def __init__(self, config: CodecEncoderConfig) -> None:
        super().__init__()
        self.semantic_count = config.num_semantic_quantizers
        args = (config.codebook_size, config.codebook_dim, config.hidden_size)
        self.semantic_residual_vector_quantizer = ResidualQuantizer(config.num_semantic_quantizers, *args)
        self.acoustic_residual_vector_quantizer = ResidualQuantizer(
            config.num_quantizers - config.num_semantic_quantizers, *args)

    def encode(self, features: torch.Tensor, count: int) -> torch.Tensor:
        """features ``[B, D, F]`` -> codes ``[B, count, F]`` int64 (``num_semantic_quantizers <= count``)."""
        codes = self.semantic_residual_vector_quantizer.encode(features, self.semantic_count)
        if count > self.semantic_count:
            rest = self.acoustic_residual_vector_quantizer.encode(features, count - self.semantic_count)
            codes = torch.cat([codes, rest], dim=1)
        return codes


class CodecEncoder(nn.Module):
    """24 kHz mono waveforms -> codec codes.

    Args:
        config: the encoder's settings.
        num_codebooks: codebooks kept per frame (the codec's ``encoder_valid_num_quantizers``, the talker's
            ``num_code_groups``).

    Raises:
        ValueError: ``num_codebooks`` outside ``[num_semantic_quantizers, num_quantizers]``.

    Parameters (the checkpoint's ``encoder.*`` without the prefix): encoder.layers.*, encoder_transformer.layers.*,
    downsample.conv.weight, quantizer.{semantic,acoustic}_residual_vector_quantizer.*.
    """

    def __init__(self, config: CodecEncoderConfig, num_codebooks: int) -> None:
        super().__init__()
        if not config.num_semantic_quantizers <= num_codebooks <= config.num_quantizers:
            raise ValueError(f"num_codebooks must be in [{config.num_semantic_quantizers}, {config.num_quantizers}], "
                             f"got {num_codebooks}")
        self.config = config
        self.num_codebooks = num_codebooks
        self.encoder = ConvEncoder(config)
        self.encoder_transformer = EncoderTransformer(config)
        stride = config.downsample_stride
        self.downsample = PaddedConv1d(config.hidden_size, config.hidden_size, 2 * stride, stride=stride, bias=False,
                                       pad_mode="replicate")
        self.quantizer = SplitQuantizer(config)

    @property
    def samples_per_frame(self) -> int:
        """Input samples per code frame (1920 released: 80 ms at 24 kHz)."""
        return self.config.samples_per_frame

    def frames(self, samples: int) -> int:
        """Code frames of a ``samples``-long waveform: ``ceil(samples / samples_per_frame)``."""
        return math.ceil(samples / self.samples_per_frame)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """audio ``[B, N]`` float (at ``config.sample_rate``) -> codes ``[B, ceil(N / 1920), num_codebooks]``
        int64, every row taken as ``N`` samples long."""
        features = self.encoder(audio[:, None].to(self.downsample.conv.weight.dtype))  # [B, D, ceil(N / 960)]
        features = self.encoder_transformer(features.transpose(1, 2)).transpose(1, 2)
        features = self.downsample(features)  # [B, D, F]
        return self.quantizer.encode(features, self.num_codebooks).transpose(1, 2)

    @torch.inference_mode()
    def encode(self, waveforms: list[torch.Tensor]) -> list[torch.Tensor]:
        """Encode a batch of waveforms of any lengths.

        Args:
            waveforms: each ``[N_i]`` float, mono at ``config.sample_rate`` Hz, ``N_i >= 1``.

        Returns:
            Per waveform its codes ``[ceil(N_i / 1920), num_codebooks]`` int64 (on the encoder's device).

        Raises:
            ValueError: no waveforms, or one that is not 1-D, empty, or not finite.
        """
        if not waveforms:
            raise ValueError("encode needs at least one waveform")
        for i, wav in enumerate(waveforms):
            if wav.dim() != 1 or wav.shape[0] == 0:
                raise ValueError(f"waveform {i} must be [N] with N >= 1, got {tuple(wav.shape)}")
            if not torch.isfinite(wav).all():
                raise ValueError(f"waveform {i} holds NaN or infinite samples")
        device = self.downsample.conv.weight.device
        longest = max(wav.shape[0] for wav in waveforms)
        batch = torch.zeros(len(waveforms), longest, device=device)
        for i, wav in enumerate(waveforms):
            batch[i, : wav.shape[0]] = wav.to(device)
        codes = self(batch)
        return [codes[i, : self.frames(wav.shape[0])] for i, wav in enumerate(waveforms)]
