"""The engine's code predictor loop (:mod:`anna_audio.qwen3_tts.frame_predictor`) against the reference's golden
codes and the plain :class:`~anna_audio.qwen3_tts.code_predictor.CodePredictor`: greedy codebooks equal, the frame's
codec sum equal to ``embed_frame``; no host sync in a frame; and the work per frame, counted as the kernels a device
would launch (each op-table call one fused kernel, view ops none), well under the plain module's."""

from __future__ import annotations

import pytest
import torch
from anna_audio.qwen3_tts import load_code_predictor, load_config
from anna_audio.qwen3_tts.code_predictor import CodePredictor, greedy
from anna_audio.qwen3_tts.config import AttentionShape, CodePredictorConfig
from anna_audio.qwen3_tts.frame_predictor import FramePredictor
from anna_audio.qwen3_tts.sampling import CodeSampling, choose_gumbel
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.testing.host_reads import HOST_READS
from torch.utils._python_dispatch import TorchDispatchMode

from tests.audio.tts_golden import CHECKPOINTS, cases, golden
from tests.audio.tts_ops import FusedAttentionOffered, HookedOps


def _setup(kind: str, rows: int = 4, wrap=None):
    from safetensors.torch import load_file

    tensors, _ = golden(kind)
    folder = CHECKPOINTS[kind]
    predictor = load_code_predictor(folder, load_config(folder))
    table = load_file(str(folder / "model.safetensors"))["talker.model.codec_embedding.weight"].float()
    ops = bind_ops(KernelRegistry.from_plugins(), "cpu", torch.float32)
    fast = FramePredictor(predictor, wrap(ops) if wrap else ops, greedy)
    fast.reserve(rows)
    return predictor, fast, table, tensors


@pytest.mark.parametrize("kind", ["base", "custom_voice", "voice_design"])
def test_frames_equal_reference_and_the_plain_predictor(kind):
    predictor, fast, table, g = _setup(kind, rows=4)
    checked = 0
    for case, row in cases(g):
        codes, hidden = g[f"{case}/codes/{row}"], g[f"{case}/talker_hidden/{row}"]
        first = table[codes[:, 0]]
        with torch.inference_mode():
            # all frames at once (more rows than reserved: buffers of the call's own), then the first 3 (static)
            for n in (codes.shape[0], min(3, codes.shape[0])):
                predicted, frame = fast(hidden[:n], first[:n])
                assert torch.equal(predicted, codes[:n, 1:]), f"{kind} {case} row {row} ({n} frames)"
                assert torch.equal(frame, predictor.embed_frame(first[:n], predicted))
        checked += codes.shape[0]
    assert checked >= 20


def test_bad_inputs_and_reserve():
    predictor, fast, table, g = _setup("custom_voice", rows=2)
    h = g["batch/talker_hidden/0"]
    with pytest.raises(ValueError, match="must both be"):
        fast(h[:2], h[:3])
    with pytest.raises(ValueError, match="positive"):
        fast.reserve(0)


class _Launches(TorchDispatchMode):
    """Counts dispatched non-view ops (a device's kernel launches; an op-table call counts once, see
    :class:`_OneLaunchPerOp`) and host syncs."""

    def __init__(self):
        super().__init__()
        self.launches = 0
        self.syncs = 0
        self.inside_op = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in HOST_READS:
            self.syncs += 1
        if not self.inside_op and not func.is_view and func is not torch.ops.aten.detach.default:
            self.launches += 1
        return func(*args, **(kwargs or {}))


class _OneLaunchPerOp(HookedOps):
    """An op table whose every call counts as one launch (each is one fused kernel on a GPU)."""

    def __init__(self, ops, counter: _Launches):
        super().__init__(ops, self._count)
        self._counter = counter

    def _count(self, fn, *args, **kwargs):
        self._counter.launches += 1
        self._counter.inside_op = True
        try:
            return fn(*args, **kwargs)
        finally:
            self._counter.inside_op = False


def frame_launches(kind: str = "custom_voice", rows: int = 1) -> dict[str, int]:
    """Kernel launches of one frame of ``rows`` rows: the plain predictor (with ``embed_frame``) and the
    :class:`FramePredictor`; host syncs of the latter."""
    counted = _Launches()
    predictor, fast, table, g = _setup(kind, rows=rows, wrap=lambda ops: _OneLaunchPerOp(ops, counted))
    h = g["batch/talker_hidden/0"][:rows]
    first = table[g["batch/codes/0"][:rows, 0]]
    plain = _Launches()
    with torch.inference_mode(), plain:
        predictor.embed_frame(first, predictor(h, first))
    counted.launches = 0
    with torch.inference_mode(), counted:
        fast(h, first)
    return {"plain": plain.launches, "fast": counted.launches, "fast_syncs": counted.syncs}


