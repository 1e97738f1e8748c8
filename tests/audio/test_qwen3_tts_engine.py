"""The talker on Anna's engine (:mod:`anna_audio.qwen3_tts.talker_lm`, :mod:`~anna_audio.qwen3_tts.engine_requests`)
against the reference's golden codes: every case of all three kinds (named speakers, instructions, x-vector and
in-context cloning, text whole in the prompt or streamed) submitted together to one engine, greedy codes exactly
equal; a request alone equals the same request in the batch; requests preempted by recompute (a KV pool too small
for them all) continue with the same codes."""

from __future__ import annotations

import pytest
import torch
from anna_audio.qwen3_tts import build_prompt, load_code_predictor, load_config
from anna_audio.qwen3_tts.engine_requests import FrameAssembler, engine_request, talker_params
from anna_audio.qwen3_tts.generate import GREEDY
from anna_audio.qwen3_tts.sampling import SpeechSampling
from anna_audio.qwen3_tts.talker_lm import TalkerLM
from anna_audio.qwen3_tts.weights import load_talker
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.testing.fake_graphs import FakeGraphAccelerator

from tests.audio.test_qwen3_tts_talker import KINDS, _requests
from tests.audio.tts_golden import CHECKPOINTS, golden

SAMPLING = SpeechSampling(talker=GREEDY, predictor=GREEDY, repetition_penalty=1.05, max_new_tokens=24)


def _model(name: str, slots: int):
    """``(config, talker, predictor, model)`` of the tiny ``name`` checkpoint on the CPU, ``slots`` reserved."""
    folder = CHECKPOINTS[name]
    config = load_config(folder)
    talker, predictor = load_talker(folder, config), load_code_predictor(folder, config)
    model = TalkerLM(config, talker, predictor, bind_ops(KernelRegistry.from_plugins(), "cpu", torch.float32),
                     predictor_sampling=GREEDY)
    model.reserve_slots(slots)
    return config, talker, predictor, model


def _new_engine(model: TalkerLM, max_num_seqs: int, **config) -> LLMEngine:
    """An engine over ``model`` without prefix or prompt caches (64 KV blocks unless ``config`` says otherwise)."""
    return LLMEngine(model, config=EngineConfig(max_num_seqs=max_num_seqs, enable_prefix_caching=False,
                                                prompt_cache_size=0, **{"num_blocks": 64, **config}),
                     eos_token_ids=[model.eos_token_id])


def _engine(name: str, max_num_seqs: int = 8):
    config, talker, predictor, model = _model(name, max_num_seqs)
    return config, talker, predictor, model, _new_engine(model, max_num_seqs)


def _prompts(config, talker, predictor, jobs) -> dict:
    """``{"<case>/<row>": TalkerPrompt}`` of ``(case, row, request)`` jobs."""
    with torch.inference_mode():
        return {f"{case}/{row}": build_prompt(config, talker, predictor, request) for case, row, request in jobs}


def _run(engine: LLMEngine, model: TalkerLM, jobs: dict, groups: int, params=None) -> dict[str, torch.Tensor]:
    """Submit ``{request id: TalkerPrompt}`` at once (``params``: greedy :data:`SAMPLING` unless given), step to the
    end; ``{request id: codes [F, G]}``."""
    frames = {}
    for rid, prompt in jobs.items():
        request = engine_request(prompt, model.placeholder_id, talker_params(SAMPLING) if params is None else params)
        engine.add_request(rid, request.prompt_ids, request.params, multimodal=request.multimodal)
        frames[rid] = FrameAssembler()
    while engine.has_unfinished():
        for out in engine.step():
            assert out.finish_reason != "error", out.error
            frames[out.request_id].feed(out)
    return {rid: f.codes(groups) for rid, f in frames.items()}


@pytest.mark.parametrize("name", KINDS)
def test_engine_codes_equal_reference_batched_and_alone(name):
    g, facts = golden(name)
    config, talker, predictor, model, engine = _engine(name)
    prompts = _prompts(config, talker, predictor, _requests(facts["cases"], g))
    groups = config.talker.num_code_groups
    together = _run(engine, model, prompts, groups)
    for rid, codes in together.items():
        case, row = rid.split("/")
        assert torch.equal(codes, g[f"{case}/codes/{row}"]), f"{name} {rid}"
    first = next(iter(prompts))
    alone = _run(engine, model, {first: prompts[first]}, groups)
    assert torch.equal(alone[first], together[first])


