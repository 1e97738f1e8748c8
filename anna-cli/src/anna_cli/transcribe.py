"""``anna transcribe``: one audio file to text, with the ``transcribe`` task's engine (``register_tasks``).

A family whose tasks do not include ``transcribe`` is refused before any weights load. The output is the
response body ``POST /v1/audio/transcriptions`` sends for the same ``--format``: JSON for ``json`` and
``verbose_json``, the text itself for ``text``, ``srt`` and ``vtt``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from anna_cli.options import exit_on_anna_errors, model_options, resolve_model_path

FORMATS = ("json", "text", "verbose_json", "srt", "vtt")


def _language(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--language`` stripped; an empty one is refused (leave the flag out to detect the language)."""
    if value is None:
        return None
    if not value.strip():
        raise click.BadParameter("is empty: give an ISO 639-1 code ('en') or an English name ('English'), or leave "
                                 "--language out to detect the language")
    return value.strip()


@click.command("transcribe")
@model_options
@click.option("--audio", "audio_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The audio file (WAV, FLAC, Ogg, Opus, MP3, M4A, WebM, AAC).")
@click.option("--language", default=None, callback=_language,
              help="Force the language (an ISO code or English name; default: detect).")
@click.option("--prompt", default=None, help="Context or hot words for the model.")
@click.option("--format", "response_format", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--temperature", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True, help="0 = greedy.")
@click.option("--asr-aligner-dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A Qwen3 forced-aligner checkpoint: word timestamps in verbose_json.")
@click.option("--cuda-graph/--no-cuda-graph", default=True, show_default=True,
              help="Warm up and capture graphs first, as anna serve does (CUDA / XPU; eager on CPU).")
@exit_on_anna_errors
def transcribe(model_dir: Path | None, gguf_file: str | None, device: str, dtype: str, load_format: str,
               weight_quant: str, audio_path: Path, language: str | None, prompt: str | None, response_format: str,
               temperature: float, asr_aligner_dir: Path | None, cuda_graph: bool) -> None:
    """Transcribe an audio file with a speech-recognition model."""
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.errors import AnnaError, InvalidRequestError
    from anna_core.loading import load_model
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import model_families, task_for
    from anna_core.registry import resolve

    path, _ = resolve_model_path(model_dir)
    family = select_family(inspect_model_dir(path, gguf_file=gguf_file), model_families())
    build = resolve(task_for(family, name="transcribe").engine)  # fail fast: not a speech-recognition family
    audio = audio_path.read_bytes()
    loaded = load_model(path, device=device, dtype=dtype, load_format=load_format, gguf_file=gguf_file,
                        weight_quant=weight_quant)
    runner = RunnerConfig(cuda_graph=cuda_graph, warmup=loaded.device.type != "cpu")
    options: dict[str, Any] = {} if asr_aligner_dir is None else {"asr_aligner_dir": asr_aligner_dir}
    engine = build(loaded, EngineConfig(), runner, **options)
    granularities = ("word", "segment") if asr_aligner_dir is not None and response_format == "verbose_json" else ()
    try:
        body = engine.transcribe(audio, language=language, prompt=prompt, response_format=response_format,
                                 temperature=temperature, timestamp_granularities=granularities)
    except InvalidRequestError as exc:
        raise AnnaError(f"{audio_path}: {exc}") from exc
    if isinstance(body, str):
        click.echo(body, nl=not body.endswith("\n"))
    else:
        click.echo(json.dumps(body, ensure_ascii=False))
