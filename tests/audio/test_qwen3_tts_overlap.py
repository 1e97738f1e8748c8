"""The talker's decode steps under asynchronous scheduling (:mod:`anna_core.engine.llm_engine`): each captured decode
step (over :class:`~anna_core.testing.fake_graphs.FakeGraphAccelerator`) is launched before the previous one is read
back, its side outputs (the code predictor's codebooks) travelling with its sampled ids. Overlapped decoding gives
exactly the tokens, codes and audio of the synchronous engine (``async_scheduling=False``) and of the reference,
batched and alone, with seeded sampling, and with requests preempted by recompute while their step is in flight; the
overlap is really taken (rows read their input token from the previous replay on the device). The decode step
itself (talker and code predictor) reads nothing on the host, and its launches per frame are bounded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from anna_audio.qwen3_tts.engine_requests import TalkerParams, talker_params
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.request import PENDING
from anna_core.engine.sampling_params import SamplingParams
from anna_core.testing.fake_graphs import record_rows_launched_ahead
from anna_core.testing.host_reads import NoHostReads, OpCounts

from tests.audio.tts_engine import SAMPLING, generate, no_error, submit, talker_engine, talker_prompts
from tests.audio.tts_golden import CHECKPOINTS, golden, speech_requests, talker_parts

pytestmark = pytest.mark.slow  # captures the tiny talker's graphs for two engines per test (seconds each)

# Launches (ATen ops that run a kernel, OpCounts) of one captured greedy decode step, i.e. one frame per row, of the
# tiny CustomVoice checkpoint (talker of 2 layers; code predictor of 2 layers filling codebooks 1..3) over
# the CPU op table, by batch: measured 482 at batch 1 and 616 at batch 4 (the CPU reference paged attention loops over
# sequences; a GPU's Triton kernels do not, and a GPU replays the step as one graph launch), bounded with a little
# headroom so a regression (e.g. per-codebook host work, the code predictor run per row) fails. Sampling codebook 0
# in the graph adds the sampler's ops (~90).
MAX_LAUNCHES_PER_FRAME = {1: 500, 4: 640}


def _graph_engine(parts, *, async_scheduling: bool, max_num_seqs: int = 8, num_blocks: int = 64,
                  block_size: int = 16, max_prefill_tokens: int | None = None):
    """An engine over the talker whose decode steps replay captured graphs (the fake accelerator)."""
    model, engine = talker_engine(parts, max_num_seqs, graphs=True, num_blocks=num_blocks, block_size=block_size,
                                  max_prefill_tokens=max_prefill_tokens, async_scheduling=async_scheduling)
    assert engine.runner.graph_report()["decode"]["captured"]
    return model, engine


def _paired(out) -> None:
    """Every output's side outputs pair with its tokens, none pending (and no error)."""
    no_error(out)
    assert PENDING not in out.delta_token_ids and len(out.side_outputs) == len(out.delta_token_ids)


def _run(engine: LLMEngine, model, prompts: dict, params_of=None):
    """Submit ``{request id: TalkerPrompt}`` at once with ``params_of(i)`` each (greedy unless given), step to the end:
    ``{request id: (tokens, codes [F, G])}``; every output's side outputs pair with its tokens, none pending."""
    got = generate(engine, model, prompts, params_of, check=_paired)
    assert engine._inflight is None and engine.kv.num_used_blocks == 0
    return got


def _prompts(parts, cases, g, keep=None) -> dict:
    jobs = speech_requests(cases, g)
    return talker_prompts(parts, jobs if keep is None else keep(jobs))


