"""``--expert-quant int4|int8|fp8`` on Gemma 4's MoE block (26B-A4B's shape, issue 29): quality against the unquantized
model on a tiny checkpoint within bounds measured here, the loader's option and its errors.

The tiny MoE checkpoint: hidden 128 and expert width 128, so int4 groups of 128 fit; 4 experts, top-2; every
parameter random. :data:`BOUNDS` are about twice the KL and a little under the agreement measured on the CPU through
the float32 references (:mod:`anna_core.testing.quant_quality`: a 12-token prompt, 64 greedy tokens, teacher-forced
logits along the dense model's greedy continuation); the measured values are beside them.
"""

from __future__ import annotations

import pytest
from anna_core.errors import ModelLoadError
from anna_core.layers.wq_experts import WQExperts, quantize_experts
from anna_core.layers.wq_linear import weight_kinds
from anna_core.testing.quant_quality import Agreement, DenseRun, QualityBounds

from tests.gemma4.conftest import load_anna

BOUNDS = {  # scheme: (min greedy tokens equal of 64, min top-1 agreement, max mean KL (nats), max KL)
    "int8": QualityBounds(48, 0.95, 1.5e-3, 4e-2),  # measured: 64, 1.00, 5.2e-4, 1.5e-2
    "fp8": QualityBounds(0, 0.9, 1.5e-2, 6e-2),  # measured: 2, 0.97, 5.9e-3, 2.8e-2
    "int4": QualityBounds(0, 0.9, 0.1, 0.25),  # measured: 3, 0.97, 4.3e-2, 1.0e-1
}


@pytest.fixture(scope="module")
def tiny_moe(gemma4_factory):
    return gemma4_factory(variant="moe", hidden_size=128, moe_intermediate_size=128)


@pytest.fixture(scope="module")
def dense_run(tiny_moe, prompt):
    return DenseRun.of(load_anna(tiny_moe).model, prompt[:12], 64)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["int8", "fp8", "int4"])
def test_quantized_experts_quality_against_dense(tiny_moe, dense_run, scheme):
    model = load_anna(tiny_moe).model
    assert quantize_experts(model, scheme, model.ops) == 6  # every layer has the MoE block
    BOUNDS[scheme].check(Agreement.of(model, dense_run))


@pytest.mark.slow
def test_loader_option_and_errors(tiny_moe, gemma4_factory):
    model = load_anna(tiny_moe, expert_quant="int4").model
    experts = [m for m in model.modules() if isinstance(m, WQExperts)]
    assert len(experts) == 6 and {(m.scheme, m.activation) for m in experts} == {("int4", "gelu_tanh")}
    assert weight_kinds(model)["experts"] == "int4"
    with pytest.raises(ModelLoadError, match="FP8 units"):
        load_anna(tiny_moe, expert_quant="fp8")
    with pytest.raises(ModelLoadError, match="no routed experts"):
        load_anna(gemma4_factory(variant="dense"), expert_quant="int8")
