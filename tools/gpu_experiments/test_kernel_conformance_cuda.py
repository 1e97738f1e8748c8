"""The kernel conformance suite on a CUDA device (the GPU machine; CI runs it on the CPU through Triton's
interpreter, tests/xpu_kernels/test_kernel_conformance.py): every implementation anna-xpu-kernels registers
(Triton, fla) against its op's torch reference on the op's sample inputs, on the GPU. Run from the repository
root there: ``python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py``."""

from anna_core.testing.conformance import KernelConformance


class TestXpuKernelsConformanceOnCuda(KernelConformance):
    plugin = "anna_xpu_kernels"
    device = "cuda"
