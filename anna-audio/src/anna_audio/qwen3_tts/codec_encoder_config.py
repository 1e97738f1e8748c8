"""The 12 Hz codec's encoder settings: ``speech_tokenizer/config.json``'s ``encoder_config`` (a Mimi encoder).

Fields the file leaves out take the defaults of transformers' ``MimiConfig`` (the reference builds the encoder as
``MimiModel`` from that block: QwenLM/Qwen3-TTS ``tokenizer_12hz/configuration_qwen3_tts_tokenizer_v2.py``).
Only the encoding path is described: the SEANet convolution stack, the encoder transformer, the 2x downsampling and
the split residual vector quantizer.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs
from anna_core.errors import ModelLoadError

from anna_audio.qwen3_tts.config import CODEC_TYPE, _read_json

PAD_MODES = ("constant", "replicate")


@attrs.frozen
class CodecEncoderConfig:
    """The Mimi encoder of a 12 Hz codec.

    Attributes:
        sample_rate: Hz of the waveform it encodes (24000 released).
        num_filters: channels after the first convolution, doubled by each downsampling convolution.
        ratios: the SEANet's downsampling strides in the order they run (``upsampling_ratios`` reversed).
        kernel_size, last_kernel_size, residual_kernel_size: kernels of the first, the last and the residual units'
            first convolutions.
        num_residual_layers: residual units before each downsampling convolution (unit ``j`` dilated
            ``dilation_growth_rate ** j``).
        compress: a residual unit's bottleneck divisor.
        use_conv_shortcut: a 1x1 convolution on the residual path instead of the identity.
        pad_mode: how the causal convolutions pad (``constant`` zeros or ``replicate``; the downsampling by 2 always
            replicates).
        hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size, norm_eps, rope_theta,
        sliding_window: the encoder transformer (frames at ``sample_rate / prod(ratios)`` Hz; a query sees itself
            and the ``sliding_window - 1`` frames before it).
        downsample_stride: the last convolution's stride (2: 25 Hz -> 12.5 Hz), kernel ``2 * downsample_stride``.
        codebook_size, codebook_dim: entries per codebook and the quantizers' width (``vector_quantization_hidden_
            dimension``; the transformer's width is projected to it when they differ).
        num_quantizers, num_semantic_quantizers: codebooks in the checkpoint, the first ``num_semantic_quantizers``
            in the semantic group, the rest in the acoustic one.
    """

    sample_rate: int
    num_filters: int
    ratios: tuple[int, ...]
    kernel_size: int
    last_kernel_size: int
    residual_kernel_size: int
    num_residual_layers: int
    dilation_growth_rate: int
    compress: int
    use_conv_shortcut: bool
    pad_mode: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    norm_eps: float
    rope_theta: float
    sliding_window: int
    downsample_stride: int
    codebook_size: int
    codebook_dim: int
    num_quantizers: int
    num_semantic_quantizers: int

    @property
    def samples_per_frame(self) -> int:
        """Input samples per code frame: ``prod(ratios) * downsample_stride`` (1920 released)."""
        return math.prod(self.ratios) * self.downsample_stride


def _value(block: dict[str, Any], key: str, default: Any, kind: type, where: str) -> Any:
    """``block[key]`` (``default`` when absent or null) checked to be a ``kind`` (an int passes as a float)."""
    value = block.get(key)
    value = default if value is None else value
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind is bool:
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, kind) and not isinstance(value, bool)
    if not ok:
        raise ModelLoadError(f"{where}.{key} must be {kind.__name__}, got {value!r}")
    return kind(value)


def parse_codec_encoder(codec: dict[str, Any], where: str = "speech_tokenizer/config.json") -> CodecEncoderConfig:
    """``speech_tokenizer/config.json`` -> :class:`CodecEncoderConfig`.

    Raises:
        ModelLoadError: another tokenizer type, a missing ``encoder_config``, a mistyped field, a pad mode other than
            ``constant`` / ``replicate``, widths that do not divide (heads, bottleneck), an encoder whose frame
            (``prod(upsampling_ratios) * 2`` samples) differs from ``encode_downsample_rate``, a sample rate other
            than ``input_sample_rate``, or fewer checkpoint codebooks than ``encoder_valid_num_quantizers``.
    """
    if codec.get("model_type") != CODEC_TYPE:
        raise ModelLoadError(f"{where}: model_type {codec.get('model_type')!r} is not supported (only {CODEC_TYPE!r})")
    block = codec.get("encoder_config")
    if not isinstance(block, dict):
        raise ModelLoadError(f"{where}: encoder_config is missing")
    w = f"{where} encoder_config"

    def i(key: str, default: int) -> int:
        return _value(block, key, default, int, w)

    ratios = block.get("upsampling_ratios") or [8, 6, 5, 4]
    if not (isinstance(ratios, list) and ratios and all(isinstance(r, int) and r > 0 for r in ratios)):
        raise ModelLoadError(f"{w}.upsampling_ratios must be a list of positive ints, got {ratios!r}")
    hidden, heads = i("hidden_size", 512), i("num_attention_heads", 8)
    rope = block.get("rope_parameters") or {}
    theta = rope.get("rope_theta", block.get("rope_theta", 10000.0)) if isinstance(rope, dict) else None
    if not isinstance(theta, int | float) or isinstance(theta, bool):
        raise ModelLoadError(f"{w}: rope_theta must be a number, got {theta!r}")
    config = CodecEncoderConfig(
        sample_rate=i("sampling_rate", 24000), num_filters=i("num_filters", 64), ratios=tuple(reversed(ratios)),
        kernel_size=i("kernel_size", 7), last_kernel_size=i("last_kernel_size", 3),
        residual_kernel_size=i("residual_kernel_size", 3), num_residual_layers=i("num_residual_layers", 1),
        dilation_growth_rate=i("dilation_growth_rate", 2), compress=i("compress", 2),
        use_conv_shortcut=_value(block, "use_conv_shortcut", False, bool, w),
        pad_mode=_value(block, "pad_mode", "constant", str, w), hidden_size=hidden, num_layers=i("num_hidden_layers", 8),
        num_heads=heads, num_kv_heads=i("num_key_value_heads", 8), head_dim=i("head_dim", hidden // max(heads, 1)),
        intermediate_size=i("intermediate_size", 2048), norm_eps=_value(block, "norm_eps", 1e-5, float, w),
        rope_theta=float(theta), sliding_window=i("sliding_window", 250), downsample_stride=2,
        codebook_size=i("codebook_size", 2048), codebook_dim=i("vector_quantization_hidden_dimension", 256),
        num_quantizers=i("num_quantizers", 32), num_semantic_quantizers=i("num_semantic_quantizers", 1))
    if config.pad_mode not in PAD_MODES:
        raise ModelLoadError(f"{w}.pad_mode {config.pad_mode!r} is not supported; supported: {list(PAD_MODES)}")
    if not _value(block, "use_causal_conv", True, bool, w):
        raise ModelLoadError(f"{w}.use_causal_conv is false; only the causal encoder (as released) is supported")
    if _value(block, "audio_channels", 1, int, w) != 1:
        raise ModelLoadError(f"{w}.audio_channels must be 1 (mono)")
    if heads <= 0 or config.num_kv_heads <= 0 or heads % config.num_kv_heads:
        raise ModelLoadError(f"{w}: {heads} attention heads do not group over {config.num_kv_heads} key/value heads")
    if config.num_filters % config.compress:
        raise ModelLoadError(f"{w}: num_filters {config.num_filters} is not divisible by compress {config.compress}")
    if not 0 < config.num_semantic_quantizers < config.num_quantizers:
        raise ModelLoadError(f"{w}: num_semantic_quantizers {config.num_semantic_quantizers} must be in [1, "
                             f"num_quantizers {config.num_quantizers})")
    frame = _value(codec, "encode_downsample_rate", 1920, int, where)
    if config.samples_per_frame != frame:
        raise ModelLoadError(f"{w}: the encoder's strides make {config.samples_per_frame}-sample frames, not "
                             f"encode_downsample_rate {frame}")
    rate = _value(codec, "input_sample_rate", 24000, int, where)
    if config.sample_rate != rate:
        raise ModelLoadError(f"{w}: sampling_rate {config.sample_rate} differs from input_sample_rate {rate}")
    valid = _value(codec, "encoder_valid_num_quantizers", 16, int, where)
    if not 0 < valid <= config.num_quantizers:
        raise ModelLoadError(f"{where}: encoder_valid_num_quantizers {valid} is outside [1, {config.num_quantizers}]")
    return config


def load_codec_encoder_config(folder: str | Path) -> CodecEncoderConfig:
    """Read ``folder/speech_tokenizer/config.json``'s encoder block (see :func:`parse_codec_encoder`).

    Raises:
        ModelLoadError: the file is missing or unreadable, or :func:`parse_codec_encoder` refuses it.
    """
    path = Path(folder) / "speech_tokenizer" / "config.json"
    return parse_codec_encoder(_read_json(path), str(path))
