"""The ops one Gemma 4 E2B-style decode step issues, in order (so a fusion cannot silently regress): with every
fused op served (here its torch reference, counted as one call), a layer is six ops — the previous layer's last
residual add fused with this layer's input norm into its q/k/v projection (q when KV-shared;
``post_norm_residual_linear``), the q/k/v norms + rotary + cache write + attention (``qkv_norm_rope_cache_attention``;
the query norm + rotary + attention, ``q_norm_rope_attention``, when KV-shared), ``o_proj``, the attention's tail
fused into the gate/up projection, ``down_proj``, and the MLP's tail with the per-layer-input gate and projection
(``post_norm_residual_gated_linear``). Where no kernel serves that last op (it is opt-in on GPUs) a layer is seven: the
MLP's tail fused into the per-layer-input gate, then the per-layer-input projection with its gated product
(``gated_linear``). Before these fusions a layer was ten ops (nine when KV-shared): the value norm (``rms_norm``), the
layer's last residual add (``post_norm_residual``) and the q/k norm + rotary (+ cache write) op ran on their own. On
CUDA each op is one launch at batch 1 (attention adds its split merge, unless ``ANNA_ATTENTION_FUSED_MERGE`` merges
inside the attention launch: tests/xpu_kernels/test_gemma4_decode_kernels.py counts the kernels)."""

from __future__ import annotations

import pytest
import torch
from anna_core.testing.runner import prefill_logits
from torch.utils._python_dispatch import TorchDispatchMode

from tests.core._graph_engine import fake_graph_engine
from tests.gemma4.conftest import load_anna
from tests.gemma4.kernel_ops import KernelOpCalls

OWN_KV = ["post_norm_residual_linear", "qkv_norm_rope_cache_attention", "linear", "post_norm_residual_linear",
          "linear", "post_norm_residual_gated_linear"]
SHARED_KV = ["post_norm_residual_linear", "q_norm_rope_attention", "linear", "post_norm_residual_linear", "linear",
             "post_norm_residual_gated_linear"]
PER_LAYER_APART = ["post_norm_residual_linear", "gated_linear"]
"""The last op of a layer, ``post_norm_residual_gated_linear``, where no kernel serves it."""


def _record_forwards(model, accelerate: bool, declined: frozenset[str] = frozenset()) -> list[list[str]]:
    """Patch ``model`` so each forward pass records the ops it calls (outermost only); with ``accelerate`` every fused
    op but those ``declined`` counts as accelerated (its reference serves it), as a GPU's kernels would be chosen."""
    per_call: list[list[str]] = []

    def on_op(op: str) -> None:
        if per_call:
            per_call[-1].append(op)

    KernelOpCalls(model.ops.registry, on_op, accelerate=accelerate, declined=declined)
    forward = model.model.forward

    def recorded(*args, **kwargs):
        per_call.append([])
        return forward(*args, **kwargs)

    model.model.forward = recorded
    return per_call


@pytest.mark.parametrize("declined", [frozenset(), frozenset({"post_norm_residual_gated_linear"})],
                         ids=["six-ops", "seven-ops"])
def test_e2b_decode_step_runs_six_ops_per_layer(gemma4_factory, declined):
    path = gemma4_factory(variant="e2b")
    want = prefill_logits(load_anna(path).model, [5, 17, 33, 101], chunk_size=3)
    model = load_anna(path).model
    per_call = _record_forwards(model, accelerate=True, declined=declined)
    with torch.no_grad():
        got = prefill_logits(model, [5, 17, 33, 101], chunk_size=3)  # a prefill chunk, then a decode-sized step
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # the fused ops' references = the unfused path
    layers = model.model.layers
    shared = [layer.self_attn.shares_kv for layer in layers]
    assert any(shared) and not all(shared)
    step = per_call[-1]
    # per step: the per-layer-input projection, then the per-layer inputs (the table rows, scales, norm and sum: one
    # op), the first layer's input norm; then the layers (the first layer's q/k/v projection has no tail before it);
    # the last layer's tail with the final norm; the LM head with its soft cap (one op)
    expected = ["linear", "per_layer_inputs", "rms_norm"]
    for i, own in enumerate(not s for s in shared):
        ops = list(OWN_KV if own else SHARED_KV)
        if declined:
            ops[-1:] = PER_LAYER_APART
        if i == 0:
            ops[0] = "linear"
        expected += ops
    expected += ["post_norm_residual", "linear_soft_cap"]
    assert step == expected
    assert step.count("rms_norm") == 1 and step.count("post_norm_residual") == 1  # no value norm, one tail per step


