"""``anna serve``'s model load: off the event loop after the socket is bound, then the task's engine started
and attached to the server state (``/health`` turns 200), or the failure logged and shown on ``/health``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger("anna.serve")


class BackgroundLoader:
    """Loads the model off the event loop after start-up, builds and starts the task's engine
    (``TaskSpec.engine`` in a worker thread, then ``TaskSpec.serving``) and attaches it to the state.

    Args:
        state: the server state the engine is attached to.
        task: the served task (:class:`anna_core.registry.TaskSpec`).
        model_path / load_kwargs: what :func:`anna_core.loading.load_model` loads.
        engine_config / runner_config: passed to the task's ``build``.
        task_options: the served task's options that were set (``TaskSpec.options``), passed to its ``build``.
        requested_max_len: ``--max-model-len`` (for the log line), or None.
        metrics_log_interval_s: seconds between metrics log lines (0: none).
        tensor_parallel_size: devices the model is split over (``--tensor-parallel-size``): above 1 every rank
            loads its shard (:func:`anna_core.distributed.launch.load_engine`) and :meth:`stop` stops the workers.
    """

    def __init__(self, state: Any, task: Any, model_path: Path, load_kwargs: dict[str, Any], engine_config: Any,
                 runner_config: Any, requested_max_len: int | None, metrics_log_interval_s: float = 0.0,
                 task_options: dict[str, Any] | None = None, tensor_parallel_size: int = 1):
        self.state = state
        self.task = task
        self.task_options = dict(task_options or {})
        self.model_path = model_path
        self.load_kwargs = load_kwargs
        self.engine_config = engine_config
        self.runner_config = runner_config
        self.requested_max_len = requested_max_len
        self.tensor_parallel_size = tensor_parallel_size
        self.workers: Any = None  # a tensor-parallel group's worker processes (anna_core.distributed.launch)
        self.task_engine: Any = None
        self.metrics_log_interval_s = metrics_log_interval_s
        self._metrics_task: asyncio.Task[None] | None = None
        self.failed = False
        self.server: Any = None  # set by serve(): asked to exit when loading fails
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._load())

    async def _load(self) -> None:
        import time

        from anna_core.distributed.launch import load_engine
        from anna_core.errors import AnnaError
        from anna_core.loading import load_model
        from anna_core.registry import resolve

        t0 = time.perf_counter()
        try:
            build, start = resolve(self.task.engine), resolve(self.task.serving)
            if self.tensor_parallel_size == 1:
                loaded = await asyncio.to_thread(load_model, self.model_path, **self.load_kwargs)
                weights_s = time.perf_counter() - t0
                logger.info("weights loaded in %.1f s; building the %s engine", weights_s, self.task.name)
                await asyncio.to_thread(self._check_chat_template, loaded.tokenizer)
                # The task's engine, warmed up (graph capture for generate; eager on CPU or when capture fails).
                task_engine = await asyncio.to_thread(build, loaded, self.engine_config, self.runner_config,
                                                      **self.task_options)
            else:  # every rank loads its shard and builds its engine (anna_core.distributed)
                loaded, task_engine, self.workers = await asyncio.to_thread(
                    load_engine, self.model_path, self.load_kwargs, self.task.engine, self.engine_config,
                    self.runner_config, tensor_parallel_size=self.tensor_parallel_size, task_options=self.task_options)
                self.task_engine = task_engine
                await asyncio.to_thread(self._check_chat_template, loaded.tokenizer)
            engine = start(task_engine)
        except AnnaError as exc:
            self._fail(str(exc))
            return
        except Exception as exc:  # a bug while loading: keep the traceback in the log
            logger.exception("unexpected error while loading the model")
            self._fail(f"{type(exc).__name__}: {exc}")
            return
        try:
            self._set_ready(engine, task_engine, loaded, t0)
        except Exception as exc:  # a bug after the engine was built: never leave /health at 503 with nothing logged
            logger.exception("unexpected error while starting the model's engine")
            self._fail(f"{type(exc).__name__}: {exc}")

    def _set_ready(self, engine: Any, task_engine: Any, loaded: Any, t0: float) -> None:
        """Log the model's limits and mark the server ready with the started ``engine``."""
        import time

        from anna_core.engine.defaults import default_sampling_fields
        from anna_core.kernels.registry import chosen_kernels
        from anna_core.layers.wq_linear import weight_kinds

        max_len = task_engine.max_model_len
        if max_len:
            logger.info("max_model_len = %d tokens (checkpoint limit %d%s; capped by the KV cache memory if smaller)",
                        max_len, loaded.max_model_len,
                        f", --max-model-len {self.requested_max_len}" if self.requested_max_len else "")
        if self.requested_max_len and max_len < self.requested_max_len:
            logger.warning("--max-model-len %d is more than this model / KV cache allows; serving %d",
                           self.requested_max_len, max_len)
        model = loaded.model
        self.state.set_ready(
            engine, loaded.tokenizer, max_model_len=max_len, eos_token_ids=loaded.generation.eos_token_ids,
            checkpoint_sampling=default_sampling_fields(loaded.generation),
            info={"family": loaded.family, "device": str(loaded.device), "dtype": str(loaded.dtype).replace("torch.", ""),
                  "load_s": round(time.perf_counter() - t0, 3), "kernels": lambda: chosen_kernels(model),
                  "weights": weight_kinds(model)},
            processor=loaded.processor,
        )
        logger.info("model %s ready in %.2f s (family %s, task %s, %s, %s)", self.state.model_name,
                    time.perf_counter() - t0, loaded.family, self.task.name, loaded.device, loaded.dtype)
        if self.metrics_log_interval_s > 0 and engine.metrics is not None:
            self._metrics_task = asyncio.create_task(self._log_metrics(engine))

    def _check_chat_template(self, tokenizer: Any) -> None:
        """Render the chat template once: a broken ``--chat-template`` fails the start (exit 1);
        a checkpoint's own template that does not render is only logged (completions still work).

        Raises:
            AnnaError: the ``--chat-template`` file does not render.
        """
        from anna_core.errors import AnnaError

        if tokenizer is None:
            return
        try:
            tokenizer.check_chat_template()
        except AnnaError as exc:
            if self.load_kwargs.get("chat_template") is not None:
                raise AnnaError(f"--chat-template: {exc}") from exc
            logger.warning("%s; chat requests will fail until it is fixed (--chat-template)", exc)

    async def _log_metrics(self, engine: Any) -> None:
        """One summary line every ``--metrics-log-interval-seconds`` while serving."""
        while True:
            await asyncio.sleep(self.metrics_log_interval_s)
            logger.info("%s", engine.metrics.summary_line())

    def _fail(self, message: str) -> None:
        logger.error("could not load the model: %s", message)
        self.failed = True
        self.state.load_error = message
        if self.server is not None:
            self.server.should_exit = True

    async def stop(self) -> None:
        for task in (self._task, self._metrics_task):
            if task is not None and not task.done():
                task.cancel()
        if self.state.engine is not None:  # responses cut (drain timeout, forced stop): abort what is left
            await self.state.engine.shutdown(drain=not self.state.streams.is_cut)
        if self.workers is not None:  # the engine's loop is over: tell the tensor-parallel workers to stop
            from anna_core.distributed.launch import close_engine

            workers, self.workers = self.workers, None
            await asyncio.to_thread(close_engine, self.task_engine, workers)
