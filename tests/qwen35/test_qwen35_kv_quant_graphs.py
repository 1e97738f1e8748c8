"""A TurboQuant KV cache with a residual ring (``--kv-cache-residual-len``) on a tiny Qwen3.5 with captured decode
and prefill graphs (the fake graph-capable accelerator of :mod:`anna_core.testing.fake_graphs`: capture runs the step
under :class:`~anna_core.testing.host_reads.NoHostReads`): a batch below its graph bucket (3 requests in bucket 4, 5
in bucket 8; its padding rows write the scratch block and the scratch slot's ring), shrinking as requests finish and
through a preemption, gives the eager engine's tokens and logits and each request's tokens alone; a prompt padded to
its prefill graph's bucket gives the eager prefill's tokens (the ring ends at its real length), beside chunked
prefills too; a miss and a prefix hit give the same tokens and logits whatever their prefill chunks; the decode step
and a prefill over a cached prefix read nothing on the host."""

from __future__ import annotations

import pytest
import torch
from anna_core import SamplingParams
from anna_core.device import StepGraph
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.testing.engine_run import run_to_completion
from anna_core.testing.fake_graphs import FakeGraphAccelerator
from anna_core.testing.host_reads import NoHostReads

from tests.qwen35.conftest import load_anna

MAX_LEN = 128


@pytest.fixture(scope="module")
def loaded(anna_tiny_qwen35):
    return load_anna(anna_tiny_qwen35)


class CheckedReplays(FakeGraphAccelerator):
    """The fake graph-capable CPU whose every replay also runs under :class:`NoHostReads` (its capture does), so
    the served decode steps of these tests, real rows, padding rows and rings, read nothing on the host."""

    def capture(self, fn, pool=None) -> StepGraph:
        graph = super().capture(fn, pool)

        def replay() -> None:
            with torch.inference_mode(), NoHostReads():
                graph.replay()

        return StepGraph(replay)


def _engine(loaded, *, graphs: bool, max_seqs: int = 4, residual: int = 16, num_blocks: int = 64,
            max_len: int = MAX_LEN, bits: int = 4, **config):
    cfg = EngineConfig(block_size=16, num_blocks=num_blocks, max_num_seqs=max_seqs, max_model_len=max_len,
                       kv_cache_quantization="turboquant", kv_cache_quant_bits=bits, kv_cache_residual_len=residual,
                       **{"max_prefill_tokens": 128, "prompt_cache_size": 0, **config})
    engine = LLMEngine.from_loaded(loaded, cfg)
    engine.runner.accel = CheckedReplays()
    engine.runner.setup(RunnerConfig(cuda_graph=graphs, warmup=False, compile_mode="none"), max_model_len=max_len,
                        max_num_seqs=max_seqs)
    assert (engine.runner.graphs is not None) == graphs  # the captured step holds the TurboQuant ops
    return engine


def _rows_per_replay(engine) -> list[tuple[int, int]]:
    """Record ``(rows, bucket)`` of every decode-graph replay of ``engine`` from now on."""
    graphs, seen = engine.runner.graphs, []
    for name in ("run", "run_logits"):
        real = getattr(graphs, name)

        def spy(token_ids, *a, _real=real, **kw):
            seen.append((len(token_ids), graphs.bucket_for(len(token_ids))))
            return _real(token_ids, *a, **kw)

        setattr(graphs, name, spy)
    return seen


def _run(engine, prompts, params, cached: list[int] | None = None):
    """Per request: its tokens and the logprob of each (``logprobs`` requests; else empty lists); ``cached`` gets
    each request's prompt tokens served from the prefix cache."""
    logprobs: dict[str, list[float]] = {}
    outs = run_to_completion(engine, prompts, params, on_output=lambda o: logprobs.setdefault(o.request_id, []).extend(
        x.logprob for x in o.logprobs or []))
    assert all(o.finish_reason == "length" for o in outs), [o.error for o in outs]
    if cached is not None:
        cached.extend(o.num_cached_tokens for o in outs)
    return [o.token_ids for o in outs], [logprobs.get(o.request_id, []) for o in outs]


def _prompts(*lengths: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 320, (n,), generator=gen).tolist() for n in lengths]


