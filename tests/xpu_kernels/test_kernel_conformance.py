"""anna-xpu-kernels passes the kernel conformance suite: every Triton implementation against its op's torch
reference on the op's sample inputs, run on the CPU by Triton's interpreter (the fla implementations' probes
decline the CPU: skipped, with the reason)."""

from anna_core.testing.conformance import KernelConformance

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()


class TestXpuKernelsConformance(KernelConformance):
    plugin = "anna_xpu_kernels"
    device = "cpu"
    # the probes accept the CPU (tests/xpu_kernels/conftest.py interprets); the opt-in per-layer-input block and the
    # opt-in q/k pre-processing fused into the attention (Qwen3-TTS's code predictor) are checked
    environment = {"ANNA_TRITON_INTERPRET": "1", "ANNA_POST_NORM_GATED_LINEAR": "1", "ANNA_QK_NORM_ROPE_ATTENTION": "1"}