def test_overlapped_decoding_equals_the_synchronous_engine_and_the_reference_batched_and_alone():
    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    prompts = _prompts(parts, facts["cases"], g)
    first = next(iter(prompts))
    results = {}
    for overlap in (False, True):
        model, engine = _graph_engine(parts, async_scheduling=overlap)
        device_inputs = record_rows_launched_ahead(engine.runner.graphs)
        together = _run(engine, model, prompts)
        alone = _run(engine, model, {first: prompts[first]})
        results[overlap] = together, alone
        assert engine.runner.num_graph_steps > 10
        assert (sum(device_inputs) > 10) == overlap, device_inputs  # the overlap path is taken, and only then
        assert (engine.runner.num_launched_ahead > 10) == overlap
    (sync, sync_alone), (overlapped, overlapped_alone) = results[False], results[True]
    for rid, (tokens, codes) in overlapped.items():
        case, row = rid.split("/")
        assert tokens == sync[rid][0] and torch.equal(codes, sync[rid][1]), rid
        assert torch.equal(codes, g[f"{case}/codes/{row}"]), rid
    assert overlapped_alone[first][0] == sync_alone[first][0] == overlapped[first][0]
    assert torch.equal(overlapped_alone[first][1], overlapped[first][1])


def test_overlapped_seeded_sampling_equals_the_synchronous_engine():
    """Codebook 0 sampled in the graphs (per-row seeds) with the device-side penalty and ``min_tokens``: the same
    tokens and codes, step for step, with and without the overlap."""
    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    prompts = _prompts(parts, facts["cases"], g, keep=lambda jobs: jobs[:3])

    def sampled(i):
        return TalkerParams(SamplingParams(max_tokens=16, temperature=0.9, top_k=50, seed=11 + i),
                            repetition_penalty=1.5, min_tokens=6)

    runs = []
    for overlap in (False, True):
        model, engine = _graph_engine(parts, async_scheduling=overlap, max_num_seqs=4)
        device_inputs = record_rows_launched_ahead(engine.runner.graphs)
        runs.append(_run(engine, model, prompts, sampled))
        assert (sum(device_inputs) > 0) == overlap
    for rid in prompts:
        assert runs[0][rid][0] == runs[1][rid][0] and torch.equal(runs[0][rid][1], runs[1][rid][1]), rid
        assert 6 < len(runs[1][rid][0]) <= 16


@pytest.mark.parametrize(("name", "num_blocks"), [("custom_voice", 20), ("voice_design", 24)])
def test_requests_preempted_while_their_step_is_in_flight_recompute_to_the_same_codes(name, num_blocks):
    """A KV pool of 4-token blocks too small for every request: running requests are preempted while a step that
    computes their next token is in flight (its pending token is dropped and computed again after the recompute);
    every request's tokens and codes equal the synchronous engine's and the reference's, each frame reported once."""
    g, facts = golden(name)
    parts = talker_parts(name)
    prompts = _prompts(parts, facts["cases"], g, keep=lambda jobs: sorted(jobs, key=lambda j: j[0] == "streaming_text"))
    runs, victims = [], []
    for overlap in (False, True):
        model, engine = _graph_engine(parts, async_scheduling=overlap, num_blocks=num_blocks, block_size=4,
                                      max_prefill_tokens=16)
        preempt = engine.scheduler._preempt

        def recording(request, preempt=preempt, overlap=overlap):
            if overlap:
                victims.append(request.output_token_ids[-1:] == [PENDING])
            preempt(request)

        engine.scheduler._preempt = recording
        device_inputs = record_rows_launched_ahead(engine.runner.graphs)
        runs.append(_run(engine, model, prompts))
        assert engine.scheduler.num_preemptions > 0
        assert (sum(device_inputs) > 0) == overlap
    assert any(victims), victims  # preempted with a token in flight
    for rid, (tokens, codes) in runs[1].items():
        case, row = rid.split("/")
        assert tokens == runs[0][rid][0], rid
        assert torch.equal(codes, runs[0][rid][1]) and torch.equal(codes, g[f"{case}/codes/{row}"]), rid


