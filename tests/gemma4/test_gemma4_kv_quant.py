"""A TurboQuant KV cache on a tiny Gemma 4 (its sliding-window and global groups both quantized, KV-shared layers
reading quantized K/V): logit KL against the unquantized cache and the engine's runs over it, with residual rings
under decode and prefill graphs."""

from __future__ import annotations

import pytest
import torch
from anna_core import LLM, SamplingParams
from anna_core.kv_quant.layout import TurboQuantLayout
from anna_core.testing.runner import prefill_logits

from tests.gemma4.conftest import load_anna


@pytest.mark.parametrize("bits,max_kl", [(4, 0.25), (3, 0.32)])
def test_logit_kl_against_unquantized_kv(gemma4_factory, prompt, bits, max_kl):
    # Teacher-forced over the 70-token prompt. Measured (96 tokens): 4 bits KL mean 0.18, 3 bits 0.23; with head
    # dims 64 / 128 0.19 / 0.25. Gemma 4 attends at scale 1 over RMS-normalised q and k, so its logits are ~D times
    # a cosine and the keys' inner-product error (std ~ sqrt(0.047 D) at 4 bits, arXiv 2504.19874 Theorem 2) moves
    # them far more than in Qwen3.5's 1/sqrt(D)-scaled attention (KL 5e-3 at 4 bits).
    model = load_anna(gemma4_factory()).model
    ref = prefill_logits(model, prompt).log_softmax(-1)
    got = prefill_logits(model, prompt, kv_quant=TurboQuantLayout(bits)).log_softmax(-1)
    kl = (ref.exp() * (ref - got)).sum(-1)
    assert kl.mean().item() < max_kl


def test_engine_runs_over_both_quantized_groups_with_prefix_hits(gemma4_factory, prompt):
    path = gemma4_factory()
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    llm = LLM(path, device="cpu", dtype="fp32", num_blocks=64, block_size=16, kv_cache_quantization="turboquant",
              kv_cache_quant_bits=3)
    spec = llm.engine.cache_spec
    assert [spec.groups[g].quant for g in spec.attention_groups] == [TurboQuantLayout(3)] * 2
    assert [s["kv_quant"]["bits"] for s in llm.engine.kv.group_stats()] == [3, 3]  # shown on /healthz
    first = llm.generate([prompt], greedy)[0]
    again = llm.generate([prompt], greedy)[0]
    assert again.num_cached_tokens >= 48 and again.token_ids == first.token_ids
    assert llm.engine.kv.num_used_blocks == 0


def test_a_residual_covering_the_context_decodes_as_unquantized_kv(gemma4_factory, prompt):
    # every position read from the ring (sliding-window and global groups, KV-shared readers of their owners' rings)
    path = gemma4_factory()
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    common = dict(device="cpu", dtype="fp32", num_blocks=64, block_size=16, max_prefill_tokens=32, prefill_chunk_size=16)
    base = LLM(path, **common).generate([prompt, prompt[:20]], greedy)
    ringed = LLM(path, kv_cache_quantization="turboquant", kv_cache_quant_bits=3, kv_cache_residual_len=128,
                 **common).generate([prompt, prompt[:20]], greedy)
    assert [o.token_ids for o in ringed] == [b.token_ids for b in base]


def _graph_engine(path, *, graphs: bool, max_seqs: int = 4, residual: int = 8, bits: int = 4, max_len: int = 128,
                  prefix_caching: bool = True):
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.testing.fake_graphs import FakeGraphAccelerator

    cfg = EngineConfig(block_size=16, num_blocks=64, max_num_seqs=max_seqs, max_model_len=max_len,
                       max_prefill_tokens=128, prompt_cache_size=0, kv_cache_quantization="turboquant",
                       kv_cache_quant_bits=bits, kv_cache_residual_len=residual,
                       enable_prefix_caching=prefix_caching)
    engine = LLMEngine.from_loaded(load_anna(path), cfg)
    engine.runner.accel = FakeGraphAccelerator()
    engine.runner.setup(RunnerConfig(cuda_graph=graphs, warmup=False, compile_mode="none"), max_model_len=max_len,
                        max_num_seqs=max_seqs)
    assert (engine.runner.graphs is not None) == graphs
    return engine


