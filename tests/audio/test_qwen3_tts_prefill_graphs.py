"""The talker's prompts on captured prefill graphs (:mod:`anna_core.engine.prefill_graphs`, over
:class:`~anna_core.testing.fake_graphs.FakeGraphAccelerator`: capture fails at any host read, replay reruns the step over
the same static buffers). The talker declares ``padded_prefill`` and ``prompt_state``: its per-slot tables (trailing
text, sampling controls) are bound by ``start_prompts`` before the replay, its prompt embeddings are staged into the
graphs' buffer, and the hidden state the first frame's code predictor reads is the last valid row's. Every kind's
requests (Base with voice cloning, CustomVoice, VoiceDesign), batched and alone, replay prefill graphs, their first
frames and every later one decode graphs, no step eager, and give the golden codes and audio, equal to the eager
engine's; a padded prefill writes no cache row but its own and the scratch block's; the step's host work shrinks
from the eager prefill's to a few copies and one replay."""

from __future__ import annotations

import pytest
import torch
from anna_audio.qwen3_tts import load_codec_decoder
from anna_audio.qwen3_tts.generate import GREEDY
from anna_core.engine import model_runner
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.sched_output import StepPath
from anna_core.testing.fake_graphs import FakeGraphAccelerator
from anna_core.testing.host_reads import NoHostReads, OpCounts

from tests.audio.tts_engine import generate_codes, submit, talker_engine, talker_prompts
from tests.audio.tts_golden import CHECKPOINTS, KINDS, WAVE_ATOL, golden, speech_requests, talker_parts

pytestmark = pytest.mark.slow  # captures the tiny talker's prefill and decode graphs (seconds per test)

BUCKETS = (16, 32, 64)
"""Captured prompt lengths in these tests (the fixtures' prompts run 8 to 54 tokens: every one padded, by 2 to 8 rows;
the engine's own ladder starts at 128)."""

# One prompt's prefill step (the tiny CustomVoice checkpoint's 18-token prompt, 2 talker layers, the CPU op table),
# measured: eagerly 163 launches and 14 tensors made from host data (each a host wait on a GPU); on its prefill
# graph 17 launches around the replay (the prompt's tables bound by start_prompts, the staging upload, the embeddings'
# copy, the greedy sampler, the side outputs' gather) plus the replay (on a GPU one graph launch), and one tensor from
# host data (the gather's slot index, pinned and copied without blocking on a GPU). Bounded with a little headroom.
MAX_HOST_LAUNCHES = 24


@pytest.fixture
def small_buckets(monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in BUCKETS if b <= n])


def _engine(parts, *, graphs: bool, max_num_seqs: int = 8, block_size: int = 16):
    """``(model, engine)`` over a talker of ``parts``: with ``graphs`` its prefill and decode steps captured (the fake
    accelerator), else every step eager."""
    model, engine = talker_engine(parts, max_num_seqs, graphs=graphs, block_size=block_size)
    if graphs:
        report = engine.runner.graph_report()
        assert report["prefill"]["captured"] and report["prefill"]["prompt_lengths"] == list(BUCKETS), report
        assert report["decode"]["captured"], report
    return model, engine


def _prompts(parts, cases, g) -> dict:
    return talker_prompts(parts, speech_requests(cases, g))


def _first_frame_paths(engine: LLMEngine) -> list[StepPath]:
    """Records, for every step that computes some request's first frame (its first generated token comes back as
    input), the path its decodes take: the step's own, or the decode part's of a split step."""
    paths: list[StepPath] = []
    runner, execute = engine.runner, engine.runner.execute

    def recording(out, **kwargs):
        if any(s.num_new_tokens == 1 and s.start == s.request.num_prompt_tokens for s in out.seqs):
            path = kwargs.get("path") or runner.plan(out)
            if path is StepPath.SPLIT:
                path = runner._decode_path(runner.split(out)[0])
            paths.append(path)
        return execute(out, **kwargs)

    runner.execute = recording
    return paths