@pytest.mark.parametrize("n,max_seqs", [(3, 4), pytest.param(5, 8, marks=pytest.mark.slow)])  # 8: ~10-20 s
def test_a_batch_below_its_bucket_decodes_as_eager_and_alone(loaded, n, max_seqs):
    # contexts of 9..53 positions over a 16-position ring: every request reads quantized rows and its ring; the
    # requests finish at different steps, so the batch shrinks (n rows, then fewer, padded to their buckets)
    prompts = _prompts(21, 9, 35, 14, 27)[:n]
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in (12, 18, 6, 15, 9)][:n]
    want, _ = _run(_engine(loaded, graphs=False, max_seqs=max_seqs), prompts, params)
    engine = _engine(loaded, graphs=True, max_seqs=max_seqs)
    replays = _rows_per_replay(engine)
    got, _ = _run(engine, prompts, params)
    assert got == want
    assert any(rows < bucket for rows, bucket in replays) and (n, max_seqs if n > 4 else 4) in replays
    for prompt, p, tokens in zip(prompts, params, want):
        assert _run(engine, [prompt], [p])[0] == [tokens]  # alone: bucket 1, no padding row
    assert engine.kv.num_used_blocks == 0 and engine.kv.slots.num_used_slots == 0


@pytest.mark.slow  # ~12 s
def test_the_logits_of_padded_graph_steps_are_the_eager_and_the_lone_requests(loaded):
    # logprobs: the "logits" graphs, whose float32 logits the eager sampler reads
    prompts = _prompts(21, 9, 35, seed=1)
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True, logprobs=1) for m in (8, 11, 5)]
    want = _run(_engine(loaded, graphs=False), prompts, params)
    engine = _engine(loaded, graphs=True)
    replays = _rows_per_replay(engine)
    got = _run(engine, prompts, params)
    assert got[0] == want[0] and (3, 4) in replays
    for g, w in zip(got[1], want[1]):
        assert len(g) == len(w) and max(abs(a - b) for a, b in zip(g, w)) < 1e-5
    for i, (prompt, p) in enumerate(zip(prompts, params)):
        tokens, logprobs = _run(engine, [prompt], [p])
        assert tokens == [want[0][i]] and max(abs(a - b) for a, b in zip(logprobs[0], want[1][i])) < 1e-4


@pytest.mark.slow  # 5-16 s on a loaded CPU
def test_a_preemption_under_graphs_decodes_as_eager(loaded):
    # 7 blocks of 16 for 3 requests growing to 3 blocks each: the newest is preempted (recomputed later, taking a
    # fresh slot whose ring is emptied) while the others decode in padded graph steps
    prompts = _prompts(20, 17, 25, seed=2)
    params = [SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)] * 3
    eager = _engine(loaded, graphs=False, num_blocks=7)
    want, _ = _run(eager, prompts, params)
    engine = _engine(loaded, graphs=True, num_blocks=7)
    replays = _rows_per_replay(engine)
    got, _ = _run(engine, prompts, params)
    assert got == want
    assert engine.scheduler.num_preemptions == eager.scheduler.num_preemptions > 0
    assert any(rows < bucket for rows, bucket in replays)
    assert engine.kv.num_used_blocks == 0 and engine.kv.slots.num_used_slots == 0