def test_unaccelerated_tail_runs_unfused(gemma4_factory):
    """Where no kernel serves the fused attention pre-processing (the CPU's references), the layers compose the unfused
    ops: the q/k/v norms (``rms_norm``), rotary and the cache write run on their own."""
    model = load_anna(gemma4_factory(variant="e2b")).model
    per_call = _record_forwards(model, accelerate=False)
    with torch.no_grad():
        prefill_logits(model, [5, 17, 33, 101], chunk_size=3)
    step = per_call[-1]
    own_kv = sum(not layer.self_attn.shares_kv for layer in model.model.layers)
    fused = {"qkv_norm_rope_cache", "qk_norm_rope_cache", "q_norm_rope", "q_norm_rope_attention",
             "qkv_norm_rope_cache_attention"}
    assert not fused & set(step)
    # the per-layer-input norm, the first input norm, per own-KV layer the q/k/v norms, per KV-shared layer the q norm
    assert step.count("rms_norm") == 2 + 3 * own_kv + (len(model.model.layers) - own_kv)


class _OpsOutsideModel(TorchDispatchMode):
    """The aten ops (views left out: they launch nothing) run while active and while :attr:`inside` is False."""

    def __init__(self):
        super().__init__()
        self.inside = False
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.inside and not func.is_view:
            self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_captured_greedy_step_runs_the_gather_the_models_ids_and_one_copy(gemma4_factory):
    """Around the model's forward and greedy head (``compute_greedy``: capability ``greedy_head``), a captured greedy
    decode step (batch 1) runs two ops: the gather of each row's input token (staged, or the last replay's sampled id:
    both in the staging buffer) and the copy of the ids into the step's output buffer. Before, the staged ids were
    copied first, and the argmax ran over the float32 logits after the LM head (two graph memcpys, one reduction).
    The greedy head's ops: with its kernels, the one ``linear_soft_cap_argmax`` op; on the CPU the head's references
    and the argmax, the ids of the eager sampler."""
    engine, _ = fake_graph_engine(gemma4_factory(variant="e2b"), graphs=True, max_seqs=1)
    graphs = engine.runner.graphs
    assert graphs.greedy_head
    mode = _OpsOutsideModel()
    forward = graphs._forward_greedy
    model = graphs.model
    head_ops: list[str] = []
    KernelOpCalls(model.ops.registry, head_ops.append, accelerate=True)
    ids: list[torch.Tensor] = []

    def model_part(batch):
        mode.inside = True
        try:
            ids.append(forward(batch))
            return ids[-1]
        finally:
            mode.inside = False

    graphs._forward_greedy = model_part
    hidden = []
    model.compute_greedy = lambda h, greedy=model.compute_greedy: hidden.append(h) or greedy(h)
    replay = graphs.padded_replay(1, "greedy")
    with torch.inference_mode(), mode:
        replay()
    assert mode.ops == ["index_select", "copy_"]
    assert head_ops[-1] == "linear_soft_cap_argmax" and "linear_soft_cap" not in head_ops
    with torch.inference_mode():
        assert torch.equal(graphs.out[:1], ids[-1])
        assert torch.equal(ids[-1], torch.argmax(model.compute_logits(hidden[-1]), dim=-1))


def test_a_greedy_head_that_fails_capture_leaves_the_full_heads_graphs(gemma4_factory, monkeypatch, caplog):
    """The fused greedy head (``greedy_head``) failing at capture must not leave decode eager: the runner captures the
    full head's graphs (logits and argmax) instead, which give the eager engine's tokens."""
    from anna_core.engine.sampling_params import SamplingParams
    from anna_gemma4.model import Gemma4ForCausalLM

    from tests.core._graph_engine import generate_tokens

    def failing_greedy(self, hidden):
        raise RuntimeError("the fused greedy head failed to capture")

    model_dir = gemma4_factory(variant="e2b")
    prompts, params = [[5, 9, 3], [7, 8]], [SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)] * 2
    eager, _ = fake_graph_engine(model_dir, graphs=False, max_seqs=2)
    expected = generate_tokens(eager, prompts, params)
    monkeypatch.setattr(Gemma4ForCausalLM, "compute_greedy", failing_greedy)
    with caplog.at_level("WARNING"):
        engine, accel = fake_graph_engine(model_dir, graphs=True, max_seqs=2)
    assert "capturing the full head's modes only" in caplog.text and "running eagerly" not in caplog.text
    assert engine.runner.graphs is not None and not engine.runner.graphs.greedy_head
    assert generate_tokens(engine, prompts, params) == expected
    assert accel.replays > 0
