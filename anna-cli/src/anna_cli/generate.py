"""``anna generate``: one prompt, streamed to stdout (or one JSON object with ``--json``).

The engine is the ``generate`` task's (``register_tasks``); a family whose tasks do not include
``generate`` is refused before any weights load."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from anna_cli.engine_options import (
    max_device_memory_option,
    offload_config_from_options,
    offload_options,
    tensor_parallel_option,
    vision_offload_option,
)
from anna_cli.options import (
    SAMPLING_FLAGS,
    exit_on_anna_errors,
    expert_quant_option,
    fused_topk_head_mode,
    fused_topk_head_option,
    lm_head_family_options,
    lm_head_quant_option,
    model_options,
    resolve_model_path,
    sampling_options,
)


def _prompt_ids(tokenizer: Any, prompt: str, chat: bool | None, enable_thinking: bool | None,
                num_images: int = 0, num_videos: int = 0) -> list[int]:
    """The prompt's ids; in chat form the user message holds ``num_images`` image parts and then ``num_videos``
    video parts before the text (a raw prompt writes the model's placeholders itself)."""
    from anna_core.errors import AnnaError

    if tokenizer is None:
        raise AnnaError("this model was loaded without a tokenizer, so a text prompt cannot be encoded")
    if chat is None:
        chat = tokenizer.has_chat_template
    if not chat:
        return tokenizer.encode(prompt, add_special_tokens=True)
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    parts = [*([{"type": "image"}] * num_images), *([{"type": "video"}] * num_videos)]
    content: Any = [*parts, {"type": "text", "text": prompt}] if parts else prompt
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True, **kwargs)
    return tokenizer.encode(text, add_special_tokens=False)


def _check_takes(loaded: Any, kind: str) -> None:
    """Raises AnnaError: the model's processor takes no ``kind`` (``"image"``, ``"video"``)."""
    from anna_core.errors import AnnaError

    if loaded.processor is None:
        raise AnnaError(f"this model takes text only; --{kind} needs a vision-language checkpoint")
    if kind not in loaded.processor.modalities:
        raise AnnaError(f"this model takes no {kind}s (only {', '.join(loaded.processor.modalities)}); drop --{kind}")


def _with_media(loaded: Any, prompt_ids: list[int], images: tuple[Path, ...],
                videos: tuple[Path, ...]) -> tuple[list[int], Any]:
    """The prompt with its image and video placeholders expanded and its multimodal inputs (the model's processor).
    Images decode as the server decodes them; videos are sampled at the checkpoint's rate and frame cap
    (``processor.video_sampling``) under the default media policy's caps.

    Raises:
        AnnaError: the model takes no images / videos; InvalidRequestError (an AnnaError): a file is not an
            image or a video, or breaks the default policy's pixel / frame / time caps.
    """
    from anna_core.media import MediaPolicy, decode_image, decode_video_for

    policy = MediaPolicy()
    media: dict[str, list[Any]] = {}
    if images:
        media["image"] = [decode_image(path.read_bytes(), policy.max_image_pixels) for path in images]
    if videos:
        sampling = loaded.processor.video_sampling
        media["video"] = [decode_video_for(path.read_bytes(), sampling, policy) for path in videos]
    return loaded.processor.process(prompt_ids, media)