@pytest.mark.slow  # ~13 s
def test_padded_decode_graph_rows_leave_the_first_requests_ring_alone(gemma4_factory, prompt):
    # No recurrent group: the padding rows of a 3-request step in bucket 4 once wrote state slot 0, i.e. the first
    # request's ring (scratch_slot), which it then read as its newest positions. Both groups carry rings (8
    # positions, below every context), the requests finish at different steps (the batch shrinks); tokens and
    # logits equal the eager engine's, and tokens each request's alone (without prefix caching: a re-run's prefix hit
    # reads the positions before its hit point quantized where the miss read them from its ring).
    from anna_core.testing.engine_run import run_to_completion

    path = gemma4_factory()
    prompts = [prompt[:24], prompt[40:49], prompt[20:37]]
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True, logprobs=1) for m in (7, 10, 4)]

    def run(engine, prompts, params):
        lps = {}
        outs = run_to_completion(engine, prompts, params,
                                 on_output=lambda o: lps.setdefault(o.request_id, []).extend(x.logprob for x in o.logprobs))
        return [o.token_ids for o in outs], [lps[o.request_id] for o in outs]

    want = run(_graph_engine(path, graphs=False, prefix_caching=False), prompts, params)
    engine = _graph_engine(path, graphs=True, prefix_caching=False)
    steps = engine.runner.num_graph_steps
    got = run(engine, prompts, params)
    assert engine.runner.num_graph_steps - steps == 9  # every decode step replayed a graph (3 rows, 2, then 1)
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        assert max(abs(a - b) for a, b in zip(g, w)) < 1e-5
    greedy = [SamplingParams(temperature=0.0, max_tokens=p.max_tokens, ignore_eos=True) for p in params]
    assert [run(engine, [q], [p])[0][0] for q, p in zip(prompts, greedy)] == want[0]


def test_prefix_hits_and_misses_with_rings_do_not_depend_on_the_prefill_chunks(gemma4_factory, prompt):
    # 8-position rings in both groups (the ring's exact window is per query): a 70-token prompt and a 17-token one,
    # then both again, in 16- and in 8-token chunks. The re-run of the long one resumes at 48 (70 - 8 = 62, whole
    # blocks), so its rings hold positions 62..69 computed by the request, as the miss's do; its queries at 48..54
    # read the positions before 48 quantized where the miss read them exactly (a hit differs from a miss by that
    # quantization noise: measured, other greedy tokens on this tiny model). Each run's tokens and logprobs are the
    # same whatever the chunk size; the short prompt's re-run (no whole block cached past the ring) equals its miss.
    from anna_core.testing.engine_run import run_to_completion

    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=1)
    runs = []
    for chunk in (16, 8):
        llm = LLM(gemma4_factory(), device="cpu", dtype="fp32", num_blocks=64, block_size=16, max_prefill_tokens=32,
                  prefill_chunk_size=chunk, kv_cache_quantization="turboquant", kv_cache_quant_bits=3,
                  kv_cache_residual_len=8)

        def run(llm=llm):
            lps = {}
            outs = run_to_completion(llm.engine, [prompt, prompt[20:37]], greedy, on_output=lambda o: lps.setdefault(
                o.request_id, []).extend(x.logprob for x in o.logprobs))
            return [(o.num_cached_tokens, o.token_ids, lps[o.request_id]) for o in outs]

        miss, hit = run(), run()
        assert [m[0] for m in miss] == [0, 0] and [h[0] for h in hit] == [48, 0]
        assert hit[1][1] == miss[1][1] and max(abs(a - b) for a, b in zip(hit[1][2], miss[1][2])) < 1e-5
        runs.append(miss + hit)
    for by16, by8 in zip(*runs):
        assert by8[1] == by16[1] and len(by8[2]) == 6 and max(abs(a - b) for a, b in zip(by8[2], by16[2])) < 1e-4


@pytest.mark.parametrize("bits,residual", [(4, 16), (3, 16), (4, 128), (3, 128)])
def test_a_padded_prefill_graph_over_rings_gives_the_eager_tokens(gemma4_factory, prompt, bits, residual):
    # 40 prompt tokens replay the 128 bucket's prefill graph (88 padding rows): both groups' rings end at the
    # prompt's real length, so its newest positions are read from them as in the eager prefill (KV-shared readers
    # too); a ring as long as the bucket holds the whole prompt and none of the padding
    from anna_core.testing.engine_run import run_to_completion

    path = gemma4_factory()
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=1)

    def run(engine):
        lps = []
        outs = run_to_completion(engine, [prompt[:40]], [params], on_output=lambda o: lps.extend(
            x.logprob for x in o.logprobs))
        return outs[0].token_ids, lps

    want = run(_graph_engine(path, graphs=False, bits=bits, residual=residual, max_len=256))
    engine = _graph_engine(path, graphs=True, bits=bits, residual=residual, max_len=256)
    report = engine.runner.graph_report()["prefill"]
    assert report["captured"] and 128 in report["prompt_lengths"] and report["why_not"] is None
    got = run(engine)
    assert engine.runner.num_prefill_graph_steps == 1
    assert got[0] == want[0] and len(got[1]) == 6 and max(abs(a - b) for a, b in zip(got[1], want[1])) < 1e-4


