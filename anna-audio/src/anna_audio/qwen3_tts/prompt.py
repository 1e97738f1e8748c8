"""The talker's prompt of one request: prefill embeddings and the text embeddings fed during decoding.

After the reference (QwenLM/Qwen3-TTS ``modeling_qwen3_tts.py``, ``Qwen3TTSForConditionalGeneration.generate`` and
``generate_icl_prompt``). Text ids come from the checkpoint's tokenizer on the reference's fixed strings:

* ``assistant_ids``: ``<|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n`` (the text is
  ``[3:-5]``);
* ``instruct_ids``: ``<|im_start|>user\\n{instructions}<|im_end|>\\n`` (prepended whole, projected);
* ``ref_ids`` (Base, in-context cloning): ``<|im_start|>assistant\\n{reference transcript}<|im_end|>\\n``
  (the transcript is ``[3:-2]``).

Each prompt position adds a text-side embedding (projected text, or the ``tts_pad`` / ``tts_bos`` / ``tts_eos``
embeddings) to a codec-side one (control ids, the speaker, codes). The codec side opens with think / language
tags, the speaker (a CustomVoice speaker's codec embedding or a Base speaker encoder's x-vector), ``pad`` and
``bos``. With ``non_streaming_text`` the whole text is in the prompt (over ``pad`` codec embeddings) and decoding
adds ``tts_pad``; otherwise the prompt holds the first text token and each decode step adds the next one (then
``tts_eos``, then ``tts_pad``). In-context cloning appends the reference transcript with the text and the
reference codes (each frame the sum of its codebooks' embeddings) after ``bos``.
"""

from __future__ import annotations

import attrs
import torch
from anna_core.device import accelerator

from anna_audio.languages import english_name
from anna_audio.qwen3_tts.code_predictor import CodePredictor
from anna_audio.qwen3_tts.config import Qwen3TTSConfig
from anna_audio.qwen3_tts.talker import Talker


@attrs.frozen
class SpeechRequest:
    """What one synthesis asks for, tokenized.

    Attributes:
        assistant_ids: ``[T]`` int64, the text wrapped as described in the module docstring.
        language: a ``codec_language_id`` key or ``"auto"`` (case-insensitive).
        speaker: a CustomVoice speaker name, or None.
        instruct_ids: ``[T_i]`` int64 or None.
        speaker_embedding: ``[H]`` x-vector of Base voice cloning, or None.
        ref_ids: ``[T_r]`` int64 (Base in-context cloning), or None.
        ref_codes: ``[F_r, G]`` int64 codes of the reference audio (with ``ref_ids``), or None.
        non_streaming_text: whether the whole text goes into the prompt.
    """

    assistant_ids: torch.Tensor
    language: str = "auto"
    speaker: str | None = None
    instruct_ids: torch.Tensor | None = None
    speaker_embedding: torch.Tensor | None = None
    ref_ids: torch.Tensor | None = None
    ref_codes: torch.Tensor | None = None
    non_streaming_text: bool = True


@attrs.frozen
class TalkerPrompt:
    """``prefill`` ``[T, H]``; ``trailing`` ``[N, H]`` (added to decode step ``i < N``); ``pad`` ``[H]`` (added
    after)."""

    prefill: torch.Tensor
    trailing: torch.Tensor
    pad: torch.Tensor


def language_id(config: Qwen3TTSConfig, language: str, speaker: str | None) -> int | None:
    """The codec language id (None for ``auto``) of ``language``, a name in any case or an ISO code (``"en"``,
    :func:`anna_audio.languages.english_name`); a dialect speaker's dialect replaces Chinese and ``auto``.

    Raises:
        ValueError: an unknown language or speaker.
    """
    talker = config.talker
    lang = language.strip().lower()
    if lang not in talker.languages:
        lang = english_name(lang)
    chosen = None
    if lang != "auto":
        if lang not in talker.languages:
            raise ValueError(f"language {language!r} is not supported; supported: "
                             f"{['auto', *sorted(k for k in talker.languages if 'dialect' not in k)]}")
        chosen = talker.languages[lang]
    if speaker and lang in ("chinese", "auto"):
        dialect = talker.speaker_dialects.get(speaker.lower())
        if dialect:
            chosen = talker.languages[dialect]
    return chosen