@pytest.mark.parametrize("name", KINDS)
def test_prompts_replay_prefill_graphs_with_the_golden_codes_and_audio_batched_and_alone(name, small_buckets):
    g, facts = golden(name)
    parts = talker_parts(name)
    config = parts[0]
    prompts = _prompts(parts, facts["cases"], g)
    model, engine = _engine(parts, graphs=True)
    runner = engine.runner
    first_frames = _first_frame_paths(engine)
    together = generate_codes(engine, model, prompts)
    assert runner.num_prefill_graph_steps == len(prompts) and runner.num_eager_steps == 0
    assert len(first_frames) >= 1 and set(first_frames) == {StepPath.DECODE_GRAPH}, first_frames
    for rid, codes in together.items():
        case, row = rid.split("/")
        assert torch.equal(codes, g[f"{case}/codes/{row}"]), f"{name} {rid}"
    for rid in prompts:  # each request alone: one prefill graph, its first frame on a decode graph
        steps, frames = runner.num_prefill_graph_steps, len(first_frames)
        alone = generate_codes(engine, model, {rid: prompts[rid]})
        assert runner.num_prefill_graph_steps == steps + 1 and runner.num_eager_steps == 0
        assert first_frames[frames:] == [StepPath.DECODE_GRAPH]
        assert torch.equal(alone[rid], together[rid]), f"{name} {rid}"
    eager_model, eager = _engine(talker_parts(name), graphs=False)
    eagerly = generate_codes(eager, eager_model, prompts)
    assert eager.runner.num_prefill_graph_steps == 0 and eager.runner.num_eager_steps > 0
    for rid, codes in eagerly.items():
        assert torch.equal(codes, together[rid]), f"{name} {rid}"
    decoder = load_codec_decoder(CHECKPOINTS[name], config)
    for case, row, request in speech_requests(facts["cases"], g):
        if case != "batch" or request.ref_codes is not None:  # (in-context cloning decodes the reference's codes too)
            continue
        with torch.inference_mode():
            wav, eager_wav = decoder.decode([together[f"batch/{row}"], eagerly[f"batch/{row}"]])
        # the same codes in two rows of one batch: equal up to the CPU's GEMM rounding, which may differ by row
        # (1e-6 seen on an AVX-512 machine)
        torch.testing.assert_close(wav, eager_wav, atol=1e-5, rtol=0)
        torch.testing.assert_close(wav, g[f"batch/wav/{row}"], atol=WAVE_ATOL, rtol=0)


