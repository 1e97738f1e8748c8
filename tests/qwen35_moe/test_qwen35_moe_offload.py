"""Expert offload of a tiny Qwen3.5 MoE on the CPU (the "device" is the CPU: copies run at once, no streams):
logits and greedy tokens equal the resident model's for every cache size and resident layer set, batched and
alone, prefill and decode; the engine path; ``auto`` under a memory cap; the KV budget under the cap;
``/healthz``; graph capture skipped; refusals."""

from __future__ import annotations

import asyncio

import pytest
import torch
from anna_core import SamplingParams
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.offload import OffloadConfig, OffloadConfigError, offload_device_bytes, planning_reserve_bytes
from anna_core.errors import AnnaError, UnsupportedModelError
from anna_core.layers.expert_offload import OffloadedExperts, model_sizes
from anna_core.loading import load_model
from anna_core.testing.runner import prefill_logits, simple_greedy_batch

E, K = 16, 4
GIB = 1 << 30


@pytest.fixture(scope="module")
def moe_dir(tiny_moe_factory):
    return tiny_moe_factory(num_experts=E, top_k=K)


def _load(path, offload=None, cap=None, load_format="auto"):
    return load_model(path, device="cpu", dtype="fp32", offload=offload, max_device_memory_gib=cap,
                      load_format=load_format)


@pytest.fixture(scope="module")
def resident(moe_dir):
    return _load(moe_dir, OffloadConfig(mode="none"))


PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [20, 21, 22], [40 + i for i in range(30)]]


@pytest.fixture(scope="module")
def reference(resident):
    return simple_greedy_batch(resident.model, PROMPTS, 4), [prefill_logits(resident.model, p) for p in PROMPTS]


@pytest.mark.parametrize(("cached", "layers"), [(0, None), (3, (1,)), (E, None), (5, (0, 3))])
def test_offloaded_equals_resident(moe_dir, reference, cached, layers):
    off = _load(moe_dir, OffloadConfig(mode="experts", cached_experts_per_layer=cached, resident_layers=layers))
    modules = [m for m in off.model.modules() if isinstance(m, OffloadedExperts)]
    want_resident = tuple(layers or ())
    assert [m.moe_index for m in modules] == [i for i in range(4) if i not in want_resident]
    assert off.expert_store.resident_layers == want_resident
    tokens, logits = reference
    assert simple_greedy_batch(off.model, PROMPTS, 4) == tokens  # batched prefill, then decode steps
    for p, want in zip(PROMPTS, logits):
        assert torch.equal(prefill_logits(off.model, p), want)  # alone, bit for bit
    s = off.expert_store.stats
    assert s.misses > 0 and s.calls > 0 and s.bytes_copied == (s.misses + s.prefetched) * off.expert_store.expert_bytes
    if cached == 0:
        assert s.hits == 0
    if cached == E:  # each expert is copied at most once per layer
        assert s.misses <= E * len(modules) and s.hits > 0


def test_offloaded_weights_stay_in_host_memory(resident, moe_dir):
    off = _load(moe_dir, OffloadConfig(mode="experts", cached_experts_per_layer=2))
    names = {n for n, _ in off.model.named_parameters()}
    assert not any("experts" in n for n in names)  # routed experts are no parameters: no .to(device) moves them
    layer = next(m for m in off.model.modules() if isinstance(m, OffloadedExperts))
    ref = resident.model.model.layers[0].mlp.experts
    assert torch.equal(layer.host_gate_up, ref.gate_up_proj) and torch.equal(layer.host_down, ref.down_proj)
    assert tuple(layer.cache_gate_up.shape) == (2, *ref.gate_up_proj.shape[1:])
    assert off.model.capabilities.graph_capture is False and resident.model.capabilities.graph_capture is True


def test_per_expert_and_fused_checkpoints_offload_alike(tiny_moe_factory):
    fused = tiny_moe_factory(num_experts=8, top_k=2, fused=True)
    per_expert = tiny_moe_factory(num_experts=8, top_k=2)
    cfg = OffloadConfig(mode="experts", cached_experts_per_layer=3)
    a, b, ref = _load(fused, cfg), _load(per_expert, cfg), _load(fused, OffloadConfig(mode="none"))
    want = simple_greedy_batch(ref.model, PROMPTS[:2], 4)
    assert simple_greedy_batch(a.model, PROMPTS[:2], 4) == want == simple_greedy_batch(b.model, PROMPTS[:2], 4)


