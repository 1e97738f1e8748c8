"""Qwen3-TTS's code predictor loop (:class:`~anna_audio.qwen3_tts.frame_predictor.FramePredictor`) through
anna-xpu-kernels' ``qk_norm_rope_cache_attention`` (Triton, interpreted): a tiny predictor's greedy codes equal, and
its logits match, the frame of the unfused torch references, at batch 1 and 3; the passes of one query per row run
the q/k norms, rotary, cache write and attention as one kernel (the first pass, two queries a row, as two)."""

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

GROUPS, LAYERS = 4, 2
"""Codebooks a frame (``G``: ``G - 1`` passes) and predictor layers: small, so a frame interprets in about a second."""
GEMV = ("linear", "add_rms_norm_linear", "add_rms_norm_linear_act_mul")
"""The projections stay on the torch references (the GEMV kernels are tested elsewhere, and slow to interpret)."""


def _predictor():
    from anna_audio.qwen3_tts.code_predictor import CodePredictor
    from anna_audio.qwen3_tts.config import AttentionShape, CodePredictorConfig

    torch.manual_seed(0)
    shape = AttentionShape(hidden_size=32, num_layers=LAYERS, num_heads=4, num_kv_heads=2, head_dim=16,
                           intermediate_size=48, rms_norm_eps=1e-6, rope_theta=1e4)
    predictor = CodePredictor(CodePredictorConfig(shape, vocab_size=32, num_code_groups=GROUPS), talker_hidden=40)
    predictor = predictor.eval().requires_grad_(False)
    with torch.no_grad():
        for name, param in predictor.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                param.uniform_(0.5, 1.5)  # q/k norms (and the others) that are not the identity
    return predictor


def _frame(ops, rows: int, inputs):
    """``(codes [rows, G-1], frame sum [rows, 40], logits [G-1, rows, vocab], FramePredictor)`` of one frame."""
    from anna_audio.qwen3_tts.frame_predictor import FramePredictor

    logits = []

    def choose(scores, codebook):
        logits.append(scores.clone())
        return scores.argmax(dim=-1)

    fast = FramePredictor(_predictor(), ops, choose)
    fast.reserve(3)
    with torch.inference_mode():
        codes, frame = fast(*(x[:rows] for x in inputs))
    return codes, frame, torch.stack(logits), fast


@pytest.mark.parametrize("rows", [1, 3])
def test_fused_attention_frames_equal_the_reference_frames(monkeypatch, rows):
    from anna_core.kernels import KernelRegistry, bind_ops
    from anna_core.kernels.ops import CORE_OPS
    from anna_core.plugins import make_plugin_manager

    from tests.xpu_kernels._launches import LaunchCounter

    gen = torch.Generator().manual_seed(1)
    inputs = (torch.randn(3, 40, generator=gen), torch.randn(3, 40, generator=gen))
    want_codes, want_frame, want_logits, plain = _frame(bind_ops(KernelRegistry(CORE_OPS), "cpu", torch.float32), rows,
                                                        inputs)
    assert plain.norm_rope_cache_attend is None  # the references: two calls a layer
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    monkeypatch.setenv("ANNA_QK_NORM_ROPE_ATTENTION", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_core_reference", "anna_xpu_kernels"}),
                                           disabled=tuple(f"{op}:triton" for op in GEMV))
    with LaunchCounter() as launches:
        codes, frame, logits, fused = _frame(bind_ops(registry, "cpu", torch.float32), rows, inputs)
    assert fused.norm_rope_cache_attend is not None
    assert registry.chosen()["qk_norm_rope_cache_attention"] == "triton"
    assert torch.equal(codes, want_codes)
    torch.testing.assert_close(logits, want_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(frame, want_frame, rtol=1e-5, atol=1e-5)
    # per layer: the first pass (2 queries a row) the pre-processing kernel then the attention, each later pass one
    # attention kernel with the pre-processing inside (16 keys at most: no split, no merge kernel)
    assert launches.launches["triton:_qk_norm_rope_cache_kernel"] == LAYERS
    assert launches.launches["triton:_paged_attention_kernel"] == LAYERS * (GROUPS - 1)
    assert launches.launches["triton:_merge_splits_kernel"] == 0


def test_sampled_frames_draw_each_code_in_one_launch_as_the_reference_does(monkeypatch):
    """The checkpoints' sampling (temperature 0.9, top-k 20 of 32 codes here, no top-p): each codebook's draw is
    one ``top_k_gumbel_sample`` kernel, and a frame's codes for one seed equal the torch references' frame."""
    from anna_audio.qwen3_tts.frame_predictor import FramePredictor
    from anna_audio.qwen3_tts.sampling import CodeSampling
    from anna_core.kernels import KernelRegistry, bind_ops
    from anna_core.kernels.ops import CORE_OPS
    from anna_core.plugins import make_plugin_manager

    from tests.xpu_kernels._launches import LaunchCounter

    sampling = CodeSampling(True, 0.9, 20, 1.0)
    gen = torch.Generator().manual_seed(4)
    inputs = (torch.randn(3, 40, generator=gen), torch.randn(3, 40, generator=gen))

    def frame(ops):
        fast = FramePredictor(_predictor(), ops, sampling)
        fast.reserve(3)
        with torch.inference_mode():
            torch.manual_seed(5)
            return fast(*inputs)

    want_codes, want_frame = frame(bind_ops(KernelRegistry(CORE_OPS), "cpu", torch.float32))
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_core_reference", "anna_xpu_kernels"}),
                                           disabled=tuple(f"{op}:triton" for op in GEMV))
    with LaunchCounter() as launches:
        codes, got_frame = frame(bind_ops(registry, "cpu", torch.float32))
    assert registry.chosen()["top_k_gumbel_sample"] == "triton"
    assert launches.launches["triton:_top_k_gumbel_kernel"] == GROUPS - 1
    assert torch.equal(codes, want_codes)
    torch.testing.assert_close(got_frame, want_frame, rtol=1e-5, atol=1e-5)