@click.command("generate")
@model_options
@lm_head_quant_option
@expert_quant_option
@click.option("--prompt", required=True, help="The prompt text ('-' reads it from stdin).")
@click.option("--image", "images", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An image file for a vision-language model (repeatable; in chat form each goes before the text, "
                   "a --raw prompt holds the model's image placeholder once per image).")
@click.option("--video", "videos", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A video file for a vision-language model that takes video (repeatable; sampled at the "
                   "checkpoint's frame rate and frame cap; in chat form each goes after the images, before the "
                   "text; a --raw prompt holds the model's video placeholder once per video).")
@click.option("--chat/--raw", default=None,
              help="Wrap the prompt in the chat template as a user message (default when the model has one), "
                   "or send it as is.")
@click.option("--enable-thinking/--disable-thinking", default=None,
              help="Chat template's enable_thinking (default: the template's own).")
@click.option("--max-new-tokens", type=int, default=128, show_default=True)
@sampling_options
@click.option("--seed", type=click.IntRange(-(1 << 63), (1 << 63) - 1), default=None,
              help="Sampling seed, a 64-bit signed integer (default: a random one).")
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option("--chat-template", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A Jinja file overriding the checkpoint's chat template.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (text, token_ids, finish_reason, usage, timings) instead of streaming.")
@click.option("--cuda-graph/--no-cuda-graph", default=True, show_default=True,
              help="Warm up and capture decode and prefill graphs first, as anna serve does (CUDA / XPU; "
                   "eager on CPU).")
@click.option("--compile-mode", type=click.Choice(("none", "default", "max-autotune")), default="none",
              show_default=True, help="torch.compile the forward pass before graph capture.")
@fused_topk_head_option
@max_device_memory_option
@offload_options
@vision_offload_option
@tensor_parallel_option
@exit_on_anna_errors
def generate(model_dir: Path | None, gguf_file: str | None, device: str, dtype: str, load_format: str,
             weight_quant: str, lm_head_quant: str, expert_quant: str, prompt: str, images: tuple[Path, ...],
             videos: tuple[Path, ...],
             chat: bool | None, enable_thinking: bool | None, max_new_tokens: int, seed: int | None,
             stop: tuple[str, ...], chat_template: Path | None, as_json: bool, cuda_graph: bool, compile_mode: str,
             fused_topk_head: bool, max_device_memory_gib: float | None, offload_vision: bool, tensor_parallel_size: int,
             **sampling: Any) -> None:
    """Generate a completion for one prompt."""
    from anna_core.device import resolve_device
    from anna_core.distributed.launch import close_engine, load_engine
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import model_families, task_for
    from anna_core.registry import resolve

    if prompt == "-":
        prompt = sys.stdin.read()
    path, _ = resolve_model_path(model_dir)
    family = select_family(inspect_model_dir(path, gguf_file=gguf_file), model_families())
    build = task_for(family, name="generate").engine
    resolve(build)  # fail fast: not a text-generation family
    offload = offload_config_from_options(**sampling)
    config = EngineConfig(max_num_seqs=1, max_device_memory_gib=max_device_memory_gib)
    t0 = time.perf_counter()
    load_kwargs = dict(device=device, dtype=dtype, load_format=load_format, gguf_file=gguf_file,
                       weight_quant=weight_quant, chat_template=chat_template.read_text() if chat_template else None,
                       offload=offload, max_device_memory_gib=max_device_memory_gib, offload_vision=offload_vision,
                       family_options=lm_head_family_options(lm_head_quant) or None, expert_quant=expert_quant)
    runner = RunnerConfig(cuda_graph=cuda_graph, compile_mode=compile_mode, warmup=resolve_device(device).type != "cpu",
                          fused_topk_head=fused_topk_head_mode(fused_topk_head))
    loaded, engine, workers = load_engine(path, load_kwargs, build, config, runner,
                                          tensor_parallel_size=tensor_parallel_size)
    try:
        _generate(engine, loaded, t0, prompt, images, videos, chat, enable_thinking, max_new_tokens, seed, stop,
                  as_json, sampling)
    finally:
        close_engine(engine, workers)


def _generate(engine: Any, loaded: Any, t0: float, prompt: str, images: tuple[Path, ...], videos: tuple[Path, ...],
              chat: bool | None, enable_thinking: bool | None, max_new_tokens: int, seed: int | None,
              stop: tuple[str, ...], as_json: bool, sampling: dict[str, Any]) -> None:
    """The generation of :func:`generate` over its built engine."""
    from anna_core.engine.defaults import sampling_params_with_defaults
    from anna_core.errors import AnnaError

    load_s = time.perf_counter() - t0
    for kind, files in (("image", images), ("video", videos)):
        if files:
            _check_takes(loaded, kind)  # before the chat template sees image / video parts
    prompt_ids = _prompt_ids(loaded.tokenizer, prompt, chat, enable_thinking, len(images), len(videos))
    multimodal = None
    if images or videos:
        prompt_ids, multimodal = _with_media(loaded, prompt_ids, images, videos)
    explicit = {k: v for k, v in sampling.items() if k in SAMPLING_FLAGS and v is not None}
    params = sampling_params_with_defaults(loaded.generation, max_tokens=max_new_tokens, seed=seed,
                                           stop=list(stop), **explicit)

    t_start = time.perf_counter()
    t_first = None
    engine.add_request("generate-0", prompt_ids, params, multimodal=multimodal)
    final = None
    while engine.has_unfinished():
        for out in engine.step():
            if t_first is None and out.token_ids:
                t_first = time.perf_counter()
            if out.delta_text and not as_json:
                click.echo(out.delta_text, nl=False)
            final = out
    t_end = time.perf_counter()
    if final is None or final.finish_reason == "error":
        raise AnnaError(f"generation failed: {final.error if final else 'no output'}")
    n_out = len(final.token_ids)
    decode_s = t_end - (t_first or t_end)
    timings = {
        "load_s": round(load_s, 4),
        "ttft_s": round((t_first or t_end) - t_start, 4),
        "decode_tokens_per_s": round((n_out - 1) / decode_s, 2) if n_out > 1 and decode_s > 0 else None,
        "total_s": round(t_end - t_start, 4),
    }
    if as_json:
        click.echo(json.dumps({
            "text": final.text,
            "token_ids": list(final.token_ids),
            "finish_reason": final.finish_reason,
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": n_out,
                      "total_tokens": len(prompt_ids) + n_out},
            "timings": timings,
            **({"expert_cache": engine.expert_store.report()} if engine.expert_store is not None else {}),
        }, ensure_ascii=False))
    else:
        click.echo()
        click.echo(f"[{final.finish_reason}; {n_out} tokens; load {timings['load_s']:.2f} s, "
                   f"ttft {timings['ttft_s']:.3f} s, {timings['decode_tokens_per_s'] or 0:.1f} tok/s]", err=True)
