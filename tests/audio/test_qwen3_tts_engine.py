"""The talker on Anna's engine (:mod:`anna_audio.qwen3_tts.talker_lm`, :mod:`~anna_audio.qwen3_tts.engine_requests`)
against the reference's golden codes: every case of all three kinds (named speakers, instructions, x-vector and
in-context cloning, text whole in the prompt or streamed) submitted together to one engine, greedy codes exactly
equal; a request alone equals the same request in the batch; requests preempted by recompute (a KV pool too small
for them all) continue with the same codes."""

from __future__ import annotations

import pytest
import torch
from anna_audio.qwen3_tts import build_prompt
from anna_audio.qwen3_tts.engine_requests import FrameAssembler, talker_params

from tests.audio.tts_engine import (
    SAMPLING,
    capture_graphs,
    generate,
    generate_codes,
    new_engine,
    submit,
    talker_engine,
    talker_model,
    talker_prompts,
)
from tests.audio.tts_golden import KINDS, golden, golden_codes, speech_requests, talker_parts


@pytest.mark.parametrize("name", KINDS)
def test_engine_codes_equal_reference_batched_and_alone(name):
    g, facts = golden(name)
    parts = talker_parts(name)
    model, engine = talker_engine(parts)
    prompts = talker_prompts(parts, speech_requests(facts["cases"], g))
    together = generate_codes(engine, model, prompts)
    for rid, codes in together.items():
        case, row = rid.split("/")
        assert torch.equal(codes, g[f"{case}/codes/{row}"]), f"{name} {rid}"
    first = next(iter(prompts))
    alone = generate_codes(engine, model, {first: prompts[first]})
    assert torch.equal(alone[first], together[first])


def test_max_frames_and_ignore_eos():
    """``max_frames`` bounds the frames exactly (EOS ignored: a benchmark's fixed length)."""
    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    model, engine = talker_engine(parts, max_num_seqs=2)
    prompts = talker_prompts(parts, speech_requests(facts["cases"], g)[:1])
    [(rid, codes)] = generate_codes(engine, model, prompts,
                                    lambda i: talker_params(SAMPLING, max_frames=5, ignore_eos=True)).items()
    assert codes.shape == (5, parts.config.talker.num_code_groups)
    assert torch.equal(codes, golden_codes(g, rid)[:5])
    with pytest.raises(ValueError, match="max_frames"):
        talker_params(SAMPLING, max_frames=0)
    with pytest.raises(ValueError, match="ignore_eos needs max_frames"):
        talker_params(SAMPLING, ignore_eos=True)


def test_trailing_text_beyond_the_reserved_table_fails_the_request():
    g, facts = golden("custom_voice")
    config, talker, predictor = parts = talker_parts("custom_voice")
    model = talker_model(parts, 2)
    model.reserve_slots(2, max_trailing=3)  # before a new engine: the tables are the engine's from now on
    engine = new_engine(model, 2)
    case, row, request = next(r for r in speech_requests(facts["cases"], g) if r[0] == "streaming_text")
    with torch.inference_mode():
        prompt = build_prompt(config, talker, predictor, request)
    assert prompt.trailing.shape[0] > 3
    submit(engine, model, "long", prompt)
    outs = [out for _ in range(3) for out in engine.step()]
    assert outs[-1].finish_reason == "error" and "this server holds 3" in outs[-1].error
    with pytest.raises(ValueError, match="must be positive"):
        model.reserve_slots(0)


def test_chunked_prefills_and_mixed_steps_equal_the_reference():
    """Prompts cut into 4-token chunks (the last chunk of one prompt may be a single row in a step of decodes) and
    requests arriving while others decode give the same codes."""
    g, facts = golden("voice_design")
    parts = talker_parts("voice_design")
    model = talker_model(parts, 4)
    engine = new_engine(model, 4, max_prefill_tokens=4)
    prompts = talker_prompts(parts, speech_requests(facts["cases"], g))
    frames = {rid: FrameAssembler() for rid in prompts}
    pending = list(prompts.items())
    while pending or engine.has_unfinished():
        if pending:  # one new request per step
            rid, prompt = pending.pop(0)
            submit(engine, model, rid, prompt)
        for out in engine.step():
            assert out.finish_reason != "error", out.error
            frames[out.request_id].feed(out)
    for rid, f in frames.items():
        case, row = rid.split("/")
        assert torch.equal(f.codes(parts.config.talker.num_code_groups), g[f"{case}/codes/{row}"]), rid


