"""``anna speak``: text to an audio file, with the ``speech`` task's engine (``register_tasks``).

A family whose tasks do not include ``speech`` is refused before any weights load. The file's format follows the
``--output`` suffix (``.wav``, ``.flac``, ``.mp3``, ``.opus``, ``.pcm``: raw 16-bit little-endian samples), at the
model's sample rate (24 kHz for Qwen3-TTS).
"""

from __future__ import annotations

from pathlib import Path

import click

from anna_cli.options import exit_on_anna_errors, model_options, resolve_model_path

SUFFIXES = {".wav": "wav", ".flac": "flac", ".mp3": "mp3", ".opus": "opus", ".ogg": "opus", ".pcm": "pcm"}


@click.command("speak")
@model_options
@click.option("--input", "text", required=True, help="The text to speak.")
@click.option("--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The audio file to write (.wav, .flac, .mp3, .opus or .pcm).")
@click.option("--voice", default=None, help="A named voice of a CustomVoice model.")
@click.option("--instructions", default=None, help="Style instructions, or the described voice of a VoiceDesign model.")
@click.option("--language", default="auto", show_default=True, help="The text's language (a model language or auto).")
@click.option("--ref-audio", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Reference recording to clone the voice of (Base models).")
@click.option("--ref-text", default=None, help="The reference recording's transcript.")
@click.option("--max-frames", type=click.IntRange(min=1), default=None,
              help="Stop after this many 80 ms frames (default: at the model's end of speech).")
@click.option("--seed", type=int, default=None, help="Seed of the sampling.")
@click.option("--cuda-graph/--no-cuda-graph", default=True, show_default=True,
              help="Warm up first, as anna serve does (CUDA / XPU; eager on CPU).")
@exit_on_anna_errors
def speak(model_dir: Path | None, gguf_file: str | None, device: str, dtype: str, load_format: str, weight_quant: str,
          text: str, output: Path, voice: str | None, instructions: str | None, language: str,
          ref_audio: Path | None, ref_text: str | None, max_frames: int | None, seed: int | None,
          cuda_graph: bool) -> None:
    """Speak text into an audio file with a text-to-speech model."""
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.errors import AnnaError, InvalidRequestError
    from anna_core.loading import load_model
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import model_families, task_for
    from anna_core.registry import resolve

    response_format = SUFFIXES.get(output.suffix.lower())
    if response_format is None:
        raise click.BadParameter(f"the suffix must be one of {', '.join(SUFFIXES)}", param_hint="--output")
    path, _ = resolve_model_path(model_dir)
    family = select_family(inspect_model_dir(path, gguf_file=gguf_file), model_families())
    build = resolve(task_for(family, name="speech").engine)  # fail fast: not a text-to-speech family
    reference = ref_audio.read_bytes() if ref_audio is not None else None
    loaded = load_model(path, device=device, dtype=dtype, load_format=load_format, gguf_file=gguf_file,
                        weight_quant=weight_quant)
    runner = RunnerConfig(cuda_graph=cuda_graph, warmup=loaded.device.type != "cpu")
    engine = build(loaded, EngineConfig(max_num_seqs=1), runner)
    try:
        data = engine.speak(text, voice=voice, instructions=instructions, language=language, ref_audio=reference,
                            ref_text=ref_text, response_format=response_format, max_frames=max_frames, seed=seed)
    except InvalidRequestError as exc:
        raise AnnaError(str(exc)) from exc
    output.write_bytes(data)
    click.echo(f"wrote {output} ({len(data)} bytes, {engine.sample_rate} Hz)")