def test_max_frames_and_ignore_eos():
    """``max_frames`` bounds the frames exactly (EOS ignored: a benchmark's fixed length)."""
    g, facts = golden("custom_voice")
    config, talker, predictor, model, engine = _engine("custom_voice", max_num_seqs=2)
    case, row, request = _requests(facts["cases"], g)[0]
    with torch.inference_mode():
        prompt = build_prompt(config, talker, predictor, request)
    params = talker_params(SAMPLING, max_frames=5, ignore_eos=True)
    req = engine_request(prompt, model.placeholder_id, params)
    engine.add_request("r", req.prompt_ids, req.params, multimodal=req.multimodal)
    frames = FrameAssembler()
    while engine.has_unfinished():
        for out in engine.step():
            frames.feed(out)
    codes = frames.codes(config.talker.num_code_groups)
    assert codes.shape == (5, config.talker.num_code_groups)
    assert torch.equal(codes, g[f"{case}/codes/{row}"][:5])
    with pytest.raises(ValueError, match="max_frames"):
        talker_params(SAMPLING, max_frames=0)
    with pytest.raises(ValueError, match="ignore_eos needs max_frames"):
        talker_params(SAMPLING, ignore_eos=True)


def test_trailing_text_beyond_the_reserved_table_fails_the_request():
    g, facts = golden("custom_voice")
    config, talker, predictor, model, engine = _engine("custom_voice", max_num_seqs=2)
    model.reserve_slots(2, max_trailing=3)  # before a new engine: the tables are the engine's from now on
    engine = _new_engine(model, 2)
    case, row, request = next(r for r in _requests(facts["cases"], g) if r[0] == "streaming_text")
    with torch.inference_mode():
        prompt = build_prompt(config, talker, predictor, request)
    assert prompt.trailing.shape[0] > 3
    req = engine_request(prompt, model.placeholder_id, talker_params(SAMPLING))
    engine.add_request("long", req.prompt_ids, req.params, multimodal=req.multimodal)
    outs = [out for _ in range(3) for out in engine.step()]
    assert outs[-1].finish_reason == "error" and "this server holds 3" in outs[-1].error
    with pytest.raises(ValueError, match="must be positive"):
        model.reserve_slots(0)


def test_chunked_prefills_and_mixed_steps_equal_the_reference():
    """Prompts cut into 4-token chunks (the last chunk of one prompt may be a single row in a step of decodes) and
    requests arriving while others decode give the same codes."""
    g, facts = golden("voice_design")
    config, talker, predictor, model = _model("voice_design", 4)
    engine = _new_engine(model, 4, max_prefill_tokens=4)
    prompts = _prompts(config, talker, predictor, _requests(facts["cases"], g))
    frames = {rid: FrameAssembler() for rid in prompts}
    pending = list(prompts.items())
    while pending or engine.has_unfinished():
        if pending:  # one new request per step
            rid, prompt = pending.pop(0)
            r = engine_request(prompt, model.placeholder_id, talker_params(SAMPLING))
            engine.add_request(rid, r.prompt_ids, r.params, multimodal=r.multimodal)
        for out in engine.step():
            assert out.finish_reason != "error", out.error
            frames[out.request_id].feed(out)
    for rid, f in frames.items():
        case, row = rid.split("/")
        assert torch.equal(f.codes(config.talker.num_code_groups), g[f"{case}/codes/{row}"]), rid


def test_decode_steps_are_captured_with_the_code_predictor_and_equal_the_reference():
    """The speech talker declares graph capture and keeps side outputs (gathered inside the step): its decode steps,
    the code predictor's passes inside, capture (no host read) and their replays give the golden codes."""
    g, facts = golden("custom_voice")
    config, talker, predictor, model, engine = _engine("custom_voice", max_num_seqs=3)
    assert model.capabilities.graph_capture and model.capabilities.side_outputs
    accel = FakeGraphAccelerator()
    engine.runner.accel = accel
    engine.runner.setup(RunnerConfig(cuda_graph=True, warmup=False), max_model_len=engine.max_model_len,
                        max_num_seqs=3)
    report = engine.runner.graph_report()["decode"]
    assert report["captured"] and report["batch_sizes"] == [1, 2, 3], report
    prompts = _prompts(config, talker, predictor, _requests(facts["cases"], g)[:3])
    got = _run(engine, model, prompts, config.talker.num_code_groups)
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
    config, talker, predictor, model = _model(name, 8)
    engine = _new_engine(model, 8, block_size=4, num_blocks=num_blocks, max_prefill_tokens=16)
    victims = []  # (request id, tokens generated) of every preemption
    preempt = engine.scheduler._preempt

    def recording(request):
        victims.append((request.request_id, len(request.output_token_ids)))
        preempt(request)

    engine.scheduler._preempt = recording
    jobs = sorted(_requests(facts["cases"], g), key=lambda job: job[0] == "streaming_text")
    prompts = _prompts(config, talker, predictor, jobs)
    got = _run(engine, model, prompts, config.talker.num_code_groups)
    assert any(n >= 2 for _, n in victims), victims  # preempted with frames to recompute
    if name == "custom_voice":
        assert any(rid == "streaming_text/0" and n >= 2 for rid, n in victims), victims
    for rid, codes in got.items():
        case, row = rid.split("/")
        assert torch.equal(codes, g[f"{case}/codes/{row}"]), rid
    assert engine.kv.num_used_blocks == 0