def test_decode_steps_are_captured_with_the_code_predictor_and_equal_the_reference():
    """The speech talker declares graph capture and keeps side outputs (gathered inside the step): its decode steps,
    the code predictor's passes inside, capture (no host read) and their replays give the golden codes."""
    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    model, engine = talker_engine(parts, max_num_seqs=3)
    assert model.capabilities.graph_capture and model.capabilities.side_outputs
    accel = capture_graphs(engine, 3)
    report = engine.runner.graph_report()["decode"]
    assert report["captured"] and report["batch_sizes"] == [1, 2, 3], report
    prompts = talker_prompts(parts, speech_requests(facts["cases"], g)[:3])
    got = generate_codes(engine, model, prompts)
    assert accel.replays > 0 and engine.runner.num_graph_steps > 0
    for rid, codes in got.items():
        case, row = rid.split("/")
        assert torch.equal(codes, g[f"{case}/codes/{row}"]), rid


@pytest.mark.parametrize(("name", "num_blocks"), [("custom_voice", 20), ("custom_voice", 24), ("voice_design", 24)])
def test_preempted_requests_are_recomputed_to_the_same_codes(name, num_blocks):
    """Every case of a kind at once over 4-token blocks, too few for them all: the newest running requests are
    preempted, also after generating frames (the streamed-text case, added last, among them), recompute their prompt
    and frames from the codes already handed out, and every request's codes still equal the reference's (the others
    in those steps unaffected); nothing is reported twice (each frame once, in order)."""
    g, facts = golden(name)
    parts = talker_parts(name)
    model, engine = talker_engine(parts, 8, block_size=4, num_blocks=num_blocks, max_prefill_tokens=16)
    victims = []  # (request id, tokens generated) of every preemption
    preempt = engine.scheduler._preempt

    def recording(request):
        victims.append((request.request_id, len(request.output_token_ids)))
        preempt(request)

    engine.scheduler._preempt = recording
    jobs = sorted(speech_requests(facts["cases"], g), key=lambda job: job[0] == "streaming_text")
    got = generate_codes(engine, model, talker_prompts(parts, jobs))
    assert any(n >= 2 for _, n in victims), victims  # preempted with frames to recompute
    if name == "custom_voice":
        assert any(rid == "streaming_text/0" and n >= 2 for rid, n in victims), victims
    for rid, codes in got.items():
        case, row = rid.split("/")
        assert torch.equal(codes, g[f"{case}/codes/{row}"]), rid
    assert engine.kv.num_used_blocks == 0


def _sampled_run(params_of, jobs, model, engine):
    """Submit ``jobs`` (request id -> TalkerPrompt) with ``params_of(i)`` each, step to the end over captured decode
    graphs; ``({request id: (tokens, codes [F, G])}, {path: steps})``."""
    paths = {"sampler_in_graph": 0, "logits_graph": 0}
    runner = engine.runner
    launch, logits_graph = runner._launch_decode, runner._run_logits_graph

    def counted_launch(*args, **kwargs):
        paths["sampler_in_graph"] += 1
        return launch(*args, **kwargs)

    def counted_logits(*args, **kwargs):
        paths["logits_graph"] += 1
        return logits_graph(*args, **kwargs)

    runner._launch_decode, runner._run_logits_graph = counted_launch, counted_logits
    got = generate(engine, model, jobs, params_of)
    runner._launch_decode, runner._run_logits_graph = launch, logits_graph
    return got, paths


def test_device_side_penalty_and_min_tokens_leave_the_codes_unchanged():
    """The repetition penalty and ``min_tokens`` applied by the talker on the device (per-slot state, inside the
    captured decode step) give the same sampled codes, seed for seed, as the engine's eager sampler applying them; the
    decode steps then sample inside their graphs. A strong penalty and a long ``min_tokens`` make both matter."""
    from anna_audio.qwen3_tts.engine_requests import TalkerParams
    from anna_core.engine.sampling_params import SamplingParams

    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    model, engine = talker_engine(parts, max_num_seqs=3, graphs=True)
    prompts = talker_prompts(parts, speech_requests(facts["cases"], g)[:3])

    def sampling(i, penalty=1.0, min_tokens=0):
        return SamplingParams(max_tokens=20, temperature=0.9, top_k=50, seed=7 + i, repetition_penalty=penalty,
                              min_tokens=min_tokens)

    eager, eager_paths = _sampled_run(lambda i: TalkerParams(sampling(i, 2.0, 12)), prompts, model, engine)
    device, device_paths = _sampled_run(lambda i: TalkerParams(sampling(i), repetition_penalty=2.0, min_tokens=12),
                                        prompts, model, engine)
    plain, _ = _sampled_run(lambda i: TalkerParams(sampling(i)), prompts, model, engine)
    for rid in prompts:
        assert device[rid][0] == eager[rid][0] and torch.equal(device[rid][1], eager[rid][1]), rid
    assert any(device[rid][0] != plain[rid][0] for rid in prompts)  # the penalty and min_tokens changed the codes
    assert eager_paths["logits_graph"] > 0 and eager_paths["sampler_in_graph"] == 0
    assert device_paths["sampler_in_graph"] > 0 and device_paths["logits_graph"] == 0


