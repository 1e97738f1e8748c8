"""The tiny Qwen3.5 model through the engine with anna-xpu-kernels' Triton kernels (interpreter, fused
GDN decode step, fused q/k norm + rotary + cache write, split paged attention) gives the same greedy
tokens as with the torch references."""

import torch

from tests.bench.tiny_config import write_tiny_qwen35_config
from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()


def _check_no_error(out) -> None:
    assert out.error is None, out.error


def _generate(model_dir, prompts, disable_kernels=()):
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.sampling_params import SamplingParams
    from anna_core.loading import load_model
    from anna_core.testing.engine_run import run_to_completion

    loaded = load_model(model_dir, device="cpu", dtype="fp32", load_format="dummy", disable_kernels=disable_kernels)
    engine = LLMEngine.from_loaded(loaded, EngineConfig(max_num_seqs=4, num_blocks=32, block_size=4,
                                                        max_model_len=64, enable_prefix_caching=False))
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    outs = run_to_completion(engine, prompts, params, prefix="", on_output=_check_no_error)
    chosen = engine.runner.model.model.layers[0].linear_attn.ops.registry.chosen()
    return [list(out.token_ids) for out in outs], chosen


def test_triton_model_matches_reference_model(tmp_path, monkeypatch):
    d = write_tiny_qwen35_config(tmp_path / "tiny")
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 200, (n,), generator=gen).tolist() for n in (3, 9, 14)]
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want, chosen_ref = _generate(d, prompts)
    assert set(chosen_ref.values()) == {"reference"}
    # only the references of the fused ops would run them: the layers compose the unfused ops instead
    assert not {"fused_gdn_decode", "fused_gdn_prefill", "qk_norm_rope_cache"} & set(chosen_ref)
    assert {"gated_delta_rule_decode", "gated_delta_rule_prefill", "rms_norm"} <= set(chosen_ref)
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    from anna_xpu_kernels import gdn_decode_fused, qk_norm_rope

    calls = {"gdn": 0, "qk": 0}

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        wrapper.counters = getattr(fn, "counters", None)  # fused_gdn_decode finds its pool through its name
        return wrapper

    # the registry resolves an implementation's "module:attr" when it first chooses it
    monkeypatch.setattr(gdn_decode_fused, "fused_gdn_decode", counting("gdn", gdn_decode_fused.fused_gdn_decode))
    monkeypatch.setattr(qk_norm_rope, "qk_norm_rope_cache", counting("qk", qk_norm_rope.qk_norm_rope_cache))
    got, chosen = _generate(d, prompts)
    assert calls["gdn"] > 0 and calls["qk"] > 0, calls
    assert chosen["fused_gdn_decode"] == chosen["qk_norm_rope_cache"] == "triton"  # the fused ops, through the table
    assert "fused_gdn_prefill" not in chosen  # fla needs CUDA: the unfused prefill ops run
    assert "rms_norm" not in chosen and "gated_delta_rule_decode" not in chosen  # inside the fused ops
    assert chosen["paged_attention"] == "triton"
    assert chosen["add_rms_norm"] == chosen["sigmoid_mul"] == "triton"  # the final norm, the attention gate
    assert chosen["add_rms_norm_linear"] == chosen["add_rms_norm_linear_act_mul"] == chosen["linear"] == "triton"
    assert got == want


def test_fused_prefill_path_matches_reference_model(tmp_path, monkeypatch):
    """The model's fused GDN prefill (one-launch input preparation, then the chunked rule) wired as
    anna-xpu-kernels wires it: fla's chunked kernels need CUDA, so the rule itself is the torch
    reference here; the preparation kernel runs in the interpreter."""
    from anna_core.kernels.reference import gated_delta_rule as ref_gdr
    from anna_xpu_kernels import fla_prefill, plugin, probes

    d = write_tiny_qwen35_config(tmp_path / "tiny")
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 200, (n,), generator=gen).tolist() for n in (3, 9, 14)]
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want, _ = _generate(d, prompts)

    calls = {"chunked": 0}

    def chunked(q, k, v, g, beta, cu_seqlens, states, slots, scale):
        calls["chunked"] += 1
        assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous() and g.dtype == torch.float32
        return ref_gdr.gated_delta_rule_prefill(q, k, v, g, beta, cu_seqlens, states, slots, scale)

    monkeypatch.setattr(fla_prefill, "chunked_forward", chunked)
    # fla's probe (and its declared devices) accept the CPU here (its rule is the reference above); everything
    # else keeps the references
    monkeypatch.setattr(probes, "fla_prefill_probe", lambda request: request.device_type == "cpu")
    monkeypatch.setattr(plugin, "FLA_DEVICES", ("cuda", "cpu"))
    got, chosen = _generate(d, prompts)
    assert chosen["fused_gdn_prefill"] == "fla" and "fused_gdn_decode" not in chosen
    assert calls["chunked"] > 0
    assert got == want


