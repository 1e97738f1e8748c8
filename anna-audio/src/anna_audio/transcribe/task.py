"""The ``transcribe`` task: Anna's engine over a speech-recognition model, served through a
:class:`~anna_audio.transcribe.service.Transcriber` and ``POST /v1/audio/transcriptions``.

``build`` makes the same :class:`~anna_core.engine.llm_engine.LLMEngine` as ``generate`` (so concurrent
transcriptions, and the windows of a long one, batch in it) and loads the forced aligner when
``asr_aligner_dir`` is given; ``start`` runs the engine on its thread behind an
:class:`~anna_core.engine.async_engine.AsyncEngine` and wraps it in a ``Transcriber``. The built
:class:`TranscriptionEngine` also transcribes one file synchronously (``anna transcribe``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.model import LoadedModel

    from anna_audio.transcribe.service import Transcriber


@attrs.define
class TranscriptionEngine:
    """What ``build`` returns: the engine over the ASR model and the planner of its requests.

    Attributes:
        engine: the :class:`~anna_core.engine.llm_engine.LLMEngine`.
        planner: :class:`~anna_audio.transcribe.service.TranscriptionPlanner` (prompts, limits, aligner).
    """

    engine: Any
    planner: Any

    @property
    def max_model_len(self) -> int:
        """Prompt + output tokens per window request."""
        return self.engine.max_model_len

    def transcribe(self, audio: bytes, *, language: str | None = None, prompt: str | None = None,
                   response_format: str = "json", temperature: float = 0.0,
                   timestamp_granularities: tuple[str, ...] = ()) -> dict[str, Any] | str:
        """Transcribe one file on this thread (the engine must not be running elsewhere): the response body of
        ``response_format`` (a dict for ``json`` / ``verbose_json``, a string otherwise), as the route sends it.

        Args:
            language: an ISO 639-1 code or English name to force, or None to detect it.

        Raises:
            InvalidRequestError: what the route answers with a 400 (see
                :meth:`~anna_audio.transcribe.service.TranscriptionPlanner.prepare`); an unknown
                ``response_format``; a blank ``language`` (None detects it).
            AnnaError: a window failed in the engine.
        """
        from anna_core.errors import AnnaError, InvalidRequestError

        from anna_audio.transcribe import formats
        from anna_audio.transcribe.request import TranscriptionRequest

        if response_format not in formats.RESPONSE_FORMATS:
            raise InvalidRequestError(f"response_format must be one of {', '.join(formats.RESPONSE_FORMATS)}, got "
                                      f"{response_format!r}", param="response_format")
        if language is not None and not language.strip():
            raise InvalidRequestError("'language' is empty: give an ISO 639-1 code or an English name, or None to "
                                      "detect the language", param="language")
        request = TranscriptionRequest(audio=audio, language=language, prompt=prompt, response_format=response_format,
                                       temperature=temperature, granularities=tuple(timestamp_granularities))
        job = self.planner.prepare(request)
        jobs, media = self.planner.engine_jobs(job, "transcribe")
        for (rid, ids, params), mm in zip(jobs, media):
            self.engine.add_request(rid, ids, params, multimodal=mm)
        finals: dict[str, Any] = {}
        while self.engine.has_unfinished():
            for out in self.engine.step():
                if out.finished:
                    finals[out.request_id] = out
        texts = []
        for rid, _, _ in jobs:
            out = finals.get(rid)
            if out is None or out.finish_reason == "error":
                raise AnnaError(f"transcription failed: {out.error if out is not None else 'no output'}")
            texts.append(out.text)
        transcript = self.planner.assemble(job, texts)
        return formats.render(transcript, response_format, temperature=temperature,
                              granularities=request.granularities)


def build(loaded: LoadedModel, config: EngineConfig, runner: RunnerConfig | None = None, *,
          asr_aligner_dir: Path | None = None) -> TranscriptionEngine:
    """The engine of a loaded speech-recognition model (warmed up and graphs captured with ``runner``), and the
    forced aligner of ``asr_aligner_dir`` on the model's device.

    Args:
        asr_aligner_dir: a forced-aligner checkpoint folder, or None (no timestamps).

    Raises:
        AnnaError: the model is not a speech-recognition model, the cache does not fit, or the aligner does not
            load.
    """
    from anna_core.errors import AnnaError
    from anna_core.tasks.generate import build as build_generate

    from anna_audio.transcribe.asr import AsrPrompts
    from anna_audio.transcribe.service import TranscriptionPlanner

    engine = build_generate(loaded, config, runner)
    try:
        prompts = AsrPrompts.from_loaded(loaded, engine.max_model_len)
    except (TypeError, ValueError) as exc:
        raise AnnaError(f"the transcribe task needs a speech-recognition model: {exc}") from exc
    aligner = None
    if asr_aligner_dir is not None:
        from anna_audio.transcribe.aligner import ForcedAligner

        aligner = ForcedAligner.load(asr_aligner_dir, device=loaded.device, dtype=loaded.dtype)
    return TranscriptionEngine(engine, TranscriptionPlanner(prompts, max_model_len=engine.max_model_len,
                                                            aligner=aligner))


def start(built: TranscriptionEngine) -> Transcriber:
    """Run the engine on its thread and wrap it in the :class:`Transcriber` the routes call."""
    from anna_core.tasks.generate import start as start_generate

    from anna_audio.transcribe.service import Transcriber

    return Transcriber(start_generate(built.engine), built.planner)
