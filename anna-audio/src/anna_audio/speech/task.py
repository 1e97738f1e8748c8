"""The ``speech`` task: Anna's engine over a Qwen3-TTS talker, served through a
:class:`~anna_audio.speech.service.SpeechService` and ``POST /v1/audio/speech``.

``build`` makes an :class:`~anna_core.engine.llm_engine.LLMEngine` over the family's
:class:`~anna_audio.qwen3_tts.talker_lm.TalkerLM` (so concurrent requests batch in its steps) with prefix and prompt
caching off (a speech prompt's last hidden state must be computed for the code predictor, never served from a
cache), and the shared :class:`~anna_audio.speech.vocoder.Vocoder`; ``start`` runs the engine on its thread behind an
:class:`~anna_core.engine.async_engine.AsyncEngine`. The built :class:`SpeechEngine` also synthesizes one request on
the caller's thread (``anna speak``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import numpy as np
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.model import LoadedModel

    from anna_audio.qwen3_tts.voice import VoiceRequest
    from anna_audio.speech.service import SpeechService


@attrs.define
class SpeechEngine:
    """What ``build`` returns.

    Attributes:
        engine: the :class:`~anna_core.engine.llm_engine.LLMEngine` over the talker.
        planner: the :class:`~anna_audio.speech.service.SpeechPlanner`.
        vocoder: the :class:`~anna_audio.speech.vocoder.Vocoder`.
    """

    engine: Any
    planner: Any
    vocoder: Any

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    @property
    def sample_rate(self) -> int:
        return self.planner.sample_rate

    def synthesize(self, request: VoiceRequest, *, max_frames: int | None = None, seed: int | None = None
                   ) -> np.ndarray:
        """The whole waveform of ``request`` (float32 samples at :attr:`sample_rate`), on this thread (the engine must
        not be running elsewhere).

        Raises:
            InvalidRequestError: see :meth:`~anna_audio.speech.service.SpeechPlanner.prepare`.
            AnnaError: the engine failed the request.
        """
        import numpy as np

        from anna_audio.speech.service import synthesize

        job = self.planner.prepare(request, max_frames=max_frames, seed=seed)
        chunks = list(synthesize(self.engine, self.planner, self.vocoder, job))
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)

    def speak(self, text: str, *, voice: str | None = None, instructions: str | None = None,
              language: str = "auto", ref_audio: bytes | None = None, ref_text: str | None = None,
              response_format: str = "wav", max_frames: int | None = None, seed: int | None = None) -> bytes:
        """``text`` spoken, as a file of ``response_format`` (``wav``, ``flac``, ``mp3``, ``opus``, ``pcm``) at
        :attr:`sample_rate` (``anna speak``; on this thread, the engine not running elsewhere).

        Raises:
            InvalidRequestError: a format it cannot write; see
                :meth:`~anna_audio.speech.service.SpeechPlanner.prepare` (reference audio: voice cloning is not
                available yet).
            AnnaError: the engine failed the request.
        """
        from anna_audio.qwen3_tts.voice import VoiceRequest
        from anna_audio.speech.audio_out import check_format, encode

        check_format(response_format)
        samples = self.synthesize(VoiceRequest(text=text, voice=voice, instructions=instructions, language=language,
                                               ref_audio=ref_audio, ref_text=ref_text),
                                  max_frames=max_frames, seed=seed)
        return encode(samples, self.sample_rate, response_format)


VOCODER_GRAPH_BATCH = 16
"""The most streams one captured codec decoder replay decodes (more take several replays): the graphs' activation
memory grows with it."""


def build(loaded: LoadedModel, config: EngineConfig, runner: RunnerConfig | None = None) -> SpeechEngine:
    """The engine of a loaded Qwen3-TTS checkpoint (warmed up with ``runner``), its planner and vocoder.

    Raises:
        AnnaError: the model is not a Qwen3-TTS talker, or the cache does not fit.
    """
    import attrs as _attrs
    from anna_core.errors import AnnaError
    from anna_core.tasks.generate import build as build_generate

    from anna_audio.qwen3_tts.loader import SpeechParts
    from anna_audio.qwen3_tts.talker_lm import TalkerLM
    from anna_audio.speech.service import SpeechPlanner
    from anna_audio.speech.vocoder import Vocoder

    parts = loaded.processor
    if not isinstance(loaded.model, TalkerLM) or not isinstance(parts, SpeechParts):
        raise AnnaError(f"the speech task needs a Qwen3-TTS checkpoint; this is a {loaded.family} model")
    config = _attrs.evolve(config, enable_prefix_caching=False, prompt_cache_size=0)
    loaded.model.reserve_slots(config.max_num_seqs)
    engine = build_generate(loaded, config, runner)
    # a prompt is one media item of the engine: at most what one step's encoder budget takes, and it must leave room
    # in the context for at least one frame
    limit = min(engine.config.max_encoder_tokens, engine.config.encoder_cache_tokens, engine.max_model_len - 1)
    planner = SpeechPlanner(parts, loaded.model.placeholder_id, max_trailing=loaded.model.max_trailing,
                            max_prompt_tokens=limit)
    vocoder = Vocoder(parts.codec_decoder, engine.runner.accel)  # the engine's device services
    if runner is None or runner.cuda_graph:  # where the device captures graphs (a failure logs, stays eager)
        vocoder.capture_graphs(planner.chunks.lengths(), min(config.max_num_seqs, VOCODER_GRAPH_BATCH))
    if runner is not None and runner.warmup:  # the chunk lengths a request decodes first, then mostly
        vocoder.warm_up(sorted({planner.chunks.first, planner.chunks.rest}))
    return SpeechEngine(engine, planner, vocoder)


def start(built: SpeechEngine) -> SpeechService:
    """Run the engine on its thread and wrap it in the :class:`SpeechService` the routes call."""
    from anna_core.tasks.generate import start as start_generate

    from anna_audio.speech.service import SpeechService

    return SpeechService(start_generate(built.engine), built.planner, built.vocoder)