def test_a_prefix_hit_and_a_miss_do_not_depend_on_the_prefill_chunks(loaded, monkeypatch):
    # 40 prompt tokens with a 16-position ring, prefilled in 16- and in 8-token chunks: the ring's window is per
    # query, so the miss's tokens and logits are the same either way, and so are the hit's. The hit resumes at 16,
    # not at 32 (its ring then holds 24..39 computed by this request, as the miss's does for the decode); its
    # queries at 16..30 read the positions before 16 quantized (the miss read them exactly: they were in its ring),
    # so the hit differs from the miss by that quantization noise (measured: the first token and its logprob agree
    # to 2.5e-3, later tokens drift on the tiny model's flat distribution). The hit's prefill over the cached prefix,
    # eager, reads nothing on the host.
    prompt = _prompts(40, seed=3)[0]
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=1)
    runs = {}
    for chunk in (16, 8):
        engine = _engine(loaded, graphs=True, enable_prefix_caching=True, snapshot_interval=16, max_prefill_tokens=32,
                         prefill_chunk_size=chunk)
        cached = []
        miss = _run(engine, [prompt], [params], cached)
        model, forward = engine.runner.model, engine.runner.model.forward
        calls = []

        def checked(*args, _forward=forward, _calls=calls, **kwargs):
            _calls.append(1)
            with NoHostReads():
                return _forward(*args, **kwargs)

        monkeypatch.setattr(model, "forward", checked)
        hit = _run(engine, [prompt], [params], cached)
        monkeypatch.undo()
        assert cached == [0, 16]
        assert len(calls) == -(-24 // chunk) + 7  # the prefill chunks of 16..39, then 7 decode steps (replays)
        runs[chunk] = miss, hit
    for i in range(2):  # the miss, the hit
        (tokens, logprobs), (tokens8, logprobs8) = runs[16][i], runs[8][i]
        assert tokens8 == tokens
        assert max(abs(a - b) for a, b in zip(logprobs8[0], logprobs[0])) < 1e-4
    (miss_tokens, miss_logprobs), (hit_tokens, hit_logprobs) = runs[16]
    assert hit_tokens[0][0] == miss_tokens[0][0] and abs(hit_logprobs[0][0] - miss_logprobs[0][0]) < 5e-3


@pytest.mark.parametrize("bits,residual", [(4, 16), (3, 16), (4, 128), (3, 128)])
def test_a_padded_prefill_graph_over_a_ring_gives_the_eager_tokens(loaded, bits, residual):
    # A 40-token prompt replays the 128 bucket's prefill graph (88 padding rows): the ring's window ends at the
    # prompt's real length (valid_lens), so positions 24..39 are read from the ring as in the eager prefill (read
    # from the bucket's length, 112 on, they came out quantized: other tokens than eager's). A ring as long as the
    # bucket holds the whole prompt; its padding rows never enter it. The replay reads nothing on the host.
    prompt = _prompts(40, seed=5)[0]
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=1)
    eager = _engine(loaded, graphs=False, bits=bits, residual=residual, max_len=256)
    want = _run(eager, [prompt], [params])
    engine = _engine(loaded, graphs=True, bits=bits, residual=residual, max_len=256)
    report = engine.runner.graph_report()["prefill"]
    assert report["captured"] and 128 in report["prompt_lengths"] and report["why_not"] is None
    got = _run(engine, [prompt], [params])
    assert engine.runner.num_prefill_graph_steps == 1 and eager.runner.num_prefill_graph_steps == 0
    assert got[0] == want[0] and max(abs(a - b) for a, b in zip(got[1][0], want[1][0])) < 1e-4


def test_chunked_prefills_beside_prefill_graphs_over_rings_give_the_eager_tokens(loaded):
    # A 70-token prompt in 32-token chunks (eager: no chunk is a whole fresh prompt) leaves its ring the newest 16
    # positions of its last chunk; then a 20-token prompt replays its prefill graph. Both as the eager engine.
    prompts = _prompts(70, 20, seed=6)
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=1)
    config = dict(prefill_chunk_size=32, max_len=256)
    want = [_run(_engine(loaded, graphs=False, **config), [p], [params]) for p in prompts]
    engine = _engine(loaded, graphs=True, **config)
    got = []
    for p in prompts:
        got.append(_run(engine, [p], [params]))
        if not got[1:]:  # the chunked prompt: its chunks eager
            assert engine.runner.num_prefill_graph_steps == 0
    assert engine.runner.num_prefill_graph_steps == 1
    for g, w in zip(got, want):
        assert g[0] == w[0] and max(abs(a - b) for a, b in zip(g[1][0], w[1][0])) < 1e-4


@pytest.mark.parametrize("graphs", [False, True])
def test_a_prompt_cache_hit_over_rings_decodes_as_the_miss(loaded, graphs):
    # an exact repeat served by the prompt cache computes nothing: its new slot's ring is restored from the entry
    # (the prompt's positions 24..39 in the serving dtype, as the miss left them), so its tokens and logits are the
    # miss's (left empty, those positions were read quantized: other tokens). With graphs the miss replays its prefill
    # graph. (No logprobs: a request that wants them keeps no prompt-cache entry.)
    prompt = _prompts(40, seed=4)[0]
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    engine = _engine(loaded, graphs=graphs, max_len=256, prompt_cache_size=8, enable_prefix_caching=True,
                     snapshot_interval=16)
    assert engine.scheduler.prompt_cache is not None and engine.prompt_store.capacity == 8
    assert [r.pos.shape for r in engine.prompt_store.rings.values()] == [(8, 16)]
    cached = []
    miss = _run(engine, [prompt], [params], cached)
    hit = _run(engine, [prompt], [params], cached)
    assert cached == [0, 40] and engine.runner.num_prefill_graph_steps == int(graphs)
    assert hit[0] == miss[0]