def test_disabling_the_fused_kernels_falls_back_to_the_unfused_kernels(tmp_path, monkeypatch):
    d = write_tiny_qwen35_config(tmp_path / "tiny")
    prompts = [[5, 17, 33], list(range(1, 12))]
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want, _ = _generate(d, prompts)
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    got, chosen = _generate(d, prompts, disable_kernels=("fused_gdn_decode:triton", "qk_norm_rope_cache:triton"))
    assert "fused_gdn_decode" not in chosen and "qk_norm_rope_cache" not in chosen
    # the layers compose the unfused ops, each chosen on its own: Triton where it runs (the interpreter)
    assert chosen["gated_delta_rule_decode"] == chosen["rms_norm"] == "triton"
    assert chosen["paged_attention"] == "triton"
    assert got == want


def test_vision_language_steps_all_take_the_fused_qk_kernel(tmp_path, monkeypatch):
    # a Qwen3.5 checkpoint that takes images has [3, T] (M-RoPE) positions; decode steps and text-only batches have
    # equal rows (ForwardBatch.uniform_positions) and hand the fused q/k norm + rotary + cache-write kernel their
    # first row; a prompt with an image has rows that differ and hands it all three with the rotary's per-frequency
    # row (interleaved sections). Greedy tokens and the prompt's logits equal the references'.
    import numpy as np
    from anna_core import LLM, SamplingParams
    from anna_core.testing.checkpoints import build_tiny_qwen35_vl
    from PIL import Image

    path = build_tiny_qwen35_vl(tmp_path / "vl", num_layers=4)
    picture = Image.fromarray(np.random.RandomState(0).randint(0, 256, (32, 32, 3), dtype=np.uint8))
    text = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|> describe<|im_end|>\n<|im_start|>assistant\n"
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True, logprobs=3)

    def run():
        llm = LLM(path, device="cpu", dtype="fp32", block_size=4, num_blocks=64, max_num_seqs=2, prompt_cache_size=0)
        [with_image] = llm.generate(text, params, media={"image": [picture]})
        [text_only] = llm.generate("<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n", params)
        return with_image, text_only

    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want = run()
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    from anna_xpu_kernels import qk_norm_rope

    calls = []
    real = qk_norm_rope.qk_norm_rope_cache

    def spy(q, k, v, qw, kw, eps, zc, positions, *rest):
        calls.append((tuple(positions.shape), len(rest)))
        return real(q, k, v, qw, kw, eps, zc, positions, *rest)

    monkeypatch.setattr(qk_norm_rope, "qk_norm_rope_cache", spy)
    got = run()
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        # the last step's top logprobs (they read the K/V the image prefill wrote): fused kernel vs separate ops
        [glp], [wlp] = g.logprobs[-1:], w.logprobs[-1:]
        assert [i for i, _ in glp.top] == [i for i, _ in wlp.top]
        assert max(abs(a - b) for (_, a), (_, b) in zip(glp.top, wlp.top)) < 1e-4
    prompt_len = len(got[0].prompt_token_ids)
    # the image prompt: [3, T] positions and the rope axis (one call per full-attention layer of the prefill)
    assert calls.count(((3, prompt_len), 5)) == 2
    assert all(shape == (3, prompt_len) or len(shape) == 1 for shape, _ in calls)
    assert all(n == 4 for shape, n in calls if len(shape) == 1)  # 1-D: row 0 of equal rows, no axis
    assert any(shape == (1,) for shape, _ in calls)  # decode steps of the image request and of the text request