def test_overlapped_audio_equals_the_synchronous_audio_and_the_reference():
    """The vocoder's waveform of the overlapped engine's codes: equal to the synchronous engine's and within the
    golden tolerance of the reference's."""
    from anna_audio.qwen3_tts.stream_state import StreamState
    from anna_audio.speech import task
    from anna_core.loading import load_model

    g, facts = golden("custom_voice")
    loaded = load_model(CHECKPOINTS["custom_voice"], device="cpu", dtype="float32")
    built = task.build(loaded, EngineConfig(max_num_seqs=4), None)
    parts = talker_parts("custom_voice")
    prompts = _prompts(parts, facts["cases"], g, keep=lambda jobs: jobs[:2])
    waves = []
    try:
        for overlap in (False, True):
            model, engine = _graph_engine(parts, async_scheduling=overlap, max_num_seqs=4)
            got = _run(engine, model, prompts)
            waves.append({rid: built.vocoder.decode(StreamState(), codes).result() for rid, (_, codes) in got.items()})
    finally:
        built.vocoder.close()
    for rid, wave in waves[1].items():
        case, row = rid.split("/")
        np.testing.assert_array_equal(wave, waves[0][rid])
        np.testing.assert_allclose(wave, g[f"{case}/wav/{row}"].numpy(), atol=1e-4, rtol=0)


def test_the_decode_step_reads_nothing_on_the_host_and_its_launches_are_bounded():
    """The captured decode step (talker, code predictor's passes for the frame, sampling, the side outputs' gather)
    under :class:`NoHostReads` at batch 1 and the largest bucket, greedy and sampling, no host data made at batch 1;
    the greedy step's launches at most :data:`MAX_LAUNCHES_PER_FRAME`. An overlapped engine step of decodes then
    makes no host read either (the previous step's ids and side outputs come from page-locked copies)."""
    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    model, engine = _graph_engine(parts, async_scheduling=True, max_num_seqs=4)
    graphs = engine.runner.graphs
    launches = {}
    for batch in (1, 4):
        for mode in ("greedy", "sample"):
            replay = graphs.padded_replay(batch, mode)
            with torch.inference_mode(), NoHostReads(), OpCounts() as counts:
                replay()
            if batch == 1:  # (at larger batches the CPU reference attention builds index tensors from host lists)
                assert counts.syncs == 0, counts.ops
            launches[batch, mode] = counts.launches
    for batch, bound in MAX_LAUNCHES_PER_FRAME.items():
        assert launches[batch, "greedy"] <= bound, launches
    assert launches[1, "sample"] > launches[1, "greedy"]
    prompts = _prompts(parts, facts["cases"], g, keep=lambda jobs: jobs[:2])
    for rid, prompt in prompts.items():
        submit(engine, model, rid, prompt, talker_params(SAMPLING, max_frames=12, ignore_eos=True))
    while engine._inflight is None:  # prefills (on prefill graphs), then the first decode launched ahead
        engine.step()
    for _ in range(3):
        with torch.inference_mode(), NoHostReads():
            outs = engine.step()
        assert engine._inflight is not None and {o.request_id for o in outs} == set(prompts)
        assert all(len(o.side_outputs) == 1 and o.side_outputs[0].shape == (parts[0].talker.num_code_groups - 1,)
                   for o in outs)
    while engine.has_unfinished():
        engine.step()


def test_a_sampled_code_never_leaves_the_codebook_at_the_noise_edge():
    """Issue 27 (a code 2269 of a 2048-code book reached the vocoder at 16 concurrent requests on a GPU): the seeded
    Gumbel noise of seed 2625 at output step 4 is the float32 value that rounded to 1.0 at id 584, a blocked control
    id of the tiny talker (vocabulary 1088, codebook 64), where the masked logit turned NaN and won ``argmax``. Every
    sampled token of the overlapped graph engine (EOS ignored) is a code, and the frames equal the synchronous
    engine's."""
    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    config = parts[0].talker
    codebook = config.vocab_size - 1024
    prompts = _prompts(parts, facts["cases"], g, keep=lambda jobs: jobs[:1])

    def seeded(i):
        return TalkerParams(SamplingParams(max_tokens=8, temperature=0.9, top_k=50, seed=2625, ignore_eos=True),
                            repetition_penalty=1.05, min_tokens=8)

    runs = []
    for overlap in (False, True):
        model, engine = _graph_engine(parts, async_scheduling=overlap, max_num_seqs=2)
        runs.append(_run(engine, model, prompts, seeded))
        assert engine.runner.num_graph_steps > 4
    for rid, (tokens, codes) in runs[1].items():
        assert len(tokens) == 8 and all(0 <= t < codebook for t in tokens), tokens
        assert tokens == runs[0][rid][0] and torch.equal(codes, runs[0][rid][1])
