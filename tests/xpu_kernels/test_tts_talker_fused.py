"""Qwen3-TTS's talker on the engine (:class:`~anna_audio.qwen3_tts.talker_lm.TalkerLM`, the tiny CustomVoice
checkpoint) through anna-xpu-kernels' ``qk_norm_rope_cache_attention`` (Triton, interpreted): the codes equal the
reference's golden ones and those of the unfused torch references, and every step's logits match theirs, at batch 1
and 3, prompts in 8-token chunks. Each talker layer runs every step through the op: a decode step (one query a
sequence) as one attention kernel with the q/k norms, rotary and cache write inside, a prefill chunk as the op's own
two kernels. The projections and norms stay on the torch references (the GEMV kernels are tested elsewhere)."""

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

KIND = "custom_voice"
FRAMES = 6
"""Frames generated a request (EOS ignored): each one a decode step of the talker; few, as every step interprets the
kernel once per layer."""


def _run(ops, rows: int):
    """``(codes {request id: [FRAMES, G]}, logits of every step that computes some [N, vocab] each, model)``: the
    ``rows`` CustomVoice requests of the shortest prompts together on a talker over ``ops``, prompts cut into 8-token
    chunks. The code predictor runs
    its two unfused ops (its fused attention: ``test_tts_frame_predictor_fused.py``; interpreted here, it would double
    the test's time)."""
    from anna_audio.qwen3_tts.engine_requests import talker_params

    from tests.audio.tts_engine import SAMPLING, generate_codes, new_engine, talker_model, talker_prompts
    from tests.audio.tts_golden import golden, speech_requests, talker_parts

    g, facts = golden(KIND)
    parts = talker_parts(KIND)
    model = talker_model(parts, 3, ops)
    model.frame_predictor.norm_rope_cache_attend = None
    logits, compute = [], model.compute_logits

    def recorded(hidden):
        out = compute(hidden)
        logits.append(out.clone())
        return out

    model.compute_logits = recorded
    engine = new_engine(model, 3, max_prefill_tokens=8)
    every = talker_prompts(parts, speech_requests(facts["cases"], g))
    prompts = dict(sorted(every.items(), key=lambda item: item[1].prefill.shape[0])[:rows])  # the shortest prefills
    params = talker_params(SAMPLING, max_frames=FRAMES, ignore_eos=True)
    return generate_codes(engine, model, prompts, lambda i: params), logits, model


class _Calls:
    """Wraps an op, recording ``(rows, sequences)`` of each call."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, q, *args):
        self.calls.append((q.shape[0], args[11].shape[0] - 1))  # args[11]: cu_seqlens_q
        return self.fn(q, *args)


@pytest.mark.parametrize("rows", [1, 3])
def test_talker_steps_through_the_fused_attention_kernel_equal_the_references(monkeypatch, rows):
    from anna_core.kernels import KernelRegistry, bind_ops
    from anna_core.kernels.ops import CORE_OPS
    from anna_core.plugins import make_plugin_manager
    from anna_xpu_kernels import paged_attention_fused
    from anna_xpu_kernels.plugin import TRITON_KERNELS

    from tests.audio.tts_golden import golden, golden_codes
    from tests.xpu_kernels._launches import LaunchCounter

    g, _ = golden(KIND)
    want_codes, want_logits, plain = _run(bind_ops(KernelRegistry(CORE_OPS), "cpu", torch.float32), rows)
    assert all(layer.norm_rope_cache_attend is None for layer in plain.layers)  # the references: two calls a layer
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    monkeypatch.setenv("ANNA_QK_NORM_ROPE_ATTENTION", "1")
    registry = KernelRegistry.from_plugins(
        make_plugin_manager({"anna_core_reference", "anna_xpu_kernels"}),
        disabled=tuple(f"{op}:triton" for op in TRITON_KERNELS if op != "qk_norm_rope_cache_attention"))
    ops = bind_ops(registry, "cpu", torch.float32)

    calls = []

    class Spied:  # the talker's layers' lookups of the fused op, wrapped to record their batches
        def accelerated(self, op, **shape):
            fn = ops.accelerated(op, **shape)
            if op == "qk_norm_rope_cache_attention" and fn is not None:
                assert fn is paged_attention_fused.qk_norm_rope_cache_attention
                calls.append(_Calls(fn))
                return calls[-1]
            return fn

        def __getattr__(self, name):
            return getattr(ops, name)

    with LaunchCounter() as launches:
        codes, logits, fused = _run(Spied(), rows)
    assert registry.chosen()["qk_norm_rope_cache_attention"] == "triton"
    talker_calls = [c for c in calls if any(layer.norm_rope_cache_attend is c for layer in fused.layers)]
    assert len(talker_calls) == len(fused.layers)
    assert codes.keys() == want_codes.keys() and len(codes) == rows
    for rid in codes:
        assert torch.equal(codes[rid], want_codes[rid]), rid
        assert torch.equal(codes[rid], golden_codes(g, rid)[:FRAMES]), rid
    assert len(logits) == len(want_logits)
    for got, want in zip(logits, want_logits, strict=True):
        finite = want.isfinite()
        assert torch.equal(got.isfinite(), finite)
        torch.testing.assert_close(got[finite], want[finite], rtol=1e-4, atol=1e-4)
    for layer_calls in talker_calls:  # every step of each layer: decode steps (one query a row) and prefill chunks
        steps = layer_calls.calls
        assert sum(t == b for t, b in steps) >= FRAMES and any(t > b for t, b in steps), steps
    # a pass of one query a sequence is one attention kernel with the pre-processing inside; a pass with several
    # queries a sequence the pre-processing kernel, then the attention (the code predictor runs the torch references)
    several = sum(t > b for c in talker_calls for t, b in c.calls)
    assert launches.launches["triton:_qk_norm_rope_cache_kernel"] == several
    assert launches.launches["triton:_paged_attention_kernel"] == sum(len(c.calls) for c in talker_calls)
