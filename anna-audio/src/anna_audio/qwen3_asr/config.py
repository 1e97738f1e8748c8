"""Qwen3-ASR hyper-parameters from ``config.json``, in either checkpoint layout.

Two layouts share ``model_type`` ``qwen3_asr``, told apart by ``config.json`` alone:

* ``hf`` — the converted layout transformers reads (``transformers.models.qwen3_asr``): top-level ``audio_config``
  (``model_type`` ``qwen3_asr_encoder``), ``text_config`` (a plain Qwen3 text model, 1-D rotary) and
  ``audio_token_id``; weights ``model.audio_tower.*``, ``model.multi_modal_projector.*``,
  ``model.language_model.*``, ``lm_head.*``.
* ``original`` — the release layout of the upstream ``qwen-asr`` package: everything under ``thinker_config``
  (``audio_config`` with the projector inside the tower as ``proj1`` / ``proj2``, ``text_config`` with an
  M-RoPE ``rope_scaling``), an optional top-level ``support_languages`` list; weights under ``thinker.``.

:func:`hf_form` rewrites the original layout's config into the ``hf`` form the way transformers' conversion script
for Qwen3-ASR does: the thinker's sub-configs moved to the top, the encoder's sinusoid table cut to the
``13`` positions one ``2 * n_window``-frame chunk gives after the convolutions (the original keeps 1500 rows of
which only those are read), the sub-configs' own ``model_type`` s dropped, and the M-RoPE fields dropped: audio prompts give all three M-RoPE rows the same
position, which is plain 1-D rotary (Qwen Team, "Qwen3-Omni Technical Report", 2025, on audio positions).
"""

from __future__ import annotations

import copy
from typing import Any

import attrs
from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_qwen35.qwen3.config import Qwen3Config

LAYOUTS = ("hf", "original")
ARCHITECTURE = "Qwen3ASRForConditionalGeneration"
ALIGNER_ARCHITECTURE = "Qwen3ASRForTokenClassification"
ENCODER_POSITIONS = 13
"""Rows one ``2 * n_window = 100``-frame chunk has after the encoder's three stride-2 convolutions."""
MROPE_KEYS = ("mrope_section", "mrope_interleaved", "interleaved")
ENCODER_KEYS = ("num_mel_bins", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim", "d_model",
                "activation_function", "scale_embedding", "n_window", "output_dim", "n_window_infer",
                "downsample_hidden_size", "max_position_embeddings")
"""The ``audio_config`` fields transformers' ``Qwen3ASREncoderConfig`` takes that the encoder reads."""
DEFAULT_CONV_CHUNKS = 500
"""Convolution chunks per encoder call without ``audio_config.conv_chunksize`` (the released configs' value)."""


def layout_of(config: dict[str, Any]) -> str:
    """``"original"`` when ``config.json`` nests the model in ``thinker_config``, else ``"hf"``.

    Raises:
        UnsupportedModelError: a forced-aligner checkpoint (``Qwen3ASRForTokenClassification``, or ``classify_num``
            in the thinker config): it aligns words to audio and does not transcribe.
    """
    thinker = config.get("thinker_config")
    aligner = ALIGNER_ARCHITECTURE in (config.get("architectures") or []) or (
        isinstance(thinker, dict) and "classify_num" in thinker)
    if aligner:
        raise UnsupportedModelError("this is a Qwen3 forced-aligner checkpoint (Qwen3ASRForTokenClassification): it "
                                    "times words, it does not transcribe; load a Qwen3-ASR checkpoint instead")
    return "original" if isinstance(thinker, dict) else "hf"