def test_a_frame_launches_far_fewer_kernels_and_never_syncs():
    n = frame_launches()
    assert n["fast_syncs"] == 0
    assert n["fast"] * 3 <= n["plain"], n


SHAPE_1_7B = AttentionShape(hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=96,
                            rms_norm_eps=1e-6, rope_theta=1e6)
"""The 1.7B checkpoints' code predictor (5 layers, 16 codebooks, grouped key/value heads, a projection from a wider
talker) at small widths: the op counts depend on the layer and codebook counts only."""
GREEDY = CodeSampling(False, 1.0, 0, 1.0)
SAMPLED = CodeSampling(True, 0.9, 50, 1.0)  # the checkpoints' subtalker defaults
STEP_LAUNCHES = {False: 36, True: 36}
"""Upper bound on the kernels a predictor step launches (a frame's count over its ``G - 1`` passes), greedy and
sampled. Measured at the 1.7B layer count: 35.1 greedy, 35.5 sampled (527 and 532 a frame, batch 1 and 16 alike);
before the one-launch draw (``top_k_gumbel_sample``) 40.5 sampled (607); before the norm-into-projection fusion and
the per-frame Gumbel noise 46.1 and 56.1 (692 and 842)."""


def _random(rows: int, sampling: CodeSampling, counter: _Launches | None = None, fused: bool = False):
    torch.manual_seed(0)
    config = CodePredictorConfig(SHAPE_1_7B, vocab_size=64, num_code_groups=16)
    predictor = CodePredictor(config, talker_hidden=96).eval().requires_grad_(False)
    with torch.no_grad():
        for name, param in predictor.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                param.uniform_(0.5, 1.5)  # norms that are not the identity
    ops = bind_ops(KernelRegistry.from_plugins(), "cpu", torch.float32)
    ops = FusedAttentionOffered(ops) if fused else ops
    fast = FramePredictor(predictor, _OneLaunchPerOp(ops, counter) if counter else ops, sampling)
    fast.reserve(rows)
    return predictor, fast, torch.randn(rows, 96), torch.randn(rows, 96)


@pytest.mark.parametrize("fused", [False, True], ids=["two-ops", "fused-attention"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("rows", [1, 5])
def test_random_weights_equal_the_plain_predictor(rows, sampled, fused):
    """At the 1.7B layer and codebook counts, random weights: the same codes as the plain module (the sampled ones
    for one seed: on the CPU the frame's one noise draw equals the plain module's per-codebook draws), and the frame's
    codec sum equals ``embed_frame`` — through ``qk_norm_rope_cache`` and ``paged_attention``, and through
    ``qk_norm_rope_cache_attention`` where the op table offers it."""
    sampling = SAMPLED if sampled else GREEDY
    predictor, fast, hidden, first = _random(rows, sampling, fused=fused)
    assert (fast.norm_rope_cache_attend is not None) == fused
    with torch.inference_mode():
        torch.manual_seed(1)
        plain = predictor(hidden, first, lambda logits, g: choose_gumbel(logits, sampling))
        torch.manual_seed(1)
        codes, frame = fast(hidden, first)
        torch.manual_seed(2)
        other, _ = fast(hidden, first)
    assert codes.shape == (rows, 15)
    assert torch.equal(codes, plain)
    assert torch.equal(frame, predictor.embed_frame(first, codes))
    assert torch.equal(other, codes) != sampled  # a sampled frame depends on the seed (15 x 64 codes per row)


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("rows", [1, 16])
def test_launches_per_predictor_step_stay_bounded(rows, sampled):
    counted = _Launches()
    sampling = SAMPLED if sampled else GREEDY
    _, fast, hidden, first = _random(rows, sampling, counted)
    with torch.inference_mode(), counted:
        counted.launches = 0
        fast(hidden, first)
    assert counted.syncs == 0
    assert counted.launches <= STEP_LAUNCHES[sampled] * 15, counted.launches / 15


def test_the_fused_attention_saves_one_call_a_layer_and_pass():
    """Where ``qk_norm_rope_cache_attention`` is offered, each layer of each pass makes one op-table call less (the
    q/k norms, rotary, cache write and attention in one), and the frame still never syncs."""
    counts = {}
    for fused in (False, True):
        counted = _Launches()
        _, fast, hidden, first = _random(3, GREEDY, counted, fused=fused)
        with torch.inference_mode(), counted:
            counted.launches = 0
            fast(hidden, first)
        assert counted.syncs == 0
        counts[fused] = counted.launches
    assert counts[False] - counts[True] == SHAPE_1_7B.num_layers * 15, counts