def test_device_side_controls_are_the_engine_sampler_s_math():
    """Every step's logits from the talker equal the engine sampler's penalty (``Sampler._penalize``, the path
    the controls took before) and ``min_tokens`` mask applied to the plain logits, for the codes generated so far."""
    from anna_audio.qwen3_tts.engine_requests import TalkerParams
    from anna_core.engine.request import Request
    from anna_core.engine.sampler import Sampler
    from anna_core.engine.sampling_params import SamplingParams

    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    model, engine = talker_engine(parts, max_num_seqs=2)
    [prompt] = talker_prompts(parts, speech_requests(facts["cases"], g)[:1]).values()
    penalty, min_tokens, eos = 2.0, 5, model.eos_token_id
    params = TalkerParams(SamplingParams(max_tokens=14, temperature=0.0), repetition_penalty=penalty,
                          min_tokens=min_tokens)
    steps = []
    compute_logits = model.compute_logits

    def recording(hidden):
        plain = parts.talker.codec_head(hidden).float().masked_fill(model.blocked, float("-inf"))
        out = compute_logits(hidden)
        steps.append((plain, out))
        return out

    model.compute_logits = recording
    r = submit(engine, model, "r", prompt, params)
    tokens = []
    while engine.has_unfinished():
        for out in engine.step():
            tokens += out.delta_token_ids
    assert len(steps) == len(tokens) == 14 and len(set(tokens)) < len(tokens)  # repeated codes: penalised
    for k, (plain, out) in enumerate(steps):
        history = Request("r", r.prompt_ids, SamplingParams(repetition_penalty=penalty))
        history.output_token_ids = tokens[:k]
        expected = Sampler._penalize(plain.clone(), [history])
        if k < min_tokens:
            expected[:, eos] = float("-inf")
        assert torch.equal(out, expected), k
    assert any((plain[0, tokens[:k]] < 0).any() for k, (plain, _) in enumerate(steps))  # negatives penalised too
    assert torch.isfinite(steps[min_tokens][1][0, eos]) and not torch.isfinite(steps[min_tokens - 1][1][0, eos])


def test_preempted_requests_keep_their_penalty_state():
    """A strong repetition penalty and a long ``min_tokens`` (the talker's per-slot state, rebuilt by a recompute
    from the codes it replays): requests preempted in a too-small KV pool give the codes each gives alone."""
    from anna_audio.qwen3_tts.engine_requests import TalkerParams
    from anna_core.engine.sampling_params import SamplingParams

    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    model = talker_model(parts, 8)
    params = TalkerParams(SamplingParams(max_tokens=20, temperature=0.0), repetition_penalty=2.0, min_tokens=8)
    jobs = sorted(speech_requests(facts["cases"], g), key=lambda job: job[0] == "streaming_text")
    prompts = talker_prompts(parts, jobs)

    def run(num_blocks, subset):
        engine = new_engine(model, 8, block_size=4, num_blocks=num_blocks, max_prefill_tokens=16)
        jobs = {rid: prompts[rid] for rid in subset}
        return generate_codes(engine, model, jobs, lambda i: params), engine

    together, engine = run(22, list(prompts))
    assert engine.scheduler.num_preemptions > 0
    for rid in prompts:
        alone, _ = run(64, [rid])
        assert torch.equal(together[rid], alone[rid]), rid


def test_request_key_names_every_input_of_the_prompt():
    """The prompt's cache identity comes from the request (no read of its device embeddings): equal requests share
    it, and any input that changes the prompt changes it."""
    from anna_audio.qwen3_tts.engine_requests import request_key
    from anna_audio.qwen3_tts.prompt import SpeechRequest

    ids = torch.tensor([1, 2, 3])
    base = SpeechRequest(assistant_ids=ids)
    assert request_key(base) == request_key(SpeechRequest(assistant_ids=ids.clone()))
    assert request_key(SpeechRequest(assistant_ids=ids, language=" English ")) == \
        request_key(SpeechRequest(assistant_ids=ids, language="english"))
    variants = [
        SpeechRequest(assistant_ids=torch.tensor([1, 2, 4])),
        SpeechRequest(assistant_ids=ids, language="english"),
        SpeechRequest(assistant_ids=ids, speaker="serena"),
        SpeechRequest(assistant_ids=ids, instruct_ids=torch.tensor([5])),
        SpeechRequest(assistant_ids=ids, speaker_embedding=torch.zeros(4)),
        SpeechRequest(assistant_ids=ids, speaker_embedding=torch.ones(4)),
        SpeechRequest(assistant_ids=ids, ref_ids=torch.tensor([5])),
        SpeechRequest(assistant_ids=ids, ref_ids=torch.tensor([5]), ref_codes=torch.zeros(2, 3, dtype=torch.int64)),
        SpeechRequest(assistant_ids=ids, instruct_ids=torch.tensor([5]), ref_ids=torch.tensor([5])),
        SpeechRequest(assistant_ids=ids, non_streaming_text=False),
    ]
    keys = [request_key(v) for v in [base, *variants]]
    assert len(set(keys)) == len(keys)
