"""The engine's talker layers (:class:`~anna_audio.qwen3_tts.talker_lm.PagedTalkerLayer`) where the op table offers
``qk_norm_rope_cache_attention`` (here the CPU's reference, the composition of ``qk_norm_rope_cache`` and
``paged_attention``, offered as a device's kernel would be): the golden codes through whole and chunked prefills,
mixed steps, batched and captured decodes, and one op-table call less per layer in every pass. The op's Triton kernel in the
talker: ``tests/xpu_kernels/test_tts_talker_fused.py``."""

from __future__ import annotations

import torch
from anna_core.kernels.registry import KernelRegistry, bind_ops

from tests.audio.tts_engine import capture_graphs, generate_codes, new_engine, talker_model, talker_prompts
from tests.audio.tts_golden import golden, golden_codes, speech_requests, talker_parts
from tests.audio.tts_ops import FusedAttentionOffered, HookedOps


def _ops(fused: bool):
    ops = bind_ops(KernelRegistry.from_plugins(), "cpu", torch.float32)
    return FusedAttentionOffered(ops) if fused else ops


def test_the_fused_attention_gives_the_golden_codes_through_chunked_prefills_and_batched_decodes():
    """Every VoiceDesign case at once, prompts cut into 4-token chunks (chunks of several queries, a last chunk of one
    row beside decodes): the reference's codes exactly, every talker layer through the offered op."""
    g, facts = golden("voice_design")
    parts = talker_parts("voice_design")
    model = talker_model(parts, 4, _ops(True))
    assert all(layer.norm_rope_cache_attend is not None for layer in model.layers)
    assert talker_model(parts, 1).layers[0].norm_rope_cache_attend is None  # the CPU's references: two ops
    engine = new_engine(model, 4, max_prefill_tokens=4)
    got = generate_codes(engine, model, talker_prompts(parts, speech_requests(facts["cases"], g)))
    assert len(got) >= 3
    for rid, codes in got.items():
        assert torch.equal(codes, golden_codes(g, rid)), rid


def test_captured_decode_steps_through_the_fused_attention_give_the_golden_codes():
    """Three CustomVoice requests, decode steps captured (a fake graph accelerator: padding rows of a bucket write the
    scratch block): the reference's codes through the offered op."""
    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    model = talker_model(parts, 3, _ops(True))
    engine = new_engine(model, 3)
    accel = capture_graphs(engine, 3)
    got = generate_codes(engine, model, talker_prompts(parts, speech_requests(facts["cases"], g)[:3]))
    assert accel.replays > 0 and engine.runner.num_graph_steps > 0
    for rid, codes in got.items():
        assert torch.equal(codes, golden_codes(g, rid)), rid


class _TalkerLayerCalls(HookedOps):
    """An op table that counts the calls made inside the talker's layers in each forward pass of ``model``
    (:meth:`watch`): ``passes`` holds ``(decode step?, calls)`` per pass."""

    def __init__(self, ops) -> None:
        super().__init__(ops, self._count)
        self.inside = False
        self.passes: list[tuple[bool, int]] = []

    def watch(self, model) -> None:
        def start(module, args):
            self.passes.append((args[0].is_decode, 0))

        def enter(module, args):
            self.inside = True

        def leave(module, args, out):
            self.inside = False

        model.register_forward_pre_hook(start)
        for layer in model.layers:
            layer.register_forward_pre_hook(enter)
            layer.register_forward_hook(leave)

    def _count(self, fn, *args, **kwargs):
        if self.inside:
            decode, n = self.passes[-1]
            self.passes[-1] = (decode, n + 1)
        return fn(*args, **kwargs)


def test_the_fused_attention_saves_one_op_table_call_a_layer_in_every_pass():
    """Three CustomVoice requests together: each talker layer makes six op-table calls a pass, prefill or decode, and
    five where ``qk_norm_rope_cache_attention`` is offered; the codes stay the reference's."""
    g, facts = golden("custom_voice")
    parts = talker_parts("custom_voice")
    layers = parts.config.talker.shape.num_layers
    prompts = talker_prompts(parts, speech_requests(facts["cases"], g)[:3])
    for fused, per_layer in ((False, 6), (True, 5)):
        ops = _TalkerLayerCalls(_ops(fused))
        model = talker_model(parts, 3, ops)
        ops.watch(model)
        got = generate_codes(new_engine(model, 3), model, prompts)
        for rid, codes in got.items():
            assert torch.equal(codes, golden_codes(g, rid)), (fused, rid)
        kinds = {decode for decode, _ in ops.passes}
        assert kinds == {False, True}, ops.passes  # prefill and decode passes counted
        assert {n for _, n in ops.passes} == {per_layer * layers}, (fused, ops.passes)
