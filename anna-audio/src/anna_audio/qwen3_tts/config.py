"""Qwen3-TTS (12 Hz) configuration: the checkpoint's ``config.json`` and its codec's ``speech_tokenizer/config.json``.

Fields a released file leaves out take the reference code's class defaults (QwenLM/Qwen3-TTS,
``qwen_tts/core/models/configuration_qwen3_tts.py`` and ``tokenizer_12hz/configuration_qwen3_tts_tokenizer_v2.py``);
e.g. the released Base configs give the speaker encoder's ``enc_dim`` and ``sample_rate`` only.

What differs per kind (``tts_model_type``): ``base`` carries a speaker encoder (voice cloning from reference audio,
with the codec's encoder for in-context cloning) and no speaker table; ``custom_voice`` lists named speakers
(``talker_config.spk_id``, some with a dialect that replaces the language, ``spk_is_dialect``) and takes
instructions except at the 0.6B size; ``voice_design`` takes instructions (a described voice) and no speaker.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs
from anna_core.errors import ModelLoadError

KINDS = ("base", "custom_voice", "voice_design")
CODEC_TYPE = "qwen3_tts_tokenizer_12hz"
CONTROL_ROWS = 1024
"""Talker ids past the codebook: the reference never samples ``[vocab - 1024, vocab)`` except the codec EOS."""


def _get(block: dict[str, Any], key: str, where: str, default: Any = ...) -> Any:
    if key in block and block[key] is not None:
        return block[key]
    if default is ...:
        raise ModelLoadError(f"{where} lacks {key!r}")
    return default


def _int(block: dict[str, Any], key: str, where: str, default: Any = ...) -> int:
    value = _get(block, key, where, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelLoadError(f"{where}.{key} must be an integer, got {value!r}")
    return value


def _float(block: dict[str, Any], key: str, where: str, default: Any = ...) -> float:
    value = _get(block, key, where, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelLoadError(f"{where}.{key} must be a number, got {value!r}")
    return float(value)


def _ints(block: dict[str, Any], key: str, where: str, default: Any = ...) -> tuple[int, ...]:
    value = _get(block, key, where, default)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ModelLoadError(f"{where}.{key} must be a list of integers, got {value!r}")
    return tuple(value)


def _block(config: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = config.get(key)
    if not isinstance(value, dict):
        raise ModelLoadError(f"{where} lacks the {key!r} object")
    return value


@attrs.frozen
class AttentionShape:
    """One transformer stack's geometry (talker, code predictor or codec decoder)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float

    @classmethod
    def parse(cls, block: dict[str, Any], where: str, defaults: dict[str, Any]) -> AttentionShape:
        def d(key: str) -> Any:
            return defaults.get(key, ...)

        hidden = _int(block, "hidden_size", where, d("hidden_size"))
        heads = _int(block, "num_attention_heads", where, d("num_attention_heads"))
        shape = cls(hidden_size=hidden, num_layers=_int(block, "num_hidden_layers", where, d("num_hidden_layers")),
                    num_heads=heads, num_kv_heads=_int(block, "num_key_value_heads", where, d("num_key_value_heads")),
                    head_dim=_int(block, "head_dim", where, hidden // max(heads, 1)),
                    intermediate_size=_int(block, "intermediate_size", where, d("intermediate_size")),
                    rms_norm_eps=_float(block, "rms_norm_eps", where, d("rms_norm_eps")),
                    rope_theta=_float(block, "rope_theta", where, d("rope_theta")))
        if min(shape.hidden_size, shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim) <= 0:
            raise ModelLoadError(f"{where}: sizes must be positive, got {shape}")
        if shape.num_heads % shape.num_kv_heads:
            raise ModelLoadError(f"{where}: {shape.num_heads} attention heads are not a multiple of "
                                 f"{shape.num_kv_heads} key/value heads")
        if shape.head_dim % 2:
            raise ModelLoadError(f"{where}: head_dim {shape.head_dim} must be even (rotary halves)")
        return shape


@attrs.frozen
class CodecIds:
    """The talker's control ids past the codebook (``talker_config.codec_*``)."""

    pad: int
    bos: int
    eos: int
    think: int
    nothink: int
    think_bos: int
    think_eos: int


@attrs.frozen
class TalkerConfig:
    """The talker: a Qwen3 decoder over codec-frame embeddings (first codebook out) with M-RoPE, a text
    embedding table of the Qwen vocabulary projected to its width, and the control ids of the prompt.

    Attributes:
        vocab_size: talker ids (codebook + :data:`CONTROL_ROWS`).
        mrope_section: rotary frequencies per (t, h, w) position row, summing to ``head_dim // 2``.
        languages: language name (lower case) -> codec id; ``*_dialect`` entries are reached through speakers.
        speakers: CustomVoice speaker name (lower case) -> codec id (empty for the other kinds).
        speaker_dialects: speaker name -> the ``languages`` key of its dialect, or None.
    """

    shape: AttentionShape
    vocab_size: int
    text_vocab_size: int
    text_hidden_size: int
    num_code_groups: int
    mrope_section: tuple[int, ...]
    mrope_interleaved: bool
    ids: CodecIds
    languages: dict[str, int]
    speakers: dict[str, int]
    speaker_dialects: dict[str, str | None]
    position_id_per_seconds: int


@attrs.frozen
class CodePredictorConfig:
    """The code predictor: a small Qwen3 decoder that fills codebooks ``1 .. num_code_groups - 1`` of a frame from
    the talker's hidden state and the frame's first code (one embedding table and one head per codebook)."""

    shape: AttentionShape
    vocab_size: int
    num_code_groups: int


@attrs.frozen
class SpeakerEncoderConfig:
    """ECAPA-TDNN speaker encoder of Base checkpoints (128-bin log-mel input at ``sample_rate``)."""

    mel_dim: int
    enc_dim: int
    channels: tuple[int, ...]
    kernel_sizes: tuple[int, ...]
    dilations: tuple[int, ...]
    attention_channels: int
    res2net_scale: int
    se_channels: int
    sample_rate: int


@attrs.frozen
class CodecDecoderConfig:
    """The 12 Hz codec's decoder (codes -> waveform): split residual VQ (one semantic codebook, the rest acoustic),
    a causal convolution, a sliding-window transformer, two 2x transposed-conv + ConvNeXt upsamplers, then
    SnakeBeta / transposed-conv blocks (``upsample_rates``) down to one channel.

    Attributes:
        codebook_dim: width of the quantizer's output (each codebook holds ``codebook_dim // 2`` values).
        latent_dim: width of the convolutional path and of the transformer's input / output projections.
        sliding_window: frames each attention query sees, itself included.
        decoder_dim: channels after the first decoder convolution, halved by each upsampling block.
    """

    codebook_size: int
    codebook_dim: int
    latent_dim: int
    shape: AttentionShape
    sliding_window: int
    num_quantizers: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    decoder_dim: int

    @property
    def samples_per_frame(self) -> int:
        """Output samples per code frame: the product of every upsampling factor (1920 released)."""
        return math.prod(self.upsample_rates + self.upsampling_ratios)


@attrs.frozen
class CodecConfig:
    """``speech_tokenizer/config.json`` (12 Hz tokenizer, ``Qwen3TTSTokenizerV2Config``)."""

    decoder: CodecDecoderConfig
    output_sample_rate: int
    input_sample_rate: int
    decode_upsample_rate: int
    encode_downsample_rate: int
    encoder_valid_num_quantizers: int


@attrs.frozen
class Qwen3TTSConfig:
    """A Qwen3-TTS 12 Hz checkpoint's configuration.

    Attributes:
        kind: ``"base"``, ``"custom_voice"`` or ``"voice_design"`` (``tts_model_type``).
        model_size: ``tts_model_size`` as written (``"0b6"``, ``"1b7"``).
        text_ids: ids of the text vocabulary the prompt uses: ``im_start``, ``im_end``, ``tts_pad``, ``tts_bos``,
            ``tts_eos``.
        speaker_encoder: Base checkpoints only (None otherwise).
    """

    kind: str
    model_size: str
    text_ids: dict[str, int]
    talker: TalkerConfig
    predictor: CodePredictorConfig
    speaker_encoder: SpeakerEncoderConfig | None
    codec: CodecConfig

    @property
    def accepts_speaker(self) -> bool:
        """A named speaker (CustomVoice)."""
        return self.kind == "custom_voice"

    @property
    def accepts_instructions(self) -> bool:
        """Instructions (VoiceDesign; CustomVoice except at the 0.6B size, where the reference drops them)."""
        return self.kind == "voice_design" or (self.kind == "custom_voice" and self.model_size != "0b6")

    @property
    def accepts_reference_audio(self) -> bool:
        """Voice cloning from reference audio (Base)."""
        return self.kind == "base"


_TALKER_DEFAULTS = {"hidden_size": 1024, "num_hidden_layers": 20, "num_attention_heads": 16,
                    "num_key_value_heads": 2, "intermediate_size": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000}
_PREDICTOR_DEFAULTS = {"hidden_size": 1024, "num_hidden_layers": 5, "num_attention_heads": 16,
                       "num_key_value_heads": 8, "intermediate_size": 3072, "rms_norm_eps": 1e-6, "rope_theta": 10000}
_CODEC_DECODER_DEFAULTS = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
                           "num_key_value_heads": 16, "intermediate_size": 3072, "rms_norm_eps": 1e-5,
                           "rope_theta": 10000}