def to_device(t: torch.Tensor | list[int], device: torch.device) -> torch.Tensor:
    """``t`` (a tensor, or ids) on ``device`` without waiting for the work already queued there: a host tensor is
    page-locked where that speeds the copy (:meth:`anna_core.device.Accelerator.pin`: CUDA) and sent non-blocking,
    ordered on the stream after that work (a blocking copy would make the host wait for every queued engine step,
    once per copy of every prompt build on the server's worker threads)."""
    if not isinstance(t, torch.Tensor):
        t = torch.tensor(t, dtype=torch.int64)
    if t.device.type != "cpu":
        return t.to(device)
    return accelerator(device).pin(t).to(device, non_blocking=True)


def build_prompt(config: Qwen3TTSConfig, talker: Talker, predictor: CodePredictor,
                 request: SpeechRequest) -> TalkerPrompt:
    """The talker prompt of ``request`` (see the module docstring).

    Raises:
        ValueError: an unknown language or speaker, a speaker on a checkpoint without speakers, reference inputs on a
            non-Base checkpoint, ``ref_ids`` without ``ref_codes`` (or the reverse), or an ``assistant_ids`` too
            short to hold the wrapping.
    """
    ids = config.talker.ids
    device = talker.codec_head.weight.device

    def codec(*values: int) -> torch.Tensor:
        return talker.codec(to_device(list(values), device))

    text = to_device(request.assistant_ids, device)
    if text.dim() != 1 or text.shape[0] < 9:
        raise ValueError("assistant_ids must be the wrapped text: [T] with T >= 9")
    if (request.ref_ids is None) != (request.ref_codes is None):
        raise ValueError("in-context cloning needs both ref_ids and ref_codes")
    if (request.speaker_embedding is not None or request.ref_ids is not None) and not config.accepts_reference_audio:
        raise ValueError(f"a {config.kind} checkpoint takes no reference audio")
    special = talker.text(to_device([config.text_ids["tts_bos"], config.text_ids["tts_eos"],
                                     config.text_ids["tts_pad"]], device))
    tts_bos, tts_eos, tts_pad = special[0:1], special[1:2], special[2:3]

    speaker_embed = None
    if request.speaker:
        name = request.speaker.lower()
        if name not in config.talker.speakers:
            raise ValueError(f"speaker {request.speaker!r} is not supported; supported: "
                             f"{sorted(config.talker.speakers)}")
        speaker_embed = codec(config.talker.speakers[name])
    elif request.speaker_embedding is not None:
        speaker_embed = to_device(request.speaker_embedding, device).to(tts_pad.dtype).view(1, -1)
    lang = language_id(config, request.language, request.speaker)
    tags = [ids.nothink, ids.think_bos, ids.think_eos] if lang is None else [ids.think, ids.think_bos, lang,
                                                                             ids.think_eos]
    codec_side = torch.cat([codec(*tags), *([speaker_embed] if speaker_embed is not None else []),
                            codec(ids.pad, ids.bos)])  # [L, H]
    role = talker.text(text[:3])
    text_side = torch.cat([tts_pad.expand(codec_side.shape[0] - 2, -1), tts_bos])
    parts = [role, text_side + codec_side[:-1]]
    if request.instruct_ids is not None:
        parts.insert(0, talker.text(to_device(request.instruct_ids, device)))

    if request.ref_ids is not None:
        words = talker.text(torch.cat([to_device(request.ref_ids, device)[3:-2], text[3:-5]]))
        words = torch.cat([words, tts_eos])
        codes = to_device(request.ref_codes, device)
        frames = torch.cat([codec(ids.bos), predictor.embed_frame(talker.codec(codes[:, 0]), codes[:, 1:])])
        if request.non_streaming_text:
            parts += [words + codec(*([ids.pad] * words.shape[0])), frames + tts_pad]
            trailing = tts_pad
        elif words.shape[0] > frames.shape[0]:
            parts.append(words[: frames.shape[0]] + frames)
            trailing = words[frames.shape[0]:]
        else:
            padded = torch.cat([words, tts_pad.expand(frames.shape[0] - words.shape[0], -1)])
            parts.append(padded + frames)
            trailing = tts_pad
    elif request.non_streaming_text:
        words = torch.cat([talker.text(text[3:-5]), tts_eos])
        parts += [words + codec(*([ids.pad] * words.shape[0])), tts_pad + codec(ids.bos)]
        trailing = tts_pad
    else:
        parts.append(talker.text(text[3:4]) + codec_side[-1:])
        trailing = torch.cat([talker.text(text[4:-5]), tts_eos])
    return TalkerPrompt(prefill=torch.cat(parts), trailing=trailing, pad=tts_pad[0])
