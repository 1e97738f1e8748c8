"""``--expert-quant int4|int8|fp8`` on Qwen3.5 MoE (issue 29): the quantized model is the dense model with its routed
experts' weights replaced by their dequantized values (every difference is the quantization's rounding), and its
quality against the unquantized model on a tiny checkpoint stays within bounds measured here.

The tiny checkpoint (hidden 128 and expert width 128, so int4 groups of 128 fit; 8 experts, top-2; every parameter
random) is far more sensitive than a trained model. :data:`BOUNDS` are about twice the KL and a little under the
agreement measured on the CPU through the float32 references (:mod:`anna_core.testing.quant_quality`: a 12-token
prompt, 64 greedy tokens, teacher-forced logits along the dense model's greedy continuation); the measured values
are beside them.
"""

from __future__ import annotations

import pytest
import torch
from anna_core.errors import AnnaError, ModelLoadError
from anna_core.kernels.registry import KernelRegistry
from anna_core.layers.wq_experts import WQExperts, quantize_experts
from anna_core.layers.wq_linear import weight_kinds
from anna_core.model_dir import inspect_model_dir
from anna_core.testing.quant_quality import Agreement, DenseRun, QualityBounds
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_core.weights.gpu_quant import dequantize

from tests.qwen35.conftest import load_anna, rel_err

BOUNDS = {  # scheme: (min greedy tokens equal of 64, min top-1 agreement, max mean KL (nats), max KL)
    "int8": QualityBounds(10, 0.8, 1e-2, 0.25),  # measured: 14, 0.86, 4.1e-3, 1.2e-1
    "fp8": QualityBounds(0, 0.7, 6e-2, 0.6),  # measured: 0, 0.78, 2.7e-2, 3.0e-1
    "int4": QualityBounds(0, 0.35, 0.5, 2.6),  # measured: 0, 0.44, 2.6e-1, 1.3
}


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory):
    from anna_qwen35.tiny import build_tiny_qwen35_moe

    return build_tiny_qwen35_moe(tmp_path_factory.mktemp("tiny-moe-128"), hidden_size=128, moe_intermediate_size=128)


@pytest.fixture(scope="module")
def dense_run(tiny_moe, long_prompt):
    return DenseRun.of(load_anna(tiny_moe).model, long_prompt[:12], 64)


def _quantized(path, scheme):
    loaded = load_anna(path)
    count = quantize_experts(loaded.model.model.layers, scheme, loaded.model.ops)
    return loaded.model, count


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["int8", "fp8", "int4"])
def test_quantized_experts_quality_against_dense(tiny_moe, dense_run, scheme):
    model, count = _quantized(tiny_moe, scheme)
    assert count == 4  # every layer's routed experts
    BOUNDS[scheme].check(Agreement.of(model, dense_run))


@pytest.mark.slow
def test_quantized_experts_equal_dense_experts_of_dequantized_weights(tiny_moe, long_prompt):
    """All of the quality loss is the experts' rounding: the dense model holding their dequantized weights gives the
    same logits (float32 summation order) and the same greedy tokens."""
    model, _ = _quantized(tiny_moe, "int4")
    twin = load_anna(tiny_moe).model
    quantized = {name: m for name, m in model.named_modules() if isinstance(m, WQExperts)}
    assert len(quantized) == 4
    for name, m in twin.named_modules():
        if name in quantized:
            q = quantized[name]
            for e in range(q.num_experts):
                m.gate_up_proj.data[e] = dequantize(q.gate_up_q[e], q.gate_up_scale[e], q.gate_up_zero[e], "int4")
                m.down_proj.data[e] = dequantize(q.down_q[e], q.down_scale[e], q.down_zero[e], "int4")
    prompt = long_prompt[:24]
    assert rel_err(prefill_logits(model, prompt), prefill_logits(twin, prompt)) <= 1e-5
    assert simple_greedy(model, prompt[:12], 16) == simple_greedy(twin, prompt[:12], 16)