def test_dummy_weights_offload_with_the_resident_values(moe_dir):
    cfg = OffloadConfig(mode="experts", cached_experts_per_layer=4)
    off = load_model(moe_dir, device="cpu", dtype="fp32", load_format="dummy", offload=cfg)
    res = load_model(moe_dir, device="cpu", dtype="fp32", load_format="dummy", offload=OffloadConfig(mode="none"))
    layer = off.model.model.layers[2].mlp.experts
    assert torch.equal(layer.host_gate_up, res.model.model.layers[2].mlp.experts.gate_up_proj)
    assert simple_greedy_batch(off.model, PROMPTS[:1], 4) == simple_greedy_batch(res.model, PROMPTS[:1], 4)


GREEDY = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)


def _run(engine, prompts, tag):
    for i, p in enumerate(prompts):
        engine.add_request(f"{tag}{i}", p, GREEDY)
    done = {}
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    return [done[f"{tag}{i}"].token_ids for i in range(len(prompts))]


def test_engine_batched_and_alone_equal_resident_and_report_the_cache(moe_dir, resident):
    off = _load(moe_dir, OffloadConfig(mode="experts", cached_experts_per_layer=6, resident_layers=(2,)))
    cfg = EngineConfig(max_num_seqs=4, num_blocks=64, prompt_cache_size=0, enable_prefix_caching=False)
    want = _run(LLMEngine.from_loaded(resident, cfg), PROMPTS, "r")
    engine = LLMEngine.from_loaded(off, cfg)
    assert _run(engine, PROMPTS, "b") == want
    alone = LLMEngine.from_loaded(off, EngineConfig(max_num_seqs=1, num_blocks=64, prompt_cache_size=0))
    assert [_run(alone, [p], f"a{i}-")[0] for i, p in enumerate(PROMPTS)] == want
    cache = engine.stats()["expert_cache"]
    assert cache["cached_experts_per_layer"] == 6 and cache["offloaded_layers"] == [0, 1, 3]
    assert cache["resident_layers"] == [2] and cache["hits"] + cache["misses"] > 0
    assert cache["hit_rate"] == pytest.approx(cache["hits"] / (cache["hits"] + cache["misses"]))
    assert "expert_cache" not in LLMEngine.from_loaded(resident, cfg).stats()


def test_graph_capture_is_skipped_when_offloaded(moe_dir):
    from anna_core.testing.fake_graphs import FakeGraphAccelerator

    off = _load(moe_dir, OffloadConfig(mode="experts"))
    engine = LLMEngine.from_loaded(off, EngineConfig(max_num_seqs=2, num_blocks=32, prompt_cache_size=0))
    engine.runner.accel = FakeGraphAccelerator()
    engine.runner.setup(RunnerConfig(cuda_graph=True), max_model_len=engine.max_model_len, max_num_seqs=2)
    report = engine.runner.graph_report()
    assert engine.runner.graphs is None and engine.runner.prefill_graphs is None
    for kind in ("decode", "prefill"):
        assert not report[kind]["captured"] and "graph_capture" in report[kind]["why_not"]


def test_auto_offloads_under_a_cap_keeping_leading_layers(moe_dir, resident):
    sizes = model_sizes(resident.model)
    assert sizes.num_moe_layers == 4 and sizes.num_experts == E
    assert _load(moe_dir, OffloadConfig()).expert_store is None  # fits the free memory: resident
    two = offload_device_bytes(sizes, 2, 1, E)  # room for 2 resident layers exactly, beside the planner's reserve
    cap = next(c for c in range(two, two + 8 * GIB, 1 << 16) if two + planning_reserve_bytes(c) <= c) / GIB
    off = _load(moe_dir, OffloadConfig(cached_experts_per_layer=1), cap=cap)
    assert off.expert_store.resident_layers == (0, 1)
    assert [m.moe_index for m in off.expert_store.layers] == [2, 3]
    off = _load(moe_dir, OffloadConfig(resident_layers=(3,)), cap=0.5)  # given resident layers win
    assert off.expert_store.resident_layers == (3,)
    assert _load(moe_dir, OffloadConfig(mode="none"), cap=0.5).expert_store is None
    # whatever auto decides under a cap, the engine then finds room for its KV cache under the same cap
    for c in (cap, 3.0):
        loaded = _load(moe_dir, OffloadConfig(), cap=c)
        engine = LLMEngine.from_loaded(loaded, EngineConfig(max_device_memory_gib=c, prompt_cache_size=0))
        assert engine.kv.num_blocks > 0


