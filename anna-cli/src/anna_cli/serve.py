"""``anna serve``: the HTTP server (litestar app on uvicorn) of the loaded family's task
(``generate``: the OpenAI-compatible API).

Start-up order: cheap checks first (model folder, family, its task through ``register_tasks``,
flags) so a wrong ``--model-dir`` or a task no plugin installs fails at once with a one-line error;
then the app is built with the task's routes and the socket is bound (a busy port fails before any
loading) and ``/health`` answers 503 ``loading`` while the weights load in a background thread; when the engine runs, ``/health``
turns 200. A failed load is logged, shown on ``/health`` (``failed``) and ends the process with
exit code 1.

SIGTERM (or Ctrl+C) drains: ``/health`` and new ``/v1/*`` requests get 503, in-flight requests
finish, then the server exits with code 0. A drain that outlasts ``--drain-timeout-s`` ends the
responses still in flight (a stream gets a final SSE error event and ``[DONE]``, a waiting
non-streamed request a 503: :mod:`anna_core.server.shutdown`) and exits with code 0. A second
signal does the same at once and exits with code 1 (a third one quits without waiting).

The socket is served for the internet (:mod:`anna_cli.http_protocol`): request headers must
arrive within ``--header-timeout-s`` and the body within ``--body-timeout-s``, an idle kept-alive
connection closes after ``--keep-alive-timeout-s``, and beyond ``--max-connections`` open
connections a new one gets a 503.

This module parses the flags and starts the server; the background load is
:mod:`anna_cli.background_loader`, the draining shutdown :mod:`anna_cli.draining_server`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click

from anna_cli.background_loader import BackgroundLoader
from anna_cli.draining_server import CUT_GRACE_S, draining_server_class
from anna_cli.engine_options import (
    engine_config_from_options,
    engine_options,
    offload_config_from_options,
    offload_options,
    tensor_parallel_option,
    vision_offload_option,
)
from anna_cli.logging_setup import LEVELS, configure_logging
from anna_cli.media_options import media_options, media_settings
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

__all__ = ["CUT_GRACE_S", "BackgroundLoader", "serve"]

logger = logging.getLogger("anna.serve")

MAX_HEADER_BYTES = 16 * 1024
"""Most bytes of a request line plus headers (h11's incomplete-event limit); more is a 400."""

GRACEFUL_SHUTDOWN_S = 10
"""uvicorn's ``timeout_graceful_shutdown``: how long connections still open when the server stops
may take to finish (after a drain or a cut the app has nothing left to send)."""


def _check_disabled_kernels(disabled: tuple[str, ...]) -> None:
    """Fail fast on a ``--disable-kernel`` entry that names no registered implementation.

    Raises:
        AnnaError: the entry is unknown (or names the torch reference).
    """
    from anna_core.errors import AnnaError
    from anna_core.kernels.registry import KernelRegistry

    try:
        KernelRegistry.from_plugins(disabled=disabled)
    except ValueError as exc:
        raise AnnaError(str(exc)) from exc


def _split(values: tuple[str, ...]) -> list[str]:
    """Repeated and comma-separated flag values as one list."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _parser(kind: str, flag: str | None, family_default: str) -> Any:
    """The parser factory chosen by the flag, else the family's default (None: no parsing).

    Raises:
        AnnaError: no installed plugin registers that name.
    """
    from anna_core.parsers.loading import parser_factory

    name = family_default if flag is None else flag
    if not name or name == "none":
        return None
    factory = parser_factory(kind, name)
    logger.info("%s parser: %s", kind.replace("_", "-"), name)
    return factory


@click.command("serve")
@model_options
@lm_head_quant_option
@expert_quant_option
@click.option("--model-name", default=None, help="The model id clients use (default: the folder name).")
@click.option("--task", "task_name", default=None,
              help="Which of the family's tasks to serve (generate, transcribe, speech, ...; default: its main one).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--log-level", type=click.Choice(LEVELS), default="info", show_default=True)
@click.option("--log-format", type=click.Choice(("text", "json")), default="text", show_default=True)
@click.option("--max-model-len", type=click.IntRange(min=1), default=None,
              help="Prompt + completion tokens per request (default: the checkpoint's limit, capped by what "
                   "the KV cache memory holds; the value is logged).")
@click.option("--chat-template", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A Jinja file overriding the checkpoint's chat template.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="CPU threads for torch.")
@click.option("--max-completion-tokens", type=click.IntRange(min=1), default=None,
              help="Default completion limit when a request sets none (default: what the context leaves).")
@sampling_options
@click.option("--enable-thinking/--disable-thinking", default=None,
              help="Default of the chat template's enable_thinking (a request's chat_template_kwargs wins).")
@click.option("--reasoning-parser", default=None,
              help="Reasoning parser (register_output_parsers name; default: the family's; 'none' = off).")
@click.option("--tool-call-parser", default=None,
              help="Tool-call parser (register_output_parsers name; default: the family's; 'none' = off).")
@click.option("--reasoning-format", type=click.Choice(("deepseek", "none")), default="deepseek", show_default=True,
              help="deepseek: reasoning in message.reasoning_content; none: left inline in content.")
@click.option("--api-key", envvar="ANNA_API_KEY", default=None, show_envvar=True,
              help="Require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize.")
@engine_options
@offload_options
@vision_offload_option
@click.option("--cuda-graph/--no-cuda-graph", default=True, show_default=True,
              help="Capture decode steps as device graphs per batch-size bucket (CUDA / XPU; eager on CPU).")
@click.option("--compile-mode", type=click.Choice(("none", "default", "max-autotune")), default="none",
              show_default=True, help="torch.compile the forward pass before graph capture.")
@fused_topk_head_option
@click.option("--disable-kernel", "disable_kernels", multiple=True, metavar="OP:NAME|NAME",
              help="Never use this kernel implementation (e.g. linear:triton, or fla for all its ops); repeatable.")
@click.option("--allowed-hosts", "allowed_hosts", multiple=True, metavar="HOST[,HOST...]",
              help="Host header values served besides localhost / 127.0.0.1 / [::1] ('*' = any). Default: only "
                   "those on a loopback --host, any on 0.0.0.0 / ::. Repeatable.")
@click.option("--allowed-origins", "allowed_origins", multiple=True, metavar="ORIGIN[,ORIGIN...]",
              help="Origin header values served, e.g. http://localhost:3000 ('*' = any). Default: none, so "
                   "browsers' cross-site requests get a 403. Repeatable.")
@click.option("--drain-timeout-s", type=click.FloatRange(min=0.0), default=120.0, show_default=True,
              help="After SIGTERM, how long in-flight requests may run before they are ended (streams get a "
                   "final error event and [DONE]); a second SIGTERM ends them at once.")
@click.option("--header-timeout-s", type=click.FloatRange(min=0.0), default=10.0, show_default=True,
              help="Close a connection whose request line and headers take longer (0 = no limit).")
@click.option("--body-timeout-s", type=click.FloatRange(min=0.0), default=60.0, show_default=True,
              help="Close a connection whose request body takes longer once its headers are in (0 = no limit).")
@click.option("--keep-alive-timeout-s", type=click.IntRange(min=1), default=5, show_default=True,
              help="Close a kept-alive connection idle this long between requests.")
@click.option("--max-connections", type=click.IntRange(min=0), default=1024, show_default=True,
              help="Open connections beyond which a new one gets a 503 (0 = no limit).")
@click.option("--metrics-log-interval-seconds", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
              help="Log a one-line metrics summary this often (0 = never). Full figures: /healthz, /metrics.")
@media_options
@tensor_parallel_option
@exit_on_anna_errors
def serve(model_dir: Path | None, gguf_file: str | None, device: str, dtype: str, load_format: str, weight_quant: str,
          lm_head_quant: str, expert_quant: str,
          model_name: str | None, task_name: str | None, host: str, port: int, log_level: str, log_format: str,
          max_model_len: int | None, chat_template: Path | None, threads: int | None, max_completion_tokens: int | None,
          enable_thinking: bool | None, reasoning_parser: str | None, tool_call_parser: str | None,
          reasoning_format: str, api_key: str | None, cuda_graph: bool, compile_mode: str, fused_topk_head: bool,
          disable_kernels: tuple[str, ...], allowed_hosts: tuple[str, ...], allowed_origins: tuple[str, ...],
          drain_timeout_s: float, header_timeout_s: float, body_timeout_s: float,
          keep_alive_timeout_s: int, max_connections: int, metrics_log_interval_seconds: float,
          tensor_parallel_size: int, **options: Any) -> None:
    """Serve a model over HTTP: its task's routes (generate: the OpenAI-compatible API)."""
    import uvicorn
    from anna_core.device import resolve_device
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import check_task, model_families, task_for, tasks
    from anna_core.server.app import create_app
    from anna_core.server.request_guard import RequestGuard
    from anna_core.server.state import ServerState

    from anna_cli.task_options import pop_task_options

    sampling = {k: v for k, v in options.items() if k in SAMPLING_FLAGS}
    engine_config = engine_config_from_options(**options, max_model_len=max_model_len)  # bad flags fail here
    offload = offload_config_from_options(**options)
    media_fetcher, mm_processor_kwargs = media_settings(**options)
    configure_logging(log_level, log_format)
    path, default_name = resolve_model_path(model_dir)
    source = inspect_model_dir(path, gguf_file=gguf_file)  # fail fast: missing folder, unknown family
    family = select_family(source, model_families())
    task = task_for(family, name=task_name)  # fail fast: the family's task is not installed
    check_task(task)  # ... or its plugin's targets do not import
    task_options, family_options = pop_task_options(options, tasks(), task)  # ... or another task's flag was given
    family_options = {**family_options, **lm_head_family_options(lm_head_quant)}
    _check_disabled_kernels(disable_kernels)
    runner_config = RunnerConfig(cuda_graph=cuda_graph, compile_mode=compile_mode,
                                 warmup=resolve_device(device).type != "cpu",
                                 fused_topk_head=fused_topk_head_mode(fused_topk_head))
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    name = model_name or default_name or (path.stem if path.is_file() else path.resolve().name)
    state = ServerState(
        model_name=name,
        server_sampling={k: v for k, v in sampling.items() if k in SAMPLING_FLAGS and v is not None},
        max_completion_tokens=max_completion_tokens,
        enable_thinking=enable_thinking,
        reasoning_parser=_parser("reasoning", reasoning_parser, family.reasoning_parser),
        tool_call_parser=_parser("tool_call", tool_call_parser, family.tool_call_parser),
        reasoning_format=reasoning_format,
        api_key=api_key or None,
        request_guard=RequestGuard.for_bind(host, _split(allowed_hosts), _split(allowed_origins)),
        media_fetcher=media_fetcher,
        mm_processor_kwargs=mm_processor_kwargs,
        info={"model_dir": str(path), "family": family.name, "task": task.name, "device": device,
              "weight_quant": weight_quant, "lm_head_quant": lm_head_quant, "expert_quant": expert_quant},
    )
    loader = BackgroundLoader(
        state, task, path,
        load_kwargs={"device": device, "dtype": dtype, "load_format": load_format, "gguf_file": gguf_file,
                     "disable_kernels": disable_kernels, "weight_quant": weight_quant, "offload": offload,
                     "expert_quant": expert_quant,
                     "offload_vision": bool(options.get("offload_vision")),
                     "max_device_memory_gib": engine_config.max_device_memory_gib,
                     "chat_template": chat_template.read_text() if chat_template else None,
                     **({"family_options": family_options} if family_options else {})},
        engine_config=engine_config, runner_config=runner_config, requested_max_len=max_model_len,
        metrics_log_interval_s=metrics_log_interval_seconds, task_options=task_options,
        tensor_parallel_size=tensor_parallel_size,
    )
    app = create_app(state, task=task, on_shutdown=[loader.stop])
    from anna_cli.http_protocol import protocol_class

    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, log_level=log_level, lifespan="on",
        http=protocol_class(header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s,
                            max_connections=max_connections),
        timeout_keep_alive=keep_alive_timeout_s,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,  # request line + headers; beyond: 400
        # Once the app is done (drained or cut), connections still open get this long to finish.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    server = draining_server_class()(config, state, loader.start, drain_timeout_s)
    loader.server = server
    logger.info("serving %s (%s, task %s) on http://%s:%d; loading in the background", name, family.name, task.name,
                host, port)
    try:
        server.run()
    except SystemExit:  # uvicorn exits with its own code (3) when the port is busy or start-up fails
        if server.started:
            raise
    if loader.failed:
        sys.exit(1)
    if server.forced:
        click.echo("error: stopped by a second signal before every response finished", err=True)
        sys.exit(1)
    if not server.started:
        click.echo(f"error: could not start the server on {host}:{port} (see the log above)", err=True)
        sys.exit(1)
