"""The tiny CPU engine over the fake graph-capable accelerator, shared by the graph-path engine tests (of anna-core
and of the families, on their own tiny checkpoints)."""

from __future__ import annotations

from anna_core.testing.engine_run import run_to_completion
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


def fake_graph_engine(model_dir, *, graphs: bool, max_seqs: int = 5, prefix_caching: bool = False,
                      compile_mode: str = "none"):
    """``(engine, accelerator)``: an ``LLMEngine`` on the tiny checkpoint ``model_dir`` (``load_tiny``: dummy fp32 weights) with the benchmarks'
    config (``engine_config``: ``max_seqs`` sequences of at most 48 tokens, 64 prompt tokens a step, 4-token blocks)
    on a fresh :class:`FakeGraphAccelerator`, its decode graphs captured with ``graphs`` (``compile_mode`` as
    ``RunnerConfig`` takes it)."""
    from anna_core.bench.engine_bench import engine_config
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.model_runner import RunnerConfig

    from tests.core._tiny_family import load_tiny

    loaded = load_tiny(model_dir)
    engine = LLMEngine.from_loaded(loaded, engine_config(max_seqs, 48, 64, block_size=4, prefix_caching=prefix_caching))
    accel = FakeGraphAccelerator()
    engine.runner.accel = accel
    engine.runner.setup(RunnerConfig(cuda_graph=graphs, compile_mode=compile_mode), max_model_len=engine.max_model_len,
                        max_num_seqs=max_seqs)
    return engine, accel


def generate_tokens(engine, prompts, params) -> list[list[int]]:
    """Every prompt's generated token ids, the prompts submitted at once (``run_to_completion``)."""
    return [out.token_ids for out in run_to_completion(engine, prompts, params)]


def check_graph_engine_generates_the_eager_tokens(model_dir) -> list[list[int]]:
    """A family's checkpoint ``model_dir`` (any family ``load_tiny`` loads: the folder's config picks it) on
    :func:`fake_graph_engine`: three greedy prompts (5, 20 and 11 tokens), each alone and then together, on captured
    graphs give the eager engine's tokens; the prompts alone and the three together replay prefill graphs (6 steps:
    the caller shrinks ``model_runner.prefill_buckets`` to 8, 16, 32), and every replay is a decode or prefill graph
    step. The eager tokens."""
    import torch
    from anna_core.engine.sampling_params import SamplingParams

    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 320, (n,), generator=gen).tolist() for n in (5, 20, 11)]  # 20 > a 16-token window
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in (9, 6, 12)]
    eager, _ = fake_graph_engine(model_dir, graphs=False)
    ref = generate_tokens(eager, prompts, params)
    graph, accel = fake_graph_engine(model_dir, graphs=True)
    alone = [generate_tokens(graph, [p], [q]) for p, q in zip(prompts, params)]  # one prompt a step: prefill graphs
    together = generate_tokens(graph, prompts, params)
    assert together == ref and [a[0] for a in alone] == ref
    assert all(len(t) == p.max_tokens for t, p in zip(ref, params))
    runner = graph.runner
    assert accel.captures > 0 and runner.num_graph_steps > 0
    assert runner.num_prefill_graph_steps == 6  # 3 prompts alone, then 3 in one split step
    assert accel.replays == runner.num_graph_steps + runner.num_prefill_graph_steps
    return ref