def test_kv_cache_is_sized_under_the_cap(moe_dir):
    from anna_core.engine.cache_allocator import capped_kv_budget_bytes, state_bytes

    off = _load(moe_dir, OffloadConfig(mode="experts", cached_experts_per_layer=4))
    cap = 0.6
    engine = LLMEngine.from_loaded(off, EngineConfig(max_device_memory_gib=cap, prompt_cache_size=0,
                                                     enable_prefix_caching=False))
    spec = off.model.cache_spec
    in_use = engine._model_device_bytes()
    assert in_use >= off.expert_store.device_bytes() > 0
    budget = capped_kv_budget_bytes(int(cap * GIB), in_use, state_bytes(spec, 65, torch.float32))
    per_block = sum(spec.groups[g].bytes_per_block(16, torch.float32) for g in spec.attention_groups)
    kv = engine.kv.num_blocks * per_block
    assert budget - per_block < kv <= budget
    with pytest.raises(AnnaError, match="leaves no room for the KV cache"):
        LLMEngine.from_loaded(off, EngineConfig(max_device_memory_gib=0.4))  # less than the activation headroom
    with pytest.raises(AnnaError, match="do not fit under max_device_memory_gib"):
        LLMEngine.from_loaded(off, EngineConfig(max_device_memory_gib=0.6, num_blocks=10**6, prompt_cache_size=0,
                                                enable_prefix_caching=False))


def test_healthz_shows_the_expert_cache(moe_dir):
    from anna_core.engine.async_engine import AsyncEngine
    from anna_core.server.app import create_app
    from litestar.testing import TestClient

    from tests.server.conftest import MODEL, make_state

    off = _load(moe_dir, OffloadConfig(mode="experts", cached_experts_per_layer=3))
    llm = LLMEngine.from_loaded(off, EngineConfig(max_num_seqs=2, num_blocks=32, prompt_cache_size=0))
    engine = AsyncEngine(llm)
    engine.start()
    try:
        with TestClient(create_app(make_state(off.tokenizer, engine))) as c:
            r = c.post("/v1/completions", json={"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 3})
            assert r.status_code == 200, r.text
            body = c.get("/healthz").json()
    finally:
        asyncio.run(engine.shutdown(drain=False))
    cache = body["engine"]["expert_cache"]
    assert cache["cached_experts_per_layer"] == 3 and cache["misses"] > 0 and 0 <= cache["hit_rate"] <= 1
    assert cache["bytes_copied"] == (cache["misses"] + cache["prefetched"]) * off.expert_store.expert_bytes


def test_refusals(moe_dir, tiny_moe_factory, tmp_path):
    with pytest.raises(OffloadConfigError, match=r"indices \[4\] are out of range: the model has 4 MoE layers"):
        _load(moe_dir, OffloadConfig(mode="experts", resident_layers=(4,)))
    with pytest.raises(OffloadConfigError, match="more than the 16 experts"):
        _load(moe_dir, OffloadConfig(mode="experts", cached_experts_per_layer=17))
    from anna_core.testing.checkpoints import build_tiny_qwen35

    dense = build_tiny_qwen35(tmp_path / "dense")
    with pytest.raises(OffloadConfigError, match="no routed-experts"):
        _load(dense, OffloadConfig(mode="experts"))
    assert _load(dense, OffloadConfig(), cap=0.01).expert_store is None  # auto: nothing to offload


def test_a_family_without_the_declaration_is_refused(tmp_path):
    from anna_llama.tiny import build_tiny_llama

    path = tmp_path / "llama"
    build_tiny_llama(path, vocab_size=64, tie=False)
    with pytest.raises(UnsupportedModelError, match=r"the 'llama' family \(anna-llama\) does not declare expert offload"):
        _load(path, OffloadConfig(mode="experts"), load_format="dummy")
    assert _load(path, OffloadConfig(), cap=0.01, load_format="dummy").expert_store is None  # auto: resident


def test_llm_api_takes_the_offload_settings(moe_dir):
    from anna_core import LLM

    kw = dict(device="cpu", max_num_seqs=2, num_blocks=32, prompt_cache_size=0)
    resident = LLM(moe_dir, offload_mode="none", **kw)
    off = LLM(moe_dir, offload_mode="experts", resident_expert_layer_indices="1,3", cached_experts_per_layer=2,
              expert_prefetch=False, max_device_memory_gib=2.0, **kw)
    want = [o.token_ids for o in resident.generate(PROMPTS[:2], GREEDY)]
    assert [o.token_ids for o in off.generate(PROMPTS[:2], GREEDY)] == want
    cache = off.engine.stats()["expert_cache"]
    assert cache["resident_layers"] == [1, 3] and cache["prefetch"] is False and cache["cached_experts_per_layer"] == 2
    assert off.engine.config.max_device_memory_gib == 2.0 and resident.loaded.expert_store is None