def test_a_prompt_cache_hit_restores_the_rings(gemma4_factory, prompt):
    # No recurrent group: a prompt-cache entry keeps the tail block, the logits and both groups' 8-position rings; an
    # exact repeat computes nothing and its slot's rings are the miss's (left empty, the prompt's positions 62..69
    # were read quantized: other tokens)
    greedy = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    llm = LLM(gemma4_factory(), device="cpu", dtype="fp32", num_blocks=64, block_size=16,
              kv_cache_quantization="turboquant", kv_cache_quant_bits=3, kv_cache_residual_len=8)
    assert len(llm.engine.prompt_store.rings) == 2
    miss, hit = llm.generate([prompt], greedy)[0], llm.generate([prompt], greedy)[0]
    assert (miss.num_cached_tokens, hit.num_cached_tokens) == (0, len(prompt))
    assert hit.token_ids == miss.token_ids


_TWO_READERS = dict(num_hidden_layers=8, num_kv_shared_layers=4,
                    layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2
                    + ["sliding_attention", "full_attention"])
"""The e2b variant with two readers per owner: layers 4 and 6 read layer 3's K/V (sliding), 5 and 7 layer 2's."""


@pytest.mark.parametrize("chunk_size", [5, 13])
@pytest.mark.parametrize("overrides,readers", [({}, {4: 3, 5: 2}), (_TWO_READERS, {4: 3, 5: 2, 6: 3, 7: 2})],
                         ids=["one-reader", "two-readers"])
def test_kv_shared_layers_read_the_per_query_ring_window_however_the_prompt_is_chunked(gemma4_factory, prompt,
                                                                                       chunk_size, overrides, readers):
    # KV-shared layers read their owners' K/V. With 8-position rings, a prompt prefilled in chunks shorter (5) or
    # longer (13) than R gives the logits of the whole prompt at every position, and so do the decode steps after
    # it: a reader's query at q reads q - R < p <= q exactly as its owner's does (the owner's ring as before the
    # step, plus its rows of the step, written once after its last reader). With the readers' window ending at each
    # chunk's end instead (before this), these differed by quantization noise (measured: max logit difference 0.50).
    model = load_anna(gemma4_factory(**overrides)).model
    assert {i: layer.kv_owner for i, layer in enumerate(model.config.layers) if layer.kv_owner is not None} == readers
    ids, forced = prompt[:45], prompt[45:50]
    ring = TurboQuantLayout(3, residual_len=8)
    whole = prefill_logits(model, ids, kv_quant=ring, decode_ids=forced)
    chunked = prefill_logits(model, ids, kv_quant=ring, decode_ids=forced, chunk_size=chunk_size)
    assert whole.shape == (50, model.vocab_size)
    torch.testing.assert_close(chunked, whole, rtol=1e-4, atol=1e-4)
    # the ring is in effect: without it the same prompt's logits differ (positions within R read quantized)
    plain = prefill_logits(model, ids, kv_quant=TurboQuantLayout(3), decode_ids=forced)
    assert (plain - whole).abs().max().item() > 1e-2


def test_kv_shared_layers_with_the_fused_query_op_keep_the_per_query_window(gemma4_factory, prompt):
    # Where a kernel serves q_norm_rope (GPUs; here its reference, counted as accelerated) a KV-shared layer of a
    # quantized group normalises and rotates q in it, then attends through its PagedAttention: still over the rows
    # its owner holds, and its last reader still writes them (else the ring would miss them at decode)
    from tests.gemma4.kernel_ops import KernelOpCalls

    path = gemma4_factory(**_TWO_READERS)
    ids, forced = prompt[:45], prompt[45:50]
    ring = TurboQuantLayout(3, residual_len=8)
    whole = prefill_logits(load_anna(path).model, ids, kv_quant=ring, decode_ids=forced)
    model, called = load_anna(path).model, set()
    KernelOpCalls(model.ops.registry, called.add, accelerate=True)
    chunked = prefill_logits(model, ids, kv_quant=ring, decode_ids=forced, chunk_size=5)
    assert "q_norm_rope" in called and "paged_attention_turboquant" in called
    torch.testing.assert_close(chunked, whole, rtol=1e-4, atol=1e-4)
