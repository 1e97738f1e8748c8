"""The tiny CPU engine over the fake graph-capable accelerator, shared by the graph-path engine tests."""

from __future__ import annotations

from anna_core.testing.fake_graphs import FakeGraphAccelerator


def graph_engine(model_dir, *, async_scheduling: bool, graphs: bool = True, max_seqs: int = 4,
                 num_blocks: int | None = None, max_len: int = 64, prefix_caching: bool = False):
    """An ``LLMEngine`` on ``model_dir`` (dummy fp32 weights, 4-token blocks, no prompt cache) whose
    runner captured its decode graphs on :class:`FakeGraphAccelerator` (none with ``graphs=False``)."""
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.model_runner import RunnerConfig

    from tests.core._tiny_family import load_tiny

    loaded = load_tiny(model_dir)
    cfg = EngineConfig(max_num_seqs=max_seqs, max_model_len=max_len, block_size=4, prompt_cache_size=0,
                       enable_prefix_caching=prefix_caching, num_blocks=num_blocks or 2 * max_seqs * (max_len // 4) + 8,
                       async_scheduling=async_scheduling)
    engine = LLMEngine.from_loaded(loaded, cfg)
    engine.runner.accel = FakeGraphAccelerator()
    engine.runner.setup(RunnerConfig(cuda_graph=graphs), max_model_len=engine.max_model_len, max_num_seqs=max_seqs)
    return engine