def _kv(engine: LLMEngine, blocks: list[int], n: int) -> list[torch.Tensor]:
    """Per layer, ``[2, n, H_kv, D]``: the K and V a sequence over ``blocks`` holds at positions ``0 .. n-1``."""
    bs, cache = engine.runner.caches.block_size, engine.runner.caches.attention(0)
    rows = torch.tensor([blocks[p // bs] * bs + p % bs for p in range(n)])
    return [torch.stack([k.flatten(0, 1)[rows], v.flatten(0, 1)[rows]]) for k, v in zip(cache.k, cache.v)]


def test_a_padded_prefill_writes_only_its_own_rows_and_keeps_the_last_valid_rows_hidden_state(small_buckets):
    """A 9-token prompt over 4-token blocks replays the 16-row graph: its 7 padding rows run past its 3 blocks into
    the scratch block. Every other block keeps its contents; the prompt's K/V, the hidden state kept for its first
    frame, its per-slot tables and its first token equal the eager prefill's (the codes it has seen: none; the eager
    pass marks its placeholder too)."""
    g, facts = golden("base")
    prompts = _prompts(talker_parts("base"), facts["cases"], g)
    prompt = prompts["batch/1"]
    n = prompt.prefill.shape[0]
    assert n == 9
    state = {}
    for graphs in (True, False):
        model, engine = _engine(talker_parts("base"), graphs=graphs, block_size=4)
        caches = engine.runner.caches
        for k, v in caches.kv_pairs():
            k.fill_(3.0)
            v.fill_(3.0)
        submit(engine, model, "r", prompt)
        out = engine.scheduler.schedule()
        seq = out.seqs[0]
        assert engine.runner.plan(out) is (StepPath.PREFILL_GRAPH if graphs else StepPath.EAGER)
        with torch.inference_mode():
            result = engine.runner.execute(out)
        blocks, slot = seq.block_tables[0], seq.state_slot
        assert len(blocks) == 3
        scratch = caches.attention(0).k[0].shape[0] - 1
        for k, v in caches.kv_pairs():
            for b in range(scratch):
                if b not in blocks:
                    assert bool((k[b] == 3.0).all()) and bool((v[b] == 3.0).all()), b
        tables = [getattr(model, t)[slot].clone() for t in ("trailing_len", "prompt_len", "penalty", "min_tokens")]
        # the codes seen: none (an eager prefill marks its placeholder, a blocked id whose logit stays -inf anyway)
        seen = model.seen[slot].nonzero().flatten().tolist()
        assert seen == ([] if graphs else [model.placeholder_id]), seen
        trailing = model.trailing[slot, :model.trailing_len[slot]].clone()
        state[graphs] = (result.sampled["r"], model.last_hidden[slot].clone(), _kv(engine, blocks, n), tables,
                         trailing)
    (token, hidden, kv, tables, trailing), (e_token, e_hidden, e_kv, e_tables, e_trailing) = state[True], state[False]
    assert token == e_token
    torch.testing.assert_close(hidden, e_hidden, rtol=1e-5, atol=1e-5)
    for got, want in zip(kv, e_kv):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for got, want in zip(tables, e_tables):
        assert torch.equal(got, want)
    assert torch.equal(trailing, e_trailing) and trailing.shape[0] == prompt.trailing.shape[0]


def test_the_prefill_step_reads_nothing_on_the_host_and_its_launches_shrink(small_buckets):
    """One prompt's prefill step: eagerly, then on its prefill graph (the replay's body under :class:`NoHostReads`,
    counted apart: a GPU replays it as one launch); the work around the replay at most :data:`MAX_HOST_LAUNCHES`."""
    g, facts = golden("custom_voice")
    prompt = _prompts(talker_parts("custom_voice"), facts["cases"], g)["single0/0"]
    counts = {}
    for graphs in (False, True):
        model, engine = _engine(talker_parts("custom_voice"), graphs=graphs, max_num_seqs=2)
        submit(engine, model, "r", prompt)
        out = engine.scheduler.schedule()
        with torch.inference_mode(), OpCounts() as step:
            engine.runner.execute(out)
        counts[graphs] = step
    eager, total = counts[False], counts[True]
    bucket = engine.runner.prefill_graphs.bucket_for(prompt.prefill.shape[0])
    with torch.inference_mode(), NoHostReads(), OpCounts() as body:
        engine.runner.prefill_graphs._graphs[bucket].replay()
    host_launches, host_data = total.launches - body.launches, total.syncs - body.syncs
    assert body.syncs == 0, body.ops
    assert host_launches <= MAX_HOST_LAUNCHES, (host_launches, total.ops, body.ops)
    assert host_data <= 1 < eager.syncs, (total.ops, eager.ops)
    assert eager.launches > 5 * host_launches, (eager.launches, host_launches)


def test_preempted_requests_recompute_to_the_golden_codes_with_prefill_graphs(small_buckets):
    """A KV pool of 4-token blocks too small for every CustomVoice case at once, steps launched ahead: the prompts
    replay their prefill graphs, then requests are preempted and recompute eagerly (their generated tokens' inputs
    from their codes), and every request still gets the golden codes."""
    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    model, engine = talker_engine(parts, 8, graphs=True, num_blocks=40, block_size=4, async_scheduling=True)
    assert engine.runner.graph_report()["prefill"]["prompt_lengths"] == list(BUCKETS)
    prompts = _prompts(parts, facts["cases"], g)
    got = generate_codes(engine, model, prompts)
    runner = engine.runner
    assert engine.scheduler.num_preemptions > 0
    assert runner.num_prefill_graph_steps >= len(prompts) and runner.num_eager_steps > 0, (
        runner.num_prefill_graph_steps, runner.num_eager_steps)
    for rid, codes in got.items():
        case, row = rid.split("/")
        assert torch.equal(codes, g[f"{case}/codes/{row}"]), rid
    assert engine.kv.num_used_blocks == 0


def test_served_voice_clones_on_prefill_graphs_equal_the_eager_prefill_and_the_reference(monkeypatch, small_buckets):
    """The Base checkpoint's served path (``SpeechEngine.synthesize``: the planner, the checkpoint's cloner on an
    uploaded recording, in-context and x-vector only, the engine, the streamed vocoder), every graph on the fake
    accelerator, prefill graphs on and off: each request replays a prefill graph when on, and the waveforms equal
    each other exactly and the reference's golden ones within the golden tolerance."""
    import numpy as np
    from anna_audio.qwen3_tts.voice import VoiceRequest
    from anna_audio.speech import task
    from anna_core.loading import load_model

    from tests.audio.test_speech_cloning import _wav
    from tests.audio.test_speech_server import greedy_planner

    monkeypatch.setattr(model_runner, "accelerator", lambda device: FakeGraphAccelerator())
    tensors, facts = golden("base")
    recording = _wav(tensors["ref/audio"].numpy(), 24000)
    batch, ref_text = facts["cases"]["batch"], facts["cases"]["ref_text"]
    assert set(batch["mode"]) == {"icl", "x_vector_only"}, batch["mode"]
    waves = {}
    for on in (True, False):
        loaded = load_model(CHECKPOINTS["base"], device="cpu", dtype="float32")
        loaded.model.predictor_sampling = GREEDY  # before the decode graphs capture the code predictor's choice
        built = task.build(loaded, EngineConfig(max_num_seqs=2, num_blocks=64),
                           RunnerConfig(cuda_graph=True, warmup=False, prefill_graphs=on))
        built.planner = greedy_planner(loaded)
        try:
            for row, mode in enumerate(batch["mode"]):
                request = VoiceRequest(text=batch["text"][row], language=batch["language"][row], ref_audio=recording,
                                       ref_text=ref_text if mode == "icl" else None)
                waves[on, row] = built.synthesize(request, max_frames=23)
        finally:
            built.vocoder.close()
        runner = built.engine.runner
        assert runner.num_prefill_graph_steps == (len(batch["mode"]) if on else 0)
        assert runner.num_graph_steps > 0 and runner.graph_report()["prefill"]["captured"] is on
    for row in range(len(batch["mode"])):
        np.testing.assert_array_equal(waves[True, row], waves[False, row])
        ref = tensors[f"batch/wav/{row}"]
        assert waves[True, row].shape == tuple(ref.shape)
        torch.testing.assert_close(torch.from_numpy(waves[True, row]), ref, atol=WAVE_ATOL, rtol=0)
