"""The device kernels one Gemma 4 E2B-style decode step launches, counted under Triton's interpreter (so a fusion
cannot silently regress): with the decode-path switches on (the fused q/k/v pre-processing, the split merge inside the
attention launch, the per-layer-input block in one launch) a layer is six kernels — its q/k/v projection (with the
previous layer's tail), the attention, ``o_proj``, the gate/up projection (with the attention's tail), ``down_proj``
and the per-layer-input block (with the MLP's tail); with the last two switches off it is eight (the split merge and
a second per-layer-input GEMV). Outside the layers a step launches six (the token embedding's gather and scale, the
per-layer-input projection and ``per_layer_inputs``, the first input norm, the final tail). The attention is made to
split its keys as a GPU would at batch 1 (the CPU's heuristic would not split). Both paths give the reference model's
logits."""

import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_core.testing.runner import prefill_logits  # noqa: E402

from tests.gemma4.conftest import load_anna  # noqa: E402
from tests.gemma4.tiny import build_tiny_gemma4  # noqa: E402
from tests.xpu_kernels._launches import LaunchCounter  # noqa: E402

PROMPT = list(range(3, 23))  # 19 tokens of prefill, then a decode step over 20 keys (two splits)
PER_STEP = {  # the step's kernels outside the layers (model.forward: the LM head and sampler are not in it)
    "aten:embedding": 1, "aten:mul": 1,  # the scaled token embeddings
    "triton:_persistent_gemv_kernel": 1,  # their per-layer-input projection
    "triton:_per_layer_inputs_kernel": 1,  # the per-layer inputs: table rows, scales, norm and sum
    "triton:_rms_norm_kernel": 1,  # the first layer's input norm
    "triton:_post_norm_residual_kernel": 1,  # the last layer's tail with the final norm
}


def _decode_step(path, monkeypatch, **env) -> tuple[dict[str, int], torch.Tensor, int]:
    """``(kernels of the decode step, its logits [vocab], layers)`` with the Triton kernels and ``env`` set."""
    from anna_xpu_kernels import attention_plan

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    for name, value in {"ANNA_Q_NORM_ROPE_ATTENTION": "1", "ANNA_QKV_NORM_ROPE_ATTENTION": "1", **env}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(attention_plan, "default_num_splits", lambda device, programs, max_keys: 4)
    model = load_anna(path).model
    counts, forward = [], model.model.forward

    def counted(*args, **kwargs):
        with LaunchCounter() as c:
            out = forward(*args, **kwargs)
        counts.append(c.launches)
        return out

    model.model.forward = counted
    logits = prefill_logits(model, PROMPT, chunk_size=len(PROMPT) - 1, block_size=4)
    step = {k: v for k, v in counts[-1].items() if k not in ("aten:to", "aten:split_with_sizes", "aten:zeros")}
    return step, logits[-1], len(model.model.layers)  # (to: a no-op cast; split: views; zeros: the counter pool)


def test_decode_step_kernels_per_layer(tmp_path, monkeypatch):
    path = build_tiny_gemma4(tmp_path / "g", variant="e2b")
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want = prefill_logits(load_anna(path).model, PROMPT, block_size=4)[-1]  # the torch references
    fused, got_fused, layers = _decode_step(path, monkeypatch, ANNA_ATTENTION_FUSED_MERGE="1",
                                            ANNA_POST_NORM_GATED_LINEAR="1")
    apart, got_apart, _ = _decode_step(path, monkeypatch, ANNA_ATTENTION_FUSED_MERGE="0",
                                       ANNA_POST_NORM_GATED_LINEAR="0")
    assert fused == {**PER_STEP, "triton:_persistent_gemv_kernel": 1 + 4 * layers,
                     "triton:_paged_attention_kernel": layers, "triton:_gated_block_kernel": layers}
    assert apart == {**PER_STEP, "triton:_persistent_gemv_kernel": 1 + 6 * layers,
                     "triton:_paged_attention_kernel": layers, "triton:_merge_splits_kernel": layers}
    per_layer = {name: (sum(step.values()) - sum(PER_STEP.values())) / layers
                 for name, step in (("fused", fused), ("apart", apart))}
    assert per_layer == {"fused": 6, "apart": 8}
    torch.testing.assert_close(got_fused, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_apart, want, rtol=1e-4, atol=1e-4)


def test_greedy_head_launches_three_kernels_and_gives_the_argmax_of_the_logits(tmp_path, monkeypatch):
    """The captured greedy step's head (``compute_greedy``, capability ``greedy_head``): the GEMV, the soft-capped
    blocks' partials and their reduction (``linear_soft_cap_argmax``), where the full head's path is the GEMV, the
    soft cap and torch's argmax over the float32 logits; the same ids."""
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    model = load_anna(build_tiny_gemma4(tmp_path / "g", variant="e2b")).model
    assert model.capabilities.greedy_head and model.config.final_logit_softcapping
    hidden = torch.randn(3, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with LaunchCounter() as fused:
        ids = model.compute_greedy(hidden)
    with LaunchCounter() as full:
        want = torch.argmax(model.compute_logits(hidden), dim=-1)
    launched = {k: v for k, v in fused.launches.items() if k not in ("aten:to", "aten:zeros")}  # (see above)
    gemv = [k for k in launched if k.endswith("gemv_kernel")]
    assert len(gemv) == 1 and launched == {gemv[0]: 1, "triton:_soft_cap_argmax_partials_kernel": 1,
                                           "triton:_argmax_of_blocks_kernel": 1}
    assert full.launches["triton:_soft_cap_kernel"] == 1 and full.launches["aten:argmax"] == 1
    assert ids.tolist() == want.tolist()