@pytest.mark.slow
def test_loader_quantizes_the_experts_only_and_healthz_kinds_say_so(tiny_moe):
    model = load_anna(tiny_moe, expert_quant="int8").model
    experts = [m for m in model.modules() if isinstance(m, WQExperts)]
    assert len(experts) == 4 and {m.scheme for m in experts} == {"int8"}
    assert weight_kinds(model) == {"experts": "int8", "linear": "float32", "lm_head": "float32"}
    assert weight_kinds(load_anna(tiny_moe).model)["experts"] == "float32"


@pytest.mark.slow
def test_bad_expert_quant_requests_are_load_errors(tiny_moe, anna_tiny_qwen35_factory):
    from anna_core.loading import load_model

    with pytest.raises(ModelLoadError, match="FP8 units"):
        load_anna(tiny_moe, expert_quant="fp8")  # the CPU has none
    with pytest.raises(ModelLoadError, match="no routed experts"):
        load_anna(anna_tiny_qwen35_factory(layout="text"), expert_quant="int8")
    with pytest.raises(AnnaError, match="unknown expert quantization 'int3'"):
        load_model(tiny_moe, device="cpu", expert_quant="int3")


def test_auto_weighs_the_experts_quantized(tiny_moe):
    """``--weight-quant auto`` with ``--expert-quant int4``: a budget the bf16 model exceeds but the model with int4
    experts fits keeps the projections dense."""
    from anna_core.layers.wq_experts import quantized_experts_bytes
    from anna_qwen35.config import Qwen35Config
    from anna_qwen35.loader import build_model, weight_scheme

    model = build_model(Qwen35Config.from_hf(inspect_model_dir(tiny_moe).config), None, torch.bfloat16)  # meta
    dense = sum(p.numel() * p.element_size() for p in model.parameters())
    experts_dense, experts_int4 = quantized_experts_bytes(model, "int4")
    # 4 layers of 8 experts, [256, 128] gate/up and [128, 128] down each: codes a quarter of bf16, plus scales
    assert experts_dense == 4 * 8 * 3 * 128 * 128 * 2
    assert experts_int4 == 4 * 8 * (256 * 64 + 2 * 256 * 2 + 128 * 64 + 2 * 128 * 2)
    budget = dense - experts_dense // 2
    device = torch.device("cuda")  # only its type is read with a budget given
    assert weight_scheme("auto", model, device, torch.bfloat16, budget) == "int4"
    assert weight_scheme("auto", model, device, torch.bfloat16, budget, "int4") is None


@pytest.mark.slow
def test_llm_expert_quant_serves_the_quantized_model(tiny_moe, long_prompt):
    """``LLM(expert_quant="int8")`` (engine, paged cache, scheduler) gives the greedy tokens of the int8-expert model."""
    from anna_core import LLM, SamplingParams

    llm = LLM(tiny_moe, device="cpu", dtype="fp32", num_blocks=32, expert_quant="int8")
    assert weight_kinds(llm.loaded.model)["experts"] == "int8"
    prompt = long_prompt[:12]
    [out] = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    assert out.token_ids == simple_greedy(load_anna(tiny_moe, expert_quant="int8").model, prompt, 8)


@pytest.mark.slow
def test_expert_offload_modes_with_quantized_experts(tiny_moe):
    """``--offload-mode auto`` plans no offload when the experts are quantized (they load on the device);
    ``experts`` (offloaded experts stay dense) is a load error."""
    from anna_core.engine.offload import OffloadConfig
    from anna_qwen35.loader import load

    def with_offload(mode):
        return load(inspect_model_dir(tiny_moe), device=torch.device("cpu"), dtype=torch.float32,
                    kernels=KernelRegistry.from_plugins(), expert_quant="int8", offload=OffloadConfig(mode=mode),
                    max_device_bytes=1)  # auto would offload every layer of dense experts at this budget

    loaded = with_offload("auto")
    assert loaded.expert_store is None and weight_kinds(loaded.model)["experts"] == "int8"
    with pytest.raises(ModelLoadError, match="expert offload is not supported"):
        with_offload("experts")
