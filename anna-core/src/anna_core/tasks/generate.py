"""The ``generate`` task (text out): an :class:`LLMEngine`, served through an :class:`AsyncEngine`
and the OpenAI routes (:mod:`anna_core.server.routes_generate`).

``anna serve``, ``anna generate`` and :class:`anna_core.LLM` build their engine with :func:`build`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anna_core.engine.async_engine import AsyncEngine
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.model import LoadedModel


def build(loaded: LoadedModel, config: EngineConfig, runner: RunnerConfig | None = None) -> LLMEngine:
    """An :class:`LLMEngine` over ``loaded``; with ``runner``, also warmed up with its decode and prefill
    graphs captured (eager on CPU or where capture fails). A model loaded as a tensor-parallel rank's shard
    (``loaded.parallel``) gets a :class:`~anna_core.distributed.engine.TensorParallelEngine`.

    Raises:
        AnnaError: the model does not implement :class:`anna_core.model.CausalLM`, or the cache does not
            fit (see :class:`LLMEngine`).
    """
    from anna_core.engine.llm_engine import LLMEngine

    if loaded.parallel is not None and loaded.parallel.is_parallel:
        from anna_core.distributed.engine import TensorParallelEngine

        engine = TensorParallelEngine.from_loaded(loaded, config)
    else:
        engine = LLMEngine.from_loaded(loaded, config)
    if runner is not None:
        engine.runner.setup(runner, max_model_len=engine.max_model_len, max_num_seqs=config.max_num_seqs,
                            max_prefill_tokens=engine.longest_one_step_prompt())
    return engine


def start(engine: LLMEngine) -> AsyncEngine:
    """Run ``engine`` on its own thread behind an :class:`AsyncEngine` (the OpenAI routes' client)."""
    from anna_core.engine.async_engine import AsyncEngine

    client = AsyncEngine(engine)
    client.start()
    return client
