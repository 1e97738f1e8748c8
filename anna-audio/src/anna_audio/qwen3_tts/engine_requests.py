"""Speech requests to and from Anna's engine over :class:`~anna_audio.qwen3_tts.talker_lm.TalkerLM`: a talker prompt
as an engine request (placeholder ids, the prefill embeddings as a medium, the sampling), and the engine's outputs
back into code frames.

The talker's repetition penalty and its ``min_tokens`` (EOS held back) are applied by the model on the device
(:meth:`~anna_audio.qwen3_tts.talker_lm.TalkerLM.compute_logits`, from per-slot state), not by the engine's sampler:
they travel in the prompt medium's data, and the engine's own parameters carry neither, so its decode steps sample
inside their captured graphs."""

from __future__ import annotations

import attrs
import torch
from anna_core.engine.outputs import RequestOutput
from anna_core.engine.sampling_params import SamplingParams
from anna_core.multimodal import MediaItem, MultiModalInputs, media_hash

from anna_audio.qwen3_tts.generate import MIN_FRAMES
from anna_audio.qwen3_tts.prompt import SpeechRequest, TalkerPrompt
from anna_audio.qwen3_tts.sampling import SpeechSampling


@attrs.frozen
class TalkerParams:
    """A request's sampling of codebook 0: ``engine`` (what the engine's sampler applies: temperature, top-k / top-p,
    the length, the seed; no penalty, no ``min_tokens``), and what the model applies on the device:
    ``repetition_penalty`` (over the codes generated so far, as the engine's sampler would) and ``min_tokens`` (EOS
    held back while fewer codes were generated)."""

    engine: SamplingParams
    repetition_penalty: float = 1.0
    min_tokens: int = 0


@attrs.frozen
class EngineSpeechRequest:
    """What ``LLMEngine.add_request`` takes for one synthesis: ``prompt_ids`` (``T`` placeholders), ``multimodal``
    (one ``"audio"`` medium over them whose ``data`` holds the prompt, ``{"prefill": [T, H], "trailing": [N, H]}``,
    and the model's sampling controls, ``"repetition_penalty"`` (float) and ``"min_tokens"`` (int)) and ``params``
    (the engine's)."""

    prompt_ids: list[int]
    multimodal: MultiModalInputs
    params: SamplingParams


def talker_params(sampling: SpeechSampling, *, max_frames: int | None = None, ignore_eos: bool = False,
                  seed: int | None = None) -> TalkerParams:
    """The sampling of codebook 0 for ``sampling`` (the talker's part; the code predictor's is the model's): greedy
    (temperature 0) unless ``do_sample``; ``max_tokens`` is ``max_frames + 1`` (the last talker step's token never
    becomes a frame), else ``sampling.max_new_tokens``; EOS is held back for the first ``MIN_FRAMES`` steps, or,
    with ``ignore_eos`` (and ``max_frames``), never chosen: every step's token is a code, so the request runs exactly
    ``max_frames`` frames (a benchmark's fixed length).

    Raises:
        ValueError: ``max_frames < 1``.
    """
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be at least 1, got {max_frames}")
    if ignore_eos and max_frames is None:
        raise ValueError("ignore_eos needs max_frames")
    t = sampling.talker
    max_tokens = sampling.max_new_tokens if max_frames is None else max_frames + 1
    engine = SamplingParams(max_tokens=max_tokens, temperature=t.temperature if t.do_sample else 0.0,
                            top_k=t.top_k if t.top_k else -1, top_p=t.top_p, seed=seed, ignore_eos=ignore_eos)
    return TalkerParams(engine, repetition_penalty=sampling.repetition_penalty,
                        min_tokens=max_tokens if ignore_eos else MIN_FRAMES)  # min_tokens: EOS masked until then


def request_key(words: SpeechRequest) -> bytes:
    """The identity of the talker prompt ``words`` builds (:func:`~anna_audio.qwen3_tts.prompt.build_prompt` is a
    function of it and the fixed weights), hashed from the request itself: the token ids, the language and speaker
    as written, the instruction and reference ids, the reference codes and x-vector, the streaming mode. Hashing the
    built prompt instead reads its embeddings back: a wait on every device step queued before it. Host data only for
    CustomVoice and VoiceDesign requests; a voice clone's (Base) codes and x-vector come from the encoders on the
    device and are read back here, as the cloning's own copies already wait (not removed)."""
    parts: list[object] = [b"qwen3-tts-request", words.assistant_ids, words.language.strip().lower(),
                           "speaker:" + (words.speaker.lower() if words.speaker else ""), int(words.non_streaming_text)]
    for name, value in (("instruct_ids", words.instruct_ids), ("speaker_embedding", words.speaker_embedding),
                        ("ref_ids", words.ref_ids), ("ref_codes", words.ref_codes)):
        parts += [name, "none"] if value is None else [name, value]
    return media_hash(*parts)


def engine_request(prompt: TalkerPrompt, placeholder_id: int, params: TalkerParams,
                   key: bytes | None = None) -> EngineSpeechRequest:
    """``prompt`` as an engine request (see :class:`EngineSpeechRequest`); ``key``: the prompt's identity
    (:func:`request_key` of the request that built it; None: hashed from the prompt's embeddings, a device read),
    with the sampling controls it carries added."""
    prefill, trailing = prompt.prefill.detach(), prompt.trailing.detach()
    length = prefill.shape[0]
    controls = {"repetition_penalty": params.repetition_penalty, "min_tokens": params.min_tokens}
    identity = (key,) if key is not None else (prefill, trailing)
    key = media_hash(b"qwen3-tts-prompt", *identity, params.repetition_penalty, params.min_tokens)
    item = MediaItem("audio", 0, length, key, data={"prefill": prefill, "trailing": trailing, **controls})
    return EngineSpeechRequest([placeholder_id] * length, MultiModalInputs(items=(item,)), params.engine)


class FrameAssembler:
    """One request's outputs -> its code frames ``[G]`` (codebook 0 from the token, the rest from the step that
    consumed it): output ``k >= 1`` completes the frame of token ``k - 1``; the last token never becomes a frame."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.frames: list[torch.Tensor] = []

    def feed(self, out: RequestOutput) -> list[torch.Tensor]:
        """The frames ``out`` completes (``[G]`` int64 on the CPU each, zero or one)."""
        new = []
        for token, rest in zip(out.delta_token_ids, out.side_outputs):
            if self.tokens:
                new.append(torch.cat([torch.tensor([self.tokens[-1]], dtype=torch.int64), rest.to("cpu")]))
            self.tokens.append(token)
        self.frames += new
        return new

    def codes(self, groups: int) -> torch.Tensor:
        """All frames so far, ``[F, G]`` int64."""
        return torch.stack(self.frames) if self.frames else torch.zeros(0, groups, dtype=torch.int64)