def hf_form(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` in the ``hf`` layout (a copy; an ``hf``-layout config is returned as a deep copy).

    Raises:
        ModelLoadError: an original-layout config without ``audio_config`` / ``text_config`` in its thinker.
        UnsupportedModelError: see :func:`layout_of`.
    """
    if layout_of(config) == "hf":
        return copy.deepcopy(config)
    thinker = config["thinker_config"]
    missing = [k for k in ("audio_config", "text_config") if not isinstance(thinker.get(k), dict)]
    if missing:
        raise ModelLoadError(f"config.json thinker_config lacks {missing}")
    out = {k: copy.deepcopy(v) for k, v in config.items() if k != "thinker_config"}
    audio = copy.deepcopy(thinker["audio_config"])
    audio.pop("max_source_positions", None)
    audio.pop("model_type", None)  # qwen3_asr_audio_encoder: the encoder's own type in the hf layout
    audio["max_position_embeddings"] = ENCODER_POSITIONS
    text = copy.deepcopy(thinker["text_config"])
    text.pop("model_type", None)  # qwen3_asr_text: a plain Qwen3 text model
    for key in ("rope_scaling", "rope_parameters"):
        if isinstance(text.get(key), dict):
            text[key] = {k: v for k, v in text[key].items() if k not in MROPE_KEYS}
    out.update(audio_config=audio, text_config=text)
    for key in ("audio_token_id", "audio_start_token_id", "audio_end_token_id"):
        if key in thinker:
            out[key] = thinker[key]
    return out


@attrs.frozen
class EncoderConfig:
    """The audio encoder's fields (transformers' ``Qwen3ASREncoderConfig``).

    Attributes:
        kwargs: the keyword arguments of ``Qwen3ASREncoderConfig`` (:data:`ENCODER_KEYS` present in the checkpoint).
        d_model: the encoder width; output_dim: the projector's output width (the text model's hidden size).
        n_window: half a convolution chunk in mel frames; num_mel_bins: mel bins of the features.
        activation_function: of the encoder MLPs and the projector (``"gelu"``).
        conv_chunksize: ``audio_config.conv_chunksize``: how many ``2 * n_window``-frame chunks the original code
            runs through the convolutions at once; Anna bounds the chunks of one encoder call by it (a longer clip
            runs alone, in segments cut at attention-window boundaries: :mod:`anna_audio.qwen3_asr.encoder_input`),
            so neither a batch of clips nor one long clip holds more convolution activations at once.
    """

    kwargs: dict[str, Any]
    d_model: int
    output_dim: int
    n_window: int
    num_mel_bins: int
    activation_function: str
    conv_chunksize: int = DEFAULT_CONV_CHUNKS


@attrs.frozen
class Qwen3ASRConfig:
    """A Qwen3-ASR checkpoint's hyper-parameters.

    Attributes:
        layout: ``"hf"`` or ``"original"`` (:func:`layout_of`).
        text: the decoder's :class:`~anna_qwen35.qwen3.config.Qwen3Config`.
        encoder: the audio encoder's :class:`EncoderConfig`.
        audio_token_id: the audio placeholder token (``<|audio_pad|>``).
        eos_token_id: the config's EOS ids.
        support_languages: the original layout's ``support_languages`` (empty when the config lists none).
        text_config: the ``text_config`` dict in ``hf`` form (for ``hf_export``).
    """

    layout: str
    text: Qwen3Config
    encoder: EncoderConfig
    audio_token_id: int
    eos_token_id: tuple[int, ...]
    support_languages: tuple[str, ...]
    text_config: dict[str, Any]

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> Qwen3ASRConfig:
        """From a parsed ``config.json`` of either layout.

        Raises:
            ModelLoadError: a missing or malformed field, or an encoder whose output width is not the text width.
            UnsupportedModelError: a forced-aligner checkpoint; an activation other than GELU; anything
                :meth:`Qwen3Config.from_hf` refuses in the text model.
        """
        layout = layout_of(config)
        cfg = hf_form(config)
        audio, text = cfg.get("audio_config"), cfg.get("text_config")
        if not isinstance(audio, dict) or not isinstance(text, dict):
            raise ModelLoadError("a Qwen3-ASR config.json needs audio_config and text_config dicts")
        tie = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
        text_cfg = Qwen3Config.from_hf(text, tie_word_embeddings=bool(tie))
        try:
            encoder = EncoderConfig(
                kwargs={k: audio[k] for k in ENCODER_KEYS if k in audio}, d_model=int(audio["d_model"]),
                output_dim=int(audio["output_dim"]), n_window=int(audio.get("n_window", 50)),
                num_mel_bins=int(audio.get("num_mel_bins", 128)),
                activation_function=str(audio.get("activation_function", "gelu")),
                conv_chunksize=int(audio.get("conv_chunksize") or DEFAULT_CONV_CHUNKS))
            audio_token_id = int(cfg["audio_token_id"])
        except KeyError as exc:
            raise ModelLoadError(f"config.json lacks the Qwen3-ASR field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ModelLoadError(f"config.json has a malformed Qwen3-ASR field: {exc}") from exc
        if encoder.n_window < 1 or encoder.conv_chunksize < 1:
            raise ModelLoadError(f"audio_config n_window ({encoder.n_window}) and conv_chunksize "
                                 f"({encoder.conv_chunksize}) must be positive")
        if encoder.activation_function != "gelu":
            raise UnsupportedModelError(f"Qwen3-ASR activation_function {encoder.activation_function!r} is not "
                                        "supported (only 'gelu')")
        if encoder.output_dim != text_cfg.hidden_size:
            raise ModelLoadError(f"audio_config.output_dim {encoder.output_dim} differs from the text hidden size "
                                 f"{text_cfg.hidden_size}")
        eos = cfg.get("eos_token_id", text.get("eos_token_id"))
        eos_ids = tuple(int(e) for e in ([] if eos is None else [eos] if isinstance(eos, int) else eos))
        languages = tuple(str(x) for x in config.get("support_languages") or ())
        return cls(layout=layout, text=text_cfg, encoder=encoder, audio_token_id=audio_token_id,
                   eos_token_id=eos_ids, support_languages=languages, text_config=text)
