"""The tiny Qwen3.5 model through the engine with anna-xpu-kernels' Triton kernels (interpreter, fused
GDN decode step, fused q/k norm + rotary + cache write, split paged attention) gives the same greedy
tokens as with the torch references."""

import torch

from tests.bench.tiny_config import write_tiny_qwen35_config
from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()


def _check_no_error(out) -> None:
    assert out.error is None, out.error


def _generate(model_dir, prompts):
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.sampling_params import SamplingParams
    from anna_core.loading import load_model
    from anna_core.testing.engine_run import run_to_completion

    loaded = load_model(model_dir, device="cpu", dtype="fp32", load_format="dummy")
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
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    from anna_xpu_kernels import gated_delta_rule, norms

    calls = {"gdn": 0, "qk": 0}

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        wrapper.fusable = getattr(fn, "fusable", None)
        return wrapper

    step = gated_delta_rule.gated_delta_rule_decode.fused_step
    monkeypatch.setattr(gated_delta_rule.gated_delta_rule_decode, "fused_step", counting("gdn", step))
    monkeypatch.setattr(norms.rms_norm, "qk_norm_rope_cache", counting("qk", norms.rms_norm.qk_norm_rope_cache))
    got, chosen = _generate(d, prompts)
    assert calls["gdn"] > 0 and calls["qk"] > 0, calls
    assert chosen["gated_delta_rule_decode"] == "triton" and chosen["rms_norm"] == "triton"
    assert chosen["paged_attention"] == "triton"
    assert chosen["add_rms_norm"] == chosen["sigmoid_mul"] == "triton"  # the final norm, the attention gate
    assert chosen["add_rms_norm_linear"] == chosen["add_rms_norm_linear_silu_mul"] == chosen["linear"] == "triton"
    assert got == want


def test_fused_prefill_path_matches_reference_model(tmp_path, monkeypatch):
    """The model's fused GDN prefill (one-launch input preparation, then the chunked rule) wired as
    anna-xpu-kernels wires it: fla's chunked kernels need CUDA, so the rule itself is the torch
    reference here; the preparation kernel runs in the interpreter."""
    from anna_core.kernels.reference import gated_delta_rule as ref_gdr
    from anna_xpu_kernels import fla_prefill

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
    monkeypatch.setattr(ref_gdr.gated_delta_rule_prefill, "fused_prefill", fla_prefill.fused_prefill, raising=False)
    got, chosen = _generate(d, prompts)
    assert chosen["gated_delta_rule_prefill"] == "reference"
    assert calls["chunked"] > 0
    assert got == want