def _sampled_run(params_of, jobs, config, model, engine):
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
    frames, tokens = {}, {}
    for i, (rid, prompt) in enumerate(jobs.items()):
        request = engine_request(prompt, model.placeholder_id, params_of(i))
        engine.add_request(rid, request.prompt_ids, request.params, multimodal=request.multimodal)
        frames[rid], tokens[rid] = FrameAssembler(), []
    while engine.has_unfinished():
        for out in engine.step():
            assert out.finish_reason != "error", out.error
            frames[out.request_id].feed(out)
            tokens[out.request_id] += out.delta_token_ids
    runner._launch_decode, runner._run_logits_graph = launch, logits_graph
    groups = config.talker.num_code_groups
    return {rid: (tokens[rid], frames[rid].codes(groups)) for rid in jobs}, paths


def test_device_side_penalty_and_min_tokens_leave_the_codes_unchanged():
    """The repetition penalty and ``min_tokens`` applied by the talker on the device (per-slot state, inside the
    captured decode step) give the same sampled codes, seed for seed, as the engine's eager sampler applying them; the
    decode steps then sample inside their graphs. A strong penalty and a long ``min_tokens`` make both matter."""
    from anna_audio.qwen3_tts.engine_requests import TalkerParams
    from anna_core.engine.sampling_params import SamplingParams

    g, facts = golden("custom_voice")
    config, talker, predictor, model, engine = _engine("custom_voice", max_num_seqs=3)
    engine.runner.accel = FakeGraphAccelerator()
    engine.runner.setup(RunnerConfig(cuda_graph=True, warmup=False), max_model_len=engine.max_model_len,
                        max_num_seqs=3)
    prompts = _prompts(config, talker, predictor, _requests(facts["cases"], g)[:3])

    def sampling(i, penalty=1.0, min_tokens=0):
        return SamplingParams(max_tokens=20, temperature=0.9, top_k=50, seed=7 + i, repetition_penalty=penalty,
                              min_tokens=min_tokens)

    eager, eager_paths = _sampled_run(lambda i: TalkerParams(sampling(i, 2.0, 12)), prompts, config, model, engine)
    device, device_paths = _sampled_run(lambda i: TalkerParams(sampling(i), repetition_penalty=2.0, min_tokens=12),
                                        prompts, config, model, engine)
    plain, _ = _sampled_run(lambda i: TalkerParams(sampling(i)), prompts, config, model, engine)
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
    config, talker, predictor, model, engine = _engine("custom_voice", max_num_seqs=2)
    case, row, request = _requests(facts["cases"], g)[0]
    with torch.inference_mode():
        prompt = build_prompt(config, talker, predictor, request)
    penalty, min_tokens, eos = 2.0, 5, model.eos_token_id
    params = TalkerParams(SamplingParams(max_tokens=14, temperature=0.0), repetition_penalty=penalty,
                          min_tokens=min_tokens)
    steps = []
    compute_logits = model.compute_logits

    def recording(hidden):
        plain = talker.codec_head(hidden).float().masked_fill(model.blocked, float("-inf"))
        out = compute_logits(hidden)
        steps.append((plain, out))
        return out

    model.compute_logits = recording
    r = engine_request(prompt, model.placeholder_id, params)
    engine.add_request("r", r.prompt_ids, r.params, multimodal=r.multimodal)
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
    config, talker, predictor, model = _model("custom_voice", 8)
    params = TalkerParams(SamplingParams(max_tokens=20, temperature=0.0), repetition_penalty=2.0, min_tokens=8)
    jobs = sorted(_requests(facts["cases"], g), key=lambda job: job[0] == "streaming_text")
    prompts = _prompts(config, talker, predictor, jobs)

    def run(num_blocks, subset):
        engine = _new_engine(model, 8, block_size=4, num_blocks=num_blocks, max_prefill_tokens=16)
        jobs = {rid: prompts[rid] for rid in subset}
        return _run(engine, model, jobs, config.talker.num_code_groups, params), engine

    together, engine = run(22, list(prompts))
    assert engine.scheduler.num_preemptions > 0
    for rid in prompts:
        alone, _ = run(64, [rid])
        assert torch.equal(together[rid], alone[rid]), rid