def parse_talker(block: dict[str, Any]) -> tuple[TalkerConfig, CodePredictorConfig]:
    """``talker_config`` -> the talker's and the code predictor's configs.

    Raises:
        ModelLoadError: a missing or mistyped field, sections that do not cover the rotary half, codebook counts or
            sizes that disagree between talker and predictor, control ids outside the vocabulary.
    """
    where = "talker_config"
    shape = AttentionShape.parse(block, where, _TALKER_DEFAULTS)
    rope = block.get("rope_scaling") or {}
    section = _ints(rope, "mrope_section", f"{where}.rope_scaling", (shape.head_dim // 2,))
    if sum(section) != shape.head_dim // 2:
        raise ModelLoadError(f"{where}.rope_scaling.mrope_section {list(section)} must sum to head_dim / 2 = "
                             f"{shape.head_dim // 2}")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ModelLoadError(f"{where}: rope type {rope_type!r} is not supported (only 'default')")
    vocab = _int(block, "vocab_size", where)
    id_keys = {"pad": "codec_pad_id", "bos": "codec_bos_id", "eos": "codec_eos_token_id", "think": "codec_think_id",
               "nothink": "codec_nothink_id", "think_bos": "codec_think_bos_id", "think_eos": "codec_think_eos_id"}
    ids = CodecIds(**{field: _int(block, key, where) for field, key in id_keys.items()})
    languages = {str(k).lower(): int(v) for k, v in (block.get("codec_language_id") or {}).items()}
    speakers = {str(k).lower(): int(v) for k, v in (block.get("spk_id") or {}).items()}
    dialects = {str(k).lower(): (v or None) for k, v in (block.get("spk_is_dialect") or {}).items()}
    named = [(key, getattr(ids, field)) for field, key in id_keys.items()]
    named += [(f"codec_language_id.{k}", v) for k, v in languages.items()]
    named += [(f"spk_id.{k}", v) for k, v in speakers.items()]
    for name, value in named:
        if not 0 <= value < vocab:
            raise ModelLoadError(f"{where}.{name} = {value} is outside the talker vocabulary of {vocab}")
    for speaker, dialect in dialects.items():
        if dialect is not None and dialect not in languages:
            raise ModelLoadError(f"{where}.spk_is_dialect: speaker {speaker!r} names dialect {dialect!r}, "
                                 f"which codec_language_id lacks")
    groups = _int(block, "num_code_groups", where)
    talker = TalkerConfig(
        shape=shape, vocab_size=vocab, text_vocab_size=_int(block, "text_vocab_size", where),
        text_hidden_size=_int(block, "text_hidden_size", where), num_code_groups=groups, mrope_section=section,
        mrope_interleaved=bool(rope.get("interleaved", False)), ids=ids, languages=languages, speakers=speakers,
        speaker_dialects=dialects, position_id_per_seconds=_int(block, "position_id_per_seconds", where, 13))
    pwhere = f"{where}.code_predictor_config"
    pblock = block.get("code_predictor_config") or {}
    if not isinstance(pblock, dict):
        raise ModelLoadError(f"{pwhere} must be an object")
    predictor = CodePredictorConfig(shape=AttentionShape.parse(pblock, pwhere, _PREDICTOR_DEFAULTS),
                                    vocab_size=_int(pblock, "vocab_size", pwhere, 2048),
                                    num_code_groups=_int(pblock, "num_code_groups", pwhere, 32))
    if predictor.num_code_groups != groups or groups < 2:
        raise ModelLoadError(f"{where}: num_code_groups {groups} and the code predictor's "
                             f"{predictor.num_code_groups} must agree and be at least 2")
    if vocab - CONTROL_ROWS != predictor.vocab_size:
        raise ModelLoadError(f"{where}: vocab_size {vocab} must be the codebook size {predictor.vocab_size} plus "
                             f"{CONTROL_ROWS} control ids")
    return talker, predictor


def parse_speaker_encoder(block: dict[str, Any]) -> SpeakerEncoderConfig:
    where = "speaker_encoder_config"
    config = SpeakerEncoderConfig(
        mel_dim=_int(block, "mel_dim", where, 128), enc_dim=_int(block, "enc_dim", where, 1024),
        channels=_ints(block, "enc_channels", where, (512, 512, 512, 512, 1536)),
        kernel_sizes=_ints(block, "enc_kernel_sizes", where, (5, 3, 3, 3, 1)),
        dilations=_ints(block, "enc_dilations", where, (1, 2, 3, 4, 1)),
        attention_channels=_int(block, "enc_attention_channels", where, 128),
        res2net_scale=_int(block, "enc_res2net_scale", where, 8),
        se_channels=_int(block, "enc_se_channels", where, 128), sample_rate=_int(block, "sample_rate", where, 24000))
    if not len(config.channels) == len(config.kernel_sizes) == len(config.dilations) >= 3:
        raise ModelLoadError(f"{where}: enc_channels, enc_kernel_sizes and enc_dilations must have one equal length "
                             f"of at least 3")
    if config.mel_dim != 128:
        raise ModelLoadError(f"{where}.mel_dim is {config.mel_dim}; the reference computes 128 mel bins")
    return config


def parse_codec(config: dict[str, Any], where: str = "speech_tokenizer/config.json") -> CodecConfig:
    """``speech_tokenizer/config.json`` -> :class:`CodecConfig`.

    Raises:
        ModelLoadError: another tokenizer type (the 25 Hz one is not supported), a missing ``decoder_config`` or
            ``codebook_dim``, or upsampling factors whose product is not ``decode_upsample_rate``.
    """
    model_type = config.get("model_type")
    if model_type != CODEC_TYPE:
        raise ModelLoadError(f"{where}: model_type {model_type!r} is not supported (only {CODEC_TYPE!r})")
    block = _block(config, "decoder_config", where)
    dwhere = f"{where} decoder_config"
    decoder = CodecDecoderConfig(
        codebook_size=_int(block, "codebook_size", dwhere, 2048), codebook_dim=_int(block, "codebook_dim", dwhere),
        latent_dim=_int(block, "latent_dim", dwhere, 1024),
        shape=AttentionShape.parse(block, dwhere, _CODEC_DECODER_DEFAULTS),
        sliding_window=_int(block, "sliding_window", dwhere, 72), num_quantizers=_int(block, "num_quantizers", dwhere,
                                                                                       16),
        upsample_rates=_ints(block, "upsample_rates", dwhere, (8, 5, 4, 3)),
        upsampling_ratios=_ints(block, "upsampling_ratios", dwhere, (2, 2)),
        decoder_dim=_int(block, "decoder_dim", dwhere, 1536))
    if decoder.codebook_dim % 2:
        raise ModelLoadError(f"{dwhere}: codebook_dim {decoder.codebook_dim} must be even")
    if decoder.decoder_dim % (2 ** len(decoder.upsample_rates)):
        raise ModelLoadError(f"{dwhere}: decoder_dim {decoder.decoder_dim} must halve {len(decoder.upsample_rates)} "
                             f"times")
    codec = CodecConfig(decoder=decoder,
                        output_sample_rate=_int(config, "output_sample_rate", where, 24000),
                        input_sample_rate=_int(config, "input_sample_rate", where, 24000),
                        decode_upsample_rate=_int(config, "decode_upsample_rate", where, 1920),
                        encode_downsample_rate=_int(config, "encode_downsample_rate", where, 1920),
                        encoder_valid_num_quantizers=_int(config, "encoder_valid_num_quantizers", where, 16))
    if decoder.samples_per_frame != codec.decode_upsample_rate:
        raise ModelLoadError(f"{where}: the decoder's upsampling factors multiply to {decoder.samples_per_frame}, "
                             f"not decode_upsample_rate {codec.decode_upsample_rate}")
    return codec


def parse_config(config: dict[str, Any], codec: dict[str, Any]) -> Qwen3TTSConfig:
    """The two JSON objects of a checkpoint -> :class:`Qwen3TTSConfig`.

    Raises:
        ModelLoadError: another ``model_type`` or ``tokenizer_type``, an unknown kind, any field error of the
            parsers above, or codec and talker disagreeing on codebooks (count or size) or a Base speaker
            embedding width other than the talker's.
    """
    where = "config.json"
    if config.get("model_type") != "qwen3_tts":
        raise ModelLoadError(f"{where}: model_type {config.get('model_type')!r} is not 'qwen3_tts'")
    if config.get("tokenizer_type") != CODEC_TYPE:
        raise ModelLoadError(f"{where}: tokenizer_type {config.get('tokenizer_type')!r} is not supported "
                             f"(only {CODEC_TYPE!r}, the 12 Hz models)")
    kind = config.get("tts_model_type")
    if kind not in KINDS:
        raise ModelLoadError(f"{where}: tts_model_type {kind!r} is not one of {list(KINDS)}")
    talker, predictor = parse_talker(_block(config, "talker_config", where))
    speaker_encoder = None
    if kind == "base":
        speaker_encoder = parse_speaker_encoder(config.get("speaker_encoder_config") or {})
        if speaker_encoder.enc_dim != talker.shape.hidden_size:
            raise ModelLoadError(f"{where}: speaker_encoder_config.enc_dim {speaker_encoder.enc_dim} must equal the "
                                 f"talker's hidden_size {talker.shape.hidden_size}")
    codec_config = parse_codec(codec)
    if codec_config.decoder.num_quantizers != talker.num_code_groups:
        raise ModelLoadError(f"the codec decodes {codec_config.decoder.num_quantizers} codebooks per frame, the "
                             f"talker makes {talker.num_code_groups}")
    if codec_config.decoder.codebook_size != predictor.vocab_size:
        raise ModelLoadError(f"the codec's codebooks hold {codec_config.decoder.codebook_size} entries, the code "
                             f"predictor's {predictor.vocab_size}")
    text_ids = {name: _int(config, f"{name}_token_id", where, default)
                for name, default in (("im_start", 151644), ("im_end", 151645), ("tts_pad", 151671),
                                      ("tts_bos", 151672), ("tts_eos", 151673))}
    for name, value in text_ids.items():
        if not 0 <= value < talker.text_vocab_size:
            raise ModelLoadError(f"{where}: {name}_token_id {value} is outside the text vocabulary of "
                                 f"{talker.text_vocab_size}")
    return Qwen3TTSConfig(kind=kind, model_size=str(config.get("tts_model_size") or ""), text_ids=text_ids,
                          talker=talker, predictor=predictor, speaker_encoder=speaker_encoder, codec=codec_config)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ModelLoadError(f"{str(path)!r} is missing") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read {str(path)!r}: {exc}") from exc
    if not isinstance(value, dict):
        raise ModelLoadError(f"{str(path)!r} does not hold a JSON object")
    return value


def load_config(folder: str | Path) -> Qwen3TTSConfig:
    """Read ``folder/config.json`` and ``folder/speech_tokenizer/config.json``.

    Raises:
        ModelLoadError: a file is missing or unreadable, or :func:`parse_config` refuses them.
    """
    folder = Path(folder)
    return parse_config(_read_json(folder / "config.json"), _read_json(folder / "speech_tokenizer" / "config.json"))
