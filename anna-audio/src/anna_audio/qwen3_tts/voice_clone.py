"""Voice cloning on Base checkpoints: reference audio (+ its transcript) -> what the talker's prompt needs.

After the reference (QwenLM/Qwen3-TTS ``inference/qwen3_tts_model.py``: ``Qwen3TTSModel.create_voice_clone_prompt``
and how ``generate_voice_clone`` uses its items). The reference audio is averaged to mono and resampled (soxr HQ,
librosa's default there, :class:`~anna_audio.audio_io.resample.MonoResampler` here) to the codec's input rate and
to the speaker encoder's (24 kHz both, released). Two modes:

* in-context (the default): the speaker encoder's x-vector, the codec encoder's codes of the whole reference audio
  (encoded alone) and the transcript, tokenized as ``<|im_start|>assistant\\n{ref_text}<|im_end|>\\n``; the prompt
  builder (:func:`~anna_audio.qwen3_tts.prompt.build_prompt`) places the transcript before the text and the codes
  after the codec ``bos``, so the talker continues the reference speech. A transcript is required.
* x-vector only: the x-vector alone stands in for a speaker (no codes, no transcript; a transcript given is
  ignored, as in the reference).

The waveform of an in-context request (:func:`cloned_waveforms`) is decoded, as the reference does, with the
reference codes in front of the generated ones (the decoder's left context), then the reference's share cut off:
``int(F_r / (F_r + F) * samples)`` samples, which is ``F_r * 1920`` or, through float rounding, one sample less. A
streamed response primes its :class:`~anna_audio.qwen3_tts.codec_decoder.StreamingDecoder` with the reference codes
and drops their ``F_r * 1920`` samples (at most one sample off the reference's cut).

The reference bounds neither the audio's length nor its level; Anna refuses audio outside
:class:`VoiceCloneLimits` (a few frames say nothing of a voice, and every 80 ms of reference becomes a prompt
position in in-context mode).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import numpy as np
import torch
from anna_core.errors import InvalidRequestError

from anna_audio.audio_io.decode import MAX_SOURCE_RATE, MIN_SOURCE_RATE, AudioLimits, decode_audio
from anna_audio.audio_io.resample import MonoResampler
from anna_audio.qwen3_tts.codec_decoder import CodecDecoder
from anna_audio.qwen3_tts.codec_encoder import CodecEncoder
from anna_audio.qwen3_tts.config import Qwen3TTSConfig
from anna_audio.qwen3_tts.prompt import SpeechRequest
from anna_audio.qwen3_tts.speaker_encoder import SpeakerEncoder, speaker_mels
from anna_audio.qwen3_tts.voice import ClonePrompt, check_ref_text
from anna_audio.qwen3_tts.weights import load_codec_encoder, load_speaker_encoder

Tokenize = Callable[[str], Sequence[int]]
"""Text -> token ids with the checkpoint's tokenizer, special tokens such as ``<|im_start|>`` parsed as written
(e.g. ``lambda s: hf_tokenizer(s)["input_ids"]``)."""
MAX_CHANNELS = 8
"""The most channels a ``[samples, channels]`` recording may have; an array with a dimension this short and a long
other one is taken for channels-first and refused with a hint."""


def _positive_finite(_instance, attribute, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ValueError(f"VoiceCloneLimits.{attribute.name} must be a positive finite number, got {value!r}")


@attrs.frozen
class VoiceCloneLimits:
    """Bounds on a reference recording, in seconds of audio.

    Attributes:
        min_seconds: shortest accepted (default 0.5 s).
        max_seconds: longest accepted (default 60 s: 750 codec frames in the prompt).

    Raises:
        ValueError: a bound that is not a positive finite number, or ``min_seconds > max_seconds``.
    """

    min_seconds: float = attrs.field(default=0.5, validator=_positive_finite)
    max_seconds: float = attrs.field(default=60.0, validator=_positive_finite)

    def __attrs_post_init__(self) -> None:
        if self.min_seconds > self.max_seconds:
            raise ValueError(f"VoiceCloneLimits: min_seconds {self.min_seconds} exceeds max_seconds {self.max_seconds}")


@attrs.frozen
class VoiceClonePrompt:
    """A cloned voice, ready for :class:`~anna_audio.qwen3_tts.prompt.SpeechRequest`.

    Attributes:
        speaker_embedding: ``[H]`` float32, the speaker encoder's x-vector (``H`` = the talker's width).
        ref_codes: ``[F, G]`` int64 codec codes of the reference audio (in-context mode), or None (x-vector only).
        ref_ids: ``[T_r]`` int64 ids of the wrapped transcript (in-context mode), or None.
        ref_text: the transcript as given (None in x-vector-only mode).
    """

    speaker_embedding: torch.Tensor
    ref_codes: torch.Tensor | None = None
    ref_ids: torch.Tensor | None = None
    ref_text: str | None = None

    @property
    def x_vector_only(self) -> bool:
        """True when only the x-vector clones the voice."""
        return self.ref_codes is None

    def apply(self, request: SpeechRequest) -> SpeechRequest:
        """``request`` with this voice: its ``speaker_embedding``, ``ref_ids`` and ``ref_codes`` replaced."""
        return attrs.evolve(request, speaker_embedding=self.speaker_embedding, ref_ids=self.ref_ids,
                            ref_codes=self.ref_codes)


def require_voice_cloning(config: Qwen3TTSConfig) -> None:
    """Refuse reference audio for a checkpoint that cannot clone.

    Raises:
        InvalidRequestError: (HTTP 400, ``param`` ``"ref_audio"``) ``config`` is not a Base checkpoint.
    """
    if not config.accepts_reference_audio:
        raise InvalidRequestError(f"voice cloning from reference audio needs a Qwen3-TTS Base model; this one is "
                                  f"{config.kind} (use its voices or instructions instead)", param="ref_audio")


class VoiceCloner:
    """Builds :class:`VoiceClonePrompt` from reference recordings on one Base checkpoint.

    Args:
        config: the checkpoint's configuration (a Base one).
        speaker_encoder: its speaker encoder (:func:`~anna_audio.qwen3_tts.weights.load_speaker_encoder`).
        codec_encoder: its codec's encoder (:func:`~anna_audio.qwen3_tts.weights.load_codec_encoder`).
        tokenize: the checkpoint's text tokenizer (:data:`Tokenize`).
        control: the texts of its control tokens (:func:`~anna_audio.qwen3_tts.voice.control_tokens`), refused in a
            transcript.
        limits: bounds on the recordings (default :class:`VoiceCloneLimits` ()).

    Raises:
        InvalidRequestError: ``config`` is not a Base checkpoint (:func:`require_voice_cloning`).
    """

    def __init__(self, config: Qwen3TTSConfig, speaker_encoder: SpeakerEncoder, codec_encoder: CodecEncoder,
                 tokenize: Tokenize, *, control: Sequence[str], limits: VoiceCloneLimits | None = None) -> None:
        require_voice_cloning(config)
        self.config = config
        self.speaker_encoder = speaker_encoder
        self.codec_encoder = codec_encoder
        self.tokenize = tokenize
        self.control = tuple(control)
        self.limits = limits or VoiceCloneLimits()

    def prompt(self, ref_audio: np.ndarray | torch.Tensor, sample_rate: int, ref_text: str | None = None, *,
               x_vector_only: bool = False) -> VoiceClonePrompt:
        """Clone the voice of ``ref_audio``.

        Args:
            ref_audio: ``[N]`` or ``[N, C]`` (``C`` <= :data:`MAX_CHANNELS`, averaged) float samples, nominally in
                ``[-1, 1]`` (any float dtype, bfloat16 included; read as float32).
            sample_rate: Hz of ``ref_audio``, an integer in [``MIN_SOURCE_RATE``, ``MAX_SOURCE_RATE``] of
                :mod:`anna_audio.audio_io.decode` (resampled to what each encoder takes).
            ref_text: the transcript of ``ref_audio``; required unless ``x_vector_only``.
            x_vector_only: clone from the speaker embedding alone.

        Returns:
            The :class:`VoiceClonePrompt` (tensors on the encoders' device).

        Raises:
            InvalidRequestError: (HTTP 400) audio that is empty, not 1-D / 2-D, channels-first, not finite, or
                outside :class:`VoiceCloneLimits` (``param`` ``"ref_audio"``); a sample rate that is not an integer
                in the accepted range (``"ref_audio"``); a transcript that is not a string, holds a control token or
                is over :data:`~anna_audio.qwen3_tts.voice.MAX_REF_TEXT_CHARS`, or a missing or blank one in
                in-context mode (``"ref_text"``).
        """
        mono = _mono(ref_audio)
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int | np.integer) or sample_rate <= 0:
            raise InvalidRequestError(f"the reference audio's sample rate must be a positive integer, got "
                                      f"{sample_rate!r}", param="ref_audio")
        sample_rate = int(sample_rate)
        if not MIN_SOURCE_RATE <= sample_rate <= MAX_SOURCE_RATE:
            raise InvalidRequestError(f"the reference audio's sample rate {sample_rate} Hz is outside "
                                      f"{MIN_SOURCE_RATE}-{MAX_SOURCE_RATE} Hz", param="ref_audio")
        if ref_text is not None and not isinstance(ref_text, str):
            raise InvalidRequestError(f"ref_text must be a string, got {type(ref_text).__name__}", param="ref_text")
        check_ref_text(ref_text, self.control)
        seconds = mono.shape[0] / sample_rate
        if not self.limits.min_seconds <= seconds <= self.limits.max_seconds:
            raise InvalidRequestError(f"the reference audio lasts {seconds:.2f} s; voice cloning takes "
                                      f"{self.limits.min_seconds:g}-{self.limits.max_seconds:g} s",
                                      param="ref_audio")
        if not x_vector_only and (ref_text is None or not ref_text.strip()):
            raise InvalidRequestError("in-context voice cloning needs the transcript of the reference audio "
                                      "(ref_text); without one, ask for x-vector-only cloning", param="ref_text")
        at_rate: dict[int, np.ndarray] = {}

        def resampled(rate: int) -> np.ndarray:
            if rate not in at_rate:
                resampler = MonoResampler(sample_rate, rate)
                resampler.push(mono[:, None])
                at_rate[rate] = resampler.finish()
            return at_rate[rate]

        speaker_rate = self.config.speaker_encoder.sample_rate
        device = self.speaker_encoder.fc.weight.device
        with torch.inference_mode():
            mels = speaker_mels(torch.from_numpy(resampled(speaker_rate)).to(device), speaker_rate)
            embedding = self.speaker_encoder(mels[None].to(self.speaker_encoder.fc.weight.dtype))[0].float()
        if x_vector_only:
            return VoiceClonePrompt(speaker_embedding=embedding)
        (codes,) = self.codec_encoder.encode([torch.from_numpy(resampled(self.codec_encoder.config.sample_rate))])
        ids = torch.tensor(list(self.tokenize(f"<|im_start|>assistant\n{ref_text}<|im_end|>\n")), dtype=torch.int64)
        return VoiceClonePrompt(speaker_embedding=embedding, ref_codes=codes, ref_ids=ids, ref_text=ref_text)


def _mono(audio: np.ndarray | torch.Tensor) -> np.ndarray:
    """``[N]`` or ``[N, C]`` samples -> ``[N]`` float32 (the channels' mean); refuses what is not audio."""
    if isinstance(audio, torch.Tensor):  # float tensors as float32 (numpy has no bfloat16)
        audio = (audio.detach().float() if audio.is_floating_point() else audio.detach()).cpu().numpy()
    if not isinstance(audio, np.ndarray) or audio.ndim not in (1, 2) or audio.size == 0:
        shape = getattr(audio, "shape", None)
        raise InvalidRequestError(f"the reference audio must be [samples] or [samples, channels] and not empty, got "
                                  f"{shape if shape is not None else type(audio).__name__}", param="ref_audio")
    if not np.issubdtype(audio.dtype, np.floating):
        raise InvalidRequestError(f"the reference audio must be float samples, got {audio.dtype}", param="ref_audio")
    if audio.ndim == 2 and audio.shape[1] > MAX_CHANNELS:
        hint = (f"; a {list(audio.shape)} array looks channels-first: pass its transpose"
                if audio.shape[0] <= MAX_CHANNELS else "")
        raise InvalidRequestError(f"the reference audio must be [samples, channels] with at most {MAX_CHANNELS} "
                                  f"channels, got {list(audio.shape)}{hint}", param="ref_audio")
    mono = audio.astype(np.float32) if audio.ndim == 1 else audio.mean(axis=1, dtype=np.float32)
    if not np.isfinite(mono).all():
        raise InvalidRequestError("the reference audio holds NaN or infinite samples", param="ref_audio")
    return np.ascontiguousarray(mono)


def build_voice_clone_prompt(cloner: VoiceCloner | None, config: Qwen3TTSConfig, ref_audio: np.ndarray | torch.Tensor,
                             sample_rate: int, ref_text: str | None = None, *,
                             x_vector_only: bool = False) -> VoiceClonePrompt:
    """The serving side's one call: refuse cloning on a checkpoint that cannot, else ``cloner.prompt(...)``.

    Args:
        cloner: the checkpoint's :class:`VoiceCloner` (None for CustomVoice / VoiceDesign checkpoints).
        config: the checkpoint's configuration.
        ref_audio, sample_rate, ref_text, x_vector_only: as :meth:`VoiceCloner.prompt`.

    Raises:
        InvalidRequestError: not a Base checkpoint (``param`` ``"ref_audio"``), or what :meth:`VoiceCloner.prompt`
            raises.
        ValueError: a Base checkpoint without a cloner (a wiring error).
    """
    require_voice_cloning(config)
    if cloner is None:
        raise ValueError("a Base checkpoint needs a VoiceCloner to clone voices")
    return cloner.prompt(ref_audio, sample_rate, ref_text, x_vector_only=x_vector_only)


def load_voice_cloner(folder: str | Path, config: Qwen3TTSConfig, tokenize: Tokenize, *, control: Sequence[str],
                      device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                      limits: VoiceCloneLimits | None = None) -> VoiceCloner:
    """The :class:`VoiceCloner` of the Base checkpoint in ``folder``: its speaker encoder and codec encoder loaded on
    ``device`` in ``dtype``; ``tokenize`` and ``control`` as :class:`VoiceCloner`'s. Keep float32 (they run once per request): in bf16 the codec encoder's nearest-entry
    choices drift from float32's (on the tiny random checkpoint most codes differ).

    Raises:
        InvalidRequestError: not a Base checkpoint (check :attr:`Qwen3TTSConfig.accepts_reference_audio` first).
        ModelLoadError: the speaker encoder's or the codec encoder's weights or settings do not match (all named).
    """
    require_voice_cloning(config)
    return VoiceCloner(config, load_speaker_encoder(folder, config, device=device, dtype=dtype),
                       load_codec_encoder(folder, config, device=device, dtype=dtype), tokenize, control=control,
                       limits=limits)


class RecordingCloner:
    """The ``speech`` task's :class:`~anna_audio.qwen3_tts.voice.VoiceCloner`: an uploaded recording's file bytes
    (any container :func:`~anna_audio.audio_io.decode.decode_audio` reads) decoded to 24 kHz mono, then
    :meth:`VoiceCloner.prompt` (in-context with ``ref_text``, x-vector only without).

    Args:
        cloner: the checkpoint's :class:`VoiceCloner`.
        limits: the upload's caps (default :class:`~anna_audio.audio_io.decode.AudioLimits` ()).
    """

    def __init__(self, cloner: VoiceCloner, limits: AudioLimits | None = None) -> None:
        self.cloner = cloner
        self.limits = limits

    def clone(self, ref_audio: bytes, ref_text: str | None) -> ClonePrompt:
        """``ref_audio`` (file bytes) and its transcript (None: x-vector only) -> the :class:`ClonePrompt`.

        Raises:
            InvalidRequestError: (``param`` ``"ref_audio"``) bytes that do not decode as audio, or audio outside the
                cloner's limits; what :meth:`VoiceCloner.prompt` refuses.
        """
        rate = self.cloner.codec_encoder.config.sample_rate
        try:
            decoded = decode_audio(ref_audio, self.limits, sample_rate=rate)
        except InvalidRequestError as exc:  # decode_audio names the transcription upload (``file``)
            raise InvalidRequestError(f"ref_audio: {exc}", param="ref_audio") from None
        prompt = self.cloner.prompt(decoded.samples, decoded.sample_rate, ref_text, x_vector_only=ref_text is None)
        return ClonePrompt(prompt.speaker_embedding, prompt.ref_codes)


def reference_cut(ref_frames: int, total_frames: int, samples: int) -> int:
    """Samples the reference drops from the front of an in-context request's waveform: ``int(ref_frames /
    max(total_frames, 1) * samples)`` (float64, as there), for ``samples`` decoded from ``total_frames`` frames of
    which the first ``ref_frames`` are the recording's."""
    return int(ref_frames / max(total_frames, 1) * samples)


def cloned_waveforms(decoder: CodecDecoder, codes: list[torch.Tensor],
                     voices: list[VoiceClonePrompt | None]) -> list[torch.Tensor]:
    """Decode generated codes as one batch into the waveforms the reference returns for them.

    Args:
        decoder: the checkpoint's codec decoder.
        codes: per request the generated codes ``[F_i, G]`` int64.
        voices: per request its cloned voice (None, or x-vector only: decoded as is; in-context: decoded after the
            reference codes, whose share is then cut off, :func:`reference_cut`).

    Returns:
        Per request ``[S_i]`` float samples at the codec's output rate.

    Raises:
        ValueError: ``codes`` and ``voices`` of different lengths, or what
            :meth:`~anna_audio.qwen3_tts.codec_decoder.CodecDecoder.decode` raises.
    """
    if len(codes) != len(voices):
        raise ValueError(f"{len(codes)} code sequences for {len(voices)} voices")
    full = [c if v is None or v.ref_codes is None else torch.cat([v.ref_codes.to(c.device), c])
            for c, v in zip(codes, voices, strict=True)]
    with torch.inference_mode():
        wavs = decoder.decode(full)
    out = []
    for wav, whole, voice in zip(wavs, full, voices, strict=True):
        prefix = 0 if voice is None or voice.ref_codes is None else voice.ref_codes.shape[0]
        out.append(wav[reference_cut(prefix, whole.shape[0], wav.shape[0]):] if prefix else wav)
    return out
